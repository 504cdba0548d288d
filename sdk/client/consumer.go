package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/internal/backoff"
	"github.com/metaq-go/metaq/sdk/balance"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
)

// Consuming defaults (reference §8 and §14).
const (
	// defaultGroup is the consumer group sent with every get.
	defaultGroup = "metaq-go"
	// defaultMaxFetchSize is the initial get size in bytes.
	defaultMaxFetchSize = 1 << 20
	// defaultMaxFetchSizeLimit is how far the get size may grow, in bytes,
	// when a record does not fit.
	defaultMaxFetchSizeLimit = 4 << 20
	// defaultMaxFetchDelay caps the pause between gets that return no data.
	defaultMaxFetchDelay = time.Second
	// defaultMaxRetries is how many times a failed message is retried
	// before it is rejected, so it is handled at most 6 times.
	defaultMaxRetries = 5
	// defaultRetryBackoff is the first pause before retrying a failed
	// message; it doubles with each retry.
	defaultRetryBackoff = 50 * time.Millisecond
	// DefaultCommitInterval is how often positions go to the offset store
	// (MetaQ's commitOffsetPeriodInMills).
	DefaultCommitInterval = 5 * time.Second
)

// StartFrom says where a partition with no stored offset starts.
type StartFrom struct {
	kind   int
	offset int64
}

const (
	startEarliest = iota
	startLatest
	startAt
)

var (
	// Earliest starts at the oldest message still stored.
	Earliest = StartFrom{kind: startEarliest}
	// Latest starts after the newest message: only new messages are read.
	Latest = StartFrom{kind: startLatest}
)

// AtOffset starts at byte offset n, which must be a record start (such as a
// SendResult.Offset or a Position).
func AtOffset(n int64) StartFrom { return StartFrom{kind: startAt, offset: n} }

// RejectFunc receives a message whose handler failed on every attempt,
// with the last error. The consumer moves past the message after it returns.
type RejectFunc func(ctx context.Context, m *message.Message, err error)

// Handler processes one message. Returning an error retries the message.
type Handler func(ctx context.Context, m *message.Message) error

type consumerConfig struct {
	conn           connOptions
	logger         *slog.Logger
	group          string
	partitions     []int32
	start          StartFrom
	fetchSize      int
	fetchLimit     int
	maxDelay       time.Duration
	store          offsets.Store
	storeSet       bool          // withOffsetStore was given (nil: no store)
	groupSet       bool          // withGroup was given
	commitInterval time.Duration // 0: no periodic commits
	maxRetries     int
	retryBackoff   time.Duration
	// filter is the expression the broker runs the gets through (Filter;
	// "" or "*": none).
	filter string

	// maxUnacked > 0: ManualAck (ack.go), with that many unsettled
	// messages per partition at most.
	maxUnacked int

	reject          RejectPolicy // nil: RecoverLocally("") with a group, else Drop()
	recoverInterval time.Duration
	// dedup drops messages whose id was handled already (the Client's,
	// shared by its consumers); nil: none dropped.
	dedup *idCache

	// Group membership (group.go): with withGroup and no withPartitions.
	heartbeat  time.Duration
	strategy   string
	consumerID string
	membership bool // withGroupMembership

	// Cluster mode (cluster_consumer.go).
	managed       bool // partitions are started and stopped by a clusterConsumer
	zk            zkConfig
	cluster       *cluster.Cluster // a Client's session, shared (not closed)
	broadcast     bool
	consumerIDSet bool
}

// withGroup sets the consumer group. Default defaultGroup. A consumer
// with a group set here keeps its positions on the broker (a
// brokerOffsetStore) unless withOffsetStore says otherwise: it resumes
// where the group left off, commits every DefaultCommitInterval and when
// consumption stops.
func withGroup(g string) consOption {
	return consumerOpt(func(c *consumerConfig) { c.group, c.groupSet = g, true })
}

