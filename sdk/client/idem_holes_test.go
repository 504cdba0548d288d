package client

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
	"github.com/metaq-go/metaq/sdk/selector"
)

// staticView is a topic view a test sets: broker 0 at one address with
// partitions 0..n-1. A failover is a set to another address.
type staticView struct {
	snap    atomic.Pointer[cluster.Snapshot]
	ready   chan struct{}
	changes chan struct{}
}

func newStaticView(addr string, parts int) *staticView {
	v := &staticView{ready: make(chan struct{}), changes: make(chan struct{}, 1)}
	close(v.ready)
	v.set(addr, parts)
	return v
}

// set lists broker 0 at addr with parts partitions (no change is
// signalled: the producer keeps its connections).
func (v *staticView) set(addr string, parts int) {
	s := &cluster.Snapshot{Addrs: map[int]string{0: addr}, Brokers: map[int]cluster.Broker{0: {ID: 0, Addr: addr}}}
	for i := range parts {
		s.Partitions = append(s.Partitions, message.Partition{BrokerID: 0, Partition: int32(i)})
	}
	v.snap.Store(s)
}

func (v *staticView) Wait(context.Context) error      { return nil }
func (v *staticView) Snapshot() *cluster.Snapshot     { return v.snap.Load() }
func (v *staticView) Partitions() []message.Partition { return v.snap.Load().Partitions }
func (v *staticView) Ready() <-chan struct{}          { return v.ready }
func (v *staticView) Changes() <-chan struct{}        { return v.changes }
func (v *staticView) watchPublish(string) topicView   { return v }
func (v *staticView) where() string                   { return "in the test's view" }
func (v *staticView) close() error                    { return nil }

// newStaticProducer is an idempotent clusterProducer over v, with a 30 s
// send timeout and a 300 ms grace.
func newStaticProducer(t *testing.T, v *staticView, opts ...prodOption) *clusterProducer {
	opts = append([]prodOption{quiet, withIdempotence(true), withSendTimeout(30 * time.Second),
		producerOpt(func(c *producerConfig) { c.grace = 300 * time.Millisecond })}, opts...)
	cfg := newProducerConfig(opts)
	cfg.maxInFlight = 64
	cp := newClusterProducer(cfg, opts, v)
	t.Cleanup(func() { _ = cp.Close(context.Background()) })
	return cp
}

// storedValues reads partitions 0..parts-1 of topic at addr: body -> count.
func storedValues(t *testing.T, addr string, parts int) map[string]int {
	raw := dialRaw(t, addr)
	seen := map[string]int{}
	for p := range parts {
		readStored(t, raw, p, func(m message.Message) { seen[string(m.Body)]++ })
	}
	return seen
}

// asyncResults collects SendAsync outcomes by body.
type asyncResults struct {
	mu   sync.Mutex
	errs map[string]error
	wg   sync.WaitGroup
}

func (r *asyncResults) send(ctx context.Context, cp *clusterProducer, body string) {
	r.wg.Add(1)
	cp.SendAsync(ctx, &message.Message{Topic: topic, Body: []byte(body)}, func(_ SendResult, err error) {
		defer r.wg.Done()
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.errs == nil {
			r.errs = map[string]error{}
		}
		r.errs[body] = err
	})
}

func (r *asyncResults) err(body string) (error, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	err, ok := r.errs[body]
	return err, ok
}

