//go:build race

package host

// raceEnabled: the race detector makes the test binary, which these tests
// re-run as the plugin, several times slower to start.
const raceEnabled = true