// withPartitions restricts the consumer to these partitions. Default: every
// partition of the topic, learned from `stats topics`, or, with withGroup,
// the partitions the group assigns this member (see withHeartbeatInterval).
func withPartitions(ps ...int32) consOption {
	return consumerOpt(func(c *consumerConfig) { c.partitions = append([]int32(nil), ps...) })
}

// withStartFrom sets where partitions without a stored offset start.
// Default Earliest.
func withStartFrom(s StartFrom) consOption {
	return consumerOpt(func(c *consumerConfig) { c.start = s })
}

// withMaxFetchSize sets the initial get size in bytes. Default 1 MiB.
func withMaxFetchSize(n int) consOption {
	return consumerOpt(func(c *consumerConfig) {
		if n > 0 {
			c.fetchSize = n
		}
	})
}

// withMaxFetchSizeLimit sets how large the get size may grow when a record
// does not fit (it doubles, then halves back when replies are less than
// half full). Default 4 MiB.
func withMaxFetchSizeLimit(n int) consOption {
	return consumerOpt(func(c *consumerConfig) {
		if n > 0 {
			c.fetchLimit = n
		}
	})
}

// withMaxFetchDelay caps the pause between gets that find no new data: each
// empty or failed get adds a tenth of it; data resets it. Default 1 s.
func withMaxFetchDelay(d time.Duration) consOption {
	return consumerOpt(func(c *consumerConfig) {
		if d > 0 {
			c.maxDelay = d
		}
	})
}

// withOffsetStore loads start positions from s and commits positions to it
// every interval (<= 0: keep the current interval, DefaultCommitInterval
// unless withCommitInterval changed it) and when consumption stops, each
// time in one call for all the consumer's partitions. A nil s turns
// offset storage off, even with withGroup.
func withOffsetStore(s offsets.Store, interval time.Duration) consOption {
	return consumerOpt(func(c *consumerConfig) {
		c.store, c.storeSet = s, true
		if interval > 0 {
			c.commitInterval = interval
		}
	})
}

// withCommitInterval sets how often changed positions are committed to the
// offset store. 0 turns periodic commits off: positions are then committed
// only when consumption stops (Close, or Consume/Messages returning).
// Default DefaultCommitInterval.
func withCommitInterval(d time.Duration) consOption {
	return consumerOpt(func(c *consumerConfig) { c.commitInterval = max(d, 0) })
}

// withRetries sets how many times a failed message is retried (0: never)
// and the first pause between attempts, which doubles up to 32 times it.
func withRetries(n int, backoff time.Duration) consOption {
	return consumerOpt(func(c *consumerConfig) {
		if n >= 0 {
			c.maxRetries = n
		}
		if backoff > 0 {
			c.retryBackoff = backoff
		}
	})
}

// withFilter sets the consumer's filter expression (Filter).
func withFilter(expr string) consOption {
	return consumerOpt(func(c *consumerConfig) {
		if strings.TrimSpace(expr) == "*" {
			expr = ""
		}
		c.filter = expr
	})
}

// partState is one assigned partition.
type partState struct {
	p         int32
	pos       atomic.Int64 // next offset after the last handled message
	lastID    atomic.Int64 // id of the last handled message, -1 if none
	committed int64        // last committed position (commit goroutine only)
	fetchSize int          // current get size, kept across runs (fetcher only)
	unaligned bool         // pos came from AtOffset and no record was read yet (fetcher only)
	acks      *ackState    // ManualAck; nil: a message is settled when its handler returns
}

