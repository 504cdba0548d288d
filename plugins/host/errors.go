package host

import "errors"

// Sentinels for start failures; the errors Launch returns wrap them (and
// name the plugin and its binary). Use errors.Is.
var (
	// ErrClosed is returned once the supervisor is closed.
	ErrClosed = errors.New("host: supervisor closed")
	// ErrNotFound means the plugin binary does not exist.
	ErrNotFound = errors.New("plugin binary not found")
	// ErrChecksum means the binary's sha256 differs from the configured one;
	// the binary is not run.
	ErrChecksum = errors.New("sha256 mismatch")
	// ErrCopy means the private copy of a pinned binary could not be made
	// (see Options.TempDir).
	ErrCopy = errors.New("plugin binary copy failed")
	// ErrStdout means the plugin wrote to stdout before serving, which
	// breaks go-plugin's handshake.
	ErrStdout = errors.New("plugin wrote to stdout before serving")
	// ErrNotGRPC means the binary is a net/rpc plugin; only gRPC plugins
	// are supported.
	ErrNotGRPC = errors.New("only gRPC plugins are supported")
	// ErrHandshake means the binary exited, timed out or answered nonsense
	// before completing the go-plugin handshake.
	ErrHandshake = errors.New("plugin handshake failed")
)
