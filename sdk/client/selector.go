package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
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
// expensive). SelectBatch sets out[i] to the partition of msgs[i], in
// [0, partitions); len(out) >= len(msgs). It honours ctx: once ctx is done
// it may return ctx's error instead of choosing.
//
// The producer prefers SelectBatch when a selector has it: Send and
// SendAsync ask for a batch of one, SendBatch once per topic of its batch.
// selectors.ForProducer adapts any selectors.Selector (builtin or plugin)
// to this interface.
type BatchSelector interface {
	PartitionSelector
	SelectBatch(ctx context.Context, topic string, partitions int, msgs []*message.Message, out []int) error
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

func (r *roundRobin) SelectBatch(_ context.Context, _ string, partitions int, msgs []*message.Message, out []int) error {
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
	return KeyPartition(m.Key, partitions), nil
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

// KeyPartition is the hash-by-key choice for a non-empty key among
// partitions (> 0) partitions: 32-bit FNV-1a of the key modulo the count.
// Every hash-by-key selector (HashByKey, selectors/hash) uses it, so a key
// lands on the same partition whichever one a producer uses.
func KeyPartition(key []byte, partitions int) int {
	return int(fnv1a(key) % uint32(partitions))
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

// selectPartition learns the topic's partition count and asks the selector.
func (p *Producer) selectPartition(ctx context.Context, m *message.Message) (int32, error) {
	n, err := p.partitionCount(ctx, m.Topic)
	if err != nil {
		return 0, err
	}
	i, err := selectOne(ctx, p.cfg.selector, n, m)
	return int32(i), err
}

// selectOne asks sel for m's partition among n, as a batch of one when sel
// is a BatchSelector, and checks that the choice is in range.
func selectOne(ctx context.Context, sel PartitionSelector, n int, m *message.Message) (int, error) {
	var i int
	var err error
	if bs, ok := sel.(BatchSelector); ok {
		sc := oneScratchPool.Get().(*oneScratch)
		sc.msgs[0] = m
		err = bs.SelectBatch(ctx, m.Topic, n, sc.msgs[:], sc.out[:])
		i = sc.out[0]
		*sc = oneScratch{}
		oneScratchPool.Put(sc)
	} else {
		i, err = sel.Select(m.Topic, n, m)
	}
	if err != nil {
		return 0, err
	}
	if i < 0 || i >= n {
		return 0, fmt.Errorf("metaq: selector chose partition %d of topic %s with %d partitions", i, m.Topic, n)
	}
	return i, nil
}

// oneScratch carries a batch of one to a BatchSelector without allocating.
type oneScratch struct {
	msgs [1]*message.Message
	out  [1]int
}

var oneScratchPool = sync.Pool{New: func() any { return new(oneScratch) }}

// selectBatch chooses a partition for each of msgs, all of topic (which
// has n partitions): one SelectBatch call when the selector has it.
func (p *Producer) selectBatch(ctx context.Context, topic string, n int, msgs []*message.Message, out []int32) error {
	choices := make([]int, len(msgs))
	if bs, ok := p.cfg.selector.(BatchSelector); ok {
		if err := bs.SelectBatch(ctx, topic, n, msgs, choices); err != nil {
			return err
		}
	} else {
		for i, m := range msgs {
			c, err := p.cfg.selector.Select(topic, n, m)
			if err != nil {
				return err
			}
			choices[i] = c
		}
	}
	for i, c := range choices {
		if c < 0 || c >= n {
			return fmt.Errorf("metaq: selector chose partition %d of topic %s with %d partitions", c, topic, n)
		}
		out[i] = int32(c)
	}
	return nil
}

// selectAll chooses the partitions of msgs: one selector call per topic.
func (p *Producer) selectAll(ctx context.Context, msgs []*message.Message) ([]int32, error) {
	parts := make([]int32, len(msgs))
	topic := msgs[0].Topic
	oneTopic := true
	for _, m := range msgs[1:] {
		if m.Topic != topic {
			oneTopic = false
			break
		}
	}
	if oneTopic {
		n, err := p.partitionCount(ctx, topic)
		if err != nil {
			return nil, err
		}
		return parts, p.selectBatch(ctx, topic, n, msgs, parts)
	}
	var order []string
	idx := make(map[string][]int)
	for i, m := range msgs {
		if _, ok := idx[m.Topic]; !ok {
			order = append(order, m.Topic)
		}
		idx[m.Topic] = append(idx[m.Topic], i)
	}
	for _, t := range order {
		n, err := p.partitionCount(ctx, t)
		if err != nil {
			return nil, err
		}
		is := idx[t]
		sub := make([]*message.Message, len(is))
		for j, i := range is {
			sub[j] = msgs[i]
		}
		out := make([]int32, len(is))
		if err := p.selectBatch(ctx, t, n, sub, out); err != nil {
			return nil, err
		}
		for j, i := range is {
			parts[i] = out[j]
		}
	}
	return parts, nil
}
