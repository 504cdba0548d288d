package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/metaq-go/metaq/internal/backoff"
	"github.com/metaq-go/metaq/sdk/balance"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/message"
)

// withBroadcast makes a clusterConsumer a broadcast consumer: every
// consumer gets every message. As in MetaQ (reference §6) the group is
// renamed to "<group>-<suffix>" so that each consumer is alone in its
// group and owns every partition; suffix is the withConsumerID id when
// one is given, else the host name (MetaQ uses the host's IP). Without
// withConsumerID, broadcast consumers on one host therefore share a group
// and split the partitions, as in MetaQ: give each its own id to have
// every process get everything. Offsets are kept per renamed group, so a
// broadcast consumer resumes where it left off.
func withBroadcast() consOption {
	return consumerOpt(func(c *consumerConfig) { c.broadcast = true })
}

// clusterConsumer consumes one topic from every broker of a MetaQ cluster
// as a member of a consumer group coordinated through ZooKeeper, as the
// Java client does (reference §5–6):
//
//   - it registers R/consumers/<g>/ids/<g>_<id> (ephemeral; data: the
//     topic) and watches the group's ids and the topic's topics-sub nodes;
//   - on every change (coalesced) it balances the sorted partitions over
//     the sorted members with the group's strategy (withBalanceStrategy:
//     DEFAULT, partitions in numeric order, or CONSIST);
//   - a partition it loses is stopped, its offset committed, and only then
//     its owner node R/consumers/<g>/owners/<t>/<broker>-<p> deleted; a
//     partition it gains is fetched only after it created that owner node
//     (ephemeral). A node another member still holds is retried with
//     backoff until it is released. So no two members ever read one
//     partition, and once the rebalance settles every partition has an
//     owner;
//   - while its ZooKeeper session is disconnected or expired it reads
//     nothing (its claims may be gone); it registers again by itself.
//
// Offsets are committed through each partition's broker (its configured
// offset store) every withCommitInterval and before releasing a partition,
// unless withOffsetStore names another store. A consumer killed without
// leaving loses its partitions when its ZooKeeper session expires
// (withZKSessionTimeout); the next owner resumes from the last commit, so
// redelivery is bounded by the commit interval.
//
// Options are those of newBrokerConsumer (group, start position, fetch sizes,
// retries, reject policy, consumer id, balance strategy), plus withZKRoot,
// withZKSessionTimeout and withBroadcast. withPartitions does not apply.
type clusterConsumer struct {
	cfg   consumerConfig
	opts  []consOption
	topic string
	group string
	cl    *cluster.Cluster
	ownCl bool // Close closes cl
	strat balance.Strategy

	mu       sync.Mutex
	running  bool
	closed   bool
	closeCh  chan struct{}
	runDone  chan struct{}
	fetching []message.Partition
	// consumers are the broker Consumers running, with their broker ids,
	// for commit and Position.
	consumers map[*brokerConsumer]int

	// onOwn, if set, is told when a partition's fetching starts (true) and
	// has fully stopped (false) (tests).
	onOwn func(p message.Partition, owned bool)
	// joinTopics, if set (by the Client, before Consume), are the topics
	// the member registers in the group: every topic its Client consumes
	// in it. The consumers of one Client share one consumer id on one
	// session, so its registration (created by the first) must list them
	// all, or the others' topics would not count the member.
	joinTopics []string
}

