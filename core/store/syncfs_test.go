package store

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/fsutil"
)

// syncfsFixture opens a journal whose checkpoints come every 20 ms, with
// syncfs replaced by sfs (nil: the journal decides by the file system),
// and n journaled logs whose segment fdatasyncs are counted.
func syncfsFixture(t *testing.T, n int, mode CheckpointSync, sfs func(*os.File) error) (*Journal, []*Log, *atomic.Int64) {
	t.Helper()
	dataDir := t.TempDir()
	jo := JournalOptions{CheckpointInterval: time.Hour, CheckpointSync: mode, Logf: t.Logf}
	if sfs != nil {
		jo.hooks = &journalHooks{syncfs: sfs, syncfsFS: true}
	}
	j := openJournal(t, dataDir, jo)
	var segSyncs atomic.Int64
	logs := openJLogs(t, dataDir, j, n, Options{hooks: &hooks{sync: func(f *os.File) error {
		segSyncs.Add(1)
		return fdatasync(f)
	}}})
	return j, logs, &segSyncs
}

// forceCheckpoint asks for a checkpoint until one more has completed (or
// the journal failed), even if nothing was written since the last one.
func forceCheckpoint(t *testing.T, j *Journal) {
	t.Helper()
	n := j.Stats().Checkpoints
	deadline := time.Now().Add(10 * time.Second)
	for j.Stats().Checkpoints <= n && j.Err() == nil {
		require.True(t, time.Now().Before(deadline), "no checkpoint: %+v", j.Stats())
		j.mu.Lock()
		j.due, j.tableCh = true, true
		j.cond.Signal()
		j.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
}

// appendAll appends one record to every log, then waits for a checkpoint
// taken after all of them (the first of the two forced may have been in
// progress before).
func appendAll(t *testing.T, j *Journal, logs []*Log) error {
	t.Helper()
	for i, l := range logs {
		if _, _, err := l.AppendSync([]Entry{entryf("m%d", i)}); err != nil {
			return err
		}
	}
	forceCheckpoint(t, j)
	forceCheckpoint(t, j)
	return j.Err()
}

// TestCheckpointSyncfs: a checkpoint of many segments makes them durable
// with one syncfs of the file system after writing every tail, instead of
// an fdatasync each; a small one, or CheckpointSyncFsync, fdatasyncs each.
func TestCheckpointSyncfs(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	count := func(f *os.File) error {
		calls.Add(1)
		return fsutil.Syncfs(f)
	}
	t.Run("many segments", func(t *testing.T) {
		calls.Store(0)
		j, logs, segSyncs := syncfsFixture(t, syncfsMinSegments+8, CheckpointSyncAuto, count)
		require.NoError(t, appendAll(t, j, logs))
		require.Positive(t, calls.Load(), "syncfs made the checkpoint durable")
		require.Positive(t, j.Stats().Syncfs)
		require.Zero(t, segSyncs.Load(), "no segment was fdatasynced")
		for i, l := range logs {
			recs := readAllRecords(t, l, 1<<20)
			require.Len(t, recs, 1)
			require.Equal(t, entryf("m%d", i).Data, recs[0].Data)
		}
	})
	t.Run("few segments", func(t *testing.T) {
		calls.Store(0)
		j, logs, segSyncs := syncfsFixture(t, 4, CheckpointSyncAuto, count)
		require.NoError(t, appendAll(t, j, logs))
		require.Zero(t, calls.Load())
		require.Zero(t, j.Stats().Syncfs)
		require.GreaterOrEqual(t, segSyncs.Load(), int64(4), "each segment was fdatasynced")
	})
	t.Run("fsync mode", func(t *testing.T) {
		calls.Store(0)
		j, logs, segSyncs := syncfsFixture(t, syncfsMinSegments+8, CheckpointSyncFsync, count)
		require.NoError(t, appendAll(t, j, logs))
		require.Zero(t, calls.Load())
		require.GreaterOrEqual(t, segSyncs.Load(), int64(syncfsMinSegments+8))
	})
}

// TestCheckpointSyncfsFailure: a failed syncfs is final, like a failed
// fsync: the journal fails, no checkpoint is recorded, and puts are
// refused from then on.
func TestCheckpointSyncfsFailure(t *testing.T) {
	t.Parallel()
	j, logs, _ := syncfsFixture(t, syncfsMinSegments, CheckpointSyncAuto, func(*os.File) error { return errors.New("injected EIO") })
	err := appendAll(t, j, logs)
	require.ErrorContains(t, err, "syncfs")
	require.ErrorContains(t, j.Err(), "injected EIO")
	ckpts := j.Stats().Checkpoints
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, ckpts, j.Stats().Checkpoints, "no checkpoint after the failure")
	_, _, err = logs[0].AppendSync([]Entry{entryf("after")})
	require.Error(t, err, "puts are refused after a failed syncfs")
}

