//go:build linux

package main

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data (and its size) to stable storage.
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}

// writeBack flushes every dirty page on the machine (sync(2)), so that a
// benchmark does not pay for the write-back of the one before it.
func writeBack() { syscall.Sync() }
