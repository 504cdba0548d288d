//go:build race

package filters_test

// raceEnabled: the race detector makes the broker side of a plugin's
// start (go-plugin's client: exec, certificate, TLS and gRPC handshakes)
// about three times slower.
const raceEnabled = true
