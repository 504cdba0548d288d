package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/internal/backoff"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// withRetryOnFailure decides whether a clusterProducer retries a send that
// failed on a broker (connection refused or lost, 403 partition closed,
// 5xx) on another partition, for as long as the send timeout allows.
// Default true.
//
// Retrying changes the partition, and a send whose connection was lost may
// have been stored, so a retry can duplicate it (at least once), unless
// the idempotent producer is on (the default, idem.go): then a retry of a
// message that went out stays on its partition with its sequence, and the
// broker stores it once. Turn it
// off for ordered sends (a Fixed or key-hashing selector): a failed send
// then fails, with one attempt, as in MetaQ. For MetaQ's ordered producer,
// which keeps such messages in a local on-disk store and resends them in
// order when the partition is back, use openOrderedProducer (it turns
// retries off).
func withRetryOnFailure(retry bool) prodOption {
	return producerOpt(func(c *producerConfig) { c.noRetry = !retry })
}

// clusterProducer sends messages to the brokers of a MetaQ cluster, which
// it discovers from ZooKeeper: for each topic it watches the masters'
// topics-pub nodes (package cluster) and the selector chooses among the
// cluster-wide partition list, sorted by (brokerId, partition) as in
// MetaQ: it gets the length of the list, and index i is the list's i-th
// (broker, partition). Brokers that appear are used and brokers that
// vanish are dropped with no restart. Each broker gets one pipelined
// connection.
//
// Options are those of newBrokerProducer, plus withZKRoot, withZKSessionTimeout
// and withRetryOnFailure. withBatching batches each broker's messages per
// partition into mput requests. withTopicPartitions does not apply:
// partitions come from ZooKeeper. It is safe for concurrent use.
type clusterProducer struct {
	cfg  producerConfig
	opts []prodOption
	src  viewSource
	sem  chan struct{}
	cbs  *callbackQueue

	// viewsRO is a copy of views for lookups without the lock (copied on
	// each new topic).
	viewsRO atomic.Pointer[map[string]topicView]

	mu      sync.Mutex
	closed  bool
	views   map[string]topicView
	unready map[string]bool            // topics whose first reading a sender waited for in vain
	brokers map[string]*brokerProducer // by address
	down    map[string]downState       // brokers whose connection failed lately
	// progress is when a retry of each idempotent producer was last
	// stored (sendWith's grace runs from it).
	progress idemProgress
	// inflight counts messages from acceptance to completion.
	inflight  sync.WaitGroup
	done      chan struct{}
	bg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

type downState struct {
	until    time.Time
	failures int
}

// newClusterProducer returns a producer over the partitions src lists.
func newClusterProducer(cfg producerConfig, opts []prodOption, src viewSource) *clusterProducer {
	// Its brokers share one table of holes: a retry's partition moves
	// between them (idemHoles).
	opts = append(slices.Clip(opts), withHoles(new(idemHoles)))
	return &clusterProducer{cfg: cfg, opts: opts, src: src, sem: make(chan struct{}, cfg.maxInFlight), cbs: newCallbackQueue(),
		views: make(map[string]topicView), unready: make(map[string]bool), brokers: make(map[string]*brokerProducer),
		down: make(map[string]downState), done: make(chan struct{})}
}

// view returns topic's view, watching it on first use.
func (cp *clusterProducer) view(topic string) topicView {
	if ro := cp.viewsRO.Load(); ro != nil {
		if v, ok := (*ro)[topic]; ok {
			return v
		}
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if v, ok := cp.views[topic]; ok {
		return v
	}
	v := cp.src.watchPublish(topic)
	cp.views[topic] = v
	ro := maps.Clone(cp.views)
	cp.viewsRO.Store(&ro)
	cp.bg.Add(1)
	go func() {
		defer cp.bg.Done()
		for {
			select {
			case <-v.Changes():
				cp.prune()
			case <-cp.done:
				return
			}
		}
	}()
	return v
}

// prune closes the connections of brokers that no watched topic lists.
func (cp *clusterProducer) prune() {
	cp.mu.Lock()
	live := make(map[string]bool)
	for _, v := range cp.views {
		for _, a := range v.Snapshot().Addrs {
			live[a] = true
		}
	}
	var gone []*brokerProducer
	for a, p := range cp.brokers {
		if !live[a] {
			gone = append(gone, p)
			delete(cp.brokers, a)
			delete(cp.down, a)
		}
	}
	cp.mu.Unlock()
	for _, p := range gone {
		cp.cfg.logger.Info("metaq: broker left the cluster; closing its connection", "addr", p.cn.addr)
		// Let its sends in flight finish (or fail over) first.
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), cp.cfg.sendTimeout)
			defer cancel()
			_ = p.Close(ctx)
		}()
	}
}