// brokerConsumer reads one topic's partitions from one broker. Assignment (which
// partitions) is decided once, before fetching starts; each partition is
// fetched by its own goroutine, with the next get in flight while the
// handler runs.
type brokerConsumer struct {
	cfg   consumerConfig
	cn    *conn
	topic string
	// bid is cn's broker id: given by a clusterConsumer, else learned
	// when an offset store first needs it.
	bid brokerID

	mu       sync.Mutex
	parts    []*partState // nil until the first run
	byID     map[int32]*partState
	running  bool
	runDone  chan struct{}
	closed   bool
	closeCh  chan struct{}
	commitMu sync.Mutex
	// onOwn, if set, is told when a partition's fetching starts (true)
	// and has fully stopped (false) in group mode (tests).
	onOwn func(p int32, owned bool)
	// onLost, if set, is told when a group member learns that the broker
	// dropped it (its connection broke, or a heartbeat answered 404),
	// before it stops its partitions (tests).
	onLost func()

	// Set by newBrokerConsumer from the reject policy: rejectFn for every policy
	// but RecoverLocally, which sets recoverDir instead, and RetryInPlace,
	// which sets inPlaceMax (the longest pause between attempts).
	rejectFn   rejecter
	recoverDir string
	inPlaceMax time.Duration
}

// newBrokerConsumer returns a consumer of topic at the broker at addr. It
// connects lazily, when Consume or Messages first runs.
func newBrokerConsumer(addr, topic string, opts ...consOption) (*brokerConsumer, error) {
	cfg := consumerConfig{conn: defaultConnOptions(), logger: slog.Default(), group: defaultGroup, start: Earliest,
		fetchSize: defaultMaxFetchSize, fetchLimit: defaultMaxFetchSizeLimit, maxDelay: defaultMaxFetchDelay,
		commitInterval: DefaultCommitInterval, maxRetries: defaultMaxRetries, retryBackoff: defaultRetryBackoff,
		recoverInterval: DefaultRecoverInterval, heartbeat: DefaultHeartbeatInterval, strategy: balance.NameDefault}
	for _, o := range opts {
		o.applyConsumer(&cfg)
	}
	switch {
	case checkAddr(addr) != nil:
		return nil, checkAddr(addr)
	case !validToken(topic):
		return nil, fmt.Errorf("metaq: bad topic %q", topic)
	case !validToken(cfg.group):
		return nil, fmt.Errorf("metaq: bad group %q", cfg.group)
	}
	if err := cfg.checkGroup(); err != nil {
		return nil, err
	}
	if cfg.fetchLimit < cfg.fetchSize {
		cfg.fetchLimit = cfg.fetchSize
	}
	cfg.conn.maxReply = max(cfg.conn.maxReply, cfg.fetchLimit+64<<10)
	c := &brokerConsumer{cfg: cfg, cn: newConn(addr, cfg.conn), topic: topic, closeCh: make(chan struct{})}
	c.resolveReject()
	if !cfg.storeSet && cfg.groupSet {
		c.cfg.store = &brokerOffsetStore{cn: c.cn, id: &c.bid}
	}
	return c, nil
}

func validToken(s string) bool { return s != "" && !strings.ContainsAny(s, " \r\n\t") }

// Position returns the next offset the consumer will deliver from
// partition p: the offset after the last handled message. It is -1 for a
// partition that is not assigned or before the first run started.
func (c *brokerConsumer) Position(p int32) int64 {
	c.mu.Lock()
	ps := c.byID[p]
	c.mu.Unlock()
	if ps == nil {
		return -1
	}
	return ps.pos.Load()
}

// Assigned returns the partitions this consumer reads (nil before the first run).
func (c *brokerConsumer) Assigned() []int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]int32, len(c.parts))
	for i, ps := range c.parts {
		out[i] = ps.p
	}
	return out
}

