package client

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
)

// countingSelector is round robin that counts its Select calls.
type countingSelector struct {
	selector.Selector
	msgs atomic.Int64
	err  error
}

func (c *countingSelector) Select(ctx context.Context, topic string, ps []message.Partition, m *message.Message) (int, error) {
	c.msgs.Add(1)
	if c.err != nil {
		return 0, c.err
	}
	return c.Selector.Select(ctx, topic, ps, m)
}

func TestSendBatch(t *testing.T) {
	t.Parallel()
	br := startBroker(t, func(c *conf.Config) { c.Topics = append(c.Topics, conf.Topic{Name: "t2"}) })
	ctx := ctxT(t, 30*time.Second)
	for _, tc := range []struct {
		name string
		opts []prodOption
	}{
		{"plain", nil},
		{"small-inflight", []prodOption{withMaxInFlight(7)}},
		{"batching", []prodOption{withBatching(16, 4<<10, time.Hour)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel := &countingSelector{Selector: selector.RoundRobin()}
			p := newProducer(t, br.addr, append(tc.opts, withSelector(sel))...)
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
			require.EqualValues(t, n, sel.msgs.Load(), "one selector call per message")
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
	t.Parallel()
	br := startBroker(t)
	ctx := ctxT(t, 30*time.Second)
	boom := errors.New("boom")
	sel := &countingSelector{Selector: selector.RoundRobin(), err: boom}
	p := newProducer(t, br.addr, withSelector(sel))

	res, err := p.SendBatch(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, res)

	_, err = p.SendBatch(ctx, []*message.Message{{Topic: topic}, {}})
	require.ErrorIs(t, err, ErrInvalidMessage)
	_, err = p.SendBatch(ctx, []*message.Message{{Topic: topic}, nil})
	require.ErrorIs(t, err, ErrInvalidMessage)
	_, err = p.SendBatch(ctx, []*message.Message{{Topic: topic, Body: make([]byte, 3<<20)}})
	require.ErrorIs(t, err, ErrInvalidMessage)
	require.Zero(t, sel.msgs.Load(), "invalid batches never reach the selector")

	_, err = p.SendBatch(ctx, []*message.Message{{Topic: topic}})
	require.ErrorIs(t, err, boom)
	_, err = p.SendBatch(ctx, []*message.Message{{Topic: "nope"}})
	require.ErrorIs(t, err, ErrUnknownTopic)

	p2 := newProducer(t, br.addr, withSelector(selector.Fixed(9)))
	_, err = p2.SendBatch(ctx, []*message.Message{{Topic: topic}})
	require.Error(t, err)

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = p2.SendBatch(canceled, []*message.Message{{Topic: topic}})
	require.ErrorIs(t, err, context.Canceled)

	require.NoError(t, p2.Close(ctx))
	_, err = p2.SendBatch(ctx, []*message.Message{{Topic: topic}})
	require.ErrorIs(t, err, ErrClosed)
}
