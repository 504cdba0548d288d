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
	// ErrFailed is wrapped by every error of a log that has seen an fsync
	// failure (of a segment, or of the directory after creating one). Such
	// a log refuses appends until it is closed and reopened (recovery then
	// decides what survived): a retried fsync could report success for
	// pages the kernel has already dropped (fsyncgate). Other I/O errors
	// (a failed or short write, a segment that cannot be created: ENOSPC,
	// EMFILE, ...) fail only the appends they hit and do not wrap it.
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

// syncError marks an fsync failure, which fails the log for good (see
// ErrFailed), among the errors of an operation that also does other I/O.
type syncError struct{ err error }

func (e *syncError) Error() string { return e.err.Error() }
func (e *syncError) Unwrap() error { return e.err }

// isSyncError reports whether err is (or wraps) a failed fsync.
func isSyncError(err error) bool {
	var se *syncError
	return errors.As(err, &se)
}