// broker returns the producer of the broker at addr, creating it.
func (cp *clusterProducer) broker(addr string) (*brokerProducer, error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.closed {
		return nil, ErrClosed
	}
	if p, ok := cp.brokers[addr]; ok {
		return p, nil
	}
	p, err := newBrokerProducer(addr, cp.opts...)
	if err != nil {
		return nil, err
	}
	cp.brokers[addr] = p
	return p, nil
}

func (cp *clusterProducer) isDown(addr string, now time.Time) bool {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.downLocked(addr, now)
}

// downLocked is isDown with cp.mu held.
func (cp *clusterProducer) downLocked(addr string, now time.Time) bool {
	return now.Before(cp.down[addr].until)
}

func (cp *clusterProducer) markDown(addr string) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	d := cp.down[addr]
	d.failures++
	d.until = time.Now().Add(backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: redialJitter}.Delay(d.failures))
	cp.down[addr] = d
}

func (cp *clusterProducer) markUp(addr string) {
	cp.mu.Lock()
	delete(cp.down, addr)
	cp.mu.Unlock()
}

// Partitions returns topic's partitions as ZooKeeper lists them now,
// sorted by (BrokerID, Partition), waiting (within the send timeout) for
// the first reading.
func (cp *clusterProducer) Partitions(ctx context.Context, topic string) ([]message.Partition, error) {
	ctx, cancel := context.WithTimeout(ctx, cp.cfg.sendTimeout)
	defer cancel()
	v := cp.view(topic)
	if err := v.Wait(ctx); err != nil {
		return nil, fmt.Errorf("metaq: read partitions of %s from ZooKeeper: %w", topic, err)
	}
	return v.Partitions(), nil
}

// errWindowFull: admit without waiting found MaxBufferedMessages
// messages in flight.
var errWindowFull = errors.New("metaq: MaxBufferedMessages messages are in flight")

func (cp *clusterProducer) begin(ctx context.Context, m *message.Message) error {
	return cp.admit(ctx, m, true)
}