// openClusterConsumer connects to ZooKeeper (zkConnect: comma-separated
// host:port) and returns a consumer of topic for the cluster registered
// there. It waits for the ZooKeeper session until ctx is done. Its group is
// withGroup's (default defaultGroup).
func openClusterConsumer(ctx context.Context, zkConnect, topic string, opts ...consOption) (*clusterConsumer, error) {
	cfg := consumerConfig{logger: slog.Default(), group: defaultGroup, heartbeat: DefaultHeartbeatInterval,
		strategy: balance.NameDefault}
	for _, o := range opts {
		o.applyConsumer(&cfg)
	}
	if len(cfg.partitions) > 0 {
		return nil, errors.New("metaq: withPartitions does not apply to a clusterConsumer: the group assigns partitions")
	}
	if !validToken(topic) || strings.ContainsAny(topic, "/,") {
		return nil, fmt.Errorf("metaq: bad topic %q", topic)
	}
	group := cfg.group
	if cfg.broadcast {
		suffix := cfg.consumerID
		if !cfg.consumerIDSet {
			suffix = hostSuffix()
		}
		group += "-" + suffix
	}
	if !validToken(group) || strings.ContainsAny(group, "/,") {
		return nil, fmt.Errorf("metaq: bad group %q", group)
	}
	if err := cfg.checkGroup(); err != nil {
		return nil, err
	}
	if strings.ContainsAny(cfg.consumerID, "/,") {
		return nil, fmt.Errorf("metaq: bad consumer id %q", cfg.consumerID)
	}
	strat, err := balance.ByName(cfg.strategy)
	if err != nil {
		return nil, fmt.Errorf("metaq: %w", err)
	}
	if cfg.cluster != nil {
		return &clusterConsumer{cfg: cfg, opts: slices.Clone(opts), topic: topic, group: group, cl: cfg.cluster, strat: strat,
			closeCh: make(chan struct{}), consumers: make(map[*brokerConsumer]int)}, nil
	}
	cl, err := cfg.zk.open(ctx, zkConnect, cfg.conn.tls != nil, cfg.logger)
	if err != nil {
		return nil, err
	}
	return &clusterConsumer{cfg: cfg, opts: slices.Clone(opts), topic: topic, group: group, cl: cl, ownCl: true, strat: strat,
		closeCh: make(chan struct{}), consumers: make(map[*brokerConsumer]int)}, nil
}

// commit commits the positions of every partition this member reads now.
func (cc *clusterConsumer) commit(ctx context.Context) error {
	cc.mu.Lock()
	cs := make([]*brokerConsumer, 0, len(cc.consumers))
	for c := range cc.consumers {
		cs = append(cs, c)
	}
	cc.mu.Unlock()
	return errors.Join(parallel(cs, func(c *brokerConsumer) error { return c.commit(ctx) })...)
}

// track adds or removes the running brokerConsumer of broker id.
func (cc *clusterConsumer) track(c *brokerConsumer, id int, on bool) {
	cc.mu.Lock()
	if on {
		cc.consumers[c] = id
	} else {
		delete(cc.consumers, c)
	}
	cc.mu.Unlock()
}

// hostSuffix is the host name made safe for a group name.
func hostSuffix() string {
	h, _ := os.Hostname()
	h = strings.Map(func(r rune) rune {
		if r <= ' ' || r > '~' || r == ',' || r == '/' || r == '.' || r == ':' {
			return '-'
		}
		return r
	}, h)
	if h == "" {
		return "localhost"
	}
	return h
}

// Group returns the consumer's group (with withBroadcast, the renamed one).
func (cc *clusterConsumer) Group() string { return cc.group }

// ConsumerID returns the member's id in ZooKeeper: "<group>_<id>".
func (cc *clusterConsumer) ConsumerID() string {
	return cluster.ConsumerID(cc.group, cc.cfg.consumerID)
}

// Assigned returns the partitions being fetched now, sorted.
func (cc *clusterConsumer) Assigned() []message.Partition {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return slices.Clone(cc.fetching)
}

// brokerRun is the brokerConsumer reading this member's partitions of one broker.
type brokerRun struct {
	id     int
	addr   string
	c      *brokerConsumer
	reqs   chan assignReq
	done   chan error // cap 1: Consume's result
	cancel context.CancelFunc
	parts  []int32 // running, as last reported
}

type assignReq struct {
	parts []int32
	reply chan []int32 // the partitions running after applying
}

// rebalancer is one Consume's state; only its goroutine uses it.
type rebalancer struct {
	cc      *clusterConsumer
	h       Handler
	m       *cluster.Member
	view    *cluster.TopicView
	owned   map[message.Partition]bool // claims this member may hold
	ownSess int64                      // the session owned was claimed on
	// stale: owner nodes this member may hold without knowing it, never
	// fetched: claims of an earlier session (one sent while disconnected
	// can be made on the next session) and claims whose reply was lost.
	// Release deletes them if the current session holds them.
	stale   map[message.Partition]bool
	brokers map[int]*brokerRun
	// settled: the last attempt reached its target.
	settled bool
	ended   chan struct{} // cap 1: a broker's brokerConsumer returned
}

