//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package store

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive advisory lock on dir, so that two Logs (in
// this process or another) never write the same partition. Closing the
// returned file releases it.
func lockDir(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("store: open %s for locking: %w", dir, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, fmt.Errorf("store: lock %s: %w", dir, err)
	}
	return f, nil
}

// unlockDir releases a lock from lockDir and closes its file. The flock
// belongs to the open file description, which a child forked by any
// goroutine of this process (a plugin start, an exec) shares until its
// exec closes its close-on-exec copy; left to Close alone the lock can
// outlive Close for that moment, and reopening the directory right after
// fails with ErrLocked. LOCK_UN drops it for every copy.
func unlockDir(f *os.File) error {
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return f.Close()
}
