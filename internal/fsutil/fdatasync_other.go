//go:build !linux

package fsutil

import "os"

// Fdatasync is f.Sync where fdatasync is not available.
func Fdatasync(f *os.File) error { return f.Sync() }

// FdatasyncHoldingP is Fdatasync here (the raw call is Linux's).
func FdatasyncHoldingP(f *os.File) error { return Fdatasync(f) }
