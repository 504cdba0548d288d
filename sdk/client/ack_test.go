package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
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

// ackMode is a discovery mode for the acked-consumption and retry tests:
// start runs a broker with topic t1 (4 partitions) and group's retry and
// dead-letter topics, and returns its address and the options of a Client
// that finds it.
type ackMode struct {
	name  string
	start func(t *testing.T, group string) (string, []Opt)
	// member: the options of a group member in this mode.
	member []Opt
}

var ackModes = []ackMode{
	{"direct", func(t *testing.T, group string) (string, []Opt) {
		br := startBroker(t, withRetryTopics(group))
		return br.addr, []Opt{Brokers(br.addr)}
	}, []Opt{HeartbeatInterval(100 * time.Millisecond)}},
	{"zookeeper", func(t *testing.T, group string) (string, []Opt) {
		zkAddr := testsvc.ZooKeeper(t)
		root := zkRoot("/ack")
		br := startBroker(t, withRetryTopics(group), func(c *conf.Config) {
			c.BrokerID, c.ZooKeeper.Connect, c.ZooKeeper.Root = 1, zkAddr, root
		})
		return br.addr, []Opt{ZooKeeper(zkAddr, root), ZooKeeperSessionTimeout(4 * time.Second)}
	}, nil},
}

func withRetryTopics(group string) func(*conf.Config) {
	return func(c *conf.Config) {
		c.Topics = append(c.Topics, conf.Topic{Name: RetryTopicOf(group)}, conf.Topic{Name: DeadLetterTopicOf(group)})
	}
}

// TestManualAckRebalance: acked consumption across a rebalance, with
// direct brokers and with ZooKeeper. Member A acks most messages, nacks
// some (they come back through the retry topic) and leaves some unacked
// for good; B joins mid-stream, then A leaves. Each time a member starts
// on a partition, its first message is exactly the first one no member
// had settled (acked or nacked): nothing whose ack the position passed is
// delivered again, and nothing unacked is skipped. At the end every
// message has been acked.
func TestManualAckRebalance(t *testing.T) {
	t.Parallel()
	for _, mode := range ackModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			const group, n = "ackrb", 120
			_, base := mode.start(t, group)
			p := newClient(t, base...)
			res, msgs := clientProduceMsgs(t, p, n)
			type at struct {
				p   int32
				off int64
			}
			where := map[string]at{}
			for i, r := range res {
				where[string(msgs[i].Body)] = at{r.Partition, r.Offset}
			}
			var mu sync.Mutex
			settled := map[string]bool{} // first deliveries acked or nacked
			acked := map[string]int{}
			last := map[int32]string{} // the member that delivered a partition's latest first delivery
			delivered := map[string]int{}
			var checks int
			var bad []string
			firstUnsettled := func(p int32) int64 {
				lo := int64(-1)
				for b, w := range where {
					if w.p == p && !settled[b] && (lo < 0 || w.off < lo) {
						lo = w.off
					}
				}
				return lo
			}
			handler := func(member string, hold bool) AckHandler {
				return func(ctx context.Context, d *Delivery) error {
					m := d.Message
					b := string(m.Body)
					var i int
					_, _ = fmt.Sscanf(b, "m%d", &i)
					mu.Lock()
					defer mu.Unlock()
					delivered[member]++
					if deliveries(m) > 1 { // back from the retry topic
						if d.Ack() == nil {
							acked[b]++
						}
						return nil
					}
					if last[m.Partition] != member {
						checks++
						if want := firstUnsettled(m.Partition); m.Offset != want {
							bad = append(bad, fmt.Sprintf("%s started partition %d at %s (offset %d), the first unsettled is at %d",
								member, m.Partition, b, m.Offset, want))
						}
						last[m.Partition] = member
					}
					switch {
					case hold && i%7 == 3:
						// never settled by this member
					case i%5 == 0:
						if d.Nack(ctx, 0) == nil {
							settled[b] = true
						}
					default:
						if d.Ack() == nil {
							settled[b] = true
							acked[b]++
						}
					}
					return nil
				}
			}
			ctx := ctxT(t, 60*time.Second)
			member := func(id string, hold bool) (*Client, chan error) {
				opts := append(slices.Clone(base), ConsumeTopics(topic), ConsumerGroup(group), ConsumerID(id),
					ManualAck(8), Reject(RetryTopics(RetryOptions{Backoff: []time.Duration{50 * time.Millisecond}})),
					FetchMaxWait(50*time.Millisecond))
				c := newClient(t, append(opts, mode.member...)...)
				done := make(chan error, 1)
				go func() { done <- c.ConsumeAcked(ctx, handler(id, hold)) }()
				return c, done
			}
			count := func(f func() bool) func() bool {
				return func() bool { mu.Lock(); defer mu.Unlock(); return f() }
			}
			a, aDone := member("a", true)
			require.Eventually(t, count(func() bool { return delivered["a"] >= 30 }), 20*time.Second, 10*time.Millisecond)
			_, bDone := member("b", false)
			require.Eventually(t, count(func() bool { return delivered["b"] >= 10 }), 20*time.Second, 10*time.Millisecond,
				"b takes partitions from a")
			require.NoError(t, a.Close(ctx))
			require.ErrorIs(t, <-aDone, ErrClosed)
			require.Eventually(t, count(func() bool { return len(acked) == n }), 30*time.Second, 10*time.Millisecond,
				"every message acked")
			mu.Lock()
			defer mu.Unlock()
			require.Empty(t, bad)
			require.GreaterOrEqual(t, checks, 5, "partitions started by a then by b")
			t.Logf("%d deliveries (a %d, b %d) of %d messages; %d partition starts checked",
				delivered["a"]+delivered["b"], delivered["a"], delivered["b"], n, checks)
			select {
			case err := <-bDone:
				t.Fatalf("b stopped: %v", err)
			default:
			}
		})
	}
}

