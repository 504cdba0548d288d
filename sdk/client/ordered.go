package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/metaq-go/metaq/internal/backoff"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
)

// Ordered producer (reference §14): MetaQ's OrderedMetaMessageSessionFactory
// with its local message storage.
const (
	// orderedMaxWait: a new message waits for a backlog of at most this
	// many messages to drain instead of joining it (MetaQ: 20).
	orderedMaxWait = 20
	// orderedRechecks and orderedRecheckEvery: how long it waits (MetaQ:
	// 3 rechecks, 100 ms apart).
	orderedRechecks     = 3
	orderedRecheckEvery = 100 * time.Millisecond
)

// orderedPoll is the backoff with which the drainer polls an unavailable
// partition.
var orderedPoll = backoff.Policy{Min: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: redialJitter}

// defaultLocalStoreBase returns ~/.meta_localmessage, MetaQ's directory for
// an ordered producer's local messages, or a directory under os.TempDir()
// when there is no home directory.
func defaultLocalStoreBase() string {
	if h, err := os.UserHomeDir(); err == nil && h != "" {
		return filepath.Join(h, ".meta_localmessage")
	}
	return filepath.Join(os.TempDir(), ".meta_localmessage")
}

// orderedConfig holds the options that only openOrderedProducer reads.
type orderedConfig struct {
	base    string
	saveAll bool
	layouts map[string][]message.Partition
}

type orderedOpt func(*orderedConfig)

// applyProducer: other producers ignore these options.
func (orderedOpt) applyProducer(*producerConfig) {}

// withLocalStore sets the directory under which an orderedProducer keeps
// the messages it could not send, one subdirectory per partition:
// base/<topic>@<brokerId>-<partition>/. Default defaultLocalStoreBase().
// Only openOrderedProducer uses it.
func withLocalStore(base string) prodOption {
	return orderedOpt(func(c *orderedConfig) { c.base = base })
}

// withPartitionLayout declares the partitions of topic for an
// orderedProducer: partitionsByBroker maps a broker id to its partition
// count (MetaQ's topic.num.<topic> = "brokerId:n;brokerId:n"). The layout
// is the list of (brokerId, partition) sorted by broker then partition,
// and the selector chooses an index in it whatever ZooKeeper lists at the
// moment, so a message's partition does not move when a broker is away.
// Only openOrderedProducer uses it.
func withPartitionLayout(topic string, partitionsByBroker map[int]int) prodOption {
	var l []message.Partition
	for _, id := range slices.Sorted(maps.Keys(partitionsByBroker)) {
		for p := range partitionsByBroker[id] {
			l = append(l, message.Partition{BrokerID: id, Partition: int32(p)})
		}
	}
	return orderedOpt(func(c *orderedConfig) {
		if c.layouts == nil {
			c.layouts = make(map[string][]message.Partition)
		}
		c.layouts[topic] = l
	})
}

// StoredLocally reports whether the Client kept the message on local disk
// (fsynced) instead of sending it: it is NOT on a broker yet, and its
// Offset and ID are -1. An Ordered Client keeps it in its local store
// (Topic, BrokerID and Partition name the partition it waits for) and
// sends it, in order, when the partition is back; a Client with Spool
// writes it to the spool (then Spooled is true too) and resends it later.
func (r SendResult) StoredLocally() bool { return r.Offset < 0 && !r.OffsetUnknown }

