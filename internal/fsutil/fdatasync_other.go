//go:build !linux

package fsutil

import "os"

// Fdatasync is f.Sync where fdatasync is not available.
func Fdatasync(f *os.File) error { return f.Sync() }
