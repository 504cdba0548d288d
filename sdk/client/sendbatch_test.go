package client_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

// countingSelector is round robin that counts its SelectBatch calls.
type countingSelector struct {
	client.PartitionSelector
	batches, msgs atomic.Int64
	err           error
}

func (c *countingSelector) SelectBatch(ctx context.Context, topic string, n int, msgs []*message.Message, out []int) error {
	c.batches.Add(1)
	c.msgs.Add(int64(len(msgs)))
	if c.err != nil {
		return c.err
	}
	return c.PartitionSelector.(client.BatchSelector).SelectBatch(ctx, topic, n, msgs, out)
}

func TestSendBatch(t *testing.T) {
	br := startBroker(t, func(c *conf.Config) { c.Topics = append(c.Topics, conf.Topic{Name: "t2"}) })
	ctx := ctxT(t, 30*time.Second)
	for _, tc := range []struct {
		name string
		opts []client.ProducerOption
	}{
		{"plain", nil},
		{"small-inflight", []client.ProducerOption{client.WithMaxInFlight(7)}},
		{"batching", []client.ProducerOption{client.WithBatching(16, 4<<10, time.Hour)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel := &countingSelector{PartitionSelector: client.RoundRobin()}
			p := newProducer(t, br.addr, append(tc.opts, client.WithSelector(sel))...)
			const n = 300
			msgs := make([]*message.Message, n)
			for i := range msgs {
				tp := topic
				if i%3 == 0 {
					tp = "t2"
				}
				msgs[i] = &message.Message{Topic: tp, Body: []byte(tc.name + "-" + strconv.Itoa(i))}
				if i%5 == 0 {
					msgs[i].Attribute, msgs[i].HasAttribute = "a"+strconv.Itoa(i), true
				}
			}
			// One message over the mput byte limit goes with put.
			msgs[10].Body = make([]byte, 600<<10)
			start := time.Now()
			res, err := p.SendBatch(ctx, msgs)
			require.NoError(t, err)
			require.Less(t, time.Since(start), 10*time.Second, "SendBatch does not wait for linger")
			require.EqualValues(t, 2, sel.batches.Load(), "one selector call per topic")
			require.EqualValues(t, n, sel.msgs.Load())
			last := map[[2]any]int64{}
			for i, r := range res {
				m := msgs[i]
				require.Equal(t, m.Topic, r.Topic)
				require.Equal(t, m.ID, r.ID)
				require.Equal(t, m.Partition, r.Partition)
				k := [2]any{r.Topic, r.Partition}
				if prev, ok := last[k]; ok {
					require.Greater(t, r.Offset, prev, "message %d: order kept within a partition", i)
				}
				last[k] = r.Offset
			}
		})
	}
}

func TestSendBatchErrors(t *testing.T) {
	br := startBroker(t)
	ctx := ctxT(t, 30*time.Second)
	boom := errors.New("boom")
	sel := &countingSelector{PartitionSelector: client.RoundRobin(), err: boom}
	p := newProducer(t, br.addr, client.WithSelector(sel))

	res, err := p.SendBatch(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, res)

	_, err = p.SendBatch(ctx, []*message.Message{{Topic: topic}, {}})
	require.ErrorIs(t, err, client.ErrInvalidMessage)
	_, err = p.SendBatch(ctx, []*message.Message{{Topic: topic}, nil})
	require.ErrorIs(t, err, client.ErrInvalidMessage)
	_, err = p.SendBatch(ctx, []*message.Message{{Topic: topic, Body: make([]byte, 3<<20)}})
	require.ErrorIs(t, err, client.ErrInvalidMessage)
	require.Zero(t, sel.batches.Load(), "invalid batches never reach the selector")

	_, err = p.SendBatch(ctx, []*message.Message{{Topic: topic}})
	require.ErrorIs(t, err, boom)
	_, err = p.SendBatch(ctx, []*message.Message{{Topic: "nope"}})
	require.ErrorIs(t, err, client.ErrUnknownTopic)

	// A selector without SelectBatch is asked per message.
	p2 := newProducer(t, br.addr, client.WithSelector(client.Fixed(9)))
	_, err = p2.SendBatch(ctx, []*message.Message{{Topic: topic}})
	require.Error(t, err)

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = p2.SendBatch(canceled, []*message.Message{{Topic: topic}})
	require.ErrorIs(t, err, context.Canceled)

	require.NoError(t, p2.Close(ctx))
	_, err = p2.SendBatch(ctx, []*message.Message{{Topic: topic}})
	require.ErrorIs(t, err, client.ErrClosed)
}
