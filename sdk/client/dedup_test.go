package client

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
)

// TestIDCache: an LRU of handled ids per topic; drop counts; eviction of
// the least recently used; a nil cache and id 0 drop nothing.
func TestIDCache(t *testing.T) {
	t.Parallel()
	var nilCache *idCache
	nilCache.handled("t", 1)
	require.False(t, nilCache.drop("t", 1))

	c := newIDCache(3)
	require.False(t, c.drop("t", 1))
	for id := int64(1); id <= 3; id++ {
		c.handled("t", id)
	}
	c.handled("t", 0)
	require.False(t, c.drop("t", 0), "id 0 is no id")
	require.Equal(t, 3, c.len())
	require.True(t, c.drop("t", 1)) // 1 becomes the most recent
	require.False(t, c.drop("u", 1), "ids are per topic")
	c.handled("t", 4) // evicts 2, the least recently used
	require.Equal(t, 3, c.len())
	require.False(t, c.drop("t", 2))
	require.True(t, c.drop("t", 1))
	require.True(t, c.drop("t", 3))
	require.True(t, c.drop("t", 4))
	require.EqualValues(t, 4, c.dropped.Load())
	c.handled("t", 4) // again: no second entry
	require.Equal(t, 3, c.len())

	// Concurrent use (run with -race).
	c = newIDCache(DefaultMessageIDCacheSize)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 10000 {
				id := int64(i%5000 + 1)
				if !c.drop("t"+strconv.Itoa(g%2), id) {
					c.handled("t"+strconv.Itoa(g%2), id)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, DefaultMessageIDCacheSize, c.len())
}

// TestIDCacheModel compares the cache with a slice kept in recency order
// under random drops and handles, at sizes 1 to 6.
func TestIDCacheModel(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for size := 1; size <= 6; size++ {
		c := newIDCache(size)
		var model []int64 // most recent first
		for range 5000 {
			id := int64(r.IntN(10) + 1)
			i := slices.Index(model, id)
			if r.IntN(2) == 0 {
				require.Equal(t, i >= 0, c.drop("t", id), "size %d, model %v, drop %d", size, model, id)
				if i >= 0 {
					model = append([]int64{id}, slices.Delete(model, i, i+1)...)
				}
				continue
			}
			c.handled("t", id)
			if i >= 0 {
				model = slices.Delete(model, i, i+1)
			}
			model = append([]int64{id}, model...)
			if len(model) > size {
				model = model[:size]
			}
			require.Equal(t, len(model), c.len())
		}
	}
}

// TestMessageIDCacheRedelivery: a group member's Client handles 20
// messages; the group's offsets are reset to the start and 10 more are
// sent; its next Consume gets only the 10 new ones (the 20 redelivered are
// dropped and counted), while a Client with MessageIDCache(0) gets all 30
// after the same reset. Messages(...) drops them too.
func TestMessageIDCacheRedelivery(t *testing.T) {
	t.Parallel()
	br := startBroker(t)
	produceN(t, br.addr, 20)
	const group = "dedup-g"

	newMember := func(opts ...Opt) *Client {
		cl, err := New(append([]Opt{Brokers(br.addr), ConsumeTopics(topic), ConsumerGroup(group), CommitInterval(0),
			HeartbeatInterval(100 * time.Millisecond)}, opts...)...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = cl.Close(context.Background()) })
		return cl
	}
	// consume runs Consume until n messages were handled, and a little
	// longer to see that no more come, and returns their bodies.
	consume := func(cl *Client, n int) []string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var mu sync.Mutex
		var got []string
		var once sync.Once
		done := make(chan struct{})
		errc := make(chan error, 1)
		go func() {
			errc <- cl.Consume(ctx, func(_ context.Context, m *message.Message) error {
				mu.Lock()
				got = append(got, string(m.Body))
				if len(got) >= n {
					once.Do(func() { close(done) })
				}
				mu.Unlock()
				return nil
			})
		}()
		select {
		case <-done:
		case <-ctx.Done():
			mu.Lock()
			t.Fatalf("consumed %d of %d: %v", len(got), n, got)
		}
		time.Sleep(500 * time.Millisecond)
		cancel()
		<-errc
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
	reset := func() {
		t.Helper()
		s, err := newBrokerOffsetStore(br.addr)
		require.NoError(t, err)
		defer s.Close()
		ps := brokerPositions(t, s, 0, 1, 2, 3)
		for i := range ps {
			ps[i].Offset, ps[i].MsgID = 0, -1
		}
		require.NoError(t, s.Commit(ctxT(t, 10*time.Second), group, ps))
	}

	cl := newMember()
	require.Len(t, consume(cl, 20), 20)
	require.Zero(t, cl.DuplicatesDropped())

	reset()
	produceN(t, br.addr, 10) // bodies "0".."9" again, with new ids
	got := consume(cl, 10)
	require.Len(t, got, 10, "only the new messages: %v", got)
	require.EqualValues(t, 20, cl.DuplicatesDropped(), "the 20 redelivered ones are dropped")
	require.NoError(t, cl.Close(ctxT(t, 10*time.Second)))

	// Off: the same reset redelivers everything.
	reset()
	off := newMember(MessageIDCache(0))
	require.Len(t, consume(off, 30), 30)
	require.Zero(t, off.DuplicatesDropped())
	require.NoError(t, off.Close(ctxT(t, 10*time.Second)))

	_, err := New(Brokers(br.addr), ConsumeTopics(topic), MessageIDCache(-1))
	require.ErrorContains(t, err, "MessageIDCache needs a size >= 0")
}

// TestMessageIDCacheMessages: the Messages iterator of a Client skips the
// messages whose ids its cache holds, and counts them.
func TestMessageIDCacheMessages(t *testing.T) {
	t.Parallel()
	br := startBroker(t)
	p := newProducer(t, br.addr)
	ids := map[int64]bool{}
	for i := range 10 {
		r, err := p.Send(ctxT(t, 20*time.Second), &message.Message{Topic: topic, Body: []byte(strconv.Itoa(i))})
		require.NoError(t, err)
		if i%2 == 0 {
			ids[r.ID] = true
		}
	}
	cl, err := New(Brokers(br.addr), ConsumeTopics(topic))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close(context.Background()) })
	for id := range ids {
		cl.dedup.handled(topic, id) // as if handled before a redelivery
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var got []string
	for m, err := range cl.Messages(ctx) {
		if err != nil {
			break
		}
		require.False(t, ids[m.ID], "message %s (id %d) was handled before", m.Body, m.ID)
		got = append(got, string(m.Body))
	}
	require.Len(t, got, 5, "%v", got)
	require.EqualValues(t, 5, cl.DuplicatesDropped())
}

// BenchmarkIDCache is what MessageIDCache costs a consumed message: a
// miss (drop) and a handled, at the default size, full.
func BenchmarkIDCache(b *testing.B) {
	c := newIDCache(DefaultMessageIDCacheSize)
	id := int64(1)
	b.ReportAllocs()
	for b.Loop() {
		if !c.drop(topic, id) {
			c.handled(topic, id)
		}
		id++
	}
}