// Consume joins the group and hands every message of the partitions the
// group assigns this member to h until ctx is done, Close is called or a
// partition fails for good; then it stops fetching, commits, releases its
// partitions and leaves the group. Messages of one partition are handled
// one at a time, in order; h must be safe for concurrent use. Retries and
// the reject policy are newBrokerConsumer's.
func (cc *clusterConsumer) Consume(ctx context.Context, h Handler) error {
	cc.mu.Lock()
	switch {
	case cc.closed:
		cc.mu.Unlock()
		return ErrClosed
	case cc.running:
		cc.mu.Unlock()
		return ErrAlreadyConsuming
	}
	cc.running = true
	done := make(chan struct{})
	cc.runDone = done
	cc.mu.Unlock()
	defer func() {
		cc.mu.Lock()
		cc.running = false
		cc.fetching = nil
		cc.mu.Unlock()
		close(done)
	}()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-cc.closeCh:
			cancel()
		case <-rctx.Done():
		}
	}()
	slow := time.AfterFunc(2*cc.cl.SessionTimeout(), func() {
		cc.cfg.logger.Warn("metaq: still waiting to join the group: the consumer id is registered by another live "+
			"ZooKeeper session (another process, or another clusterConsumer with this id, perhaps for another topic)",
			"group", cc.group, "id", cc.ConsumerID())
	})
	topics := cc.joinTopics
	if !slices.Contains(topics, cc.topic) {
		topics = append(slices.Clip(topics), cc.topic)
	}
	m, err := cc.cl.JoinGroup(rctx, cc.group, cc.cfg.consumerID, topics)
	slow.Stop()
	if err != nil {
		return runErr(ctx, fmt.Errorf("metaq: %w", err))
	}
	view := cc.cl.WatchSubscribe(cc.topic)
	r := &rebalancer{cc: cc, h: h, m: m, view: view, owned: make(map[message.Partition]bool),
		stale: make(map[message.Partition]bool), brokers: make(map[int]*brokerRun), ended: make(chan struct{}, 1)}
	err = r.loop(rctx)
	r.shutdown()
	if lerr := m.Leave(); lerr != nil {
		cc.cfg.logger.Warn("metaq: leave group failed; the registration goes with the session", "group", cc.group, "err", lerr)
	}
	return runErr(ctx, err)
}

// rebalanceRetry is the wait before rebalancing again while the last
// attempt left the member unsettled: 50 ms doubling up to 1 s.
var rebalanceRetry = backoff.Policy{Min: 50 * time.Millisecond, Max: time.Second}

