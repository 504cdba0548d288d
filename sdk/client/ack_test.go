package client

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
)

// TestManualAckRollback: one member with ManualAck(3) on one partition.
// At most 3 messages are past the position; an ack out of order does not
// move it, the ack of the first does (past both); a nack
// settles; Rollback redelivers, in order, the unsettled messages only,
// and their old deliveries turn stale; the committed position is where
// a new member of the group starts.
func TestManualAckRollback(t *testing.T) {
	t.Parallel()
	br := startBroker(t)
	ctx := ctxT(t, 20*time.Second)
	pr := newProducer(t, br.addr, withSelector(selector.Fixed(0)))
	var ends []int64 // ends[i]: the offset after m<i>
	offs := map[string]int64{}
	for i := range 12 {
		res, err := pr.Send(ctx, &message.Message{Topic: topic, Body: fmt.Appendf(nil, "m%d", i)})
		require.NoError(t, err)
		offs[fmt.Sprint("m", i)] = res.Offset
		ends = append(ends, res.Offset)
	}
	for i := range 11 {
		ends[i] = offs[fmt.Sprint("m", i+1)]
	}
	opts := []Opt{Brokers(br.addr), ConsumeTopics(topic), ConsumerGroup("ack1"), Reject(Drop()),
		HeartbeatInterval(100 * time.Millisecond), FetchMaxWait(50 * time.Millisecond), CommitInterval(0)}
	c := newClient(t, append(opts, ManualAck(3))...)
	require.ErrorContains(t, c.Consume(ctx, func(context.Context, *message.Message) error { return nil }), "ConsumeAcked")
	ds := make(chan *Delivery, 100)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.ConsumeAcked(cctx, func(_ context.Context, d *Delivery) error {
			ds <- d
			return nil
		})
	}()
	next := func(want string) *Delivery {
		t.Helper()
		select {
		case d := <-ds:
			require.Equal(t, want, string(d.Message.Body))
			return d
		case <-ctx.Done():
			t.Fatalf("no delivery; want %s", want)
			return nil
		}
	}
	none := func() {
		t.Helper()
		select {
		case d := <-ds:
			t.Fatalf("unexpected delivery of %s", d.Message.Body)
		case <-time.After(300 * time.Millisecond):
		}
	}
	pos := func() int64 {
		off, ok := c.Position(topic, message.Partition{BrokerID: -1, Partition: 0})
		require.True(t, ok)
		return off
	}
	d0, d1, d2 := next("m0"), next("m1"), next("m2")
	none() // 3 unacked: the partition waits
	require.Equal(t, offs["m0"], pos())
	require.NoError(t, d1.Ack())
	require.NoError(t, d1.Ack(), "a second Ack is a no-op")
	none() // m1 acked after m0: still 3 past the position
	require.Equal(t, offs["m0"], pos(), "m0 unacked: the position stays")
	require.NoError(t, d0.Ack())
	d3, d4 := next("m3"), next("m4")
	require.Equal(t, offs["m2"], pos(), "past m0 and m1")
	require.NoError(t, d2.Nack(ctx, 0)) // Drop(): settled
	require.Error(t, d2.Nack(ctx, 0), "settled already")
	require.Equal(t, offs["m3"], pos())
	d5 := next("m5")
	require.NoError(t, d5.Ack())
	none() // m3, m4 unsettled and m5 acked after them: 3 held
	require.NoError(t, c.Rollback())
	next("m3")
	next("m4")
	d6 := next("m6") // m5 acked: not again
	require.ErrorIs(t, d3.Ack(), ErrDeliveryStale)
	require.ErrorIs(t, d4.Nack(ctx, 0), ErrDeliveryStale)
	require.Equal(t, offs["m3"], pos())
	require.NoError(t, d6.Ack())
	require.Equal(t, offs["m3"], pos())
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)

	// What was committed is where the group goes on: m3, m4 again (not m5, m6, whose acks came after
	// the position), then the rest.
	c2 := newClient(t, append(opts, ManualAck(0))...)
	var mu sync.Mutex
	var got []string
	cctx, cancel = context.WithCancel(ctx)
	defer cancel()
	go func() {
		done <- c2.ConsumeAcked(cctx, func(_ context.Context, d *Delivery) error {
			mu.Lock()
			got = append(got, string(d.Message.Body))
			mu.Unlock()
			return d.Ack()
		})
	}()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 9
	}, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	require.Equal(t, []string{"m3", "m4", "m5", "m6", "m7", "m8", "m9", "m10", "m11"}, got)
	mu.Unlock()
	require.Eventually(t, func() bool {
		off, ok := c2.Position(topic, message.Partition{BrokerID: -1, Partition: 0})
		return ok && off == ends[10]+(ends[10]-offs["m10"])
	}, 5*time.Second, 10*time.Millisecond)
}
