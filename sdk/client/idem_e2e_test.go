package client

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/faultnet"
	"github.com/metaq-go/metaq/internal/queuecheck"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// idemMessages is how many messages the idempotence tests send:
// METAQ_IDEM_MESSAGES (make soak: 10000), else 2000 (make test).
func idemMessages(t *testing.T) int {
	if s := os.Getenv("METAQ_IDEM_MESSAGES"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		return n
	}
	return 2000
}

// idemHistory records an idempotent producer's sends and checks the
// partitions against them.
type idemHistory struct {
	mu    sync.Mutex
	h     *queuecheck.History
	acked map[string]bool
	sent  int
}

func newIdemHistory() *idemHistory {
	return &idemHistory{h: queuecheck.New(), acked: map[string]bool{}}
}

// produce sends n messages "v<i>" through p, waiting for every outcome.
// Each send must succeed (the produce timeout is long enough for the
// retries); a send answered as stored already (OffsetUnknown) is checked
// by the read alone. Each send is its own producer for queuecheck:
// pipelined sends retried after a lost connection have no order.
func (ih *idemHistory) produce(t *testing.T, ctx context.Context, p *Client, n int) {
	var wg sync.WaitGroup
	for i := range n {
		ih.send(t, ctx, p, &wg, &message.Message{Topic: topic, Body: []byte(fmt.Sprintf("v%06d", i))})
	}
	wg.Wait()
}

// send produces m, whose body is its value, through p and records its
// outcome as produce does; wg is done once it is recorded.
func (ih *idemHistory) send(t *testing.T, ctx context.Context, p *Client, wg *sync.WaitGroup, m *message.Message) {
	v := string(m.Body)
	wg.Add(1)
	p.Produce(ctx, m, func(r SendResult, err error) {
		defer wg.Done()
		ih.mu.Lock()
		defer ih.mu.Unlock()
		ih.sent++
		part := strconv.Itoa(int(r.Partition))
		switch {
		case err != nil:
			t.Errorf("send %s: %v", v, err)
			ih.h.Send(v, part, v, queuecheck.Unknown, 0)
		case r.OffsetUnknown:
			ih.h.Send(v, part, v, queuecheck.Unknown, 0)
			ih.acked[v] = true
		default:
			ih.h.Send(v, part, v, queuecheck.Acked, r.Offset)
			ih.acked[v] = true
		}
	})
}

// readStored reads partition p of topic through raw from its start,
// calling fn with each message, and returns the offset past the last.
func readStored(t *testing.T, raw *rawConn, p int, fn func(message.Message)) int64 {
	off := int64(0)
	for {
		kind, code, b := raw.do(fmt.Sprintf("get %s g %d %d %d 3", topic, p, off, 1<<20), nil)
		if kind == "result" {
			require.Equal(t, 404, code, string(b))
			return off
		}
		it := message.NewIterator(b, off, 0)
		for it.Next() {
			m, err := it.Record().Message(topic, int32(p))
			require.NoError(t, err)
			fn(m)
		}
		require.NoError(t, it.Err())
		require.Positive(t, it.Consumed())
		off = it.NextOffset()
	}
}

// check reads every partition of the broker at addr from its start and
// requires each value sent exactly once, at its acknowledged offset.
func (ih *idemHistory) check(t *testing.T, addr string, partitions, n int) {
	raw := dialRaw(t, addr)
	seen := map[string]int{}
	for p := range partitions {
		end := readStored(t, raw, p, func(m message.Message) {
			ih.h.Read(strconv.Itoa(p), m.Offset, string(m.Body))
			seen[string(m.Body)]++
		})
		ih.h.ReadEnd(strconv.Itoa(p), end)
	}
	rep := ih.h.Check()
	require.True(t, rep.OK(), rep.String())
	require.Len(t, ih.acked, n, "every send succeeded")
	for i := range n {
		v := fmt.Sprintf("v%06d", i)
		require.Equal(t, 1, seen[v], "value %s stored %d times", v, seen[v])
	}
	require.Len(t, seen, n)
}