// orderedProducer sends messages in order to fixed partitions of a MetaQ
// cluster and keeps those it cannot send in a local on-disk store, which
// it resends in order when their partition is back (MetaQ's ordered
// producer, reference §14).
//
// Partitions. For each topic the selector (withSelector; default
// selector.HashByKey()) chooses an index in the topic's layout: the list declared
// with withPartitionLayout or, for a topic without one, the partitions
// ZooKeeper lists the first time the topic is used, frozen for the life
// of the producer. Order is per partition, so with HashByKey per key;
// messages without a key are spread round robin and have no order. Without
// a declared layout a key may map to another partition in a later process
// if ZooKeeper listed other partitions then, and its order across the two
// processes is lost: declare the layout when that matters.
//
// Unavailable partitions. When the chosen partition's broker is not in
// ZooKeeper, its connection failed lately, the connection is refused or
// lost, or the broker replies 403 (partition closed) — or, with
// withSaveToLocalWhenFailed, after any failure — the message is appended
// to the partition's local store (fsynced) and Send returns a result whose
// StoredLocally is true. Other failures are returned as errors, after a
// single attempt (no retry on another partition). A background drainer per
// partition resends the store's messages oldest first when ZooKeeper lists
// the partition again, polling with backoff, and deletes each one only
// after the broker acknowledged it. A message that the broker keeps
// refusing blocks its partition's drain (it is retried and logged, never
// dropped).
//
// Order. If Send(m1) returned before Send(m2) was called and both chose
// the same partition, m1 is on the broker before m2: while a partition has
// messages in its local store a new message goes there too, after them
// (with at most 20 waiting it first rechecks every 100 ms, up to 3 times,
// whether the drain finished). Sends running concurrently have no order.
// As with every producer, a message whose connection was lost, or whose
// resend timed out, may have been stored and is sent again: it can appear
// twice, the copy right after the original.
//
// Restart. openOrderedProducer finds the local stores under its base
// directory and drains them before anything newer for their partition.
// A torn record at the end of a store (a crash mid-append) is cut. One
// producer at a time may use a base directory; the process refuses a
// second one, other processes are not detected.
//
// The options are those of openClusterProducer (withRetryOnFailure is
// forced off), plus withLocalStore, withSaveToLocalWhenFailed and
// withPartitionLayout. It is safe for concurrent use.
type orderedProducer struct {
	cp      *clusterProducer
	cfg     orderedConfig
	logger  *slog.Logger
	timeout time.Duration
	maxSize int

	stop        chan struct{} // closed by Close: drainers stop, waits end
	drainCtx    context.Context
	cancelDrain context.CancelFunc

	mu      sync.Mutex
	closed  bool
	layouts map[string][]message.Partition
	waited  map[string]bool // topics whose ZooKeeper view was waited for
	queues  map[orderedKey]*orderedQueue
	// wg counts Sends and drainers.
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

type orderedKey struct {
	topic string
	part  message.Partition
}

// orderedQueue is one partition's local store.
type orderedQueue struct {
	topic string
	part  message.Partition
	store *recoverStore

	mu       sync.Mutex // orders appends against the drainer's exit
	draining bool
}

// orderedBases are the base directories in use by this process's
// ordered producers.
var orderedBases = struct {
	sync.Mutex
	m map[string]bool
}{m: make(map[string]bool)}

// newOrderedProducer is openOrderedProducer over the clusterProducer newCP
// returns for the options it is given.
func newOrderedProducer(opts []prodOption, newCP func([]prodOption) (*clusterProducer, error)) (*orderedProducer, error) {
	var oc orderedConfig
	var pc producerConfig
	for _, o := range opts {
		if f, ok := o.(orderedOpt); ok {
			f(&oc)
		} else {
			o.applyProducer(&pc)
		}
	}
	sel := pc.selector
	if sel == nil {
		sel = selector.HashByKey()
	}
	if oc.base == "" {
		oc.base = defaultLocalStoreBase()
	}
	base, err := filepath.Abs(oc.base)
	if err != nil {
		return nil, fmt.Errorf("metaq: local store %s: %w", oc.base, err)
	}
	oc.base = base
	orderedBases.Lock()
	if orderedBases.m[base] {
		orderedBases.Unlock()
		return nil, fmt.Errorf("metaq: local store %s is in use by another orderedProducer of this process", base)
	}
	orderedBases.m[base] = true
	orderedBases.Unlock()
	unlock := func() {
		orderedBases.Lock()
		delete(orderedBases.m, base)
		orderedBases.Unlock()
	}

	cpOpts := append(slices.Clip(opts), withRetryOnFailure(false), withSelector(sel))
	cp, err := newCP(cpOpts)
	if err != nil {
		unlock()
		return nil, err
	}
	dctx, cancel := context.WithCancel(context.Background())
	op := &orderedProducer{cp: cp, cfg: oc, logger: cp.cfg.logger, timeout: cp.cfg.sendTimeout,
		maxSize: cp.cfg.maxMessageSize, stop: make(chan struct{}), drainCtx: dctx, cancelDrain: cancel,
		layouts: make(map[string][]message.Partition), waited: make(map[string]bool),
		queues: make(map[orderedKey]*orderedQueue)}
	for t, l := range oc.layouts {
		if len(l) > 0 {
			op.layouts[t] = l
			cp.view(t) // start watching now
		}
	}
	if err := op.openBacklogs(); err != nil {
		cancel()
		op.releaseStores()
		_ = cp.Close(context.Background())
		unlock()
		return nil, err
	}
	return op, nil
}

// openBacklogs opens the non-empty stores under the base directory and
// starts their drainers.
func (op *orderedProducer) openBacklogs() error {
	ents, err := os.ReadDir(op.cfg.base)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("metaq: local store %s: %w", op.cfg.base, err)
	}
	for _, de := range ents {
		if !de.IsDir() {
			continue
		}
		part, ok := parseStoreDir(de.Name())
		if !ok {
			continue
		}
		s, err := acquireRecoverStore(filepath.Join(op.cfg.base, de.Name()), op.logger)
		if err != nil {
			return err
		}
		e, n := s.first()
		if n == 0 {
			s.release()
			continue
		}
		// The directory name has the topic with / and \ replaced: take
		// it from the messages.
		k := orderedKey{e.msg.Topic, part}
		if _, dup := op.queues[k]; dup {
			s.release()
			continue
		}
		q := &orderedQueue{topic: k.topic, part: part, store: s, draining: true}
		op.queues[k] = q
		op.logger.Info("metaq: ordered producer found messages in its local store; sending them first",
			"topic", q.topic, "partition", part.String(), "messages", n, "dir", s.dir)
		op.wg.Add(1)
		go op.drain(q)
	}
	return nil
}