// TestManualAckOrderedNack: in an ordered group (RetryInPlace) Nack(delay)
// rewinds the partition to the message after delay: it comes again, then
// the later messages not acked yet, in order; the other partition flows.
func TestManualAckOrderedNack(t *testing.T) {
	t.Parallel()
	br := startBroker(t)
	ctx := ctxT(t, 20*time.Second)
	for p, bodies := range [][]string{{"a0", "a1", "a2", "a3"}, {"b0", "b1"}} {
		pr := newProducer(t, br.addr, withSelector(selector.Fixed(p)))
		for _, b := range bodies {
			_, err := pr.Send(ctx, &message.Message{Topic: topic, Body: []byte(b)})
			require.NoError(t, err)
		}
	}
	c := newClient(t, Brokers(br.addr), ConsumeTopics(topic), ConsumerGroup("ackord"), ManualAck(0),
		Reject(RetryInPlace(time.Second)), HeartbeatInterval(100*time.Millisecond), FetchMaxWait(50*time.Millisecond))
	var mu sync.Mutex
	got := map[int32][]string{}
	var nackedAt, againAt time.Time
	var first, held *Delivery
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_ = c.ConsumeAcked(cctx, func(ctx context.Context, d *Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			b := string(d.Message.Body)
			got[d.Message.Partition] = append(got[d.Message.Partition], b)
			switch {
			case b == "a1" && first == nil:
				first = d // settled later
				return nil
			case b == "a2" && held == nil:
				// a1 fails after a2 was delivered (async processing):
				// a1 and a2 come again in order; a2's delivery is stale.
				held, nackedAt = d, time.Now()
				return first.Nack(ctx, 200*time.Millisecond)
			case b == "a1" && againAt.IsZero():
				againAt = time.Now()
			}
			return d.Ack()
		})
	}()
	want := []string{"a0", "a1", "a2", "a1", "a2", "a3"}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got[0]) == len(want) && len(got[1]) == 2
	}, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, want, got[0], "a1 again after its nack, then a2 (not acked then), in order")
	require.ErrorIs(t, first.Ack(), ErrDeliveryStale)
	require.Equal(t, []string{"b0", "b1"}, got[1])
	require.GreaterOrEqual(t, againAt.Sub(nackedAt), 190*time.Millisecond, "the nack's delay")
	require.ErrorIs(t, held.Ack(), ErrDeliveryStale)
}