// TestIdempotentDroppedReplies: a producer whose replies are lost with
// their connection (internal/faultnet's DropReplies) retries every put it
// had in flight; over 16 partitions, single puts and batched mputs, each
// message is stored exactly once (queuecheck: no duplicate, no loss, every
// acknowledged offset right).
func TestIdempotentDroppedReplies(t *testing.T) {
	t.Parallel()
	for _, batched := range []bool{false, true} {
		t.Run(map[bool]string{false: "put", true: "mput"}[batched], func(t *testing.T) {
			t.Parallel()
			b := startBroker(t, func(c *conf.Config) { c.NumPartitions = 16 })
			proxy, err := faultnet.Start(b.addr)
			require.NoError(t, err)
			defer proxy.Close()
			proxy.DropReplies(3)
			opts := []Opt{Brokers(proxy.Addr()), ProduceTimeout(2 * time.Minute), quietLog}
			if batched {
				opts = append(opts, Batching(16, 1<<20, time.Millisecond))
			}
			p := newClient(t, opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			n := idemMessages(t)
			ih := newIdemHistory()
			ih.produce(t, ctx, p, n)
			require.Positive(t, proxy.Dropped(), "no reply was dropped")
			t.Logf("%d messages, %d replies dropped", n, proxy.Dropped())
			ih.check(t, b.addr, 16, n)
		})
	}
}

// TestIdempotentRetriesLandInTurn: the first copies of 40 messages of one
// producer (one partition) are lost with their connection, so all 40 are
// retried at once, in no particular order. The broker stores a producer's
// sequences only in order: it refuses a retry past the next one as out of
// order, and the SDK resends it with its binding for a grace (500 ms
// here) while the earlier ones land. With resends at the pauses only
// (pinPause; pausesOnly turns off the resend when a retry's turn comes,
// TestIdempotentRetriesResendInTurn), they land one or two per round of
// resends, and the whole chain takes longer than the grace; a retry still
// waits as long as its producer's earlier retries keep landing, and each
// message is stored once. TestIdempotentFailover failed so 1 run in 20:
// ~140 retries per partition queued at the promoted slave, and under load
// the later ones gave up while the earlier ones were still landing; none
// of them was stored.
func TestIdempotentRetriesLandInTurn(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	fn := startFaultyNet(t, b.addr)
	p := newClient(t, Brokers(fn.addr()), ProduceTimeout(time.Minute), optFunc(func(c *config) {
		c.prodOpts = append(c.prodOpts, producerOpt(func(pc *producerConfig) { pc.grace, pc.pausesOnly = 500*time.Millisecond, true }))
	}))
	const n = 41
	ih, _ := loseTogether(t, p, fn, n)
	ih.check(t, b.addr, 4, n)
}

// loseTogether sends message 0 of one producer through fn (so the broker
// knows the producer), then n-1 more, held by fn and lost with their
// connection, and waits until every send has completed (retried). It
// returns the history and how long the retries took from the cut.
func loseTogether(t *testing.T, p *Client, fn *faultyNet, n int) (*idemHistory, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ih := newIdemHistory()
	key := []byte("k") // one partition, so one producer id
	var wg sync.WaitGroup
	ih.send(t, ctx, p, &wg, &message.Message{Topic: topic, Key: key, Body: []byte("v000000")})
	wg.Wait()
	fn.holdAll()
	for i := 1; i < n; i++ {
		ih.send(t, ctx, p, &wg, &message.Message{Topic: topic, Key: key, Body: []byte(fmt.Sprintf("v%06d", i))})
	}
	require.Eventually(t, func() bool { return fn.count(protocol.OpPut) == n }, 10*time.Second, time.Millisecond)
	fn.holdIf(nil)
	start := time.Now()
	fn.cut() // the held puts are lost
	wg.Wait()
	return ih, time.Since(start)
}

// TestIdempotentRetriesResendInTurn: as TestIdempotentRetriesLandInTurn,
// with 100 retries of one producer lost together. A retry refused as out
// of order is resent as soon as the retry before it (its sequence - 1) is
// stored, not only at its next pause (pinPause): the chain lands one
// round trip per sequence, and the broker refuses few resends. Each retry
// was resent at every pause until its turn came: about n²/4 puts in all
// (2,300 to 2,600 for 100, in 2.5 s); now about 2n (200 to 260, in
// 0.15 s). The bound, n²/8, leaves room for a loaded machine, whose
// slower round trips let more pauses end while the chain lands.
func TestIdempotentRetriesResendInTurn(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	fn := startFaultyNet(t, b.addr)
	p := newClient(t, Brokers(fn.addr()), ProduceTimeout(time.Minute))
	const n = 101
	ih, took := loseTogether(t, p, fn, n)
	resends := fn.count(protocol.OpPut) - n
	t.Logf("%d retries landed in %v with %d puts", n-1, took.Round(time.Millisecond), resends)
	ih.check(t, b.addr, 4, n)
	require.Less(t, resends, (n-1)*(n-1)/8, "retries resent at every pause rather than in turn")
}

// TestIdempotentForgottenProducer: the broker forgets the producer while
// its replies are lost (idempotent_producers = 2 per partition, four other
// clients churning the tables, every third reply chunk dropped with its
// connection). A retry the broker can no longer judge is not resent: it
// fails with ErrOutcomeUnknown. No value is stored twice, and every
// acknowledged one is stored once, at its offset.
func TestIdempotentForgottenProducer(t *testing.T) {
	t.Parallel()
	const parts = 2
	b := startBroker(t, func(c *conf.Config) { c.NumPartitions = parts; c.IdempotentProducers = 2 })
	proxy, err := faultnet.Start(b.addr)
	require.NoError(t, err)
	defer proxy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	stop := make(chan struct{})
	var churn sync.WaitGroup
	for i := range 4 {
		c := newClient(t, Brokers(b.addr), quietLog)
		churn.Add(1)
		go func() {
			defer churn.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				_, err := c.ProduceSync(ctx, &message.Message{Topic: topic, Body: []byte(fmt.Sprintf("c%d-%d", i, j))})
				if err != nil && ctx.Err() == nil {
					t.Errorf("churn: %v", err)
					return
				}
			}
		}()
	}
	defer func() { close(stop); churn.Wait() }()

	proxy.DropReplies(3)
	p := newClient(t, Brokers(proxy.Addr()), ProduceTimeout(30*time.Second), quietLog)
	const n = 300
	type outcome struct {
		res SendResult
		err error
	}
	outs := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		p.Produce(ctx, &message.Message{Topic: topic, Body: []byte(fmt.Sprintf("v%06d", i))}, func(r SendResult, err error) {
			defer wg.Done()
			outs[i] = outcome{r, err}
		})
		if i%10 == 9 {
			time.Sleep(5 * time.Millisecond) // a few seconds in all under -race: the churn interleaves
		}
	}
	wg.Wait()
	require.Positive(t, proxy.Dropped(), "no reply was dropped")

	// Read every partition: value -> count, and each partition's offsets.
	raw := dialRaw(t, b.addr)
	seen := map[string]int{}
	at := map[[2]int64]string{}
	for part := range parts {
		off := int64(0)
		for {
			kind, code, body := raw.do(fmt.Sprintf("get %s g %d %d %d 3", topic, part, off, 1<<20), nil)
			if kind == "result" {
				require.Equal(t, 404, code, string(body))
				break
			}
			it := message.NewIterator(body, off, 0)
			for it.Next() {
				m, err := it.Record().Message(topic, int32(part))
				require.NoError(t, err)
				seen[string(m.Body)]++
				at[[2]int64{int64(part), m.Offset}] = string(m.Body)
			}
			require.NoError(t, it.Err())
			require.Positive(t, it.Consumed())
			off = it.NextOffset()
		}
	}
	acked, unknown, stored := 0, 0, 0
	for i, o := range outs {
		v := fmt.Sprintf("v%06d", i)
		require.LessOrEqual(t, seen[v], 1, "value %s stored %d times", v, seen[v])
		stored += seen[v]
		switch {
		case o.err != nil:
			require.ErrorIs(t, o.err, ErrOutcomeUnknown, "send %s", v)
			unknown++
		case o.res.OffsetUnknown:
			require.Equal(t, 1, seen[v], "value %s acknowledged as stored", v)
			acked++
		default:
			require.Equal(t, 1, seen[v], "value %s acknowledged", v)
			require.Equal(t, v, at[[2]int64{int64(o.res.Partition), o.res.Offset}], "value %s's offset", v)
			acked++
		}
	}
	t.Logf("%d sent: %d acknowledged, %d outcome unknown (%d stored in all); %d replies dropped",
		n, acked, unknown, stored, proxy.Dropped())
}