// TestIdempotentHoleFollowsFailover: a producer's sequence bound again
// under a new id (a hole) is recorded where every broker of the
// clusterProducer sees it. Sequences 1..3 of one producer go out on one
// connection; only 2 reaches the broker, which refuses it as out of
// order (1 is missing), so 2 is bound again under a new id: a hole at 2.
// Then the partition fails over to another address (the same broker
// behind a second proxy) and 1 and 3, lost with the first connection, are
// retried there: 1 lands, 3 is refused as out of order (2 never comes),
// and lies past the hole, so it is bound again and stored. Recorded only
// on the first address's brokerProducer, the hole was not seen there: 3
// waited out its grace and failed with ErrOutcomeUnknown, unstored.
func TestIdempotentHoleFollowsFailover(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	fn1, fn2 := startFaultyNet(t, b.addr), startFaultyNet(t, b.addr)
	v := newStaticView(fn1.addr(), 4)
	cp := newStaticProducer(t, v, withSelector(selector.Fixed(0)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := cp.Send(ctx, &message.Message{Topic: topic, Body: []byte("a-body")}) // sequence 0
	require.NoError(t, err)

	fn1.holdAll()
	var r asyncResults
	for _, body := range []string{"x-body", "w-body", "v-body"} { // sequences 1, 2, 3
		r.send(ctx, cp, body)
	}
	require.Eventually(t, func() bool { return fn1.held() == 3 }, 10*time.Second, time.Millisecond)
	fn1.pass(func(f []byte) bool { return bytes.Contains(f, []byte("w-body")) })
	require.Eventually(t, func() bool { _, ok := r.err("w-body"); return ok }, 10*time.Second, time.Millisecond)
	werr, _ := r.err("w-body")
	require.NoError(t, werr, "w bound again and stored")

	v.set(fn2.addr(), 4) // the failover
	fn1.cut()            // x and v are lost with the connection
	r.wg.Wait()
	for _, body := range []string{"x-body", "v-body"} {
		err, _ := r.err(body)
		require.NoError(t, err, "send %s", body)
	}
	seen := storedValues(t, b.addr, 4)
	require.Equal(t, map[string]int{"a-body": 1, "x-body": 1, "w-body": 1, "v-body": 1}, seen)
}

// TestIdempotentRetryKeepsItsPartition: a retry whose partition is gone
// from its broker ("partition out of range": here a failover to a broker
// with 2 partitions of the topic, not 4) fails with ErrOutcomeUnknown: its
// first copy, whose reply was lost, is stored in that partition on the
// old broker, and sent to another partition it was stored twice (it was,
// before: the refusal unbound it and the selector chose again).
func TestIdempotentRetryKeepsItsPartition(t *testing.T) {
	t.Parallel()
	bA := startBroker(t)
	bC := startBroker(t, func(c *conf.Config) { c.NumPartitions = 2 })
	fnA := startFaultyNet(t, bA.addr)
	v := newStaticView(fnA.addr(), 4)
	var moved atomic.Bool
	sel := selector.Func(func(_ context.Context, _ string, _ []message.Partition, _ *message.Message) (int, error) {
		if moved.Load() {
			return 0, nil
		}
		return 3, nil
	})
	cp := newStaticProducer(t, v, withSelector(sel))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := cp.Send(ctx, &message.Message{Topic: topic, Body: []byte("a-body")}) // connected; sequence 0 of partition 3
	require.NoError(t, err)

	fnA.holdAll()
	fnA.deafen()
	var r asyncResults
	r.send(ctx, cp, "m-body")
	require.Eventually(t, func() bool { return fnA.held() == 1 }, 10*time.Second, time.Millisecond)
	fnA.release() // stored, its reply lost
	require.Eventually(t, func() bool { return storedValues(t, bA.addr, 4)["m-body"] == 1 }, 10*time.Second, 10*time.Millisecond)
	v.set(bC.addr, 4) // broker 0 fails over to a broker without partitions 2 and 3
	moved.Store(true)
	fnA.cut()
	r.wg.Wait()
	err, _ = r.err("m-body")
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.Equal(t, protocol.CausePartitionOutOfRange, sendCause(err))
	require.Empty(t, storedValues(t, bC.addr, 2), "the retry was stored elsewhere")
	require.Equal(t, map[string]int{"a-body": 1, "m-body": 1}, storedValues(t, bA.addr, 4))
}

// TestIdempotentOutOfRangeHole: a first attempt refused as of a partition
// its broker does not have (nothing of it stored) leaves its sequence a
// hole of its producer id, and the partition starts over under a new id
// (renew), as for an out-of-order refusal: a retry of that id past it,
// refused as out of order once the partition is back, is bound again
// instead of waiting out its grace.
func TestIdempotentOutOfRangeHole(t *testing.T) {
	t.Parallel()
	b := startBroker(t, func(c *conf.Config) { c.NumPartitions = 2 })
	v := newStaticView(b.addr, 4) // a stale view: partitions 2 and 3 are not there
	var calls atomic.Int32
	sel := selector.Func(func(_ context.Context, _ string, _ []message.Partition, _ *message.Message) (int, error) {
		if calls.Add(1) == 1 {
			return 3, nil
		}
		return 0, nil
	})
	cp := newStaticProducer(t, v, withSelector(sel))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := &message.Message{Topic: topic, Body: []byte("m-body")}
	res, err := cp.Send(ctx, m)
	require.NoError(t, err)
	require.Equal(t, int32(0), res.Partition)
	p, err := cp.broker(b.addr)
	require.NoError(t, err)
	p.smu.Lock()
	st := p.seqs[tpKey{topic, 3}]
	p.smu.Unlock()
	require.NotNil(t, st)
	require.Zero(t, st.next, "partition 3 starts over under a new id")
	p.holes.mu.Lock()
	defer p.holes.mu.Unlock()
	require.Len(t, p.holes.m, 1, "sequence 0 of partition 3's first id is a hole")
	for id, seq := range p.holes.m {
		require.NotEqual(t, st.pid, id)
		require.Zero(t, seq)
	}
}
