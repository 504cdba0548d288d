// Package selectors is the partition-selector plugin kind: given a topic's
// partitions and a batch of message metadata, a selector chooses a
// partition for every message.
//
// A selector runs in process (the builtins in roundrobin, random, hash and
// fixed, or any Go type implementing Selector) or out of process as a
// plugin binary whose main is one line, selectors.Serve(impl). Open returns
// either behind the same interface, and ForProducer hands one to the SDK
// producer:
//
//	sel, err := selectors.Open(ctx, selectors.OpenOptions{Name: "hash"})
//	p, err := client.NewProducer(addr, client.WithSelector(selectors.ForProducer(sel)))
//
// Every call carries a batch, never one message, so that a plugin costs one
// RPC per batch. A selector never sees message bodies, only their Meta.
//
// When a plugin selector is down, times out or answers badly, the selector
// Open returned falls back to the builtin round-robin for that batch (the
// kind's failure policy): sending never fails because a plugin did.
package selectors

import "context"

// Partition is one partition of a topic: the broker that holds it and its
// number on that broker.
type Partition struct {
	BrokerID  int
	Partition int32
}

// Meta is what a selector sees of a message: its key, attribute and size,
// never its body.
type Meta struct {
	// Key is the message's partitioning key (message.Message.Key); nil
	// when it has none.
	Key []byte
	// Attribute is the message's attribute; HasAttribute tells an empty
	// attribute from none.
	Attribute    string
	HasAttribute bool
	// Size is the message's data length in bytes (payload plus attribute).
	Size int
}

// SelectRequest asks for a partition for each of Messages.
type SelectRequest struct {
	Topic string
	// Partitions are the topic's partitions to choose from, in the
	// caller's order; a choice is an index into this slice.
	Partitions []Partition
	// Messages is the batch; it may be empty.
	Messages []Meta
}

// SelectResponse answers a SelectRequest.
type SelectResponse struct {
	// Choices holds one entry per message, in order: Choices[i] is the
	// index into SelectRequest.Partitions chosen for Messages[i], and must
	// be in [0, len(Partitions)).
	Choices []int
}

// Selector chooses partitions for batches of messages.
//
// Implementations must be safe for concurrent use: a producer calls Select
// from many goroutines at once. Select must not modify the request (its
// slices may be shared) nor keep it after it returns (a caller may reuse it).
//
// Select returns exactly len(req.Messages) choices, each in
// [0, len(req.Partitions)): indices into the caller's list, not partition
// numbers. An empty batch gets an empty response. With no partitions it
// fails with an error wrapping ErrNoPartitions. It honours ctx: called with
// a done ctx it returns an error wrapping ctx.Err() rather than a choice. Close releases the selector's resources (for a plugin selector
// opened by Open, possibly the plugin process); it is idempotent, and
// Select after Close may fail with ErrClosed.
type Selector interface {
	Select(ctx context.Context, req *SelectRequest) (*SelectResponse, error)
	Close() error
}
