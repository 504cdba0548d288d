//go:build linux

package fsutil

import (
	"os"

	"golang.org/x/sys/unix"
)

// StartWriteBack starts the write-back of f's dirty pages in [off,
// off+n) and returns without waiting for it (sync_file_range(2) with
// SYNC_FILE_RANGE_WRITE): a later fdatasync then finds those pages
// written or being written. It makes nothing durable by itself (no
// metadata, no device cache flush). EINTR is retried; an error must be
// treated as an fdatasync error would be.
func StartWriteBack(f *os.File, off, n int64) error {
	return syncCall(f, "sync_file_range", func(fd int) error {
		return unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE)
	})
}

// WaitWriteBack starts the write-back of whatever of f's pages in [off,
// off+n) is still dirty and waits until every page of the range is
// written to the device (sync_file_range(2) with
// SYNC_FILE_RANGE_WAIT_BEFORE|WRITE|WAIT_AFTER). Like StartWriteBack it
// makes nothing durable. Since it consumes a write-back error of the
// range that a later fdatasync of f would otherwise have reported, any
// error it returns must be treated as final, as an fdatasync error is
// (fsyncgate). EINTR is retried.
func WaitWriteBack(f *os.File, off, n int64) error {
	return syncCall(f, "sync_file_range", func(fd int) error {
		return unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
	})
}

// WriteBackSupported reports whether StartWriteBack and WaitWriteBack do
// anything on this system.
const WriteBackSupported = true
