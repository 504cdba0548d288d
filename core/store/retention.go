package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DefaultDeletePolicy is MetaQ's default retention policy: delete sealed
// segments a week (168 hours) after their last write.
const DefaultDeletePolicy = "delete,168"

// ParseDeletePolicy parses MetaQ's deletePolicy "delete,N[s|m|h]" (no unit
// means hours) into the maximum age of a sealed segment. The archive
// policy is not supported.
func ParseDeletePolicy(s string) (time.Duration, error) {
	kind, arg, ok := strings.Cut(strings.TrimSpace(s), ",")
	kind = strings.TrimSpace(kind)
	switch {
	case kind == "archive":
		return 0, fmt.Errorf("%w %q: the archive policy is not supported, use delete,N[s|m|h]", ErrBadPolicy, s)
	case kind != "delete":
		return 0, fmt.Errorf("%w %q: want delete,N[s|m|h]", ErrBadPolicy, s)
	case !ok:
		return 0, fmt.Errorf("%w %q: missing age, want delete,N[s|m|h]", ErrBadPolicy, s)
	}
	arg = strings.TrimSpace(arg)
	unit := time.Hour
	if n := len(arg); n > 0 {
		switch arg[n-1] {
		case 's':
			unit, arg = time.Second, arg[:n-1]
		case 'm':
			unit, arg = time.Minute, arg[:n-1]
		case 'h':
			unit, arg = time.Hour, arg[:n-1]
		}
	}
	n, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || n <= 0 || n > int64((1<<63-1)/unit) {
		return 0, fmt.Errorf("%w %q: age must be a positive integer with an optional s, m or h unit", ErrBadPolicy, s)
	}
	return time.Duration(n) * unit, nil
}

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
		if serr := syncDir(l.dir); serr != nil {
			errs = append(errs, serr)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return k, fmt.Errorf("store: retention in %s: %w", l.dir, err)
	}
	return k, nil
}
