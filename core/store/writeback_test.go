package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// wbCall is one call of a recording writeBackFunc.
type wbCall struct {
	f      *os.File
	off, n int64
	wait   bool
}

// wbRecorder records the write-back calls of a journal and passes them
// on to the real write-back (or fails the waits of segments' with err).
type wbRecorder struct {
	mu    sync.Mutex
	calls []wbCall
	err   error
	// block, if set, holds every wait of a segment's range until it is
	// closed.
	block chan struct{}
	// waiting gets a value when a wait is held by block.
	waiting chan struct{}
}

func (r *wbRecorder) writeBack(f *os.File, off, n int64, wait bool) error {
	r.mu.Lock()
	r.calls = append(r.calls, wbCall{f, off, n, wait})
	err, block := r.err, r.block
	r.mu.Unlock()
	if wait && block != nil && strings.HasSuffix(f.Name(), segmentSuffix) {
		select {
		case r.waiting <- struct{}{}:
		default:
		}
		<-block
	}
	if err != nil && wait && strings.HasSuffix(f.Name(), segmentSuffix) {
		return err
	}
	return writeBack(f, off, n, wait)
}

func (r *wbRecorder) snapshot() []wbCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]wbCall(nil), r.calls...)
}

// TestWriteBehindRoom: room is what is left of the current step, so a
// writer that writes at most that much ends each step exactly.
func TestWriteBehindRoom(t *testing.T) {
	w := newWriteBehind(func(*os.File, int64, int64, bool) error { return nil }, syncfsWriteBehind, 1)
	a := &os.File{}
	const step = syncfsWriteBehind
	require.Equal(t, int64(step), w.room())
	w.wrote(a, 0, step/4)
	require.Equal(t, int64(step-step/4), w.room(), "what is left of the step")
	w.wrote(a, step/4, step-step/4)
	require.Equal(t, int64(step), w.room(), "a new step")
	w.finish()
}

// TestWriteBehindPacing: a worker's write-back starts every step bytes
// written, over contiguous writes of one file merged into one range and
// over several files; each kick waits for the ranges the kick before it
// started, not its own; finish starts the rest and waits for everything.
func TestWriteBehindPacing(t *testing.T) {
	var calls []wbCall
	w := newWriteBehind(func(f *os.File, off, n int64, wait bool) error {
		calls = append(calls, wbCall{f, off, n, wait})
		return nil
	}, ckptWriteBehind, 1)
	require.Equal(t, int64(ckptWriteBehind), w.step)
	require.Equal(t, int64(minWriteBehind), newWriteBehind(writeBack, ckptWriteBehind, 64).step, "at least minWriteBehind per worker")
	a, b := &os.File{}, &os.File{}
	const step = ckptWriteBehind
	w.wrote(a, 0, step/2)
	w.wrote(a, step/2, step/2) // contiguous: one range, and a step
	require.Equal(t, []wbCall{{a, 0, step, false}}, calls)
	w.wrote(a, step, step/4)
	w.wrote(b, 0, step/2)
	w.wrote(a, 2*step, step/4) // not contiguous with a's last range
	require.Equal(t, []wbCall{
		{a, 0, step, false},
		{a, step, step / 4, false}, {b, 0, step / 2, false}, {a, 2 * step, step / 4, false},
		{a, 0, step, true}, // the previous kick's, now
	}, calls)
	calls = nil
	w.wrote(b, step/2, 100)
	w.finish()
	require.Equal(t, []wbCall{
		{b, step / 2, 100, false},
		{a, step, step / 4, true}, {b, 0, step / 2, true}, {a, 2 * step, step / 4, true},
		{b, step / 2, 100, true},
	}, calls)
	calls = nil
	w.finish()
	require.Empty(t, calls, "nothing left")

	// An error is kept and ends the write-back; unsupported ends it too,
	// without an error.
	fail := errors.New("EIO")
	n := 0
	w = newWriteBehind(func(*os.File, int64, int64, bool) error { n++; return fail }, ckptWriteBehind, 1)
	w.wrote(a, 0, step)
	w.wrote(a, step, step)
	w.finish()
	require.Equal(t, 1, n)
	require.ErrorIs(t, w.err, fail)
	n = 0
	w = newWriteBehind(func(*os.File, int64, int64, bool) error {
		n++
		return &os.PathError{Op: "sync_file_range", Err: syscall.ENOSYS}
	}, ckptWriteBehind, 1)
	w.wrote(a, 0, step)
	w.wrote(a, step, step)
	w.finish()
	require.Equal(t, 1, n)
	require.NoError(t, w.err)
	require.True(t, w.unsupported)
	w.wrote(a, 2*step, step-1)
	require.Equal(t, w.step, w.room(), "unsupported: writes are not cut to what is left of a step")

	// In a hurry (the checkpoint falling behind), write-back is started
	// but never waited for.
	calls = nil
	hurry := true
	w = newWriteBehind(func(f *os.File, off, n int64, wait bool) error {
		calls = append(calls, wbCall{f, off, n, wait})
		return nil
	}, ckptWriteBehind, 1)
	w.hurry = func() bool { return hurry }
	w.wrote(a, 0, step)
	w.wrote(a, step, step)
	w.wrote(a, 2*step, 100)
	w.finish()
	require.Equal(t, []wbCall{{a, 0, step, false}, {a, step, step, false}, {a, 2 * step, 100, false}}, calls)
	calls = nil
	w.wrote(a, 3*step, step)
	hurry = false // caught up: waits again, from the next step
	w.wrote(a, 4*step, step)
	require.Equal(t, []wbCall{{a, 3 * step, step, false}, {a, 4 * step, step, false}, {a, 3 * step, step, true}}, calls)

	var nilW *writeBehind
	nilW.wrote(a, 0, step) // no write-back: nothing to do
	nilW.finish()
	require.Nil(t, newWriteBehind(nil, ckptWriteBehind, 4))
}

