package store

import (
	"errors"
	"os"
	"syscall"

	"github.com/metaq-go/metaq/internal/fsutil"
)

// ckptWriteBehind is how many bytes of segment tails a checkpoint writes
// before it starts their write-back (RocksDB's bytes_per_sync), shared
// among its workers (minWriteBehind each at least). A checkpoint made
// durable by one syncfs writes its tails with one worker and
// syncfsWriteBehind: with nothing to gain from concurrent fsyncs, the
// less segment data is queued on the device ahead of the journal's
// fdatasyncs the better. See writeBehind and docs/storage.md, "Checkpoint
// write-back".
const (
	ckptWriteBehind   = 512 << 10
	syncfsWriteBehind = 256 << 10
	minWriteBehind    = 128 << 10
)

// writeBackFunc starts the write-back of [off, off+n) of f, and with wait
// set also waits until that range is written to the device
// (fsutil.StartWriteBack, fsutil.WaitWriteBack).
type writeBackFunc func(f *os.File, off, n int64, wait bool) error

// writeBack is the real writeBackFunc.
func writeBack(f *os.File, off, n int64, wait bool) error {
	if wait {
		return fsutil.WaitWriteBack(f, off, n)
	}
	return fsutil.StartWriteBack(f, off, n)
}

// wbRange is a byte range of a file written since its write-back started.
type wbRange struct {
	f      *os.File
	off, n int64
}

// writeBehind paces the write-back of the segment tails one checkpoint
// worker writes: every step bytes it starts the write-back of what it
// wrote since (sync_file_range SYNC_FILE_RANGE_WRITE) and waits for the
// step before that to reach the device. So the device never has more than
// about two steps per worker of segment data queued ahead of the
// journal's own writes, and the checkpoint's fdatasync (or syncfs) finds
// the data already written: it has the metadata and the device cache
// flush left, not tens of MB, which is what the journal's fdatasyncs
// queued behind (docs/benchmarks.md, "Tail latency").
//
// It changes nothing about durability: the fdatasync or syncfs after it
// is what makes the tails durable, and the checkpoint record is written
// only after that, as before. A write-back error is final for the
// journal, as the fdatasync's would be: waiting for the range consumes
// the error the fdatasync would have reported (fsyncgate).
type writeBehind struct {
	wb   writeBackFunc
	step int64
	cur  []wbRange // written, write-back not started
	curN int64
	prev []wbRange // write-back started, not waited for
	err  error     // the first write-back error; later calls do nothing
	// unsupported: the file system or kernel has no sync_file_range
	// (ENOSYS, EINVAL, EOPNOTSUPP); the fdatasync does it all.
	unsupported bool
	// hurry, if set, says the checkpoint is falling behind (appends will
	// soon wait for it): the write-back is then started but not waited
	// for, and the fdatasync or syncfs waits for all of it at once, at the
	// device's full queue depth, as before write-back. Pacing must not
	// make a congested device's checkpoints slower than puts.
	hurry func() bool
}

// newWriteBehind returns the pacing of one of workers checkpoint workers
// sharing total bytes per step, or nil (no write-back) when wb is nil.
func newWriteBehind(wb writeBackFunc, total int64, workers int) *writeBehind {
	if wb == nil {
		return nil
	}
	return &writeBehind{wb: wb, step: max(total/int64(max(workers, 1)), minWriteBehind)}
}

// room returns the bytes left to write in the current step: a writer
// that writes at most that much at a time ends each step exactly, so at
// most two steps are ever queued (kick).
func (w *writeBehind) room() int64 {
	if w.err != nil || w.unsupported {
		return w.step // nothing is counted any more
	}
	return max(w.step-w.curN, 1)
}

// wrote notes that [off, off+n) of f was just written.
func (w *writeBehind) wrote(f *os.File, off, n int64) {
	if w == nil || n <= 0 || w.err != nil || w.unsupported {
		return
	}
	if k := len(w.cur); k > 0 && w.cur[k-1].f == f && w.cur[k-1].off+w.cur[k-1].n == off {
		w.cur[k-1].n += n
	} else {
		w.cur = append(w.cur, wbRange{f: f, off: off, n: n})
	}
	w.curN += n
	if w.curN >= w.step {
		w.kick()
	}
}

// kick starts the write-back of what was written since the last kick,
// then waits for the ranges the last kick started.
func (w *writeBehind) kick() {
	for _, r := range w.cur {
		if !w.call(r, false) {
			break
		}
	}
	old := w.prev
	w.prev, w.curN = w.cur, 0
	if w.hurry != nil && w.hurry() {
		clear(old) // started; the fdatasync or syncfs waits for them
	} else {
		w.waitPrev(old)
	}
	w.cur = old[:0]
}

// waitPrev waits for the ranges rs, whose write-back was started.
func (w *writeBehind) waitPrev(rs []wbRange) {
	for _, r := range rs {
		if !w.call(r, true) {
			break
		}
	}
	clear(rs)
}

// finish starts the write-back of what is left and waits for all of it:
// before a worker's fdatasync, and before it returns (the files may be
// closed after).
func (w *writeBehind) finish() {
	if w == nil {
		return
	}
	w.kick()
	if w.hurry != nil && w.hurry() {
		clear(w.prev)
	} else {
		w.waitPrev(w.prev)
	}
	w.prev = w.prev[:0]
}

// call runs the write-back of r and reports whether to go on.
func (w *writeBehind) call(r wbRange, wait bool) bool {
	if w.err != nil || w.unsupported {
		return false
	}
	err := w.wb(r.f, r.off, r.n, wait)
	switch {
	case err == nil:
		return true
	case errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, errors.ErrUnsupported):
		w.unsupported = true
	default:
		w.err = err
	}
	return false
}
