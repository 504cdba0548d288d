// Package offsets is the offset-store contract of metaq-go: where a
// consumer group's positions are kept between runs (MetaQ's
// OffsetStorage, reference §7). Like sdk/message, which it uses, it
// depends on the standard library only.
//
// One contract serves both sides. The SDK takes a Store
// (client.StoreOffsetsIn) and has one that keeps positions on the
// brokers (a ConsumerGroup's default); the broker keeps the positions its
// consumers commit in an offsetstore.Store, which is this Store plus a
// lifecycle, builtin (offsetstore/file) or a plugin binary
// (offsetstore/zk, offsetstore/mysql, examples/offsetstore-plugin).
//
// Every call is a batch: one Commit or Load carries many partitions of
// many topics of one group, because a MetaQ consumer commits all of its
// partitions at once.
package offsets

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/metaq-go/metaq/sdk/message"
)

// Store keeps committed consumer positions, per group.
//
// A position is a message.Position: the partition (topic, broker id,
// partition number) is its key; Offset is the next offset to fetch and
// MsgID the id of the last message consumed (-1 when unknown), both full
// int64 values that a store must not round through float64.
//
// Commit stores every position of the batch for group, overwriting what
// each partition held; when a partition appears twice the later position
// wins. When Commit returns nil the positions are durable to the store's
// own standard (the file store has fsynced them); when it returns an
// error the caller must assume none was stored and retry: a store never
// drops a commit silently.
//
// Load returns exactly one position per requested one, in order, with the
// requested Topic and Partition and the stored Offset and MsgID, or
// Offset and MsgID -1 where nothing is stored (which is not an error).
// The Offset and MsgID of the requested positions are ignored.
//
// Empty batches succeed (Load returns an empty slice). A malformed group
// or position (see ValidateCommit and ValidateLoad) fails the call with an
// error wrapping ErrInvalid and stores nothing. Implementations are safe
// for concurrent use; one that is closed fails every call with an error
// wrapping ErrClosed.
type Store interface {
	Commit(ctx context.Context, group string, positions []message.Position) error
	Load(ctx context.Context, group string, positions []message.Position) ([]message.Position, error)
}

var (
	// ErrClosed is returned by calls on a closed store.
	ErrClosed = errors.New("offsets: store closed")
	// ErrInvalid means a group or position is malformed: a group name that
	// message.ValidateGroup refuses, an empty topic, a negative broker id
	// or partition, or (in a commit) a negative offset.
	ErrInvalid = errors.New("offsets: invalid group or position")
)

// ValidateLoad reports whether group and the partitions of positions make
// a well-formed Load (an error wrapping ErrInvalid if not).
func ValidateLoad(group string, positions []message.Position) error {
	if err := message.ValidateGroup(group); err != nil {
		return fmt.Errorf("%w: group %s: %w", ErrInvalid, strconv.QuoteToASCII(group), err)
	}
	for _, p := range positions {
		switch {
		case p.Topic == "":
			return fmt.Errorf("%w: empty topic (group %s)", ErrInvalid, group)
		case p.Partition.BrokerID < 0:
			return fmt.Errorf("%w: negative broker id %d (topic %s)", ErrInvalid, p.Partition.BrokerID, strconv.QuoteToASCII(p.Topic))
		case p.Partition.Partition < 0:
			return fmt.Errorf("%w: negative partition %d of %s", ErrInvalid, p.Partition.Partition, strconv.QuoteToASCII(p.Topic))
		}
	}
	return nil
}

// ValidateCommit reports whether group and positions make a well-formed
// Commit (an error wrapping ErrInvalid if not): ValidateLoad's checks,
// and no negative offset.
func ValidateCommit(group string, positions []message.Position) error {
	if err := ValidateLoad(group, positions); err != nil {
		return err
	}
	for _, p := range positions {
		if p.Offset < 0 {
			return fmt.Errorf("%w: negative offset %d for %s/%s", ErrInvalid, p.Offset, strconv.QuoteToASCII(p.Topic), p.Partition)
		}
	}
	return nil
}

// NotStored returns the answer to a Load of p where nothing is stored:
// p's Topic and Partition with Offset and MsgID -1.
func NotStored(p message.Position) message.Position {
	return message.Position{Topic: p.Topic, Partition: p.Partition, Offset: -1, MsgID: -1}
}
