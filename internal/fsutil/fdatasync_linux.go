//go:build linux

package fsutil

import (
	"os"
	"syscall"
)

// Fdatasync flushes f's data and the metadata needed to read it back (its
// size) to stable storage: fsync without the inode times. EINTR is
// retried; any other error is returned and must not be retried
// (fsyncgate). f stays referenced during the call, so a concurrent Close
// cannot hand its descriptor to another file.
func Fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = syscall.Fdatasync(int(fd))
			if serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
	}
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}