// loop rebalances on every change until ctx ends or a partition fails.
func (r *rebalancer) loop(ctx context.Context) error {
	fails := 0
	for {
		if err := r.attempt(ctx); err != nil {
			return err
		}
		var retry <-chan time.Time
		var t *time.Timer
		if !r.settled {
			fails++
			t = time.NewTimer(rebalanceRetry.Delay(fails))
			retry = t.C
		} else {
			fails = 0
		}
		select {
		case <-ctx.Done():
		case <-r.m.Changes():
		case <-r.view.Changes():
		case <-r.ended:
		case <-retry:
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
		for _, br := range r.brokers {
			select {
			case err := <-br.done:
				return r.brokerFailed(br, err)
			default:
			}
		}
	}
}

// brokerFailed turns the end of a broker's Consume into Consume's error.
func (r *rebalancer) brokerFailed(br *brokerRun, err error) error {
	delete(r.brokers, br.id)
	br.cancel()
	_ = br.c.Close(context.Background())
	if err == nil || errors.Is(err, ErrClosed) || errors.Is(err, context.Canceled) {
		err = fmt.Errorf("metaq: consumer of broker %d stopped", br.id)
	}
	return err
}

// attempt moves the member one step towards its target: release what it
// must give up (stop, commit, delete the owner node), claim what it should
// own, and fetch exactly the owned target partitions. It sets r.settled
// when nothing is left to do.
func (r *rebalancer) attempt(ctx context.Context) error {
	cc := r.cc
	r.settled = false
	if !r.m.Active() {
		// Disconnected or expired: our claims may be gone and taken by
		// others, so stop reading everything until we are back.
		r.apply(ctx, nil, nil)
		return nil
	}
	sess := r.m.Session()
	if sess != r.ownSess {
		// A new session: the old one's owner nodes went with it, but a
		// claim sent while disconnected may have been made on this one.
		r.apply(ctx, nil, nil)
		for p := range r.owned {
			r.stale[p] = true
		}
		clear(r.owned)
		r.ownSess = sess
	}
	snap := r.view.Snapshot()
	members := r.m.Members(cc.topic)
	me := r.m.ID()
	if !slices.Contains(members, me) {
		return nil // our registration is not visible yet
	}
	target := cc.strat.Assign(me, members, snap.Partitions)
	want := make(map[message.Partition]bool, len(target))
	for _, p := range target {
		want[p] = true
	}
	// Stop reading what we lose, commit (in apply), then release.
	r.apply(ctx, r.ownedIn(want), snap.Addrs)
	ok := true
	var lose, gain []message.Partition
	for p := range r.owned {
		if !want[p] {
			lose = append(lose, p)
		}
	}
	for p := range r.stale {
		if !want[p] && !r.owned[p] {
			lose = append(lose, p)
		}
	}
	for _, p := range target {
		if !r.owned[p] {
			gain = append(gain, p)
		}
	}
	// ZooKeeper requests pipelined on the session's connection.
	for i, err := range parallel(lose, func(p message.Partition) error { return r.m.Release(cc.topic, p) }) {
		if err != nil {
			cc.cfg.logger.Warn("metaq: release partition failed; retrying", "partition", lose[i].String(), "err", err)
			ok = false
			continue
		}
		delete(r.owned, lose[i])
		delete(r.stale, lose[i])
	}
	for i, err := range parallel(gain, func(p message.Partition) error { return r.m.Claim(cc.topic, p) }) {
		switch {
		case err == nil:
			r.owned[gain[i]] = true
			delete(r.stale, gain[i])
		case errors.Is(err, cluster.ErrOwned):
			ok = false // its owner releases it in its own rebalance
		default:
			// The node may have been created: release it unless we get it.
			cc.cfg.logger.Warn("metaq: claim partition failed; retrying", "partition", gain[i].String(), "err", err)
			r.stale[gain[i]] = true
			ok = false
		}
	}
	if !r.m.Active() || r.m.Session() != sess {
		// The session went while we claimed: claims made on it are void.
		r.apply(ctx, nil, nil)
		return nil
	}
	// Fetch the target partitions we hold; not those whose release failed.
	running := r.apply(ctx, r.ownedIn(want), snap.Addrs)
	if running != len(target) {
		ok = false
	}
	r.settled = ok
	return nil
}

// ownedIn returns the owned partitions that are in want.
func (r *rebalancer) ownedIn(want map[message.Partition]bool) map[message.Partition]bool {
	out := make(map[message.Partition]bool, len(want))
	for p := range r.owned {
		if want[p] {
			out[p] = true
		}
	}
	return out
}

// parallel runs f on every element of xs, at most 16 at a time, and
// returns the errors in order.
func parallel[T any](xs []T, f func(T) error) []error {
	errs := make([]error, len(xs))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, x := range xs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = f(x)
		})
	}
	wg.Wait()
	return errs
}

// apply makes the fetched partitions exactly those of parts whose broker
// address is known, one brokerConsumer per broker. It returns how many are
// being fetched.
func (r *rebalancer) apply(ctx context.Context, parts map[message.Partition]bool, addrs map[int]string) int {
	byBroker := make(map[int][]int32)
	for p := range parts {
		if addrs[p.BrokerID] == "" {
			continue
		}
		byBroker[p.BrokerID] = append(byBroker[p.BrokerID], p.Partition)
	}
	// Brokers we stop reading from, or whose address changed.
	var gone []*brokerRun
	for id, br := range r.brokers {
		if len(byBroker[id]) == 0 || addrs[id] != br.addr {
			gone = append(gone, br)
		}
	}
	r.stopBrokers(gone)
	n := 0
	var fetching []message.Partition
	for id, ps := range byBroker {
		slices.Sort(ps)
		br := r.brokers[id]
		if br == nil {
			var err error
			if br, err = r.startBroker(ctx, id, addrs[id]); err != nil {
				r.cc.cfg.logger.Warn("metaq: start consumer for broker failed; retrying", "broker", id, "err", err)
				continue
			}
		}
		if !slices.Equal(br.parts, ps) {
			r.send(br, ps)
		}
		n += len(br.parts)
		for _, p := range br.parts {
			fetching = append(fetching, message.Partition{BrokerID: id, Partition: p})
		}
	}
	slices.SortFunc(fetching, message.Partition.Compare)
	r.cc.mu.Lock()
	r.cc.fetching = fetching
	r.cc.mu.Unlock()
	return n
}