// TestCheckpointWriteBack: a checkpoint writes its segments' tails in
// steps whose write-back it starts as it goes and waits for before the
// segment's fdatasync: every byte of the tails is in a range started and
// then waited for, and what was acknowledged reads back after a reopen.
func TestCheckpointWriteBack(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	rec := &wbRecorder{}
	opts := JournalOptions{CheckpointBytes: 1 << 40, CheckpointInterval: time.Hour, hooks: &journalHooks{writeBack: rec.writeBack}}
	j := openJournal(t, dataDir, opts)
	logs := openJLogs(t, dataDir, j, 2, Options{MaxSegmentSize: 3 << 20})
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	var before [2]int64
	for i, l := range logs {
		before[i] = l.Stats().Bytes
	}
	const puts = 80 // 5 MiB per log: several steps, and a roll
	for i := range puts {
		for _, l := range logs {
			_, _, err := l.AppendSync([]Entry{entry(data[:len(data)-i])})
			require.NoError(t, err)
		}
	}
	forceCheckpoint(t, j)
	require.NoError(t, j.Err())
	calls := rec.snapshot()
	started, waited := map[wbCall]int{}, map[wbCall]int{}
	var startedBytes int64
	for _, c := range calls {
		if !strings.HasSuffix(c.f.Name(), segmentSuffix) {
			continue // a new journal file's zero fill
		}
		require.Positive(t, c.n)
		require.LessOrEqual(t, c.n, int64(ckptWriteBehind)+int64(len(data)), "a range is about a step")
		if c.wait {
			c.wait = false
			waited[c]++
		} else {
			started[c]++
			startedBytes += c.n
		}
	}
	require.Equal(t, started, waited, "every range started is waited for, once")
	var written int64
	for i, l := range logs {
		written += l.Stats().Bytes - before[i]
	}
	require.Positive(t, written)
	require.Equal(t, written, startedBytes, "the write-back covers every byte the checkpoint wrote")
	require.Greater(t, len(started), 2*4, "several steps per log")

	for _, l := range logs {
		require.NoError(t, l.Close())
	}
	require.NoError(t, j.Close())
	j2 := openJournal(t, dataDir, JournalOptions{})
	for p, l := range openJLogs(t, dataDir, j2, 2, Options{MaxSegmentSize: 3 << 20}) {
		recs := readAllRecords(t, l, 1<<20)
		require.Len(t, recs, puts, "partition %d", p)
		for i, r := range recs {
			require.Equal(t, data[:len(data)-i], r.Data, "partition %d record %d", p, i)
		}
	}
}

// TestCheckpointWriteBackFailureFinal: a write-back error of a checkpoint
// fails the journal as its fdatasync's would (the wait consumed the error
// the fdatasync would have reported): no checkpoint record is written and
// every later durable append fails.
func TestCheckpointWriteBackFailureFinal(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	rec := &wbRecorder{err: &os.PathError{Op: "sync_file_range", Path: "x", Err: syscall.EIO}}
	opts := JournalOptions{CheckpointBytes: 1 << 40, CheckpointInterval: time.Hour, hooks: &journalHooks{writeBack: rec.writeBack}}
	j := openJournal(t, dataDir, opts)
	logs := openJLogs(t, dataDir, j, 1, Options{})
	_, _, err := logs[0].AppendSync([]Entry{entry(make([]byte, 4096))})
	require.NoError(t, err)
	n := j.Stats().Checkpoints
	j.mu.Lock()
	j.due, j.tableCh = true, true
	j.cond.Signal()
	j.mu.Unlock()
	require.Eventually(t, func() bool { return j.Err() != nil }, 10*time.Second, time.Millisecond)
	require.ErrorIs(t, j.Err(), ErrFailed)
	require.ErrorIs(t, j.Err(), syscall.EIO)
	require.Contains(t, j.Err().Error(), "write-back")
	require.Equal(t, n, j.Stats().Checkpoints, "no checkpoint record after a failed write-back")
	_, _, err = logs[0].AppendSync([]Entry{entryf("after")})
	require.ErrorIs(t, err, ErrFailed)
}