// startRun marks the consumer running, assigns partitions and resolves
// their start positions on the first run. The returned context ends when
// ctx does or the consumer is closed. The caller cancels it, waits for its
// goroutines, then calls finish.
func (c *brokerConsumer) startRun(ctx context.Context) (rctx context.Context, cancel, finish func(), err error) {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return nil, nil, nil, ErrClosed
	case c.running:
		c.mu.Unlock()
		return nil, nil, nil, ErrAlreadyConsuming
	}
	c.running = true
	done := make(chan struct{})
	c.runDone = done
	closeCh := c.closeCh
	c.mu.Unlock()
	rctx, cancelCtx := context.WithCancel(ctx)
	rdone := rctx.Done() // rctx is a result: the error return below writes it
	go func() {
		select {
		case <-closeCh:
			cancelCtx()
		case <-rdone:
		}
	}()
	finish = func() {
		cancelCtx()
		if err := c.commit(context.Background()); err != nil {
			// Close retries it and returns the error if it fails again.
			c.cfg.logger.Error("metaq: final offset commit failed", "topic", c.topic, "group", c.cfg.group, "err", err)
		}
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
		close(done)
	}
	if err := c.init(rctx); err != nil {
		finish()
		return nil, nil, nil, err
	}
	return rctx, cancelCtx, finish, nil
}

// init assigns partitions and loads start positions, once.
func (c *brokerConsumer) init(ctx context.Context) error {
	c.mu.Lock()
	initialized := c.parts != nil
	c.mu.Unlock()
	if initialized {
		return nil
	}
	if c.groupMode() || c.cfg.managed {
		// The group assigns partitions as it goes (group.go,
		// cluster_consumer.go).
		c.mu.Lock()
		c.parts, c.byID = []*partState{}, map[int32]*partState{}
		c.mu.Unlock()
		return nil
	}
	ids := c.cfg.partitions
	if len(ids) == 0 {
		infos, err := statsTopics(ctx, c.cn)
		if err != nil {
			return fmt.Errorf("metaq: learn partitions of %s: %w", c.topic, err)
		}
		for _, ti := range infos {
			if ti.Name == c.topic {
				for p := 0; p < ti.Partitions; p++ {
					ids = append(ids, int32(p))
				}
			}
		}
		if len(ids) == 0 {
			if denied, _ := unlisted(ctx, c.cn, c.topic); denied != nil {
				return fmt.Errorf("metaq: learn partitions of %s: %w", c.topic, denied)
			}
			return fmt.Errorf("%w: %q is not listed by the broker at %s", ErrUnknownTopic, c.topic, c.cn.addr)
		}
	}
	stored, err := c.loadStored(ctx, ids)
	if err != nil {
		return err
	}
	parts := make([]*partState, len(ids))
	byID := make(map[int32]*partState, len(ids))
	for i, p := range ids {
		off, unaligned, err := c.startOffset(ctx, p, stored)
		if err != nil {
			return err
		}
		ps := c.newPartState(p, off, unaligned)
		parts[i], byID[p] = ps, ps
	}
	c.mu.Lock()
	c.parts, c.byID = parts, byID
	c.mu.Unlock()
	return nil
}

// newPartState returns the state of partition p starting at off, with no
// message handled yet.
func (c *brokerConsumer) newPartState(p int32, off int64, unaligned bool) *partState {
	ps := &partState{p: p, committed: off, fetchSize: c.cfg.fetchSize, unaligned: unaligned}
	ps.pos.Store(off)
	ps.lastID.Store(-1)
	if c.cfg.maxUnacked > 0 {
		ps.acks = newAckState(ps, c.cfg.maxUnacked)
	}
	return ps
}

// loadStored returns the stored positions of ids (absent: none stored),
// in one call. An error fails the start rather than silently starting
// elsewhere.
func (c *brokerConsumer) loadStored(ctx context.Context, ids []int32) (map[int32]int64, error) {
	out := make(map[int32]int64)
	if c.cfg.store == nil || len(ids) == 0 {
		return out, nil
	}
	ps, err := c.positions(ctx, len(ids), func(i int) (int32, int64, int64) { return ids[i], -1, -1 })
	if err == nil {
		ps, err = c.cfg.store.Load(ctx, c.cfg.group, ps)
	}
	if err == nil && len(ps) != len(ids) {
		err = fmt.Errorf("the store returned %d positions for %d partitions", len(ps), len(ids))
	}
	if err != nil {
		return nil, fmt.Errorf("metaq: load offsets of %s for group %s: %w", c.topic, c.cfg.group, err)
	}
	for i, p := range ps {
		if p.Offset >= 0 {
			out[ids[i]] = p.Offset
		}
	}
	return out, nil
}

