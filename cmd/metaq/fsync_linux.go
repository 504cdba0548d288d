//go:build linux

package main

import "syscall"

// writeBack flushes every dirty page on the machine (sync(2)), so that a
// benchmark does not pay for the write-back of the one before it.
func writeBack() { syscall.Sync() }
