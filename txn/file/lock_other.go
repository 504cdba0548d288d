//go:build !unix

package file

import "os"

// lockFile does nothing where flock is missing: keep one process per log.
func lockFile(*os.File) error { return nil }

// closeLocked closes f.
func closeLocked(f *os.File) error { return f.Close() }
