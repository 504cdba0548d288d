package client

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
)

// sendInOrder sends msgs with SendAsync, one after another from this
// goroutine, and returns their results in send order, or the first
// failure.
func sendInOrder(ctx context.Context, p *brokerProducer, msgs []*message.Message) ([]SendResult, error) {
	res := make([]SendResult, len(msgs))
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	wg.Add(len(msgs))
	for i, m := range msgs {
		p.SendAsync(ctx, m, func(r SendResult, err error) {
			res[i], errs[i] = r, err
			wg.Done()
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
	}
	return res, nil
}

// requireStoredInOrder fails unless each partition stored res in send
// order: increasing offsets and ids.
func requireStoredInOrder(t *testing.T, res []SendResult) {
	t.Helper()
	last := map[int32]int{}
	var reordered []string
	for i, r := range res {
		if j, ok := last[r.Partition]; ok && (r.Offset <= res[j].Offset || r.ID <= res[j].ID) {
			reordered = append(reordered, "message "+strconv.Itoa(i)+" (offset "+strconv.FormatInt(r.Offset, 10)+
				") before message "+strconv.Itoa(j)+" (offset "+strconv.FormatInt(res[j].Offset, 10)+")")
		}
		last[r.Partition] = i
	}
	require.Empty(t, reordered, "%d messages stored out of send order", len(reordered))
}

// TestBatchOrderLingerRace: with a linger that expires all the time, a
// batch the linger timer detaches and the next one of the same partition,
// detached by a full add right after, reach the connection in the order
// they were detached: each goroutine's messages (one partition each, all
// over the producer's one connection) are stored in send order.
func TestBatchOrderLingerRace(t *testing.T) {
	t.Parallel()
	br := startBroker(t) // 4 partitions
	ctx := ctxT(t, 60*time.Second)
	// The partition is the body's first digit.
	sel := selector.Func(func(_ context.Context, _ string, _ []message.Partition, m *message.Message) (int, error) {
		return int(m.Body[0] - '0'), nil
	})
	p := newProducer(t, br.addr, withBatching(4, 1<<20, 10*time.Microsecond), withSelector(sel))
	const n = 5000
	res := make([][]SendResult, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for part := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs := make([]*message.Message, n)
			for i := range msgs {
				msgs[i] = &message.Message{Topic: topic, Body: []byte(strconv.Itoa(part) + "-" + strconv.Itoa(i))}
			}
			res[part], errs[part] = sendInOrder(ctx, p, msgs)
		}()
	}
	wg.Wait()
	for part := range res {
		require.NoError(t, errs[part])
		requireStoredInOrder(t, res[part])
	}
}

// TestBatchOrderBypass: a message over the batch byte limit (sent with
// put) and SendBatch's chunks go after the batched messages of the same
// partition accepted before them, never ahead of them.
func TestBatchOrderBypass(t *testing.T) {
	t.Parallel()
	br := startBroker(t)
	ctx := ctxT(t, 60*time.Second)
	// A linger far longer than a send: the batched messages wait for it,
	// or for a send that bypasses the batches to flush them.
	p := newProducer(t, br.addr, withBatching(100, 4<<10, time.Second), withSelector(selector.Fixed(2)))
	big := make([]byte, 8<<10)
	var msgs []*message.Message
	for i := range 200 {
		m := &message.Message{Topic: topic, Body: []byte("m" + strconv.Itoa(i))}
		if i%20 == 19 {
			m.Body = big
		}
		msgs = append(msgs, m)
	}
	res0, err := sendInOrder(ctx, p, msgs)
	require.NoError(t, err)
	requireStoredInOrder(t, res0)

	// Async sends wait in a batch; a SendBatch after them goes after them.
	var res []SendResult
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		p.SendAsync(ctx, &message.Message{Topic: topic, Body: []byte("a" + strconv.Itoa(i))}, func(r SendResult, err error) {
			require.NoError(t, err)
			mu.Lock()
			res = append(res, r)
			mu.Unlock()
			wg.Done()
		})
	}
	batch := []*message.Message{{Topic: topic, Body: []byte("b0")}, {Topic: topic, Body: big}, {Topic: topic, Body: []byte("b2")}}
	br2, err := p.SendBatch(ctx, batch)
	require.NoError(t, err)
	wg.Wait()
	for _, r := range res {
		require.Less(t, r.Offset, br2[0].Offset, "an async send accepted before SendBatch stored after it")
	}
	requireStoredInOrder(t, br2)

	// A synchronous oversized Send after an async batched one.
	done := make(chan SendResult, 1)
	p.SendAsync(ctx, &message.Message{Topic: topic, Body: []byte("c0")}, func(r SendResult, err error) {
		require.NoError(t, err)
		done <- r
	})
	r, err := p.Send(ctx, &message.Message{Topic: topic, Body: big})
	require.NoError(t, err)
	require.Less(t, (<-done).Offset, r.Offset)
	require.NoError(t, p.Close(context.Background()))
}
