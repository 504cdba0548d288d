// Package offsetstore is the contract for consumer-offset stores: where the
// broker keeps, per consumer group, the next offset to fetch of each
// partition and the id of the last message consumed (MetaQ's
// OffsetStorage, reference §7).
//
// A Store is either builtin (in-process: offsetstore/file) or a plugin
// binary run out of process over gRPC (offsetstore/zk, offsetstore/mysql,
// examples/offsetstore-plugin). Open returns either behind the same
// interface and the same middleware; a plugin's main calls Serve(impl).
//
// Every call carries a batch: Commit takes many entries and Load many keys,
// because MetaQ consumers commit all their partitions at once.
package offsetstore

import "context"

// Key identifies one partition of a topic, as consumed by one group:
// MetaQ's (group, topic, "<brokerId>-<partition>").
type Key struct {
	Group     string
	Topic     string
	BrokerID  int
	Partition int32
}

// Entry is a committed position. Offset is the next offset to fetch (not
// the offset of the last message consumed); MsgID is the id of the last
// message consumed, or -1 when unknown. Both are full int64 values: a
// store must not round them through float64.
type Entry struct {
	Key
	Offset int64
	MsgID  int64
}

// Result is the answer to one key of a Load: the stored entry when Found,
// else the key with Offset and MsgID set to -1.
type Result struct {
	Entry
	Found bool
}

// InitRequest configures a store. Config holds the strings of the plugin's
// [plugin.config] table in server.toml (or OpenOptions.Config).
type InitRequest struct {
	Config map[string]string
}

// Store keeps committed consumer offsets.
//
// Implementations are safe for concurrent use. Init is called once before
// any other call (and again, with the same config, after a remote plugin
// restarts, so it must tolerate being called on a fresh process).
//
// Commit stores every entry of the batch, overwriting what a key held; when
// a key appears twice the later entry wins. When Commit returns nil the
// entries are durable to the store's own standard (the file store has
// fsynced them); when it returns an error the caller must assume none was
// stored and retry: a store never drops a commit silently.
//
// Load returns exactly one Result per key, in the order of keys. A key with
// nothing stored is not an error: its Result has Found false.
//
// Close releases the store; it is idempotent, and calls after it fail with
// ErrClosed.
type Store interface {
	Init(ctx context.Context, req *InitRequest) error
	Commit(ctx context.Context, entries []Entry) error
	Load(ctx context.Context, keys []Key) ([]Result, error)
	Close() error
}
