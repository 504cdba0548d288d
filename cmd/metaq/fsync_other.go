//go:build !linux

package main

import "os"

// fdatasync falls back to a full fsync where fdatasync is not available.
func fdatasync(f *os.File) error { return f.Sync() }

// writeBack is a no-op where sync(2) is not available.
func writeBack() {}
