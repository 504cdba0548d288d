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
	return syncCall(f, "fdatasync", syscall.Fdatasync)
}

// syncCall runs the sync system call call on f's descriptor, retrying
// EINTR, with f referenced throughout; errors are *os.PathErrors naming
// op.
func syncCall(f *os.File, op string, call func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = call(int(fd))
			if serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return &os.PathError{Op: op, Path: f.Name(), Err: err}
	}
	if serr != nil {
		return &os.PathError{Op: op, Path: f.Name(), Err: serr}
	}
	return nil
}
