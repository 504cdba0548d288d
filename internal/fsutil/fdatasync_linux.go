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

// FdatasyncHoldingP is Fdatasync made as a raw system call: the calling
// goroutine keeps its P (the runtime's right to run Go code) for the
// whole call, instead of the runtime noting a blocking call. A blocking
// call that lasts more than 20 µs has its P taken by sysmon and handed to
// another thread, the caller's thread parks when the call returns, and
// while that keeps happening sysmon wakes every 20 µs: for a syncer that
// always has an fdatasync in flight, 7-15% of a busy broker's CPU per put
// on 2 cores (docs/storage.md, "The journal's fdatasync").
//
// The cost of holding the P: while the call lasts, the rest of the
// process has one P fewer, and a stop-the-world (a garbage collection's
// start and end) waits for the call to return. So callers use it only
// where a call is short (a local disk), where there is another P
// (GOMAXPROCS of 2 or more), and never on a file system a process may
// serve itself (FUSE): its server could not run while the world waits
// for the call.
func FdatasyncHoldingP(f *os.File) error {
	return syncCall(f, "fdatasync", func(fd int) error {
		_, _, e := syscall.RawSyscall(syscall.SYS_FDATASYNC, uintptr(fd), 0, 0)
		if e != 0 {
			return e
		}
		return nil
	})
}
