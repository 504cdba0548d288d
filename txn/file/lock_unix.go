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