// TestSyncfsFS: the journal decides by the data directory's file system
// (here the test's temporary directory): syncfs on a local ext4, xfs or
// btrfs (or tmpfs), an fdatasync per segment elsewhere.
func TestSyncfsFS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ok, name, _ := fsutil.SyncfsFS(dir)
	t.Logf("%s: syncfs file system %v (%s)", dir, ok, name)
	j, logs, segSyncs := syncfsFixture(t, syncfsMinSegments+8, CheckpointSyncAuto, nil)
	require.NoError(t, appendAll(t, j, logs))
	if ok2, _, _ := fsutil.SyncfsFS(filepath.Dir(j.Dir())); ok2 {
		require.Positive(t, j.Stats().Syncfs)
		require.Zero(t, segSyncs.Load())
	} else {
		require.Zero(t, j.Stats().Syncfs)
		require.Positive(t, segSyncs.Load())
	}
}

// countObs counts the observations of a store Observer.
type countObs struct{ fsyncs, rounds atomic.Int64 }

func (o *countObs) ObserveFsync(time.Duration)               { o.fsyncs.Add(1) }
func (o *countObs) ObserveCommitRound(n int)                 { o.rounds.Add(1) }
func (o *ckptCountObs) ObserveCheckpointFsync(time.Duration) { o.ckpts.Add(1) }

// ckptCountObs is a countObs that also tells checkpoint fsyncs apart.
type ckptCountObs struct {
	countObs
	ckpts atomic.Int64
}

// TestCheckpointObserver: a journal Observer that is a CheckpointObserver
// sees each fsync and syncfs of a checkpoint (kind checkpoint in
// /metrics), which then no longer reach the segments' Observer; a plain
// Observer leaves them counted as segment fsyncs.
func TestCheckpointObserver(t *testing.T) {
	t.Parallel()
	open := func(t *testing.T, n int, jobs Observer, sfs func(*os.File) error) (*Journal, []*Log, *countObs) {
		dataDir := t.TempDir()
		jo := JournalOptions{CheckpointInterval: time.Hour, Logf: t.Logf, Observer: jobs}
		if sfs != nil {
			jo.hooks = &journalHooks{syncfs: sfs, syncfsFS: true}
		}
		j := openJournal(t, dataDir, jo)
		seg := &countObs{}
		return j, openJLogs(t, dataDir, j, n, Options{Observer: seg}), seg
	}
	t.Run("fsync each", func(t *testing.T) {
		jobs := &ckptCountObs{}
		j, logs, seg := open(t, 4, jobs, nil)
		require.NoError(t, appendAll(t, j, logs))
		require.GreaterOrEqual(t, jobs.ckpts.Load(), int64(4), "each segment's checkpoint fsync")
		require.Positive(t, jobs.fsyncs.Load(), "journal fdatasyncs")
		require.Zero(t, seg.fsyncs.Load(), "checkpoint fsyncs are not segment fsyncs")
	})
	t.Run("syncfs", func(t *testing.T) {
		var calls atomic.Int64
		jobs := &ckptCountObs{}
		j, logs, seg := open(t, syncfsMinSegments+1, jobs, func(f *os.File) error {
			calls.Add(1)
			return fsutil.Syncfs(f)
		})
		require.NoError(t, appendAll(t, j, logs))
		require.Positive(t, calls.Load())
		require.GreaterOrEqual(t, jobs.ckpts.Load(), calls.Load(), "each syncfs observed")
		require.Zero(t, seg.fsyncs.Load())
	})
	t.Run("plain observer", func(t *testing.T) {
		jobs := &countObs{}
		j, logs, seg := open(t, 4, jobs, nil)
		require.NoError(t, appendAll(t, j, logs))
		require.GreaterOrEqual(t, seg.fsyncs.Load(), int64(4), "checkpoint fsyncs counted as segment fsyncs")
	})
}
