package store

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// FlushMarkName is the file, in the directory of a partition that is not
// journaled (threshold mode, or group commit without a journal), where
// its log records its durable end: the partition offset up to which its
// segments were fsynced, rewritten in place after every fsync that
// raised it (docs/storage.md, "Threshold mode: the flush mark").
// Recovery of the last segment takes damage at or past it, with valid
// records after it, for a torn tail (a power cut that kept a later
// unsynced page and lost an earlier one) and cuts it; damage before it
// is damage, as before.
//
// The file is rewritten in place and fdatasynced only now and then, so
// after a power cut its on-disk version may be an older one. An older
// mark is LOWER than the true durable end, and recovery takes damage
// between the two, in data fsynced and acknowledged, for a torn tail and
// cuts it: so the staleness is bounded. The mark is fdatasynced at every
// threshold-mode segment roll, after the flush of the threshold-mode
// ticker when its interval is at least flushMarkSyncEvery (the flush that
// ends a burst of puts: at most one fdatasync per interval), when the log
// is found idle flushMarkIdleAfter (10 ms) after a flush (the puts
// stopped right after a flush of the threshold, leaving the ticker
// nothing to flush), and otherwise by a timer at most every
// flushMarkSyncEvery (1 s) after it changed, off the put path: a bit flip
// in about the last second of acknowledged data before a power cut may be
// cut as a torn tail only under a steady stream of puts. A mark that goes down (Truncate, a recovery cut) is
// fdatasynced at once: an older, higher mark coming back would take a
// torn tail in the rewritten range for damage and refuse the start.
// Close fdatasyncs a mark changed since its last sync. After a kill -9
// the page cache keeps the latest version. It is 16 bytes:
//
//	[4 bytes "mqfl"][u64 durable end][u32 crc32c of the 12 bytes before]
const FlushMarkName = ".flushed"

const flushMarkSize = 16

var flushMarkMagic = [4]byte{'m', 'q', 'f', 'l'}

// flushMarkSyncEvery bounds how long a raised flush mark may stay
// unsynced: the first change after a sync arms a timer that fdatasyncs
// the file this long after (at most one fdatasync per interval per
// partition, and none while the mark does not change).
var flushMarkSyncEvery = time.Second

// flushMarkIdleAfter is how soon after a flush that raised the mark the
// log is checked for idleness: if nothing was appended since (the flush
// was the last of a burst), the mark is fdatasynced then, not up to
// flushMarkSyncEvery later. A log still appending leaves it to the
// next flush, or to the timer.
const flushMarkIdleAfter = 10 * time.Millisecond

// flushMark is a log's flush mark file.
type flushMark struct {
	mu  sync.Mutex
	f   *os.File // nil: the log keeps none (journaled, or it could not be opened)
	end int64    // the end last written (-1: none)
	buf [flushMarkSize]byte
	// dirty: written since its last fdatasync.
	dirty bool
	// timer fdatasyncs a dirty mark (syncFlushMarkLater); armed: pending.
	timer *time.Timer
	armed bool
	// idle fdatasyncs a dirty mark flushMarkIdleAfter after a flush that
	// raised it if the log is idle by then (flushMarkIdle); idleArmed:
	// pending.
	idle      *time.Timer
	idleArmed bool
	// syncMu is held by the timer's fdatasync (without mu, so that the
	// put path's rewrites never wait for it) and by closeFlushMark, so
	// that the file is not closed under it. Taken before mu.
	syncMu sync.Mutex
	sync   func(*os.File) error // fdatasync (hooks.markSync in tests)
}

func encodeFlushMark(b []byte, end int64) {
	copy(b, flushMarkMagic[:])
	binary.BigEndian.PutUint64(b[4:], uint64(end))
	binary.BigEndian.PutUint32(b[12:], crc32.Checksum(b[:12], castagnoli))
}

// decodeFlushMark returns the end b records, or -1 when b is not a valid
// mark.
func decodeFlushMark(b []byte) int64 {
	if len(b) < flushMarkSize || [4]byte(b[:4]) != flushMarkMagic ||
		crc32.Checksum(b[:12], castagnoli) != binary.BigEndian.Uint32(b[12:]) {
		return -1
	}
	end := int64(binary.BigEndian.Uint64(b[4:]))
	if end < 0 {
		return -1
	}
	return end
}

