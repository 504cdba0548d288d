package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// DeleteOlderThan deletes the sealed segments last modified more than
// maxAge before now, oldest first, stopping at the first younger one so
// the log never has a hole. The active segment is never deleted. The min
// offset rises to the first remaining segment; a deleted segment's file
// stays open until the last View on it is released. It returns how many
// segments were deleted.
func (l *Log) DeleteOlderThan(maxAge time.Duration, now time.Time) (deleted int, err error) {
	l.segMu.Lock()
	if len(l.segs) == 0 {
		l.segMu.Unlock()
		return 0, ErrClosed
	}
	k := 0
	for ; k < len(l.segs)-1; k++ {
		fi, err := l.segs[k].f.Stat()
		if err != nil || now.Sub(fi.ModTime()) <= maxAge {
			break
		}
	}
	if k == 0 {
		l.segMu.Unlock()
		return 0, nil
	}
	victims := make([]*segment, k)
	copy(victims, l.segs[:k])
	n := copy(l.segs, l.segs[k:])
	clear(l.segs[n:])
	l.segs = l.segs[:n]
	l.minOffset.Store(l.segs[0].start)
	for _, s := range victims {
		s.deleted = true
		if c := s.count.Load(); c >= 0 {
			l.msgCount.Add(-c)
		}
	}
	l.segMu.Unlock()

	var errs []error
	for _, s := range victims {
		if rerr := os.Remove(s.path); rerr != nil {
			errs = append(errs, rerr)
		} else {
			l.logf("store: %s: deleted segment %s (offsets %d..%d)", l.dir, filepath.Base(s.path), s.start, s.end())
		}
		s.release()
	}
	if len(errs) == 0 {
		if serr := l.syncDir(); serr != nil {
			errs = append(errs, serr)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return k, fmt.Errorf("store: retention in %s: %w", l.dir, err)
	}
	return k, nil
}
