//go:build !unix

package file

import "os"

// lockFile does nothing where flock is missing: keep one process per log.
func lockFile(*os.File) error { return nil }
