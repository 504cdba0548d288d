//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package main

import "os"

// lockFile is a no-op where flock(2) is not available.
func lockFile(f *os.File) error { return nil }