// TestCheckpointDoesNotHoldRounds: while a checkpoint is held in its
// segment's fdatasync, or in the write-back of its tail, commit rounds go
// on: durable appends to the same log and to others are acknowledged, and
// the checkpoint completes once released.
func TestCheckpointDoesNotHoldRounds(t *testing.T) {
	t.Parallel()
	for _, held := range []string{"fdatasync", "write-back"} {
		t.Run(held, func(t *testing.T) {
			t.Parallel()
			dataDir := t.TempDir()
			rec := &wbRecorder{}
			opts := JournalOptions{CheckpointBytes: 1 << 40, CheckpointInterval: time.Hour, hooks: &journalHooks{writeBack: rec.writeBack}}
			j := openJournal(t, dataDir, opts)
			g := newGateSync()
			var gate atomic.Bool
			logs := openJLogs(t, dataDir, j, 3, Options{hooks: &hooks{sync: func(f *os.File) error {
				if gate.Load() {
					return g.sync(f)
				}
				return fdatasync(f)
			}}})
			big := make([]byte, 600<<10) // more than a step: a wait before the fdatasync
			for _, l := range logs {
				_, _, err := l.AppendSync([]Entry{entry(big)})
				require.NoError(t, err)
			}
			var started chan struct{}
			if held == "fdatasync" {
				gate.Store(true)
				started = g.started
			} else {
				rec.mu.Lock()
				rec.block, rec.waiting = make(chan struct{}), make(chan struct{}, 1)
				rec.mu.Unlock()
				started = rec.waiting
			}
			n := j.Stats().Checkpoints
			j.mu.Lock()
			j.due, j.tableCh = true, true
			j.cond.Signal()
			j.mu.Unlock()
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("the checkpoint never reached its " + held)
			}
			// The checkpoint is held: rounds go on.
			for i := range 50 {
				for _, l := range logs {
					_, _, err := l.AppendSync([]Entry{entryf("during-%d", i)})
					require.NoError(t, err)
				}
			}
			require.Equal(t, n, j.Stats().Checkpoints, "the checkpoint is still held")
			require.True(t, j.ckptBusy.Load())
			if held == "fdatasync" {
				gate.Store(false)
				close(g.release)
			} else {
				rec.mu.Lock()
				close(rec.block)
				rec.block = nil
				rec.mu.Unlock()
			}
			require.Eventually(t, func() bool { return j.Stats().Checkpoints > n }, 10*time.Second, time.Millisecond)
			require.NoError(t, j.Err())
			for p, l := range logs {
				recs := readAllRecords(t, l, 1<<20)
				require.Len(t, recs, 51, "partition %d", p)
			}
		})
	}
}

// writeBackFiles returns the distinct files whose write-back rec saw.
func writeBackFiles(rec *wbRecorder) map[string]bool {
	out := map[string]bool{}
	for _, c := range rec.snapshot() {
		out[filepath.Base(c.f.Name())] = true
	}
	return out
}

// TestJournalFileZeroFillWriteBack: a new journal file's zero fill is
// written back in steps as it goes, each waited for, before its
// fdatasync: every byte of every file the journal created.
func TestJournalFileZeroFillWriteBack(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	rec := &wbRecorder{}
	j := openJournal(t, dataDir, JournalOptions{FileSize: 4 << 20, hooks: &journalHooks{writeBack: rec.writeBack}})
	require.Eventually(t, func() bool {
		j.fmu.Lock()
		defer j.fmu.Unlock()
		return len(j.files) == 1+wantSpareJournalFiles
	}, 10*time.Second, time.Millisecond, "the spare files")
	started, waited := map[string]int64{}, map[string]int64{}
	for _, c := range rec.snapshot() {
		name := filepath.Base(c.f.Name())
		require.True(t, strings.HasSuffix(name, journalNewSuffix), "write-back of %s", name)
		require.LessOrEqual(t, c.n, int64(ckptWriteBehind))
		if c.wait {
			waited[name] += c.n
		} else {
			started[name] += c.n
		}
	}
	require.Len(t, started, 1+wantSpareJournalFiles)
	for name, n := range started {
		require.Equal(t, int64(4<<20), n, name)
	}
	require.Equal(t, started, waited)
}

