package store

import (
	"errors"
	"fmt"
	"math"
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
	deleted, _, err = l.DeleteOlderThanBelow(maxAge, now, math.MaxInt64)
	return deleted, err
}

// DeleteOlderThanBelow is DeleteOlderThan that also keeps every segment
// ending after limit (a reader of the log still needs its records: the
// timer log's pending delayed messages, core/timer's Keeper). held is how
// many segments old enough to go it kept for limit.
func (l *Log) DeleteOlderThanBelow(maxAge time.Duration, now time.Time, limit int64) (deleted, held int, err error) {
	l.segMu.Lock()
	if len(l.segs) == 0 {
		l.segMu.Unlock()
		return 0, 0, ErrClosed
	}
	k := 0
	for ; k < len(l.segs)-1; k++ {
		fi, err := l.segs[k].f.Stat()
		if err != nil || now.Sub(fi.ModTime()) <= maxAge {
			break
		}
		if l.segs[k].end() > limit {
			for j := k; j < len(l.segs)-1; j++ {
				if fi, err := l.segs[j].f.Stat(); err != nil || now.Sub(fi.ModTime()) <= maxAge {
					break
				}
				held++
			}
			break
		}
	}
	if k == 0 {
		l.segMu.Unlock()
		return 0, held, nil
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
		return k, held, fmt.Errorf("store: retention in %s: %w", l.dir, err)
	}
	return k, held, nil
}
