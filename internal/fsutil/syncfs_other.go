//go:build !linux

package fsutil

import (
	"errors"
	"os"
)

// SyncfsFS is false where syncfs(2) is not available.
func SyncfsFS(dir string) (ok bool, name string, dev uint64) { return false, "", 0 }

// Device is not known where syncfs is not available.
func Device(path string) (uint64, bool) { return 0, false }

// Syncfs is not available.
func Syncfs(f *os.File) error { return errors.ErrUnsupported }
