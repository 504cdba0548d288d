package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrNotEmpty is Rebase's error for a log that holds records or has
// appends in flight.
var ErrNotEmpty = errors.New("store: log is not empty")

// Rebase moves an empty log's start to offset, so that its first record
// will be written there: a replica that starts copying a partition whose
// earliest records its source has already deleted keeps the source's
// offsets. The log must hold no records and have no append in flight (the
// caller is its only appender and waits for its appends); otherwise, or
// for offset < 0, Rebase changes nothing and returns an error
// (ErrNotEmpty). A log already starting at offset is left as it is.
//
// The one (empty) segment file is renamed to its new name and the
// directory fsynced, so that a crash leaves either the old or the new
// name, both an empty log.
func (l *Log) Rebase(offset int64) error {
	if offset < 0 {
		return fmt.Errorf("store: rebase to negative offset %d", offset)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkLocked(); err != nil {
		return err
	}
	l.segMu.Lock()
	defer l.segMu.Unlock()
	if len(l.segs) != 1 || l.active != l.segs[0] {
		return fmt.Errorf("%w: %d segments", ErrNotEmpty, len(l.segs))
	}
	old := l.active
	switch {
	case old.size.Load() != 0 || l.msgCount.Load() != 0:
		return fmt.Errorf("%w: %d bytes", ErrNotEmpty, old.size.Load())
	case len(l.pendComps) != 0 || l.queued || l.committing != 0 || len(l.dirty) != 0 || l.unflushed != 0:
		return fmt.Errorf("%w: appends in flight", ErrNotEmpty)
	case old.start == offset:
		return nil
	}
	path := filepath.Join(l.dir, segmentName(offset))
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("store: rebase %s to %d: %s exists", l.dir, offset, filepath.Base(path))
	}
	if err := os.Rename(old.path, path); err != nil {
		return fmt.Errorf("store: rebase %s to %d: %w", l.dir, offset, err)
	}
	if err := l.syncDir(); err != nil {
		// The rename may or may not survive a power loss; in this run the
		// file has the new name, so go on with it: both names are an
		// empty log.
		l.logf("store: %s: rebase to %d: %v", l.dir, offset, err)
	}
	// The file stays open under its new name; the old segment value is
	// dropped without a release, its file now the new one's.
	seg := newSegment(offset, path, old.f, 0)
	seg.count.Store(0)
	seg.cidx.setReady(0, 0, 0, nil)
	seg.readAt = old.readAt
	l.segs[0] = seg
	l.active = seg
	l.minOffset.Store(offset)
	l.readable.Store(offset)
	return nil
}