// TestCheckpointWriteBackHurry: a checkpoint that starts with the journal
// more than three quarters of its lag bound behind the last durable
// checkpoint (appends will soon wait for it) starts its tails' write-back
// without waiting for any of it: its fdatasync waits for all at once.
func TestCheckpointWriteBackHurry(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	rec := &wbRecorder{}
	// Files of 16 MiB: the puts fit in the first, so no spare file is
	// zero-filled after the ones made at open (their write-back reads
	// maxBehind too).
	opts := JournalOptions{FileSize: 16 << 20, CheckpointBytes: 1 << 40, CheckpointInterval: time.Hour, hooks: &journalHooks{writeBack: rec.writeBack}}
	j := openJournal(t, dataDir, opts)
	require.Eventually(t, func() bool {
		j.fmu.Lock()
		defer j.fmu.Unlock()
		return len(j.files) == 1+wantSpareJournalFiles
	}, 10*time.Second, time.Millisecond, "the spare files")
	logs := openJLogs(t, dataDir, j, 1, Options{})
	big := make([]byte, 512<<10)
	for range 8 {
		_, _, err := logs[0].AppendSync([]Entry{entry(big)})
		require.NoError(t, err)
	}
	j.mu.Lock()
	require.Positive(t, j.behind())
	j.maxBehind = j.behind() // 4 MiB behind, bound 4 MiB: in a hurry
	require.True(t, j.ckptBehind())
	j.mu.Unlock()
	forceCheckpoint(t, j)
	require.NoError(t, j.Err())
	var started int64
	for _, c := range rec.snapshot() {
		if !strings.HasSuffix(c.f.Name(), segmentSuffix) {
			continue
		}
		require.False(t, c.wait, "a checkpoint in a hurry waits for no write-back")
		started += c.n
	}
	require.GreaterOrEqual(t, started, int64(8*len(big)), "its write-back was started")
	j.mu.Lock()
	require.False(t, j.ckptBehind(), "the checkpoint caught up")
	j.mu.Unlock()
}

// TestSyncfsCheckpointTails: a checkpoint made durable by one syncfs
// writes back every tail itself, small ones too (at hundreds of
// partitions nearly all are small), with one worker, so that at most two
// steps of syncfsWriteBehind are started and not yet waited for at any
// time: the segment data queued on the device ahead of the journal.
func TestSyncfsCheckpointTails(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	rec := &wbRecorder{}
	var syncfs atomic.Int64
	opts := JournalOptions{FileSize: 16 << 20, CheckpointBytes: 1 << 40, CheckpointInterval: time.Hour,
		hooks: &journalHooks{writeBack: rec.writeBack, syncfsFS: true, syncfs: func(*os.File) error { syncfs.Add(1); return nil }}}
	j := openJournal(t, dataDir, opts)
	logs := openJLogs(t, dataDir, j, syncfsMinSegments+8, Options{})
	var total int64
	for i, l := range logs {
		size := 40 << 10
		if i == 0 {
			size = 3 * syncfsWriteBehind
		}
		_, _, err := l.AppendSync([]Entry{entry(make([]byte, size))})
		require.NoError(t, err)
		total += int64(size)
	}
	n := syncfs.Load()
	forceCheckpoint(t, j)
	require.NoError(t, j.Err())
	require.Greater(t, syncfs.Load(), n, "made durable by syncfs")
	dirs := map[string]bool{}
	type key struct {
		f      *os.File
		off, n int64
	}
	pending := map[key]bool{}
	var inFlight, most, started int64
	for _, c := range rec.snapshot() {
		if !strings.HasSuffix(c.f.Name(), segmentSuffix) {
			continue
		}
		dirs[filepath.Base(filepath.Dir(c.f.Name()))] = true
		k := key{c.f, c.off, c.n}
		if !c.wait {
			require.False(t, pending[k], "range %v started twice", k)
			pending[k] = true
			inFlight += c.n
			started += c.n
			most = max(most, inFlight)
			continue
		}
		if pending[k] {
			delete(pending, k)
			inFlight -= c.n
		}
	}
	require.Len(t, dirs, len(logs), "every tail is written back by the checkpoint")
	require.Empty(t, pending, "every range started is waited for")
	require.GreaterOrEqual(t, started, total, "all of the tails' bytes")
	// A tail's writes end at the step's end (writeBehind.room).
	require.LessOrEqual(t, most, int64(2*syncfsWriteBehind), "at most two steps queued")
	require.Less(t, most, started/2, "paced, not all at once")
}