// admit admits one message: it takes an in-flight slot, waiting for one
// (within ctx) only if wait is set, else failing with errWindowFull.
func (cp *clusterProducer) admit(ctx context.Context, m *message.Message, wait bool) error {
	unbind(m) // bound afresh when sent (idem.go)
	if err := checkMessage(ctx, m, cp.cfg.maxMessageSize); err != nil {
		return err
	}
	select {
	case cp.sem <- struct{}{}:
	default:
		if !wait {
			return errWindowFull
		}
		select {
		case cp.sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	cp.mu.Lock()
	if cp.closed {
		cp.mu.Unlock()
		<-cp.sem
		return ErrClosed
	}
	cp.inflight.Add(1)
	cp.mu.Unlock()
	return nil
}

func (cp *clusterProducer) end() {
	<-cp.sem
	cp.inflight.Done()
}

// Send sends m and waits for a broker to store it; the result names the
// broker (BrokerID) and partition. The whole send, retries included, is
// bounded by the send timeout. As with brokerProducer.Send, an error wrapping
// ErrTimeout or ErrConnectionLost leaves it unknown whether m was stored.
func (cp *clusterProducer) Send(ctx context.Context, m *message.Message) (SendResult, error) {
	if err := cp.begin(ctx, m); err != nil {
		return SendResult{}, err
	}
	defer cp.end()
	return cp.send(ctx, m)
}

// SendAsync sends m without waiting; cb runs exactly once with the
// outcome, on the producer's callback goroutine, in completion order.
func (cp *clusterProducer) SendAsync(ctx context.Context, m *message.Message, cb func(SendResult, error)) {
	if cb == nil {
		cb = func(SendResult, error) {}
	}
	cp.sendAsync(ctx, m, cb, true)
}

// trySendAsync is SendAsync without waiting for an in-flight slot: it
// reports false, having done nothing, when MaxBufferedMessages messages
// are in flight. Otherwise cb runs as with SendAsync.
func (cp *clusterProducer) trySendAsync(ctx context.Context, m *message.Message, cb func(SendResult, error)) bool {
	return cp.sendAsync(ctx, m, cb, false)
}

func (cp *clusterProducer) sendAsync(ctx context.Context, m *message.Message, cb func(SendResult, error), wait bool) bool {
	if err := cp.admit(ctx, m, wait); err != nil {
		if err == errWindowFull {
			return false
		}
		cp.cbs.push(cb, SendResult{}, err, nil)
		return true
	}
	if cp.sendFast(ctx, m, cb) {
		return true
	}
	go func() {
		res, err := cp.send(ctx, m)
		cp.cbs.push(cb, res, err, cp.end)
	}()
	return true
}

// sendFast is SendAsync's common case, with no goroutine: the topic's
// view is ready and the chosen partition's broker is connected and not
// marked down. It reports false, having sent nothing, when that does not
// hold; then the caller takes the slow path (send). A failed fast send
// is retried by send in a goroutine, within the same deadline.
func (cp *clusterProducer) sendFast(ctx context.Context, m *message.Message, cb func(SendResult, error)) bool {
	// Wait here, in the caller, for the topic's first reading and the
	// broker's connection, so that messages produced one after another
	// keep their order on the partition's connection; only a broker that
	// cannot be reached sends a message to the slow path. Once a caller
	// waited in vain for the first reading (no broker could be asked),
	// the next ones go to the slow path at once instead of each waiting
	// the send timeout.
	v := cp.view(m.Topic)
	select {
	case <-v.Ready():
	default:
		cp.mu.Lock()
		unready := cp.unready[m.Topic]
		cp.mu.Unlock()
		if unready {
			return false
		}
		wctx, cancel := context.WithTimeout(ctx, cp.cfg.sendTimeout)
		err := v.Wait(wctx)
		cancel()
		if err != nil {
			cp.mu.Lock()
			cp.unready[m.Topic] = true
			cp.mu.Unlock()
			return false
		}
	}
	snap := v.Snapshot()
	if len(snap.Partitions) == 0 {
		return false
	}
	i, err := cp.choose(ctx, m, snap.Partitions)
	if err != nil {
		cp.cbs.push(cb, SendResult{}, err, cp.end)
		return true
	}
	t := target{snap.Partitions[i], snap.Addrs[snap.Partitions[i].BrokerID]}
	if t.addr == "" {
		return false
	}
	now := time.Now()
	cp.mu.Lock()
	down, p := cp.downLocked(t.addr, now), cp.brokers[t.addr]
	cp.mu.Unlock()
	if down {
		return false
	}
	if p == nil {
		var err error
		if p, err = cp.broker(t.addr); err != nil {
			return false
		}
	}
	if p.cn.live() == nil {
		cctx, cancel := context.WithTimeout(ctx, cp.cfg.conn.dialTimeout)
		_, err := p.cn.get(cctx)
		cancel()
		if err != nil {
			if !errors.Is(err, ErrClosed) {
				cp.markDown(t.addr)
			}
			return false // the slow path retries elsewhere
		}
		now = time.Now()
	}
	deadline := now.Add(cp.cfg.sendTimeout)
	p.sendAsyncPart(ctx, deadline, m, t.part.Partition, true, func(res SendResult, err error) {
		if err == nil {
			res.BrokerID = t.part.BrokerID
			cp.cbs.push(cb, res, nil, cp.end)
			return
		}
		if errors.Is(err, ErrConnectionLost) {
			cp.markDown(t.addr)
		}
		// A refusal as out of order (or of an unknown producer: this is
		// m's first attempt) stored nothing: resent (bound again) even
		// without retries.
		oo := renewable(err)
		if (!oo && (cp.cfg.noRetry || !retryable(err))) || ctx.Err() != nil || !time.Now().Before(deadline) {
			cp.cbs.push(cb, SendResult{}, err, cp.end)
			return
		}
		cp.outOfOrder(m, t, err)
		pin := cp.pinOf(m, t.part)
		go func() {
			dctx, cancel := context.WithDeadline(ctx, deadline)
			defer cancel()
			res, err := cp.sendWith(dctx, m, t.addr, err, pin)
			cp.cbs.push(cb, res, err, cp.end)
		}()
	})
	return true
}

// target is one candidate partition with its broker's address.
type target struct {
	part message.Partition
	addr string
}

// send makes the attempts of one message.
func (cp *clusterProducer) send(ctx context.Context, m *message.Message) (SendResult, error) {
	ctx, cancel := context.WithTimeout(ctx, cp.cfg.sendTimeout)
	defer cancel()
	return cp.sendWith(ctx, m, "", nil, nil)
}

// pinOf returns the partition a retry of m must go to: with idempotence,
// the one m's sequence was bound in (the broker deduplicates a retry
// there), or nil when m is not bound (nothing of it was sent).
func (cp *clusterProducer) pinOf(m *message.Message, part message.Partition) *message.Partition {
	if !cp.cfg.idempotent || m.ProducerID == 0 {
		return nil
	}
	return &part
}

// pinned returns the target of partition pin in snap ("" addr: not
// listed now, as while its broker restarts or fails over).
func pinned(snap *cluster.Snapshot, pin *message.Partition) target {
	for _, p := range snap.Partitions {
		if p == *pin {
			return target{p, snap.Addrs[p.BrokerID]}
		}
	}
	return target{part: *pin}
}

// unknownGrace is how long at least a retry the broker refuses as of an
// unknown producer is resent with its binding (every pinPause) before the
// send fails with ErrOutcomeUnknown (sendWith); graceFor gives it more
// of a longer send's time.
const unknownGrace = 5 * time.Second

// maxUnknownGrace bounds graceFor.
const maxUnknownGrace = 30 * time.Second

// graceFor is the grace of a retry first refused as of an unknown
// producer at now, in a send that ends at deadline (none: unknownGrace):
// a quarter of the time left, at least unknownGrace, at most
// maxUnknownGrace. The earlier message that would make the producer known
// is retried through the same faults (connections lost, a broker marked
// down, pauses): on a loaded machine 5 s did not always let it through
// (TestIdempotentDroppedReplies failed 2 runs in 4 under -race at load
// average 19), and a longer wait stores nothing twice.
func graceFor(now time.Time, deadline time.Time, ok bool) time.Duration {
	if !ok {
		return unknownGrace
	}
	return min(max(deadline.Sub(now)/4, unknownGrace), maxUnknownGrace)
}

// graceFor is the package's graceFor unless the configuration sets a
// grace.
func (cp *clusterProducer) graceFor(now time.Time, deadline time.Time, ok bool) time.Duration {
	if cp.cfg.grace > 0 {
		return cp.cfg.grace
	}
	return graceFor(now, deadline, ok)
}

// pinPause is the pause before an idempotent retry on its partition: a
// broker that restarts or fails over is not asked in a tight loop.
const pinPause = 50 * time.Millisecond

// idemProgress is, per idempotent producer id, when a retry of one of its
// messages was last stored (sendWith), the highest sequence so stored,
// and the retries of it waiting for their turn (wait). A retry that the
// broker refuses as out of order, or as of an unknown producer, waits for
// the producer's earlier messages, retried after the same failure; the
// broker stores them one sequence at a time, in order. A retry past the
// next one is resent when the retry before it (its sequence - 1) is
// stored, or at its next pause (pinPause), whichever comes first: a chain
// of n retries lands about one round trip per sequence. At its pauses
// alone it landed in about n/2 rounds of resends, each retry resent at
// every one (TestIdempotentRetriesResendInTurn: 2,300 to 2,600 puts, 2.5
// s, for 100 retries). Only the retry whose turn came is woken, not all
// of the producer's: a store wakes one waiter, not n.
//
// While the chain lands, a waiting retry's grace runs from the last of
// them stored, not from its own first refusal: at TestIdempotentFailover's
// promoted slave ~140 retries per partition queued so, and under load (1
// run in 20) the later ones gave up, their grace spent, while the earlier
// ones were still landing; none of them was stored. The wait is still
// bounded by the send's timeout, and by the grace once the chain stops; a
// resend with its binding stores nothing twice.
type idemProgress struct {
	mu sync.Mutex
	at map[int64]*progressEntry
}

// progressEntry is idemProgress's of one producer id.
type progressEntry struct {
	at      time.Time               // last retry stored (zero: none lately)
	seq     int64                   // highest sequence of a stored retry (-1: none)
	waiting map[int64]chan struct{} // closed when the sequence's turn comes, by sequence
}

// maxProgress bounds idemProgress: past it, entries older than
// maxUnknownGrace go (no grace runs from them any more), then all
// (forgetting only ends a wait sooner, or makes a retry wait for its
// pause).
const maxProgress = 4096

// entryLocked returns id's entry, made if need be.
func (g *idemProgress) entryLocked(id int64, now time.Time) *progressEntry {
	if e := g.at[id]; e != nil {
		return e
	}
	if len(g.at) >= maxProgress {
		maps.DeleteFunc(g.at, func(_ int64, e *progressEntry) bool { return now.Sub(e.at) > maxUnknownGrace })
		if len(g.at) >= maxProgress {
			clear(g.at)
		}
	}
	if g.at == nil {
		g.at = make(map[int64]*progressEntry)
	}
	e := &progressEntry{seq: -1}
	g.at[id] = e
	return e
}

// stored notes that a retry of sequence seq of producer id was stored at
// now, and wakes the retry of seq + 1 (and of any sequence between the
// highest stored before and it), if one waits.
func (g *idemProgress) stored(id, seq int64, now time.Time) {
	if id == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.entryLocked(id, now)
	e.at = now
	if seq <= e.seq {
		return
	}
	lo, hi := e.seq+1, seq+1
	e.seq = seq
	wake := func(k int64) {
		if ch, ok := e.waiting[k]; ok {
			close(ch)
			delete(e.waiting, k)
		}
	}
	if hi-lo < int64(len(e.waiting)) {
		for k := lo; k <= hi; k++ {
			wake(k)
		}
		return
	}
	for k := range e.waiting {
		if k >= lo && k <= hi {
			wake(k)
		}
	}
}

// last returns when a retry of producer id was last stored (zero: not
// lately).
func (g *idemProgress) last(id int64) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.at[id]; e != nil {
		return e.at
	}
	return time.Time{}
}

// mark returns the highest sequence of producer id stored by a retry (-1:
// none known), for wait's seen: taken before a retry's attempt.
func (g *idemProgress) mark(id int64) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.at[id]; e != nil {
		return e.seq
	}
	return -1
}

