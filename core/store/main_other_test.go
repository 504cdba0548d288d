//go:build !linux

package store

import "time"

// tmpfsTempDir: the tests use the default temporary directory.
func tmpfsTempDir() string { return "" }

// processCPU: unknown here.
func processCPU() time.Duration { return 0 }