// parseStoreDir reads the partition from a store directory name
// "<topic>@<brokerId>-<partition>".
func parseStoreDir(name string) (message.Partition, bool) {
	i := strings.LastIndexByte(name, '@')
	if i <= 0 {
		return message.Partition{}, false
	}
	b, p, ok := strings.Cut(name[i+1:], "-")
	if !ok {
		return message.Partition{}, false
	}
	id, err1 := strconv.Atoi(b)
	n, err2 := strconv.ParseInt(p, 10, 32)
	if err1 != nil || err2 != nil || id < 0 || n < 0 {
		return message.Partition{}, false
	}
	return message.Partition{BrokerID: id, Partition: int32(n)}, true
}

// storeDir is the local store directory of topic's partition p.
func (op *orderedProducer) storeDir(topic string, p message.Partition) string {
	return recoverDir(op.cfg.base, topic, strconv.Itoa(p.BrokerID)+"-"+strconv.Itoa(int(p.Partition)))
}

// queue returns the local store of topic's partition p, opening it.
func (op *orderedProducer) queue(topic string, p message.Partition) (*orderedQueue, error) {
	k := orderedKey{topic, p}
	op.mu.Lock()
	defer op.mu.Unlock()
	if q := op.queues[k]; q != nil {
		return q, nil
	}
	s, err := acquireRecoverStore(op.storeDir(topic, p), op.logger)
	if err != nil {
		return nil, err
	}
	q := &orderedQueue{topic: topic, part: p, store: s}
	op.queues[k] = q
	if s.count() > 0 {
		// Written since openOrderedProducer looked (not by this process).
		q.draining = true
		op.wg.Add(1) // a Send holds the group: safe against Close's Wait
		go op.drain(q)
	}
	return q, nil
}

// Backlog returns how many messages of topic wait in the local store, all
// partitions together (0 after Close: the stores are closed).
func (op *orderedProducer) Backlog(topic string) int {
	op.mu.Lock()
	defer op.mu.Unlock()
	n := 0
	for k, q := range op.queues {
		if k.topic == topic {
			n += q.store.count()
		}
	}
	return n
}

func (op *orderedProducer) enter() bool {
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.closed {
		return false
	}
	op.wg.Add(1)
	return true
}

// Send sends m to its partition and waits for the broker to store it, or
// keeps it in the partition's local store (see orderedProducer): then the
// result's StoredLocally is true and m is not on a broker yet. An error
// means m is neither acknowledged nor stored locally; as with brokerProducer.Send,
// after an error wrapping ErrTimeout or ErrConnectionLost it is unknown
// whether the broker stored it. m must not be modified until Send returns.
func (op *orderedProducer) Send(ctx context.Context, m *message.Message) (SendResult, error) {
	unbind(m) // bound afresh when sent (idem.go)
	if err := checkMessage(ctx, m, op.maxSize); err != nil {
		return SendResult{}, err
	}
	if !op.enter() {
		return SendResult{}, ErrClosed
	}
	defer op.wg.Done()

	layout, err := op.layout(ctx, m.Topic)
	if err != nil {
		return SendResult{}, err
	}
	i, err := op.cp.choose(ctx, m, layout)
	if err != nil {
		return SendResult{}, err
	}
	part := layout[i]
	q, err := op.queue(m.Topic, part)
	if err != nil {
		return SendResult{}, err
	}
	op.waitReady(ctx, m.Topic)

	// Never overtake the backlog: wait briefly for a short one to drain,
	// else join it.
	for check := 0; ; check++ {
		n := q.store.count()
		if n == 0 {
			break
		}
		if _, ok := op.available(m.Topic, part, true); !ok || n > orderedMaxWait || check >= orderedRechecks {
			return op.storeLocally(q, m, nil)
		}
		t := time.NewTimer(orderedRecheckEvery)
		select {
		case <-t.C:
		case <-op.stop:
			t.Stop()
			return op.storeLocally(q, m, ErrClosed)
		case <-ctx.Done():
			t.Stop()
			return SendResult{}, ctx.Err()
		}
	}

	addr, ok := op.available(m.Topic, part, true)
	if !ok {
		return op.storeLocally(q, m, nil)
	}
	actx, cancel := context.WithTimeout(ctx, op.timeout)
	res, err := op.cp.attempt(actx, m, target{part, addr}, true)
	cancel()
	if err == nil {
		return res, nil
	}
	if ctx.Err() != nil || !(op.cfg.saveAll || unavailable(err)) {
		return SendResult{}, err
	}
	return op.storeLocally(q, m, err)
}

