package store

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"
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
// The file is never fsynced: what it says was durable when it was
// written, so whatever version of it a power cut leaves says nothing
// false (an older one says less). It is 16 bytes:
//
//	[4 bytes "mqfl"][u64 durable end][u32 crc32c of the 12 bytes before]
const FlushMarkName = ".flushed"

const flushMarkSize = 16

var flushMarkMagic = [4]byte{'m', 'q', 'f', 'l'}

// flushMark is a log's flush mark file.
type flushMark struct {
	mu  sync.Mutex
	f   *os.File // nil: the log keeps none (journaled, or it could not be opened)
	end int64    // the end last written (-1: none)
	// fresh: the file held no valid mark at Open (new, or written before
	// a power cut kept none of its writes): recovery fsyncs the first
	// one, so that some valid version of it is always durable.
	fresh bool
	buf   [flushMarkSize]byte
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
	l.fm.fresh = l.fm.end < 0
	return l.fm.end
}

// settleFlushMark records end, the end recovery left durable, as the
// log's durable end, and fsyncs the mark if the file held no valid one:
// the rewrites that follow are never fsynced, and a power cut may keep
// none of them, so a valid version must be durable first.
func (l *Log) settleFlushMark(end int64) error {
	l.resetFlushed(end)
	l.fm.mu.Lock()
	defer l.fm.mu.Unlock()
	if l.fm.f == nil || !l.fm.fresh || l.fm.end < 0 {
		return nil
	}
	if err := fdatasync(l.fm.f); err != nil {
		return fmt.Errorf("store: fsync %s: %w", filepath.Join(l.dir, FlushMarkName), err)
	}
	l.fm.fresh = false
	return nil
}

// dropFlushMark removes the flush mark a journaled log finds, left from a
// run in threshold mode, and makes the removal durable: the journaled log
// does not keep it up to date, so if the partition went back to threshold
// mode later, the stale (lower) mark would take damage in data fsynced
// since for a torn tail. Nothing to do, and no fsync, when there is none.
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
// the one recorded: everything before it was just fsynced.
func (l *Log) noteFlushed(end int64) {
	l.fm.mu.Lock()
	defer l.fm.mu.Unlock()
	if l.fm.f == nil || end <= l.fm.end {
		return
	}
	l.writeFlushMarkLocked(end)
}

// resetFlushed records end as the log's durable end even if it is lower
// (recovery cut the log there, or Truncate did): a mark past the end
// would take a later torn tail below it for damage.
func (l *Log) resetFlushed(end int64) {
	l.fm.mu.Lock()
	defer l.fm.mu.Unlock()
	if l.fm.f == nil || end == l.fm.end {
		return
	}
	l.writeFlushMarkLocked(end)
}

func (l *Log) writeFlushMarkLocked(end int64) {
	encodeFlushMark(l.fm.buf[:], end)
	if _, err := l.fm.f.WriteAt(l.fm.buf[:], 0); err != nil {
		// Not fatal: the mark only lets recovery cut a torn tail. The
		// old one stays true; an unknown one is dropped from the next
		// recovery's view by its crc.
		l.fm.end = -1
		return
	}
	l.fm.end = end
}

// closeFlushMark closes the mark file.
func (l *Log) closeFlushMark() {
	l.fm.mu.Lock()
	defer l.fm.mu.Unlock()
	if l.fm.f != nil {
		_ = l.fm.f.Close()
		l.fm.f = nil
	}
}