// stopBrokers stops the Consumers of brs (each stops and commits its
// partitions) concurrently, so that one slow broker does not keep the
// others fetching, and forgets them.
func (r *rebalancer) stopBrokers(brs []*brokerRun) {
	parallel(brs, func(br *brokerRun) error {
		r.send(br, nil)
		br.cancel()
		if err := <-br.done; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrClosed) {
			r.cc.cfg.logger.Warn("metaq: broker consumer ended", "broker", br.id, "err", err)
		}
		_ = br.c.Close(context.Background())
		r.cc.track(br.c, br.id, false)
		return nil
	})
	for _, br := range brs {
		delete(r.brokers, br.id)
	}
}

// send hands a broker's brokerConsumer its partitions and waits until it has
// stopped (and committed) the ones left out and started the new ones.
func (r *rebalancer) send(br *brokerRun, ps []int32) {
	reply := make(chan []int32, 1)
	select {
	case br.reqs <- assignReq{parts: ps, reply: reply}:
	case err := <-br.done:
		// It ended on its own (a partition failed): report it next wake.
		br.done <- err
		br.parts = nil
		return
	}
	br.parts = <-reply
}

func (r *rebalancer) startBroker(ctx context.Context, id int, addr string) (*brokerRun, error) {
	cc := r.cc
	opts := append(slices.Clone(cc.opts), withGroup(cc.group), consumerOpt(func(c *consumerConfig) {
		c.managed, c.membership = true, false
	}))
	c, err := newBrokerConsumer(addr, cc.topic, opts...)
	if err != nil {
		return nil, err
	}
	if hook := cc.onOwn; hook != nil {
		c.onOwn = func(p int32, owned bool) { hook(message.Partition{BrokerID: id, Partition: p}, owned) }
	}
	cc.track(c, id, true)
	bctx, cancel := context.WithCancel(ctx)
	br := &brokerRun{id: id, addr: addr, c: c, reqs: make(chan assignReq), done: make(chan error, 1), cancel: cancel}
	go func() {
		br.done <- c.consumeManaged(bctx, r.h, id, br.reqs)
		select {
		case r.ended <- struct{}{}:
		default:
		}
	}()
	r.brokers[id] = br
	return br, nil
}

// shutdown stops every partition (committing), releases every claim and
// stops the broker consumers.
func (r *rebalancer) shutdown() {
	r.apply(context.Background(), nil, nil) // stops every broker's brokerConsumer
	if r.m.Active() {
		for p := range r.stale {
			r.owned[p] = true
		}
		for p := range r.owned {
			if err := r.m.Release(r.cc.topic, p); err != nil {
				r.cc.cfg.logger.Warn("metaq: release partition failed; it goes with the session", "partition", p.String(), "err", err)
			}
		}
	}
	clear(r.owned)
	clear(r.stale)
}

// Close stops Consume (waiting for it until ctx is done), which commits,
// releases the partitions and leaves the group, then closes the ZooKeeper
// session. It is idempotent.
func (cc *clusterConsumer) Close(ctx context.Context) error {
	cc.mu.Lock()
	if cc.closed {
		cc.mu.Unlock()
		return nil
	}
	cc.closed = true
	close(cc.closeCh)
	done, running := cc.runDone, cc.running
	cc.mu.Unlock()
	var err error
	if running && done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			err = fmt.Errorf("metaq: cluster consumer close: %w", ctx.Err())
		}
	}
	if cc.ownCl {
		if cerr := cc.cl.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

// consumeManaged is Consume for a brokerConsumer whose partitions a
// clusterConsumer assigns: each request sets the partitions to fetch
// (stopping and committing the others first) and is answered with the
// partitions running. It returns when ctx ends or a partition fails.
func (c *brokerConsumer) consumeManaged(ctx context.Context, h Handler, brokerID int, reqs <-chan assignReq) error {
	c.bid.set(brokerID)
	fh := func(ctx context.Context, m *message.Message) error {
		m.BrokerID = brokerID
		return h(ctx, m)
	}
	gm := &groupMember{h: fh, commitTimeout: min(c.cn.opts.requestTimeout, 3*time.Second), commitAttempts: 2}
	return c.runDynamic(ctx, h, gm, func(ctx context.Context) error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case err := <-gm.errCh:
				return err
			case r := <-reqs:
				gm.apply(ctx, r.parts)
				r.reply <- slices.Sorted(maps.Keys(gm.running))
			}
		}
	}, nil)
}
