package client

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
)

// ErrNoPartitions is returned when a topic has no partitions to send to;
// it is selector.ErrNoPartitions, so errors.Is matches it whether the
// Client or a selector said so.
var ErrNoPartitions = selector.ErrNoPartitions

// selectPartition learns the topic's partition count and asks the selector.
func (p *brokerProducer) selectPartition(ctx context.Context, m *message.Message) (int32, error) {
	n, err := p.partitionCount(ctx, m.Topic)
	if err != nil {
		return 0, err
	}
	i, err := selectOne(ctx, p.cfg.selector, m.Topic, localPartitions(n), m)
	return int32(i), err
}

// selectOne asks sel for m's index among partitions, of topic, and checks
// that the choice is in range.
func selectOne(ctx context.Context, sel selector.Selector, topic string, partitions []message.Partition, m *message.Message) (int, error) {
	i, err := sel.Select(ctx, topic, partitions, m)
	if err != nil {
		return 0, err
	}
	if err := selector.CheckChoice(topic, partitions, i); err != nil {
		return 0, fmt.Errorf("metaq: selector chose badly: %w", err)
	}
	return i, nil
}

// localList caches the longest partition list localPartitions built;
// published lists are never modified.
var localList atomic.Pointer[[]message.Partition]

// localPartitions returns the partition list of a brokerProducer's one broker,
// whose id it does not know: {0, i} for i in [0, n).
func localPartitions(n int) []message.Partition {
	if p := localList.Load(); p != nil && len(*p) >= n {
		return (*p)[:n:n]
	}
	ps := make([]message.Partition, n)
	for i := range ps {
		ps[i] = message.Partition{Partition: int32(i)}
	}
	localList.Store(&ps) // a racing shorter list is harmless: it is rebuilt
	return ps
}

// selectBatch chooses a partition for each of msgs, all of topic (which
// has n partitions).
func (p *brokerProducer) selectBatch(ctx context.Context, topic string, n int, msgs []*message.Message, out []int32) error {
	ps := localPartitions(n)
	for i, m := range msgs {
		c, err := selectOne(ctx, p.cfg.selector, topic, ps, m)
		if err != nil {
			return err
		}
		out[i] = int32(c)
	}
	return nil
}

// selectAll chooses the partitions of msgs: one selector call per topic.
func (p *brokerProducer) selectAll(ctx context.Context, msgs []*message.Message) ([]int32, error) {
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
