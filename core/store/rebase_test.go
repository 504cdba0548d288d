package store

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRebase: an empty log moved to offset 1 MiB takes its first record
// there, keeps given ids, survives a reopen with that start (own writer,
// threshold mode and the journal), and a log with records refuses.
func TestRebase(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"writer", "threshold", "journal"} {
		t.Run(mode, func(t *testing.T) {
			dir, opts, l := openModeLog(t, mode, 1)
			const base = 1 << 20
			require.NoError(t, l.Rebase(base))
			require.NoError(t, l.Rebase(base), "a second rebase to the same offset is a no-op")
			require.Equal(t, int64(base), l.MinOffset())
			require.Equal(t, int64(base), l.MaxOffset())
			var es []Entry
			for i := range 300 {
				e := entryf("m%03d", i)
				e.ID = int64(1000 + i)
				es = append(es, e)
			}
			id, off, err := l.AppendSync(es)
			require.NoError(t, err)
			require.Equal(t, int64(1000), id)
			require.Equal(t, int64(base), off)
			require.NoError(t, l.Flush())
			err = l.Rebase(0)
			require.True(t, errors.Is(err, ErrNotEmpty), "rebase of a log with records: %v", err)
			end := l.MaxOffset()
			require.NoError(t, l.Close())

			l = openLog(t, dir, opts)
			require.Equal(t, int64(base), l.MinOffset())
			require.Equal(t, end, l.MaxOffset())
			recs := readAllRecords(t, l, 4096)
			require.Len(t, recs, 300)
			for i, r := range recs {
				require.Equal(t, int64(1000+i), r.ID)
				require.Equal(t, fmt.Sprintf("m%03d", i), string(r.Data))
			}
		})
	}
}