// unavailable reports whether a failed send means that its partition is
// unavailable: the broker could not be reached, the connection was lost
// (the message may have been stored), its producer was closed (the broker
// left ZooKeeper, or Close), or the broker replied 403.
func unavailable(err error) bool {
	var ce *connError
	var ne net.Error
	switch {
	case errors.As(err, &ce), errors.Is(err, ErrConnectionLost), errors.Is(err, ErrClosed):
		return true
	case errors.Is(err, ErrTimeout):
		return false
	case errors.As(err, &ne):
		return true
	}
	return errors.Is(err, ErrForbidden)
}

// storeLocally appends m to q's store durably and makes sure a drainer
// runs; cause is why m was not sent (nil: the partition is unavailable or
// has a backlog).
func (op *orderedProducer) storeLocally(q *orderedQueue, m *message.Message, cause error) (SendResult, error) {
	c := *m
	// The partition is chosen already: the key is not needed again.
	c.Partition, c.Offset, c.ID, c.Key = q.part.Partition, -1, -1, nil
	q.mu.Lock()
	err := q.store.put(&c)
	n := q.store.count()
	if err == nil && !q.draining {
		select {
		case <-op.stop:
		default:
			q.draining = true
			op.wg.Add(1) // the calling Send holds the group
			go op.drain(q)
		}
	}
	q.mu.Unlock()
	if err != nil {
		if cause != nil {
			return SendResult{}, fmt.Errorf("metaq: send to %s partition %s failed (%w) and the local store failed: %w",
				q.topic, q.part.String(), cause, err)
		}
		return SendResult{}, fmt.Errorf("metaq: partition %s of %s unavailable and the local store failed: %w",
			q.part.String(), q.topic, err)
	}
	if n == 1 {
		op.logger.Warn("metaq: partition unavailable; ordered producer keeps its messages in the local store",
			"topic", q.topic, "partition", q.part.String(), "dir", q.store.dir, "err", cause)
	}
	return SendResult{Topic: m.Topic, Partition: q.part.Partition, BrokerID: q.part.BrokerID, Offset: -1, ID: -1}, nil
}

// layout returns topic's partition layout: declared, or frozen from the
// first ZooKeeper reading that lists partitions.
func (op *orderedProducer) layout(ctx context.Context, topic string) ([]message.Partition, error) {
	op.mu.Lock()
	l, ok := op.layouts[topic]
	op.mu.Unlock()
	if ok {
		return l, nil
	}
	ctx, cancel := context.WithTimeout(ctx, op.timeout)
	defer cancel()
	v := op.cp.view(topic)
	if err := v.Wait(ctx); err != nil {
		return nil, fmt.Errorf("metaq: read partitions of %s from ZooKeeper: %w", topic, err)
	}
	for {
		if ps := v.Partitions(); len(ps) > 0 {
			op.mu.Lock()
			defer op.mu.Unlock()
			if l, ok := op.layouts[topic]; ok {
				return l, nil
			}
			op.layouts[topic] = ps
			op.waited[topic] = true
			op.logger.Info("metaq: ordered producer uses the partitions ZooKeeper lists now for this topic "+
				"(withPartitionLayout fixes them)", "topic", topic, "partitions", len(ps))
			return ps, nil
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: %s has no master partitions in ZooKeeper (%w)", ErrNoPartitions, topic, ctx.Err())
		}
	}
}

// waitReady waits, once per topic and within the send timeout, for the
// first ZooKeeper reading of topic; later, a topic whose view is not ready
// counts as unavailable.
func (op *orderedProducer) waitReady(ctx context.Context, topic string) {
	op.mu.Lock()
	w := op.waited[topic]
	op.waited[topic] = true
	op.mu.Unlock()
	if w {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, op.timeout)
	defer cancel()
	_ = op.cp.view(topic).Wait(ctx)
}

