//go:build unix

package main

import (
	"os"
	"syscall"
)

// fileIdentity returns the device and inode of fi: a file keeps them
// when renamed, so a rotation by rename is recognized.
func fileIdentity(fi os.FileInfo) (dev, ino uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), uint64(st.Ino) //nolint:unconvert // int32 on some systems
	}
	return 0, 0
}
