package store

import (
	"errors"
	"fmt"
)

var (
	// ErrClosed is returned by every operation on a closed Log.
	ErrClosed = errors.New("store: log closed")
	// ErrNoData means the requested offset is at or past the readable
	// high-water mark: there is no new data yet (MetaQ's 404 on get).
	ErrNoData = errors.New("store: no data at offset")
	// ErrBelowMin is matched (errors.Is) by *OffsetOutOfRangeError: the
	// requested offset is below the log's first segment (MetaQ's 301).
	ErrBelowMin = errors.New("store: offset below minimum")
	// ErrTooLarge means an entry's data is longer than Options.MaxMessageSize.
	ErrTooLarge = errors.New("store: message too large")
	// ErrEmptyBatch means Append was called with no entries.
	ErrEmptyBatch = errors.New("store: no entries to append")
	// ErrBadSize means Read was called with maxSize <= 0 (MetaQ's 400).
	ErrBadSize = errors.New("store: read size must be positive")
	// ErrFailed is wrapped by every error of a log that has seen a write or
	// fsync failure. Such a log refuses appends until it is closed and
	// reopened (recovery then decides what survived): a retried fsync could
	// report success for pages the kernel has already dropped.
	ErrFailed = errors.New("store: log failed")
	// ErrBrokenChain is wrapped by Open's error when two consecutive segment
	// files do not chain (start + size != next start).
	ErrBrokenChain = errors.New("store: segments do not chain")
	// ErrLocked means another open Log (in this process or another) holds
	// the directory.
	ErrLocked = errors.New("store: log directory in use")
)

// OffsetOutOfRangeError is returned by Read for an offset below the log's
// minimum. Min is the offset to restart from (the first segment's start).
type OffsetOutOfRangeError struct {
	Offset int64
	Min    int64
}

func (e *OffsetOutOfRangeError) Error() string {
	return fmt.Sprintf("store: offset %d below minimum %d", e.Offset, e.Min)
}

// Is makes errors.Is(err, ErrBelowMin) true.
func (e *OffsetOutOfRangeError) Is(target error) bool { return target == ErrBelowMin }
