package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestJournalCheckpointClosed: once CheckpointClosed returns after a log
// closed, its directory can be removed and a restart replays nothing into
// it (deleting a topic must not bring its partitions back).
func TestJournalCheckpointClosed(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	opts := smallJournal() // no timed checkpoints: CheckpointClosed must ask for one
	j, err := OpenJournal(dataDir, opts)
	require.NoError(t, err)
	logs := make([]*Log, 2)
	for p := range logs {
		logs[p], err = Open(filepath.Join(dataDir, partName(p)), Options{IDs: &seqIDs{}, Journal: j})
		require.NoError(t, err)
	}
	for range 20 {
		for _, l := range logs {
			_, _, err := l.AppendSync([]Entry{entry([]byte("hello journal"))})
			require.NoError(t, err)
		}
	}
	require.NoError(t, logs[0].Close())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, j.CheckpointClosed(ctx))
	require.NoError(t, os.RemoveAll(filepath.Join(dataDir, partName(0))))
	// Crash: the data directory as it is now, without the final
	// checkpoint a clean close writes (the other log is still open).
	crashed := copyTree(t, dataDir)
	require.NoError(t, logs[1].Close())
	require.NoError(t, j.Close())

	j2, err := OpenJournal(crashed, opts)
	require.NoError(t, err)
	defer j2.Close()
	_, err = os.Stat(filepath.Join(crashed, partName(0)))
	require.True(t, os.IsNotExist(err), "deleted partition came back: %v", err)
}

// copyTree copies the directories and regular files under src into a new
// temporary directory.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	require.NoError(t, filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	}))
	return dst
}