// positions returns n positions of the consumer's topic on its broker;
// at(i) gives the i-th partition, offset and msgId.
func (c *brokerConsumer) positions(ctx context.Context, n int, at func(i int) (p int32, offset, msgID int64)) ([]message.Position, error) {
	rctx, cancel := withDefaultTimeout(ctx, c.cn.opts.requestTimeout)
	defer cancel()
	id, err := c.bid.get(rctx, c.cn)
	if err != nil {
		return nil, err
	}
	ps := make([]message.Position, n)
	for i := range ps {
		p, off, msgID := at(i)
		ps[i] = message.Position{Topic: c.topic, Partition: message.Partition{BrokerID: id, Partition: p}, Offset: off, MsgID: msgID}
	}
	return ps, nil
}

// startOffset returns where p starts (its stored offset, else per
// withStartFrom) and whether that offset came from the user (AtOffset), so
// may not be a record start.
func (c *brokerConsumer) startOffset(ctx context.Context, p int32, stored map[int32]int64) (int64, bool, error) {
	if off, ok := stored[p]; ok {
		return off, false, nil
	}
	switch c.cfg.start.kind {
	case startLatest:
		off, err := nearestOffset(ctx, c.cn, c.topic, c.cfg.group, p, latestOffset)
		if errors.Is(err, ErrNoData) {
			return 0, false, nil // no store yet: everything is new
		}
		if err != nil {
			return 0, false, fmt.Errorf("metaq: find latest offset of %s-%d: %w", c.topic, p, err)
		}
		return off, false, nil
	case startAt:
		return c.cfg.start.offset, true, nil
	}
	return 0, false, nil // a 301 moves it up to the oldest retained offset
}

// commit sends the positions that changed since the last successful
// commit to the offset store, in one call. On failure nothing is marked
// committed, so the next commit sends them again; the error is returned
// (and logged by the caller), never dropped.
func (c *brokerConsumer) commit(ctx context.Context) error {
	if c.cfg.store == nil {
		return nil
	}
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	c.mu.Lock()
	parts := c.parts
	c.mu.Unlock()
	type change struct {
		ps         *partState
		pos, msgID int64
	}
	var changed []change
	for _, ps := range parts {
		// lastID first: it is stored before pos, so it is never newer.
		id := ps.lastID.Load()
		if pos := ps.pos.Load(); pos != ps.committed {
			changed = append(changed, change{ps, pos, id})
		}
	}
	if len(changed) == 0 {
		return nil
	}
	ctx, cancel := withDefaultTimeout(ctx, c.cn.opts.requestTimeout)
	defer cancel()
	batch, err := c.positions(ctx, len(changed), func(i int) (int32, int64, int64) {
		return changed[i].ps.p, changed[i].pos, changed[i].msgID
	})
	if err != nil {
		return fmt.Errorf("metaq: commit offsets of %s for group %s: %w", c.topic, c.cfg.group, err)
	}
	if err := c.cfg.store.Commit(ctx, c.cfg.group, batch); err != nil {
		return err
	}
	for _, ch := range changed {
		ch.ps.committed = ch.pos
	}
	return nil
}

func (c *brokerConsumer) commitLoop(ctx context.Context) {
	if c.cfg.store == nil || c.cfg.commitInterval <= 0 {
		return
	}
	t := time.NewTicker(c.cfg.commitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := c.commit(ctx); err != nil && ctx.Err() == nil {
				c.cfg.logger.Warn("metaq: offset commit failed; retrying next period", "topic", c.topic,
					"group", c.cfg.group, "err", err)
			}
		}
	}
}

