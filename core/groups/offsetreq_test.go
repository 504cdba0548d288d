package groups

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// TestCommitFetchRequest: a commit and a fetch request's store calls,
// the fetch's reply lines (-1 where nothing is stored), and a failed
// commit counted and logged.
func TestCommitFetchRequest(t *testing.T) {
	dir := t.TempDir()
	open := func(path string) *Offsets {
		o, err := OpenOffsets(OffsetsConfig{Name: conf.OffsetStoreBuiltin, BrokerID: 1, Store: map[string]string{"path": path}},
			nil, NewCommitted(CommittedConfig{DataDir: dir, BrokerID: 1}, nil, slog.New(slog.DiscardHandler)))
		require.NoError(t, err)
		t.Cleanup(func() { o.Close() })
		return o
	}
	var logged []string
	errorf := func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }
	o := open(filepath.Join(dir, "offsets"))
	ctx := context.Background()
	pos := func(p int32, off int64) message.Position {
		return message.Position{Topic: "t", Partition: message.Partition{BrokerID: 1, Partition: p}, Offset: off, MsgID: 7}
	}
	require.NoError(t, o.CommitRequest(ctx, "g", []message.Position{pos(0, 42)}, errorf))
	lines, err := o.FetchRequest(ctx, "g", []message.Position{pos(0, 0), pos(1, 0)}, errorf)
	require.NoError(t, err)
	require.Equal(t, []protocol.OffsetEntry{{Topic: "t", Partition: 0, Offset: 42, MsgID: 7}, {Topic: "t", Partition: 1, Offset: -1, MsgID: -1}}, lines)
	require.Empty(t, logged)

	sub := filepath.Join(dir, "sub")
	bad := open(filepath.Join(sub, "offsets"))
	require.NoError(t, os.RemoveAll(sub))
	require.NoError(t, os.WriteFile(sub, nil, 0o644)) // its directory is a file now: every write fails
	err = bad.CommitRequest(ctx, "g", []message.Position{pos(0, 1)}, errorf)
	var se *StoreError
	require.ErrorAs(t, err, &se)
	require.Equal(t, int64(1), bad.Stats().CommitFailed)
	require.Len(t, logged, 1)
	require.Contains(t, logged[0], "commit offsets of group g (1 partitions) to "+conf.OffsetStoreBuiltin+": ")
}
