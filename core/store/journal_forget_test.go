package store

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDeletedPartitionForgotten: a deleted topic's partition leaves the
// checkpoints' closed table (ForgetRemoved when its directory is removed;
// a restart that finds the directory gone, for a crash before that or a
// binary from before it), so the topic created again under the same name
// does not inherit the old partition's trusted end. A crash of the new
// partition at a roll before its first journal round was durable (an
// empty segment 0, an empty rolled segment after a gap) then restarts,
// the empty segment removed; with the old end inherited the restart
// refused the gap (ErrBrokenChain). One with acknowledged records keeps
// every one.
func TestDeletedPartitionForgotten(t *testing.T) {
	t.Parallel()
	name := partName(0)
	const rollAt = 64 << 10
	// deleted returns a live journal of a data directory whose partition
	// t-0 held 40 records, was closed, checkpointed and removed.
	deleted := func(t *testing.T) (dataDir string, j *Journal) {
		dataDir = t.TempDir()
		j = openJournal(t, dataDir, JournalOptions{CheckpointBytes: 1 << 40, CheckpointInterval: time.Hour})
		l := openJLogs(t, dataDir, j, 1, Options{MaxSegmentSize: 1 << 30})[0]
		for i := range 40 {
			mustAppend(t, l, bytes.Repeat([]byte{'o'}, 500+i))
		}
		require.NoError(t, l.Close())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, j.CheckpointClosed(ctx))
		_, ok := closedTable(j)[name]
		require.True(t, ok, "the closed partition is in the closed table")
		require.NoError(t, os.RemoveAll(filepath.Join(dataDir, name)))
		return dataDir, j
	}
	crashCopy := func(t *testing.T, dataDir string) string {
		dir := filepath.Join(t.TempDir(), "crash")
		require.NoError(t, os.CopyFS(dir, os.DirFS(dataDir)))
		return dir
	}
	// recreatedCrashAtRoll is the new partition of a crash at its first
	// roll before its first journal round was durable.
	recreatedCrashAtRoll := func(t *testing.T, dir string) {
		pdir := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(pdir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(pdir, segmentName(0)), nil, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(pdir, segmentName(rollAt)), nil, 0o644))
	}
	restart := func(t *testing.T, dir string) (*Log, *logBuf) {
		lb := &logBuf{}
		j, err := OpenJournal(dir, testFileSize(JournalOptions{Logf: lb.logf}))
		require.NoError(t, err)
		t.Cleanup(func() { _ = j.Close() })
		l, err := Open(filepath.Join(dir, name), Options{Journal: j, IDs: &seqIDs{}, Logf: lb.logf, MaxSegmentSize: 1 << 30})
		require.NoError(t, err, "the restart of the re-created partition starts: %s", lb.String())
		t.Cleanup(func() { _ = l.Close() })
		return l, lb
	}

	// mendedAfterRoll: the re-created partition in dir crashes at its
	// first roll, and the restart removes the empty roll (no stale trust
	// point refuses it) with nothing in the partition.
	mendedAfterRoll := func(t *testing.T, dir string) {
		t.Helper()
		recreatedCrashAtRoll(t, dir)
		l, lb := restart(t, dir)
		require.Contains(t, lb.String(), "removed 1 empty segment(s) from "+segmentName(rollAt))
		require.Zero(t, l.MaxOffset())
	}

	t.Run("forgotten when its directory is removed", func(t *testing.T) {
		t.Parallel()
		dataDir, j := deleted(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, j.ForgetRemoved(ctx, []string{filepath.Join(dataDir, name)}))
		_, ok := closedTable(j)[name]
		require.False(t, ok)
		mendedAfterRoll(t, crashCopy(t, dataDir)) // the re-created partition's crash
	})

	t.Run("forgotten by a restart that finds its directory gone", func(t *testing.T) {
		t.Parallel()
		dataDir, _ := deleted(t)
		dir := crashCopy(t, dataDir) // a crash before ForgetRemoved
		j2 := openJournal(t, dir, JournalOptions{})
		_, ok := closedTable(j2)[name]
		require.False(t, ok, "a partition whose directory is gone is not vouched for")
		forceCheckpoint(t, j2)
		mendedAfterRoll(t, crashCopy(t, dir))
	})

	t.Run("acknowledged records of the re-created partition kept", func(t *testing.T) {
		t.Parallel()
		dataDir, j := deleted(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, j.ForgetRemoved(ctx, []string{filepath.Join(dataDir, name)}))
		l := openLog(t, filepath.Join(dataDir, name), Options{Journal: j, MaxSegmentSize: 1 << 30})
		var want [][]byte
		for i := range 10 {
			d := fmt.Appendf(nil, "new #%d", i)
			mustAppend(t, l, d)
			want = append(want, d)
		}
		end := l.MaxOffset()
		dir := crashCopy(t, dataDir)
		// The roll of a round that never reached the journal.
		require.NoError(t, os.WriteFile(filepath.Join(dir, name, segmentName(end+rollAt)), nil, 0o644))
		l2, _ := restart(t, dir)
		require.Equal(t, end, l2.MaxOffset())
		recs := readAllRecords(t, l2, 1<<20)
		require.Len(t, recs, len(want))
		for i, r := range recs {
			require.Equal(t, want[i], r.Data)
		}
		require.NoFileExists(t, filepath.Join(dir, name, segmentName(end+rollAt)))
	})
}

// closedTable returns a copy of j's closed table.
func closedTable(j *Journal) map[string]closedEnd {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.closedTableLocked()
}