// TestZooKeeperMemberTopics: a ZooKeeper Client consuming two topics is
// one member of its group (one consumer id, registered with both topics):
// alone, a group member reads every partition of both, with a default id
// or its own; a broadcast member too.
func TestZooKeeperMemberTopics(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := zkRoot("/member-topics")
	startBroker(t, func(c *conf.Config) {
		c.Topics = append(c.Topics, conf.Topic{Name: "t2"})
		c.BrokerID, c.ZooKeeper.Connect, c.ZooKeeper.Root = 1, zkAddr, root
	})
	ctx := ctxT(t, 20*time.Second)
	for i, opts := range [][]Opt{
		{ConsumerGroup("mt1")},
		{ConsumerGroup("mt2"), ConsumerID("me")},
		{ConsumerGroup("mt3"), Broadcast()},
	} {
		c := newClient(t, append([]Opt{ZooKeeper(zkAddr, root), ZooKeeperSessionTimeout(4 * time.Second),
			ConsumeTopics(topic, "t2"), Reject(Drop())}, opts...)...)
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Consume(cctx, func(context.Context, *message.Message) error { return nil }) }()
		require.Eventually(t, func() bool { return len(c.Assigned()) == 8 }, 10*time.Second, 20*time.Millisecond,
			"case %d: every partition of both topics", i)
		time.Sleep(200 * time.Millisecond) // settled: no second member shows up
		require.Len(t, c.Assigned(), 8, "case %d", i)
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	}
}

// TestManualAckErrorAfterSettle: a handler that settles its delivery
// (Ack, Nack) or rolls it back and then returns an error ends that
// delivery: it is not run again for it, and the Reject policy does not get
// it (a Nack's own reject aside). A handler that fails without settling is
// retried and rejected as before.
func TestManualAckErrorAfterSettle(t *testing.T) {
	t.Parallel()
	br := startBroker(t)
	ctx := ctxT(t, 20*time.Second)
	pr := newProducer(t, br.addr, withSelector(selector.Fixed(0)))
	bodies := []string{"nack", "ack", "rollback", "plain", "last"}
	var lastEnd int64
	for _, b := range bodies {
		res, err := pr.Send(ctx, &message.Message{Topic: topic, Body: []byte(b)})
		require.NoError(t, err)
		lastEnd = res.Offset
	}
	var mu, rmu sync.Mutex // mu: the handler's; rmu: the Reject policy's
	calls, rejects := map[string]int{}, map[string]int{}
	c := newClient(t, Brokers(br.addr), ConsumeTopics(topic), ConsumerGroup("ackerr"), ManualAck(0),
		HandlerRetries(2, time.Millisecond), Reject(RejectFunc(func(_ context.Context, m *message.Message, _ error) {
			rmu.Lock()
			rejects[string(m.Body)]++
			rmu.Unlock()
		})), HeartbeatInterval(100*time.Millisecond), FetchMaxWait(50*time.Millisecond))
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var nackErr, ackAfterNack, ackErr, nackAfterAck, rollbackErr error
	go func() {
		_ = c.ConsumeAcked(cctx, func(ctx context.Context, d *Delivery) error {
			b := string(d.Message.Body)
			mu.Lock()
			defer mu.Unlock()
			calls[b]++
			switch b {
			case "nack":
				nackErr = d.Nack(ctx, 0)
				ackAfterNack = d.Ack()
			case "ack":
				ackErr = d.Ack()
				nackAfterAck = d.Nack(ctx, 0)
			case "rollback":
				if calls[b] > 1 {
					return d.Ack()
				}
				rollbackErr = c.Rollback() // delivered again by the rewind
			case "last":
				return d.Ack()
			}
			return fmt.Errorf("failed %s", b)
		})
	}()
	require.Eventually(t, func() bool {
		off, ok := c.Position(topic, message.Partition{BrokerID: -1, Partition: 0})
		return ok && off > lastEnd
	}, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{"nack": 1, "ack": 1, "rollback": 2, "plain": 3, "last": 1}, calls)
	rmu.Lock()
	defer rmu.Unlock()
	require.Equal(t, map[string]int{"nack": 1, "plain": 1}, rejects)
	require.NoError(t, nackErr)
	require.NoError(t, ackErr)
	require.NoError(t, rollbackErr)
	require.ErrorContains(t, ackAfterNack, "nacked already", "an Ack after a Nack")
	require.ErrorContains(t, nackAfterAck, "acked or nacked already", "a Nack after an Ack")
}

