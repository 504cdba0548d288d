//go:build linux

package store

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data and the metadata needed to read it back (its
// size) to stable storage. EINTR means nothing was done, so it is retried;
// any other error is returned and must never be retried (fsyncgate).
// The caller holds a reference that keeps f open.
func fdatasync(f *os.File) error {
	fd := int(f.Fd())
	for {
		err := syscall.Fdatasync(fd)
		if err == nil {
			return nil
		}
		if err != syscall.EINTR {
			return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
		}
	}
}
