package client

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"sync/atomic"

	"github.com/metaq-go/metaq/sdk/message"
)

// PartitionSelector chooses the partition a message is sent to. Select is
// called concurrently and must be safe for concurrent use; it returns a
// partition in [0, partitions).
type PartitionSelector interface {
	Select(topic string, partitions int, msg *message.Message) (int, error)
}

// BatchSelector is an optional interface for selectors that choose for many
// messages at once (plugin selectors, where one call per message is too
// expensive). SelectBatch sets out[i] to the partition of msgs[i].
type BatchSelector interface {
	PartitionSelector
	SelectBatch(topic string, partitions int, msgs []*message.Message, out []int) error
}

// ErrNoPartitions is returned by selectors asked to choose among zero
// partitions.
var ErrNoPartitions = errors.New("metaq: topic has no partitions")

// RoundRobin returns the default selector: a shared counter modulo the
// partition count, like MetaQ's RoundRobinPartitionSelector.
func RoundRobin() PartitionSelector { return &roundRobin{} }

type roundRobin struct{ n atomic.Uint64 }

func (r *roundRobin) Select(_ string, partitions int, _ *message.Message) (int, error) {
	if partitions <= 0 {
		return 0, ErrNoPartitions
	}
	return int((r.n.Add(1) - 1) % uint64(partitions)), nil
}

func (r *roundRobin) SelectBatch(_ string, partitions int, msgs []*message.Message, out []int) error {
	if partitions <= 0 {
		return ErrNoPartitions
	}
	start := r.n.Add(uint64(len(msgs))) - uint64(len(msgs))
	for i := range msgs {
		out[i] = int((start + uint64(i)) % uint64(partitions))
	}
	return nil
}

// Random returns a selector that picks a partition uniformly at random.
func Random() PartitionSelector { return randomSelector{} }

type randomSelector struct{}

func (randomSelector) Select(_ string, partitions int, _ *message.Message) (int, error) {
	if partitions <= 0 {
		return 0, ErrNoPartitions
	}
	return rand.IntN(partitions), nil
}

// HashByKey returns a selector that sends messages with the same Key to the
// same partition (FNV-1a of the key modulo the partition count), so they
// keep their order. Messages without a key are spread round robin.
func HashByKey() PartitionSelector { return &hashByKey{} }

type hashByKey struct{ rr roundRobin }

func (h *hashByKey) Select(topic string, partitions int, m *message.Message) (int, error) {
	if partitions <= 0 {
		return 0, ErrNoPartitions
	}
	if len(m.Key) == 0 {
		return h.rr.Select(topic, partitions, m)
	}
	return int(fnv1a(m.Key) % uint32(partitions)), nil
}

// Fixed returns a selector that always picks partition p; sending fails if
// the topic has p or fewer partitions.
func Fixed(p int) PartitionSelector { return fixed(p) }

type fixed int

func (f fixed) Select(topic string, partitions int, _ *message.Message) (int, error) {
	if int(f) < 0 || int(f) >= partitions {
		return 0, errors.New("metaq: fixed partition " + strconv.Itoa(int(f)) + " out of range for topic " +
			topic + " with " + strconv.Itoa(partitions) + " partitions")
	}
	return int(f), nil
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