// noMark is a seen of wait before any mark: no store is known to have
// come after the retry's last attempt.
const noMark = int64(math.MaxInt64)

// wait pauses a retry of sequence seq of producer id (0: none) for d,
// until ctx is done (its error), or until its turn comes: a retry of the
// producer at seq - 1 is stored (or a later one). seen is the highest
// sequence stored when the retry's last attempt was sent (mark): if one
// was stored since that makes it the retry's turn, it does not pause.
// Each store lets a retry skip at most one pause, so a retry the broker
// refuses in its turn (it forgot the producer) is not resent in a loop.
func (g *idemProgress) wait(ctx context.Context, id, seq, seen int64, d time.Duration) error {
	var turn <-chan struct{}
	if id != 0 {
		g.mu.Lock()
		e := g.entryLocked(id, time.Now())
		if e.seq > seen && e.seq >= seq-1 {
			g.mu.Unlock()
			return nil
		}
		ch := e.waiting[seq] // a message's binding is its own: shared only in error
		if ch == nil {
			ch = make(chan struct{})
			if e.waiting == nil {
				e.waiting = make(map[int64]chan struct{})
			}
			e.waiting[seq] = ch
		}
		g.mu.Unlock()
		turn = ch
		defer g.unwait(id, seq, ch)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-turn:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// unwait ends wait's registration ch of seq of producer id, and drops the
// entry when it holds nothing else.
func (g *idemProgress) unwait(id, seq int64, ch chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.at[id]
	if e == nil {
		return // forgotten (maxProgress)
	}
	if e.waiting[seq] == ch {
		delete(e.waiting, seq)
	}
	if len(e.waiting) == 0 && e.at.IsZero() {
		delete(g.at, id)
	}
}

// sendWith makes the attempts of one message within ctx; failedAddr, if
// set, is a broker that already failed it with lastErr. pin, if set, is
// the partition m is bound to (pinOf): every attempt goes there.
func (cp *clusterProducer) sendWith(ctx context.Context, m *message.Message, failedAddr string, lastErr error, pin *message.Partition) (SendResult, error) {
	v := cp.view(m.Topic)
	if err := v.Wait(ctx); err != nil {
		return SendResult{}, fmt.Errorf("metaq: read partitions of %s %s: %w", m.Topic, cp.src.where(), err)
	}
	retry := !cp.cfg.noRetry
	var failed map[string]bool // brokers that failed this send
	if failedAddr != "" {
		failed = map[string]bool{failedAddr: true}
	}
	var cands, preferred []target
	var unknownSince time.Time               // a retry's first refusal as of an unknown producer
	var grace time.Duration                  // and how long it is resent then (graceFor)
	var unreachableSince, giveUpAt time.Time // a pinned retry's partition out of reach
	seen := noMark                           // its producer's highest stored sequence at its last attempt (idemProgress.wait)
	for {
		if lastErr != nil && cp.isClosed() {
			return SendResult{}, lastErr
		}
		if pin != nil && retry {
			res, done, err := cp.pinnedAttempt(ctx, v, m, pin, lastErr, &seen)
			if done && errors.Is(err, ErrOutcomeUnknown) && ctx.Err() == nil {
				// The broker does not know m's producer, or m lies past
				// the producer's next sequence: it forgot the producer
				// (m's first copy may be stored), or an earlier message
				// of it, lost with the same connection, is being retried
				// too and has not reached it yet. Resending m with its
				// binding stores nothing twice: for a while, so that such
				// messages can land first.
				now := time.Now()
				if unknownSince.IsZero() {
					dl, ok := ctx.Deadline()
					unknownSince, grace = now, cp.graceFor(now, dl, ok)
				}
				if at := cp.progress.last(m.ProducerID); at.After(unknownSince) {
					// The producer's earlier retries are landing, one
					// sequence at a time: m's turn is coming, and its
					// grace runs from the last of them (idemProgress).
					unknownSince = at
				}
				if now.Sub(unknownSince) < grace {
					lastErr = err
					continue
				}
			}
			if done {
				if err == nil {
					cp.progress.stored(m.ProducerID, m.ProducerSeq, time.Now())
				}
				return res, err
			}
			lastErr = err
			if m.ProducerID == 0 { // refused, nothing stored: free to go elsewhere
				pin = nil
				continue
			}
			// A partition whose broker cannot be reached (killed, or gone
			// from the cluster) for half of the time left when it became
			// unreachable: m goes to another partition, unbound, as a send
			// without idempotence would (at least once: its first copy may
			// be stored there). Sooner would store twice what a failover
			// or a restart of the broker would have answered.
			var ce *connError
			if t := pinned(v.Snapshot(), pin); errors.As(err, &ce) || t.addr == "" {
				now := time.Now()
				if unreachableSince.IsZero() {
					unreachableSince, giveUpAt = now, now.Add(30*time.Second)
					if dl, ok := ctx.Deadline(); ok {
						giveUpAt = now.Add(dl.Sub(now) / 2)
					}
				}
				if now.After(giveUpAt) {
					cp.cfg.logger.Warn("metaq: the partition of an idempotent retry is unreachable; sending it to another partition (it may be stored twice)",
						"topic", m.Topic, "partition", pin.String(), "unreachable_for", now.Sub(unreachableSince).Round(time.Millisecond), "err", err)
					unbind(m)
					pin = nil
					if t.addr != "" {
						if failed == nil {
							failed = make(map[string]bool)
						}
						failed[t.addr] = true
					}
				}
			} else {
				unreachableSince = time.Time{}
			}
			continue
		}
		snap := v.Snapshot()
		now := time.Now()
		cands, preferred = cands[:0], preferred[:0]
		cp.mu.Lock()
		for _, p := range snap.Partitions {
			a := snap.Addrs[p.BrokerID]
			if failed[a] {
				continue
			}
			cands = append(cands, target{p, a})
			if retry && !cp.downLocked(a, now) {
				preferred = append(preferred, target{p, a})
			}
		}
		cp.mu.Unlock()
		if len(preferred) > 0 {
			// Prefer brokers whose connection did not fail lately.
			cands, preferred = preferred, cands
		}
		if len(cands) == 0 {
			if !retry && lastErr != nil {
				return SendResult{}, lastErr
			}
			if len(snap.Partitions) == 0 {
				if err := viewDenied(v); err != nil { // the user has no right on the topic: no wait helps
					return SendResult{}, fmt.Errorf("metaq: send to %s: %w", m.Topic, err)
				}
			}
			// Every broker failed this send, or none is listed: wait for
			// the view to change or a short while, then try them again.
			failed = nil
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				if lastErr != nil {
					return SendResult{}, fmt.Errorf("metaq: send to %s: %w (last failure: %w)", m.Topic, ctx.Err(), lastErr)
				}
				if len(snap.Partitions) == 0 {
					if u, ok := v.(interface{ unknownTopic() bool }); ok && u.unknownTopic() {
						return SendResult{}, fmt.Errorf("%w: no broker lists %s (%w, %w)", ErrUnknownTopic, m.Topic, ErrNoPartitions, ctx.Err())
					}
					return SendResult{}, fmt.Errorf("%w: %s has no master partitions %s (%w)", ErrNoPartitions, m.Topic, cp.src.where(), ctx.Err())
				}
				return SendResult{}, fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
			}
			continue
		}
		ps := make([]message.Partition, len(cands))
		for j, c := range cands {
			ps[j] = c.part
		}
		i, err := cp.choose(ctx, m, ps)
		if err != nil {
			return SendResult{}, err
		}
		t := cands[i]
		res, err := cp.attempt(ctx, m, t, retry)
		if err == nil {
			return res, nil
		}
		if !retry || !retryable(err) || ctx.Err() != nil {
			return SendResult{}, err
		}
		pid, seq := m.ProducerID, m.ProducerSeq // before outOfOrder, for the log
		cp.outOfOrder(m, t, err)
		if pin = cp.pinOf(m, t.part); pin != nil || renewable(err) {
			lastErr = err // pinned, or bound again at once: the broker is fine
			continue
		}
		cp.cfg.logger.Debug("metaq: send failed; retrying on another partition", "topic", m.Topic,
			"partition", t.part.String(), "addr", t.addr, "producer_id", pid, "sequence", seq, "err", err)
		lastErr = err
		if failed == nil {
			failed = make(map[string]bool)
		}
		failed[t.addr] = true
	}
}

// pinnedAttempt is one attempt of an idempotent retry of m on partition
// pin, after a pause (none after an out-of-order refusal, which unbinds
// m: it is sent again at once with a new sequence), which ends early when
// the retry before m is stored (idemProgress.wait; seen is its mark, set
// here before the attempt). done is set when the send ends, with res and
// err; otherwise err is the attempt's failure.
func (cp *clusterProducer) pinnedAttempt(ctx context.Context, v topicView, m *message.Message, pin *message.Partition, lastErr error, seen *int64) (res SendResult, done bool, err error) {
	if !renewable(lastErr) {
		id := m.ProducerID
		if cp.cfg.pausesOnly {
			id = 0 // a plain pause
		}
		if cp.progress.wait(ctx, id, m.ProducerSeq, *seen, pinPause) != nil {
			return SendResult{}, true, fmt.Errorf("metaq: send to %s: %w (last failure: %w)", m.Topic, ErrTimeout, lastErr)
		}
	}
	t := pinned(v.Snapshot(), pin)
	if t.addr == "" {
		return SendResult{}, false, lastErr
	}
	*seen = cp.progress.mark(m.ProducerID)
	res, err = cp.attempt(ctx, m, t, true)
	switch {
	case err == nil:
		return res, true, nil
	case !retryable(err) || ctx.Err() != nil:
		return SendResult{}, true, err
	case isPartitionError(err):
		// m's partition is gone from its broker (the topic shrank there,
		// or another broker took its address). An earlier copy of m may
		// be stored in it: sent to another partition m could be stored
		// twice, and kept here it is refused until its deadline. Nor is
		// its sequence a hole: that copy may land if the partition comes
		// back.
		return SendResult{}, true, fmt.Errorf("%w (the partition of this idempotent retry is gone from its broker; an earlier copy may be stored there): %w", ErrOutcomeUnknown, err)
	}
	pid, seq := m.ProducerID, m.ProducerSeq // before outOfOrder, for the log
	cp.outOfOrder(m, t, err)
	cp.cfg.logger.Debug("metaq: send failed; retrying on its partition (idempotent)", "topic", m.Topic,
		"partition", t.part.String(), "addr", t.addr, "producer_id", pid, "sequence", seq, "err", err)
	return SendResult{}, false, err
}

// outOfOrder handles an attempt of m on t that failed with err, when the
// broker refused it and stored nothing: m is unbound (no longer pinned to
// its partition; bound again when resent), and the partition starts over
// with a new producer id, m's sequence a hole of the old one (renew), after
// an out-of-order or unknown-producer refusal of a first attempt, or a
// refusal of a first attempt as of a partition the broker does not have
// (a retry so refused fails: pinnedAttempt). Without the hole a retry of
// the old id past m's sequence, refused as out of order once the partition
// is back, waited out its grace instead of being bound again.
func (cp *clusterProducer) outOfOrder(m *message.Message, t target, err error) {
	if !renewable(err) && !isPartitionError(err) {
		return
	}
	if p, perr := cp.broker(t.addr); perr == nil {
		p.renew(m, t.part.Partition)
	} else {
		unbind(m)
	}
}

func (cp *clusterProducer) isClosed() bool {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.closed
}

// connError marks a failure to reach a broker: nothing was sent.
type connError struct{ err error }

func (e *connError) Error() string { return e.err.Error() }
func (e *connError) Unwrap() error { return e.err }

// attempt sends m to t once. With retries on, reaching the broker may use
// at most half of the remaining time (at most the dial timeout), so that
// a dead broker leaves time for another. A failure to connect, or a lost
// connection, marks the broker down, and a success marks it up.
func (cp *clusterProducer) attempt(ctx context.Context, m *message.Message, t target, retry bool) (SendResult, error) {
	p, err := cp.broker(t.addr)
	if err != nil {
		return SendResult{}, err
	}
	if retry && p.cn.live() == nil {
		budget := cp.cfg.conn.dialTimeout
		if dl, ok := ctx.Deadline(); ok {
			budget = min(budget, time.Until(dl)/2)
		}
		cctx, cancel := context.WithTimeout(ctx, budget)
		_, err := p.cn.get(cctx)
		cancel()
		if err != nil {
			if !errors.Is(err, ErrClosed) {
				cp.markDown(t.addr)
			}
			return SendResult{}, &connError{err}
		}
	}
	res, err := p.sendPart(ctx, m, t.part.Partition)
	if err != nil {
		if errors.Is(err, ErrConnectionLost) {
			cp.markDown(t.addr)
		}
		return res, err
	}
	cp.markUp(t.addr)
	res.BrokerID = t.part.BrokerID
	return res, nil
}

// retryable reports whether a failed attempt may be retried: the broker
// was unreachable, the connection was lost (the message may have been
// stored: with idempotence its retry stays on its partition and is stored
// once, pinOf; without, at least once), the producer of a vanished broker
// was closed, or the broker refused (403, 5xx).
func retryable(err error) bool {
	var ce *connError
	var ne net.Error
	var be *BrokerError
	switch {
	case errors.Is(err, ErrOutcomeUnknown): // a resend could store it twice
		return false
	case errors.As(err, &ce), errors.Is(err, ErrConnectionLost), errors.Is(err, ErrClosed), errors.As(err, &ne):
		return true
	case errors.As(err, &be):
		return be.Code == protocol.StatusForbidden || be.Code >= 500
	}
	return false
}

// choose asks the selector for an index into partitions.
func (cp *clusterProducer) choose(ctx context.Context, m *message.Message, partitions []message.Partition) (int, error) {
	return selectOne(ctx, cp.cfg.selector, m.Topic, partitions, m)
}

// Flush sends every batched message now and waits until all messages
// accepted so far have completed (their callbacks queued), or ctx is done.
func (cp *clusterProducer) Flush(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		// Take every slot, flushing the brokers' batches while waiting: a
		// message that reaches a batch after a flush is sent by the next.
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for i := 0; i < cap(cp.sem); {
			cp.flushBrokers()
			select {
			case cp.sem <- struct{}{}:
				i++
				continue
			case <-t.C:
			case <-ctx.Done():
				for ; i > 0; i-- {
					<-cp.sem
				}
				return
			}
		}
		for i := 0; i < cap(cp.sem); i++ {
			<-cp.sem
		}
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flushBrokers sends the brokers' batched messages now.
func (cp *clusterProducer) flushBrokers() {
	cp.mu.Lock()
	ps := make([]*brokerProducer, 0, len(cp.brokers))
	for _, p := range cp.brokers {
		ps = append(ps, p)
	}
	cp.mu.Unlock()
	for _, p := range ps {
		if p.acc != nil {
			p.acc.flushAll()
		}
	}
}

// Close stops accepting messages, waits for the messages in flight until
// ctx is done, then closes every broker connection and the ZooKeeper
// session. All callbacks have run when Close returns. Idempotent.
func (cp *clusterProducer) Close(ctx context.Context) error {
	cp.closeOnce.Do(func() {
		cp.mu.Lock()
		cp.closed = true
		cp.mu.Unlock()
		done := make(chan struct{})
		go func() { cp.inflight.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			cp.closeErr = fmt.Errorf("metaq: producer close: %w", ctx.Err())
		}
		cp.mu.Lock()
		brokers := cp.brokers
		cp.brokers = map[string]*brokerProducer{}
		cp.mu.Unlock()
		cctx, cancel := context.WithCancel(context.Background())
		cancel() // in-flight sends already had their chance
		for _, p := range brokers {
			_ = p.Close(cctx)
		}
		<-done
		close(cp.done)
		cp.bg.Wait()
		_ = cp.src.close()
		cp.cbs.close()
	})
	return cp.closeErr
}
