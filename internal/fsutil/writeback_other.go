//go:build !linux

package fsutil

import "os"

// StartWriteBack does nothing where sync_file_range(2) is not available:
// the later fdatasync writes the pages back itself.
func StartWriteBack(f *os.File, off, n int64) error { return nil }

// WaitWriteBack does nothing where sync_file_range(2) is not available.
func WaitWriteBack(f *os.File, off, n int64) error { return nil }

// WriteBackSupported reports whether StartWriteBack and WaitWriteBack do
// anything on this system.
const WriteBackSupported = false