// Consume fetches and hands every message to h until ctx is done, Close
// is called, or a partition fails for good (a *CorruptRecordError, a record
// over the fetch size limit). Messages of one partition are handled one at
// a time, in order; different partitions are handled concurrently, so h
// must be safe for concurrent use. A failing message is retried (see
// withRetries) and then passed to the reject policy (withRejectPolicy),
// which has it before the consumer moves past it; with RecoverLocally,
// Consume also replays the recovery store to h in the background.
// Consume returns ctx's error, ErrClosed, the partition's error, or an
// error opening the recovery store.
func (c *brokerConsumer) Consume(ctx context.Context, h Handler) error {
	if c.groupMode() {
		return c.consumeGroup(ctx, h)
	}
	return c.runWith(ctx, h, func(rctx context.Context, rej rejecter, wg *sync.WaitGroup) error {
		errCh := make(chan error, 1)
		for _, ps := range c.parts {
			c.runPartition(rctx, ps, h, rej, errCh, wg)
		}
		select {
		case <-rctx.Done():
			return nil
		case err := <-errCh:
			return err
		}
	}, nil)
}

// rejecter hands a message that failed every attempt to the reject policy.
type rejecter = func(context.Context, *message.Message, error) error

// runWith runs one Consume: it starts the run, the recovery replay (to h)
// and the commit loop, then body, which starts the partitions' goroutines
// (in wg, or its own) and returns when the run should end. The run's
// context is then cancelled, after runs, and the goroutines are awaited;
// the recovery store is released and the final commit made last.
func (c *brokerConsumer) runWith(ctx context.Context, h Handler,
	body func(rctx context.Context, rej rejecter, wg *sync.WaitGroup) error, after func()) error {
	rctx, cancel, finish, err := c.startRun(ctx)
	if err != nil {
		return err
	}
	defer finish()
	rej, rs, err := c.startRecover()
	if err != nil {
		return err
	}
	if rs != nil {
		defer rs.release() // after the run's goroutines, before finish
	}
	var wg sync.WaitGroup
	if rs != nil {
		wg.Go(func() { c.replayLoop(rctx, rs, h) })
	}
	go c.commitLoop(rctx)
	err = body(rctx, rej, &wg)
	cancel()
	if after != nil {
		after()
	}
	wg.Wait()
	return runErr(ctx, err)
}

// runPartition starts the fetcher and handler goroutines of one partition
// (counted in wg); they stop when ctx ends. A partition that fails for good
// sends its error to errCh.
func (c *brokerConsumer) runPartition(rctx context.Context, ps *partState, h Handler,
	rej rejecter, errCh chan<- error, wg *sync.WaitGroup) {
	if ps.acks != nil {
		c.runAckPartition(rctx, ps, h, rej, errCh, wg)
		return
	}
	ch := make(chan *fetched, 1)
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer close(ch)
		c.fetchLoop(rctx, ps, func(f *fetched) bool {
			select {
			case ch <- f:
				return true
			case <-rctx.Done():
				return false
			}
		})
	}()
	go func() {
		defer wg.Done()
		for f := range ch {
			if f.err != nil {
				select {
				case errCh <- f.err:
				default:
				}
				return
			}
			for i := range f.msgs {
				m := &f.msgs[i]
				if !c.cfg.dedup.drop(c.topic, m.ID) && !c.handle(rctx, m, h, rej) {
					return
				}
				ps.lastID.Store(m.ID)
				ps.pos.Store(f.ends[i])
			}
			ps.pos.Store(f.next)
		}
	}()
}

