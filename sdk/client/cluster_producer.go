package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/metaq-go/metaq/sdk/balance"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// WithRetryOnFailure decides whether a ClusterProducer retries a send that
// failed on a broker (connection refused or lost, 403 partition closed,
// 5xx) on another partition, for as long as the send timeout allows.
// Default true.
//
// Retrying changes the partition, and a send whose connection was lost may
// have been stored, so a retry can duplicate it (at least once). Turn it
// off for ordered sends (a Fixed or key-hashing selector): a failed send
// then fails, with one attempt, as in MetaQ. For MetaQ's ordered producer,
// which keeps such messages in a local on-disk store and resends them in
// order when the partition is back, use NewOrderedProducer (it turns
// retries off).
func WithRetryOnFailure(retry bool) ProducerOption {
	return producerOpt(func(c *producerConfig) { c.noRetry = !retry })
}

// ClusterProducer sends messages to the brokers of a MetaQ cluster, which
// it discovers from ZooKeeper: for each topic it watches the masters'
// topics-pub nodes (package cluster) and the selector chooses among the
// cluster-wide partition list, sorted by (brokerId, partition) as in
// MetaQ: it gets the length of the list, and index i is the list's i-th
// (broker, partition). Brokers that appear are used and brokers that
// vanish are dropped with no restart. Each broker gets one pipelined
// connection.
//
// Options are those of NewProducer, plus WithZKRoot, WithZKSessionTimeout
// and WithRetryOnFailure. WithTopicPartitions and WithBatching do not
// apply: partitions come from ZooKeeper and every message is sent with
// put. It is safe for concurrent use.
type ClusterProducer struct {
	cfg  producerConfig
	opts []ProducerOption
	cl   *cluster.Cluster
	sem  chan struct{}
	cbs  *callbackQueue

	mu      sync.Mutex
	closed  bool
	views   map[string]*cluster.TopicView
	brokers map[string]*Producer // by address
	down    map[string]downState // brokers whose connection failed lately
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

// NewClusterProducer connects to ZooKeeper (zkConnect: comma-separated
// host:port) and returns a producer for the cluster registered there. It
// waits for the ZooKeeper session until ctx is done.
func NewClusterProducer(ctx context.Context, zkConnect string, opts ...ProducerOption) (*ClusterProducer, error) {
	cfg := newProducerConfig(opts)
	if cfg.maxInFlight == 0 {
		cfg.maxInFlight = DefaultMaxInFlight
	}
	cl, err := cfg.zk.open(ctx, zkConnect, cfg.logger)
	if err != nil {
		return nil, err
	}
	return &ClusterProducer{cfg: cfg, opts: opts, cl: cl, sem: make(chan struct{}, cfg.maxInFlight), cbs: newCallbackQueue(),
		views: make(map[string]*cluster.TopicView), brokers: make(map[string]*Producer),
		down: make(map[string]downState), done: make(chan struct{})}, nil
}

// view returns topic's view, watching it on first use.
func (cp *ClusterProducer) view(topic string) *cluster.TopicView {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if v, ok := cp.views[topic]; ok {
		return v
	}
	v := cp.cl.WatchPublish(topic)
	cp.views[topic] = v
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
func (cp *ClusterProducer) prune() {
	cp.mu.Lock()
	live := make(map[string]bool)
	for _, v := range cp.views {
		for _, a := range v.Snapshot().Addrs {
			live[a] = true
		}
	}
	var gone []*Producer
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
func (cp *ClusterProducer) broker(addr string) (*Producer, error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.closed {
		return nil, ErrClosed
	}
	if p, ok := cp.brokers[addr]; ok {
		return p, nil
	}
	p, err := NewProducer(addr, cp.opts...)
	if err != nil {
		return nil, err
	}
	cp.brokers[addr] = p
	return p, nil
}

func (cp *ClusterProducer) isDown(addr string, now time.Time) bool {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.downLocked(addr, now)
}

// downLocked is isDown with cp.mu held.
func (cp *ClusterProducer) downLocked(addr string, now time.Time) bool {
	return now.Before(cp.down[addr].until)
}

func (cp *ClusterProducer) markDown(addr string) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	d := cp.down[addr]
	d.failures++
	d.until = time.Now().Add(backoff(100*time.Millisecond, 5*time.Second, d.failures))
	cp.down[addr] = d
}

func (cp *ClusterProducer) markUp(addr string) {
	cp.mu.Lock()
	delete(cp.down, addr)
	cp.mu.Unlock()
}

// Partitions returns topic's partitions as ZooKeeper lists them now,
// sorted by (BrokerID, Partition), waiting (within the send timeout) for
// the first reading.
func (cp *ClusterProducer) Partitions(ctx context.Context, topic string) ([]balance.Partition, error) {
	ctx, cancel := context.WithTimeout(ctx, cp.cfg.sendTimeout)
	defer cancel()
	v := cp.view(topic)
	if err := v.Wait(ctx); err != nil {
		return nil, fmt.Errorf("metaq: read partitions of %s from ZooKeeper: %w", topic, err)
	}
	return v.Partitions(), nil
}

func (cp *ClusterProducer) begin(ctx context.Context, m *message.Message) error {
	if err := checkMessage(ctx, m, cp.cfg.maxMessageSize); err != nil {
		return err
	}
	select {
	case cp.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
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

func (cp *ClusterProducer) end() {
	<-cp.sem
	cp.inflight.Done()
}

// Send sends m and waits for a broker to store it; the result names the
// broker (BrokerID) and partition. The whole send, retries included, is
// bounded by the send timeout. As with Producer.Send, an error wrapping
// ErrTimeout or ErrConnectionLost leaves it unknown whether m was stored.
func (cp *ClusterProducer) Send(ctx context.Context, m *message.Message) (SendResult, error) {
	if err := cp.begin(ctx, m); err != nil {
		return SendResult{}, err
	}
	defer cp.end()
	return cp.send(ctx, m)
}

// SendAsync sends m without waiting; cb runs exactly once with the
// outcome, on the producer's callback goroutine, in completion order.
func (cp *ClusterProducer) SendAsync(ctx context.Context, m *message.Message, cb func(SendResult, error)) {
	if cb == nil {
		cb = func(SendResult, error) {}
	}
	if err := cp.begin(ctx, m); err != nil {
		cp.cbs.push(cb, SendResult{}, err, nil)
		return
	}
	go func() {
		res, err := cp.send(ctx, m)
		cp.cbs.push(cb, res, err, cp.end)
	}()
}

// target is one candidate partition with its broker's address.
type target struct {
	part balance.Partition
	addr string
}

// send makes the attempts of one message.
func (cp *ClusterProducer) send(ctx context.Context, m *message.Message) (SendResult, error) {
	ctx, cancel := context.WithTimeout(ctx, cp.cfg.sendTimeout)
	defer cancel()
	v := cp.view(m.Topic)
	if err := v.Wait(ctx); err != nil {
		return SendResult{}, fmt.Errorf("metaq: read partitions of %s from ZooKeeper: %w", m.Topic, err)
	}
	retry := !cp.cfg.noRetry
	var failed map[string]bool // brokers that failed this send
	var lastErr error
	var cands, preferred []target
	for {
		if lastErr != nil && cp.isClosed() {
			return SendResult{}, lastErr
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
					return SendResult{}, fmt.Errorf("%w: %s has no master partitions in ZooKeeper (%w)", ErrNoPartitions, m.Topic, ctx.Err())
				}
				return SendResult{}, fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
			}
			continue
		}
		i, err := cp.choose(ctx, m, len(cands))
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
		cp.cfg.logger.Debug("metaq: send failed; retrying on another partition", "topic", m.Topic,
			"partition", t.part.String(), "addr", t.addr, "err", err)
		lastErr = err
		if failed == nil {
			failed = make(map[string]bool)
		}
		failed[t.addr] = true
	}
}

func (cp *ClusterProducer) isClosed() bool {
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
func (cp *ClusterProducer) attempt(ctx context.Context, m *message.Message, t target, retry bool) (SendResult, error) {
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
	res, err := p.sendTo(ctx, m, t.part.Partition)
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

// retryable reports whether a failed attempt may be retried on another
// broker: the broker was unreachable, the connection was lost (the
// message may have been stored: at least once), the producer of a
// vanished broker was closed, or the broker refused (403, 5xx).
func retryable(err error) bool {
	var ce *connError
	var ne net.Error
	var be *BrokerError
	switch {
	case errors.As(err, &ce), errors.Is(err, ErrConnectionLost), errors.Is(err, ErrClosed), errors.As(err, &ne):
		return true
	case errors.As(err, &be):
		return be.Code == protocol.StatusForbidden || be.Code >= 500
	}
	return false
}

// choose asks the selector for an index among n partitions.
func (cp *ClusterProducer) choose(ctx context.Context, m *message.Message, n int) (int, error) {
	return selectOne(ctx, cp.cfg.selector, n, m)
}

// Close stops accepting messages, waits for the messages in flight until
// ctx is done, then closes every broker connection and the ZooKeeper
// session. All callbacks have run when Close returns. Idempotent.
func (cp *ClusterProducer) Close(ctx context.Context) error {
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
		cp.brokers = map[string]*Producer{}
		cp.mu.Unlock()
		cctx, cancel := context.WithCancel(context.Background())
		cancel() // in-flight sends already had their chance
		for _, p := range brokers {
			_ = p.Close(cctx)
		}
		<-done
		close(cp.done)
		cp.bg.Wait()
		_ = cp.cl.Close()
		cp.cbs.close()
	})
	return cp.closeErr
}
