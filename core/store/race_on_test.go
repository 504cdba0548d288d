//go:build race

package store

// raceEnabled: under the race detector, sync.Pool drops some of what it is
// given, so pooled paths allocate now and then.
const raceEnabled = true
