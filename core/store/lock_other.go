//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package store

import "os"

// lockDir is a no-op where flock is not available.
func lockDir(string) (*os.File, error) { return nil, nil }

// unlockDir closes f.
func unlockDir(f *os.File) error { return f.Close() }