// runErr is what a run returns: its error, else ctx's, else ErrClosed.
func runErr(ctx context.Context, err error) error {
	switch {
	case err != nil:
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return ErrClosed
}

// handle runs h on m with retries, then hands it to rej; false means ctx
// ended first and m was not handled (nor rejected).
func (c *brokerConsumer) handle(ctx context.Context, m *message.Message, h Handler,
	rej rejecter) bool {
	for attempt := 0; ; attempt++ {
		err := h(ctx, m)
		if err == nil {
			if c.cfg.maxUnacked == 0 { // ManualAck: on Ack
				c.cfg.dedup.handled(c.topic, m.ID)
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		pause := backoff.Policy{Min: c.cfg.retryBackoff, Max: c.cfg.retryBackoff << 5}
		switch {
		case c.inPlaceMax > 0:
			// RetryInPlace: never rejected; the pause doubles up to
			// inPlaceMax, from retryBackoff (100 ms when that is 0).
			if attempt == c.cfg.maxRetries {
				c.cfg.logger.Warn("metaq: handler failing; retrying in place, the partition waits", "topic", m.Topic,
					"partition", m.Partition, "offset", m.Offset, "id", m.ID, "attempts", attempt+1, "err", err)
			}
			pause = backoff.Policy{Min: cmp.Or(c.cfg.retryBackoff, defaultRetryBackoff), Max: c.inPlaceMax}
		case attempt >= c.cfg.maxRetries:
			return c.reject(ctx, m, err, rej)
		}
		// The pause doubles from retryBackoff, up to 32 times it.
		if pause.Sleep(ctx, attempt+1) != nil {
			return false
		}
	}
}

// Messages returns an iterator over the messages of every assigned
// partition, each partition in order. The iteration ends when ctx is done,
// Close is called or the loop breaks; a partition that fails for good
// yields (nil, err) and ends it. A message counts as handled (its Position
// moves past it) when the loop body returns. Only one Consume or Messages
// runs at a time.
func (c *brokerConsumer) Messages(ctx context.Context) iter.Seq2[*message.Message, error] {
	return func(yield func(*message.Message, error) bool) {
		if c.groupMode() {
			yield(nil, errGroupMessages)
			return
		}
		if c.cfg.maxUnacked > 0 {
			yield(nil, errManualAck)
			return
		}
		rctx, cancel, finish, err := c.startRun(ctx)
		if err != nil {
			yield(nil, err)
			return
		}
		out := make(chan *fetched, len(c.parts))
		var wg sync.WaitGroup
		defer func() {
			cancel()
			wg.Wait()
			finish()
		}()
		for _, ps := range c.parts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.fetchLoop(rctx, ps, func(f *fetched) bool {
					select {
					case out <- f:
						return true
					case <-rctx.Done():
						return false
					}
				})
			}()
		}
		go c.commitLoop(rctx)
		for {
			select {
			case <-rctx.Done():
				return
			case f := <-out:
				if f.err != nil {
					yield(nil, f.err)
					return
				}
				ps := f.part
				for i := range f.msgs {
					m := &f.msgs[i]
					if c.cfg.dedup.drop(c.topic, m.ID) {
						ps.lastID.Store(m.ID)
						ps.pos.Store(f.ends[i])
						continue
					}
					ok := yield(m, nil)
					if ok {
						c.cfg.dedup.handled(c.topic, m.ID)
					}
					ps.lastID.Store(m.ID)
					ps.pos.Store(f.ends[i])
					if !ok {
						return
					}
				}
				ps.pos.Store(f.next)
			}
		}
	}
}

// Close stops Consume or Messages, waits for them to return (until ctx is
// done), commits positions and closes the connection. Positions of the
// messages handled so far are committed (at-least-once: a message is
// handled before its position is committed); if that commit fails, Close
// returns the error. It is idempotent.
func (c *brokerConsumer) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.closeCh)
	done := c.runDone
	running := c.running
	c.mu.Unlock()
	var err error
	if running && done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			err = fmt.Errorf("metaq: consumer close: %w", ctx.Err())
		}
	}
	if err == nil {
		// Retries a final commit that failed when the run ended (a no-op
		// when nothing changed since the last successful commit).
		if cerr := c.commit(ctx); cerr != nil {
			err = fmt.Errorf("metaq: consumer close: commit offsets: %w", cerr)
		}
	}
	c.cn.close()
	return err
}