// openFlushMark opens (creating it) the log's flush mark file and returns
// the durable end it records (-1: none, or no valid one). It runs during
// recovery, before the directory's fsync, so a new file's entry is made
// durable with the segments'. A file that cannot be opened leaves the log
// without a mark (recovery then judges damage as before its time).
func (l *Log) openFlushMark() int64 {
	if l.fm.f != nil {
		return l.fm.end
	}
	l.fm.end = -1
	f, err := l.openFile(filepath.Join(l.dir, FlushMarkName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		l.logf("store: %s: no flush mark, damage in the last segment will not be told from a torn tail: %v", l.dir, err)
		return -1
	}
	l.fm.f = f
	var b [flushMarkSize]byte
	if n, _ := f.ReadAt(b[:], 0); n == flushMarkSize {
		l.fm.end = decodeFlushMark(b[:])
	}
	return l.fm.end
}

// dropFlushMark removes the flush mark a journaled log finds, left from a
// run in threshold mode, and makes the removal durable: the journaled log
// does not keep it up to date, so if the partition went back to threshold
// mode later, the stale (lower) mark would take damage in data fsynced
// since for a torn tail. Recovery calls it only when the directory lists
// one; nothing to do, and no fsync, when there is none.
func (l *Log) dropFlushMark() error {
	err := os.Remove(filepath.Join(l.dir, FlushMarkName))
	if isNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: remove %s: %w", filepath.Join(l.dir, FlushMarkName), err)
	}
	return l.syncDir()
}

// noteFlushed records end as the log's durable end if it is higher than
// the one recorded: everything before it was just fsynced. With roll (a
// threshold-mode segment roll) the mark is fdatasynced at once if it
// changed since its last sync; otherwise the timer does it within
// flushMarkSyncEvery.
func (l *Log) noteFlushed(end int64, roll bool) {
	l.fm.mu.Lock()
	defer l.fm.mu.Unlock()
	if l.fm.f == nil {
		return
	}
	if end > l.fm.end {
		l.writeFlushMarkLocked(end)
	}
	if roll && l.fm.dirty {
		if err := l.syncFlushMarkLocked(); err != nil {
			l.logf("store: %s: %v", l.dir, err)
		}
		return
	}
	l.syncFlushMarkLater()
	l.syncFlushMarkIfIdle()
}

// syncFlushMarkIfIdle arms the timer that fdatasyncs a dirty mark
// flushMarkIdleAfter from now if the log appended nothing since
// (flushMarkIdle), unless it is armed. Callers hold fm.mu.
func (l *Log) syncFlushMarkIfIdle() {
	if !l.fm.dirty || l.fm.idleArmed {
		return
	}
	l.fm.idleArmed = true
	if l.fm.idle == nil {
		l.fm.idle = time.AfterFunc(flushMarkIdleAfter, l.flushMarkIdle)
		return
	}
	l.fm.idle.Reset(flushMarkIdleAfter)
}

// flushMarkIdle fdatasyncs a dirty mark when the log holds nothing past
// it: the puts stopped right after a flush (the threshold's, after which
// the ticker finds nothing to flush, or a group-commit chunk's), so the
// mark is exact on disk within flushMarkIdleAfter of the last flush. A
// log with appends past the mark gets a flush that raises the mark again
// and arms this again (Close's, at the latest), so under a steady stream
// of puts it adds no fdatasync: the timer's bound applies.
func (l *Log) flushMarkIdle() {
	l.fm.mu.Lock()
	l.fm.idleArmed = false
	end := l.fm.end
	l.fm.mu.Unlock()
	l.mu.Lock()
	busy := l.failErr != nil || l.final || l.active == nil || l.active.end() > end
	l.mu.Unlock()
	if !busy {
		l.syncFlushMarkNow()
	}
}

