//go:build !linux

package store

// tmpfsTempDir: the tests use the default temporary directory.
func tmpfsTempDir() string { return "" }