// available returns the address of p's broker if ZooKeeper lists p now
// (and, with skipDown, its connection did not fail lately).
func (op *orderedProducer) available(topic string, p message.Partition, skipDown bool) (string, bool) {
	v := op.cp.view(topic)
	select {
	case <-v.Ready():
	default:
		return "", false
	}
	s := v.Snapshot()
	addr := s.Addrs[p.BrokerID]
	if addr == "" || !slices.Contains(s.Partitions, p) {
		return "", false
	}
	if skipDown && op.cp.isDown(addr, time.Now()) {
		return "", false
	}
	return addr, true
}

// drain resends q's messages oldest first, removing each after the
// broker's ack, until the store is empty or the producer closes.
func (op *orderedProducer) drain(q *orderedQueue) {
	defer op.wg.Done()
	fails, sent := 0, 0
	for {
		select {
		case <-op.stop:
			return // the rest stays on disk
		default:
		}
		e, n := q.store.first()
		if n == 0 {
			q.mu.Lock()
			if q.store.count() == 0 {
				q.draining = false
				q.mu.Unlock()
				if sent > 0 {
					op.logger.Info("metaq: ordered producer's local store drained", "topic", q.topic,
						"partition", q.part.String(), "sent", sent)
				}
				return
			}
			q.mu.Unlock()
			continue
		}
		var err error
		addr, ok := op.available(q.topic, q.part, false)
		if ok {
			// A copy: the broker's reply sets its ID and offset, and the
			// store may be reading the original (compaction).
			m := *e.msg
			ctx, cancel := context.WithTimeout(op.drainCtx, op.timeout)
			_, err = op.cp.attempt(ctx, &m, target{q.part, addr}, true)
			cancel()
			if err == nil {
				op.remove(q, e.seq)
				fails = 0
				sent++
				continue
			}
		}
		fails++
		if err != nil && !unavailable(err) && (fails == 1 || fails%30 == 0) {
			op.logger.Warn("metaq: ordered producer could not resend a message from its local store; retrying",
				"topic", q.topic, "partition", q.part.String(), "attempt", fails, "err", err)
		} else if err != nil {
			op.logger.Debug("metaq: partition still unavailable", "topic", q.topic, "partition", q.part.String(), "err", err)
		}
		t := time.NewTimer(orderedPoll.Delay(fails))
		select {
		case <-t.C:
		case <-op.stop:
			t.Stop()
			return
		}
	}
}

// remove deletes an acknowledged message from q's store, retrying: it
// must not be sent again.
func (op *orderedProducer) remove(q *orderedQueue, seq uint64) {
	for i := 1; ; i++ {
		err := q.store.remove(seq)
		if err == nil {
			return
		}
		op.logger.Error("metaq: could not remove a sent message from the local store; retrying (after a restart "+
			"it would be sent again)", "dir", q.store.dir, "err", err)
		t := time.NewTimer(orderedPoll.Delay(i))
		select {
		case <-t.C:
		case <-op.stop:
			t.Stop()
			return
		}
	}
}

// Close stops accepting messages and waits, until ctx is done, for the
// Sends in flight and for each drainer's current resend; it then closes
// the broker connections (a Send still in flight then keeps its message in
// the local store) and the ZooKeeper session. Messages in the local stores
// stay on disk for the next orderedProducer with the same base directory.
// Idempotent.
func (op *orderedProducer) Close(ctx context.Context) error {
	op.closeOnce.Do(func() {
		op.mu.Lock()
		op.closed = true
		op.mu.Unlock()
		close(op.stop)
		done := make(chan struct{})
		go func() { op.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			op.closeErr = fmt.Errorf("metaq: ordered producer close: %w", ctx.Err())
		}
		op.cancelDrain()
		cctx, cancel := context.WithCancel(context.Background())
		cancel() // the sends had their chance
		_ = op.cp.Close(cctx)
		<-done
		op.releaseStores()
		orderedBases.Lock()
		delete(orderedBases.m, op.cfg.base)
		orderedBases.Unlock()
	})
	return op.closeErr
}

func (op *orderedProducer) releaseStores() {
	op.mu.Lock()
	qs := op.queues
	op.queues = map[orderedKey]*orderedQueue{}
	op.mu.Unlock()
	for _, q := range qs {
		q.store.release()
	}
}

// first returns the oldest pending message and how many are pending.
func (s *recoverStore) first() (recoverEntry, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ents) == 0 {
		return recoverEntry{}, 0
	}
	return *s.ents[0], len(s.ents)
}

// count returns how many messages are pending.
func (s *recoverStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ents)
}
