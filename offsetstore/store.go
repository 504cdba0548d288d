// Package offsetstore is the plugin kind of consumer-offset stores: where the
// broker keeps, per consumer group, the next offset to fetch of each
// partition and the id of the last message consumed (MetaQ's
// OffsetStorage, reference §7).
//
// A Store is either builtin (in-process: offsetstore/file) or a plugin
// binary run out of process over gRPC (offsetstore/zk, offsetstore/mysql,
// examples/offsetstore-plugin). Open returns either behind the same
// interface and the same middleware; a plugin's main calls Serve(impl).
//
// The contract is sdk/offsets: a Store is an offsets.Store (batch-first
// Commit and Load of one group's positions, message.Position each) plus
// the lifecycle the broker drives, Init and Close. The wire between host
// and plugin (offsetstore/proto) carries the group in every key; the gRPC
// adapters fill it in and take it apart.
package offsetstore

import (
	"context"

	"github.com/metaq-go/metaq/sdk/offsets"
)

// InitRequest configures a store. Config holds the strings of the plugin's
// own [plugin.config] table in server.toml (or OpenOptions.Config), nothing
// else of server.toml.
type InitRequest struct {
	Config map[string]string
}

// Store keeps committed consumer offsets: the offsets.Store contract
// (Commit and Load, whose rules it keeps) with a lifecycle.
//
// Init is called once before any other call (and again, with the same
// config, after a remote plugin restarts, so it must tolerate being
// called on a fresh process); Commit and Load before it fail with
// ErrNotInitialized. Close releases the store; it is idempotent, and calls
// after it fail with offsets.ErrClosed.
type Store interface {
	offsets.Store
	Init(ctx context.Context, req *InitRequest) error
	Close() error
}
