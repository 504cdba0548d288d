//go:build !linux

package main

// writeBack is a no-op where sync(2) is not available.
func writeBack() {}
