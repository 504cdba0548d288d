package selectors

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

// ForProducer adapts sel for the SDK producer:
//
//	p, err := client.NewProducer(addr, client.WithSelector(selectors.ForProducer(sel)))
//
// The result also implements client.BatchSelector, so the producer asks sel
// once per batch (Producer.SendBatch) and passes its context along; Send
// asks for a batch of one. The producer knows only its topic's partition
// count, so the partitions sel sees are {BrokerID: 0, Partition: i} for i in
// [0, count), and a choice is the partition number. Closing sel stays the
// caller's job, after the producer is closed.
func ForProducer(sel Selector) client.PartitionSelector {
	return &producerSelector{sel: sel}
}

type producerSelector struct {
	sel Selector
	// parts caches the longest partition list built so far; a topic with
	// n partitions uses (*parts)[:n]. Published lists are never modified.
	parts atomic.Pointer[[]Partition]
}

var _ client.BatchSelector = (*producerSelector)(nil)

// scratch is reused between calls: a Selector must not keep the request.
type scratch struct {
	req   SelectRequest
	metas []Meta
	one   [1]*message.Message
	out   [1]int
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func (s *producerSelector) Select(topic string, partitions int, m *message.Message) (int, error) {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	sc.one[0] = m
	err := s.selectBatch(context.Background(), sc, topic, partitions, sc.one[:], sc.out[:])
	sc.one[0] = nil
	return sc.out[0], err
}

func (s *producerSelector) SelectBatch(ctx context.Context, topic string, partitions int, msgs []*message.Message, out []int) error {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	return s.selectBatch(ctx, sc, topic, partitions, msgs, out)
}

func (s *producerSelector) selectBatch(ctx context.Context, sc *scratch, topic string, n int, msgs []*message.Message, out []int) error {
	if n <= 0 {
		return fmt.Errorf("select for topic %q: %w", topic, ErrNoPartitions)
	}
	if len(out) < len(msgs) {
		return fmt.Errorf("%w: %d outputs for %d messages", ErrBadRequest, len(out), len(msgs))
	}
	metas := sc.metas[:0]
	for _, m := range msgs {
		metas = append(metas, Meta{Key: m.Key, Attribute: m.Attribute, HasAttribute: m.HasAttribute, Size: m.DataLen()})
	}
	sc.req = SelectRequest{Topic: topic, Partitions: s.partitions(n), Messages: metas}
	resp, err := s.sel.Select(ctx, &sc.req)
	if err == nil {
		err = checkResponse(&sc.req, resp)
	}
	clear(metas) // drop references to the messages' keys
	sc.metas, sc.req = metas[:0], SelectRequest{}
	if err != nil {
		return fmt.Errorf("select partitions for topic %q: %w", topic, err)
	}
	copy(out, resp.Choices)
	return nil
}

// partitions returns {0, i} for i in [0, n).
func (s *producerSelector) partitions(n int) []Partition {
	if p := s.parts.Load(); p != nil && len(*p) >= n {
		return (*p)[:n:n]
	}
	ps := make([]Partition, n)
	for i := range ps {
		ps[i] = Partition{Partition: int32(i)}
	}
	s.parts.Store(&ps) // a racing shorter list is harmless: it is rebuilt
	return ps
}