// TestManualAckNackSettles: a Nack settles its message. In an ordered
// group (RetryInPlace) an Ack after the Nack, before the rewind, fails and
// does not cancel it: the message comes again. With a policy that sends
// it away, a Rollback, and the release when consumption stops, that come
// while the Nack is sending the message wait for it: the Nack succeeds,
// and the message is neither delivered again from its partition nor
// committed before it (a new member starts after it).
func TestManualAckNackSettles(t *testing.T) {
	t.Parallel()
	br := startBroker(t)
	ctx := ctxT(t, 20*time.Second)
	pr := newProducer(t, br.addr, withSelector(selector.Fixed(0)))
	for _, b := range []string{"m0", "m1", "m2"} {
		_, err := pr.Send(ctx, &message.Message{Topic: topic, Body: []byte(b)})
		require.NoError(t, err)
	}
	opts := []Opt{Brokers(br.addr), ConsumeTopics(topic), HeartbeatInterval(100 * time.Millisecond),
		FetchMaxWait(50 * time.Millisecond), CommitInterval(0)}
	consume := func(c *Client, cctx context.Context, h AckHandler) chan error {
		done := make(chan error, 1)
		go func() { done <- c.ConsumeAcked(cctx, h) }()
		return done
	}

	t.Run("ordered", func(t *testing.T) {
		c := newClient(t, append(opts, ConsumerGroup("acksettle-ord"), ManualAck(0), Reject(RetryInPlace(time.Second)))...)
		var mu sync.Mutex
		var got []string
		var ackErr error
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		consume(c, cctx, func(ctx context.Context, d *Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, string(d.Message.Body))
			if len(got) == 1 {
				if err := d.Nack(ctx, 50*time.Millisecond); err != nil {
					return err
				}
				ackErr = d.Ack() // too late: nacked
				return nil
			}
			return d.Ack()
		})
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) == 4
		}, 10*time.Second, 10*time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		require.ErrorContains(t, ackErr, "nacked already")
		require.Equal(t, []string{"m0", "m0", "m1", "m2"}, got)
	})

	t.Run("sending", func(t *testing.T) {
		var rmu sync.Mutex
		entered, release := map[string]chan struct{}{}, map[string]chan struct{}{}
		for _, b := range []string{"m0", "m1"} {
			entered[b], release[b] = make(chan struct{}), make(chan struct{})
		}
		rejected := map[string]int{}
		reject := RejectFunc(func(_ context.Context, m *message.Message, _ error) {
			b := string(m.Body)
			rmu.Lock()
			rejected[b]++
			first := rejected[b] == 1
			rmu.Unlock()
			if first && entered[b] != nil {
				close(entered[b])
				<-release[b] // the send takes a while
			}
		})
		group := []Opt{ConsumerGroup("acksettle"), ManualAck(2), Reject(reject)}
		c := newClient(t, append(opts, group...)...)
		ds := make(chan *Delivery, 10)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := consume(c, cctx, func(_ context.Context, d *Delivery) error {
			ds <- d
			return nil
		})
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
		wait := func(ch chan struct{}) {
			t.Helper()
			select {
			case <-ch:
			case <-ctx.Done():
				t.Fatal("timeout")
			}
		}
		nack := func(d *Delivery) chan error {
			res := make(chan error, 1)
			go func() { res <- d.Nack(ctx, 0) }()
			return res
		}
		// A Rollback while m0's Nack sends it (m2 waits: 2 unsettled): m0
		// is not delivered again.
		d0 := next("m0")
		next("m1")
		res := nack(d0)
		wait(entered["m0"])
		require.NoError(t, c.Rollback())
		time.Sleep(200 * time.Millisecond) // the partition takes the rewind
		close(release["m0"])
		require.NoError(t, <-res)
		require.ErrorContains(t, d0.Ack(), "nacked already")
		d1 := next("m1") // rolled back
		next("m2")
		select {
		case d := <-ds:
			t.Fatalf("unexpected delivery of %s", d.Message.Body)
		case <-time.After(200 * time.Millisecond):
		}
		// Consumption stops while m1's Nack sends it: the final commit
		// passes m1, so the next member starts at m2.
		res = nack(d1)
		wait(entered["m1"])
		cancel()
		time.Sleep(200 * time.Millisecond) // the partition is released
		close(release["m1"])
		require.NoError(t, <-res)
		require.ErrorIs(t, <-done, context.Canceled)
		require.NoError(t, c.Close(ctx))

		c2 := newClient(t, append(opts, group...)...)
		cctx2, cancel2 := context.WithCancel(ctx)
		defer cancel2()
		consume(c2, cctx2, func(_ context.Context, d *Delivery) error {
			ds <- d
			return d.Ack()
		})
		next("m2")
		rmu.Lock()
		defer rmu.Unlock()
		require.Equal(t, map[string]int{"m0": 1, "m1": 1}, rejected)
	})
}