// TestIdempotentDelayedDroppedReplies: delayed messages sent while their
// replies are lost with their connection (DropReplies) are retried by the
// idempotent producer and held once each (docs/delayed.md, "Retries and
// the idempotent producer"): every one is delivered exactly once, with the
// msgId its send returned, and the broker's timer accepted each once.
func TestIdempotentDelayedDroppedReplies(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	proxy, err := faultnet.Start(b.addr)
	require.NoError(t, err)
	defer proxy.Close()
	proxy.DropReplies(3)
	p := newClient(t, Brokers(proxy.Addr()), ProduceTimeout(time.Minute), quietLog)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 120
	var mu sync.Mutex
	ids := map[string]int64{}
	var wg sync.WaitGroup
	for i := range n {
		v := fmt.Sprintf("d%04d", i)
		wg.Add(1)
		p.Produce(ctx, &message.Message{Topic: topic, Body: []byte(v), Delay: 300 * time.Millisecond}, func(r SendResult, err error) {
			defer wg.Done()
			if err != nil {
				t.Errorf("send %s: %v", v, err)
				return
			}
			mu.Lock()
			ids[v] = r.ID // -1 when answered as held already, its msgId unknown
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Positive(t, proxy.Dropped(), "no reply was dropped")
	raw := dialRaw(t, b.addr)
	seen := map[string]int64{}
	count := map[string]int{}
	require.Eventually(t, func() bool {
		clear(seen)
		clear(count)
		for part := range 4 {
			off := int64(0)
			for {
				kind, code, body := raw.do(fmt.Sprintf("get %s g %d %d %d 3", topic, part, off, 1<<20), nil)
				if kind == "result" {
					require.Equal(t, 404, code, string(body))
					break
				}
				it := message.NewIterator(body, off, 0)
				for it.Next() {
					m, err := it.Record().Message(topic, int32(part))
					require.NoError(t, err)
					seen[string(m.Body)] = m.ID
					count[string(m.Body)]++
				}
				require.Positive(t, it.Consumed())
				off = it.NextOffset()
			}
		}
		return len(seen) == n
	}, 30*time.Second, 50*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // nothing more comes
	for v, id := range ids {
		require.Equal(t, 1, count[v], "%s delivered %d times", v, count[v])
		if id > 0 {
			require.Equal(t, id, seen[v], "%s delivered with the msgId its send returned", v)
		}
	}
	st, err := brokerStats(ctx, b.addr, "delayed")
	require.NoError(t, err)
	require.Contains(t, statsLines(st), fmt.Sprintf("accepted %d", n), "each held once")
	t.Logf("%d delayed messages, %d replies dropped", n, proxy.Dropped())
}

// TestGraceFor: a retry refused as of an unknown producer is resent for a
// quarter of its send's time left, at least unknownGrace (and without a
// deadline), at most maxUnknownGrace.
func TestGraceFor(t *testing.T) {
	now := time.Now()
	require.Equal(t, unknownGrace, graceFor(now, time.Time{}, false))
	require.Equal(t, unknownGrace, graceFor(now, now.Add(10*time.Second), true))
	require.Equal(t, 7500*time.Millisecond, graceFor(now, now.Add(30*time.Second), true))
	require.Equal(t, maxUnknownGrace, graceFor(now, now.Add(2*time.Minute), true))
}

// TestRetryOutcome: a retry refused as out of order is not bound again
// (ErrOutcomeUnknown: its earlier copy may still land) unless it lies past
// a sequence of its producer that was bound again under a new id (renew),
// which the broker never stores under the old one; a first attempt's
// refusal is bound again as before.
func TestRetryOutcome(t *testing.T) {
	ooo := &BrokerError{Code: 500, Cause: protocol.CauseOutOfOrderSequence, Msg: "out of order sequence: ..."}
	require.True(t, renewable(retryOutcome(ooo, false, false)), "first attempt")
	require.ErrorIs(t, retryOutcome(ooo, true, false), ErrOutcomeUnknown)
	require.False(t, renewable(retryOutcome(ooo, true, false)))
	require.True(t, renewable(retryOutcome(ooo, true, true)), "past a hole")

	p := &brokerProducer{cfg: producerConfig{idempotent: true}, holes: new(idemHoles)}
	a := &message.Message{Topic: topic}
	p.bind(a, 0) // sequence 0
	b := &message.Message{Topic: topic}
	p.bind(b, 0) // 1
	c := &message.Message{Topic: topic}
	p.bind(c, 0) // 2
	pid := b.ProducerID
	require.False(t, p.pastHole(c))
	p.renew(b, 0) // b's first attempt refused: 1 is a hole of pid
	require.Zero(t, b.ProducerID)
	require.True(t, p.pastHole(c), "2 lies past the hole at 1")
	require.False(t, p.pastHole(a), "0 lies before it")
	p.bind(b, 0)
	require.NotEqual(t, pid, b.ProducerID)
	require.Zero(t, b.ProducerSeq)
}
