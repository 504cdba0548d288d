//go:build unix

package file

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive, non-blocking flock on f: one process at a
// time may append to a decision log. The lock goes with the process.
func lockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}

// closeLocked releases f's flock explicitly, then closes f. A flock
// belongs to the open file description, which a child process forked by
// any goroutine of this process (a plugin start, an exec) shares until
// its exec closes its close-on-exec copy; a lock left to Close alone can
// so outlive Close for that moment, and a reopen right after it fails
// with "in use by another process". LOCK_UN drops it for every copy.
func closeLocked(f *os.File) error {
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return f.Close()
}
