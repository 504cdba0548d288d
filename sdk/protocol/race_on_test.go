//go:build race

package protocol

// raceEnabled: under the race detector, sync.Pool drops some of what it is
// given, so pooled paths allocate.
const raceEnabled = true