// resetFlushed records end as the log's durable end even if it is lower
// (recovery cut the log there, or Truncate did): a mark past the end
// would take a later torn tail below it for damage. A lowered mark (or
// one replacing no known mark: the file new, or written before a power
// cut kept none of its writes) is fdatasynced before it returns, so that
// the old, higher one cannot come back after a power cut; a failed
// fdatasync is returned (recovery fails the Open on it; Truncate, which
// cannot fail on it, logs it).
func (l *Log) resetFlushed(end int64) error {
	l.fm.mu.Lock()
	defer l.fm.mu.Unlock()
	if l.fm.f == nil || end == l.fm.end {
		return nil
	}
	lower := l.fm.end < 0 || end < l.fm.end
	l.writeFlushMarkLocked(end)
	if !lower {
		l.syncFlushMarkLater()
		return nil
	}
	if l.fm.end != end {
		// The write failed (not fatal, as in writeFlushMarkLocked): an
		// older, higher mark left in the file may refuse a later start
		// for a torn tail past end.
		l.logf("store: %s: could not write the flush mark %d", l.dir, end)
		return nil
	}
	return l.syncFlushMarkLocked()
}

func (l *Log) writeFlushMarkLocked(end int64) {
	encodeFlushMark(l.fm.buf[:], end)
	l.fm.dirty = true
	if _, err := l.fm.f.WriteAt(l.fm.buf[:], 0); err != nil {
		// Not fatal: the mark only lets recovery cut a torn tail. An
		// unknown one is dropped from the next recovery's view by its
		// crc.
		l.fm.end = -1
		return
	}
	l.fm.end = end
}

// syncFlushMarkLocked fdatasyncs the mark now. Callers hold fm.mu.
func (l *Log) syncFlushMarkLocked() error {
	l.fm.dirty = false
	if err := l.fm.sync(l.fm.f); err != nil {
		return fmt.Errorf("store: fsync %s: %w", filepath.Join(l.dir, FlushMarkName), err)
	}
	return nil
}

// syncFlushMarkLater arms the timer that fdatasyncs a dirty mark within
// flushMarkSyncEvery, unless it is armed. Callers hold fm.mu.
func (l *Log) syncFlushMarkLater() {
	if !l.fm.dirty || l.fm.armed {
		return
	}
	l.fm.armed = true
	if l.fm.timer == nil {
		l.fm.timer = time.AfterFunc(flushMarkSyncEvery, l.syncFlushMarkTimer)
		return
	}
	l.fm.timer.Reset(flushMarkSyncEvery)
}

// syncFlushMarkTimer is the timer's fdatasync, on its own goroutine and
// without fm.mu: a rewrite while it runs marks the file dirty again and
// arms the timer again.
func (l *Log) syncFlushMarkTimer() {
	l.fm.mu.Lock()
	l.fm.armed = false
	l.fm.mu.Unlock()
	l.syncFlushMarkNow()
}

// syncFlushMarkNow fdatasyncs the mark if it changed since its last
// sync, without fm.mu (the put path's rewrites never wait for it): the
// timer's, and the threshold-mode ticker's after its flush (flusher). A
// timer still armed then finds the mark clean, unless it changed again.
func (l *Log) syncFlushMarkNow() {
	l.fm.syncMu.Lock()
	defer l.fm.syncMu.Unlock()
	l.fm.mu.Lock()
	f := l.fm.f
	if f == nil || !l.fm.dirty {
		l.fm.mu.Unlock()
		return
	}
	l.fm.dirty = false
	l.fm.mu.Unlock()
	if err := l.fm.sync(f); err != nil {
		l.logf("store: %s: fsync %s: %v", l.dir, FlushMarkName, err)
	}
}

// closeFlushMark stops the timer, fdatasyncs the mark if it changed
// since its last sync, and closes the file.
func (l *Log) closeFlushMark() {
	l.fm.syncMu.Lock()
	defer l.fm.syncMu.Unlock()
	l.fm.mu.Lock()
	defer l.fm.mu.Unlock()
	if l.fm.timer != nil {
		l.fm.timer.Stop()
		l.fm.armed = false
	}
	if l.fm.idle != nil {
		l.fm.idle.Stop()
		l.fm.idleArmed = false
	}
	if l.fm.f != nil {
		if l.fm.dirty {
			if err := l.syncFlushMarkLocked(); err != nil {
				l.logf("store: %s: %v", l.dir, err)
			}
		}
		_ = l.fm.f.Close()
		l.fm.f = nil
	}
}
