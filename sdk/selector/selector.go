// Package selector is the partition-selector contract of metaq-go and its
// builtins. A Selector chooses, for one message, a partition among the
// topic's partitions, given as MetaQ gives them to its PartitionSelector:
// the full list of (broker id, partition number), sorted by
// message.Partition.Compare. The choice is an index into that list.
//
// The same contract serves the SDK (client.Selector) and the selector
// plugin kind: selectors.Serve runs a Selector as a plugin binary, and
// selectors.Open returns a plugin (or a builtin) as a Selector.
//
// The builtins are RoundRobin (the default, MetaQ's
// RoundRobinPartitionSelector), Random, HashByKey and Fixed.
package selector

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"

	"github.com/metaq-go/metaq/sdk/message"
)

// Selector chooses the partition a message is sent to.
//
// Select returns an index into partitions, in [0, len(partitions)). It is
// called concurrently and must be safe for concurrent use. It must not
// modify partitions or m, nor keep them after it returns. With no
// partitions it fails with an error wrapping ErrNoPartitions. It honours
// ctx, which carries the produce deadline: a selector that waits (a plugin
// selector does, on its process) returns ctx's error once ctx is done.
type Selector interface {
	Select(ctx context.Context, topic string, partitions []message.Partition, m *message.Message) (int, error)
}

// Func adapts a function to a Selector.
type Func func(ctx context.Context, topic string, partitions []message.Partition, m *message.Message) (int, error)

// Select calls f.
func (f Func) Select(ctx context.Context, topic string, partitions []message.Partition, m *message.Message) (int, error) {
	return f(ctx, topic, partitions, m)
}

var (
	// ErrNoPartitions means a selector was asked to choose among zero
	// partitions.
	ErrNoPartitions = errors.New("metaq: topic has no partitions")
	// ErrBadChoice means a selector chose outside [0, len(partitions)), or
	// (Fixed) was given an index the topic does not have.
	ErrBadChoice = errors.New("metaq: selector choice out of range")
)

// Check returns the error a Select returns before choosing: ctx's error
// once it is done, or ErrNoPartitions when partitions is empty. The
// builtins call it first; other selectors may.
func Check(ctx context.Context, topic string, partitions []message.Partition) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(partitions) == 0 {
		return fmt.Errorf("select for topic %q: %w", topic, ErrNoPartitions)
	}
	return nil
}

// CheckChoice returns an error wrapping ErrBadChoice unless i is an index
// into partitions; the SDK and the plugin kind check every choice with it.
func CheckChoice(topic string, partitions []message.Partition, i int) error {
	if i < 0 || i >= len(partitions) {
		return fmt.Errorf("%w: index %d, topic %q has %d partitions", ErrBadChoice, i, topic, len(partitions))
	}
	return nil
}

// RoundRobin returns the default selector: a shared counter modulo the
// partition count, across calls and goroutines, like MetaQ's
// RoundRobinPartitionSelector.
func RoundRobin() Selector { return &roundRobin{} }

type roundRobin struct{ n atomic.Uint64 }

func (r *roundRobin) Select(ctx context.Context, topic string, partitions []message.Partition, _ *message.Message) (int, error) {
	if err := Check(ctx, topic, partitions); err != nil {
		return 0, err
	}
	return int((r.n.Add(1) - 1) % uint64(len(partitions))), nil
}

// Random returns a selector that picks a partition uniformly at random.
func Random() Selector { return randomSelector{} }

type randomSelector struct{}

func (randomSelector) Select(ctx context.Context, topic string, partitions []message.Partition, _ *message.Message) (int, error) {
	if err := Check(ctx, topic, partitions); err != nil {
		return 0, err
	}
	return rand.IntN(len(partitions)), nil
}

// HashByKey returns a selector that sends messages with the same Key to the
// same partition (KeyIndex: FNV-1a of the key modulo the partition count),
// so they keep their order. Messages without a key are spread round robin.
func HashByKey() Selector { return &hashByKey{} }

type hashByKey struct{ rr roundRobin }

func (h *hashByKey) Select(ctx context.Context, topic string, partitions []message.Partition, m *message.Message) (int, error) {
	if len(m.Key) == 0 {
		return h.rr.Select(ctx, topic, partitions, m)
	}
	if err := Check(ctx, topic, partitions); err != nil {
		return 0, err
	}
	return KeyIndex(m.Key, len(partitions)), nil
}

// Fixed returns a selector that always picks index i of the partition
// list; choosing fails with ErrBadChoice when i is negative or the topic
// has i or fewer partitions.
func Fixed(i int) Selector { return fixed(i) }

type fixed int

func (f fixed) Select(ctx context.Context, topic string, partitions []message.Partition, _ *message.Message) (int, error) {
	if err := Check(ctx, topic, partitions); err != nil {
		return 0, err
	}
	if err := CheckChoice(topic, partitions, int(f)); err != nil {
		return 0, fmt.Errorf("fixed: %w", err)
	}
	return int(f), nil
}

// KeyIndex is the hash-by-key choice for a non-empty key among n (> 0)
// partitions: 32-bit FNV-1a of the key modulo n. Every hash-by-key
// selector uses it, so a key lands on the same partition whichever one a
// producer uses.
func KeyIndex(key []byte, n int) int {
	return int(fnv1a(key) % uint32(n))
}

// fnv1a is 32-bit FNV-1a, inline so that hashing does not allocate.
func fnv1a(b []byte) uint32 {
	h := uint32(2166136261)
	for _, c := range b {
		h ^= uint32(c)
		h *= 16777619
	}
	return h
}
