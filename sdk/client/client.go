package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/message"
)

// Client produces to and consumes from metaq brokers, found directly
// (Brokers) or through ZooKeeper (ZooKeeper). Build it with New; every
// option is checked there, and one that does not apply to the Client
// being built is an error, never ignored. A Client is safe for
// concurrent use. Close it with Close.
type Client struct {
	cfg config
	zk  *cluster.Cluster // nil in direct mode

	mu        sync.Mutex
	closed    bool
	prod      *clusterProducer
	ordered   *orderedProducer
	spool     *spooler
	orderedQ  chan orderedJob
	orderedWG sync.WaitGroup
	prodErr   error
	cons      []consumerRun
	consuming bool
	closeOnce sync.Once
	closeErr  error
	txs       txSession        // local transactions' session (transaction.go)
	raw       map[string]*conn // Request's connections (request.go)
	dedup     *idCache         // handled message ids (MessageIDCache); nil: off
	retrier   *retrier         // Reject(RetryTopics(...)) or the default; nil: another policy
	// retryDefault: retrier is the group's default policy, not chosen
	// with Reject; Consume falls back to Drop when it cannot create the
	// topics (retryRuns, the retry topic's consumers, are then not run).
	retryDefault bool
	retryRuns    map[consumerRun]bool
}

// consumerRun is one topic's consumer of a Client (per broker in direct
// mode): a *brokerConsumer or a *clusterConsumer.
type consumerRun interface {
	Consume(ctx context.Context, h Handler) error
	Close(ctx context.Context) error
	commit(ctx context.Context) error
	assigned() []message.Partition
	position(topic string, p message.Partition) (int64, bool)
	rollback()
}

// Opt configures a Client (see New).
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

// config is what the options of New set.
type config struct {
	brokers   []string
	zkSet     bool
	zkConn    string
	zk        zkConfig
	conn      connOptions
	logger    *slog.Logger
	zkOnly    []string // options given that need ZooKeeper
	consOpts  []string // consumer options given
	groupOnly []string // options given that need ConsumerGroup
	errs      []error

	// Producing.
	prodOpts   []prodOption
	ordered    bool
	orderedDir string
	spool      bool
	spoolDir   string
	layouts    []prodOption
	retrySet   bool
	retry      bool
	selSet     bool

	// Consuming.
	topics    []string
	parts     map[string][]int32
	group     string
	broadcast bool
	storeSet  bool
	cOpts     []consOption
	idCache   int           // MessageIDCache's size; 0: off
	retryOpts *RetryOptions // Reject(RetryTopics(...)); nil: another policy
	rejectSet bool          // Reject was given
	manualAck int           // ManualAck's bound; 0: not given
}

func (c *config) errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("metaq: "+format, args...))
}

func consumerOption(name string, f func(*config)) Opt {
	return optFunc(func(c *config) {
		c.consOpts = append(c.consOpts, name)
		f(c)
	})
}

func consumerPass(name string, o consOption) Opt {
	return consumerOption(name, func(c *config) { c.cOpts = append(c.cOpts, o) })
}

// Brokers makes the Client talk to these brokers directly ("host:port"
// each), with no ZooKeeper: it learns each one's broker id and partitions
// from `stats`, and asks again every 30 s.
func Brokers(addrs ...string) Opt {
	return optFunc(func(c *config) {
		for _, a := range addrs {
			if err := checkAddr(a); err != nil {
				c.errs = append(c.errs, err)
				continue
			}
			if !slices.Contains(c.brokers, a) {
				c.brokers = append(c.brokers, a)
			}
		}
		if len(addrs) == 0 {
			c.errorf("Brokers needs at least one address")
		}
	})
}

// ZooKeeper makes the Client find brokers and partitions in the
// ZooKeeper ensemble at connect (comma-separated host:port) under root
// (MetaQ's default "/meta" when empty), and follow them as brokers come
// and go.
func ZooKeeper(connect, root string) Opt {
	return optFunc(func(c *config) {
		if strings.TrimSpace(connect) == "" {
			c.errorf("ZooKeeper needs a connect string")
		}
		c.zkSet, c.zkConn = true, connect
		if root != "" {
			c.zk.root = root
		}
	})
}

// ZooKeeperSessionTimeout sets the ZooKeeper session timeout (a group
// member killed without leaving loses its partitions after it). Default
// 30 s. Needs ZooKeeper.
func ZooKeeperSessionTimeout(d time.Duration) Opt {
	return optFunc(func(c *config) {
		c.zkOnly = append(c.zkOnly, "ZooKeeperSessionTimeout")
		if d <= 0 {
			c.errorf("ZooKeeperSessionTimeout must be positive")
		}
		c.zk.sessionTimeout = d
	})
}

// ZooKeeperAuth authenticates the ZooKeeper session with digest
// user:password (needed where the brokers protect their nodes with
// ACLs). Needs ZooKeeper.
func ZooKeeperAuth(user, password string) Opt {
	return optFunc(func(c *config) {
		c.zkOnly = append(c.zkOnly, "ZooKeeperAuth")
		c.zk.auth = cluster.Auth{User: user, Password: password}
	})
}

// ReadFromReplicas makes the Client consume from a broker's slave
// whenever one is registered (its first one, by slave number), not only
// when no master is: reads move off the master, at the cost of the
// slave's replication lag (docs/replication.md). Producing is
// unaffected: puts always go to masters. Needs ZooKeeper.
func ReadFromReplicas() Opt {
	return optFunc(func(c *config) {
		c.zkOnly = append(c.zkOnly, "ReadFromReplicas")
		c.zk.replicas = true
	})
}

// ZooKeeperDialer replaces the ZooKeeper client's dialer (tests,
// proxies). Needs ZooKeeper.
func ZooKeeperDialer(dial func(network, addr string, timeout time.Duration) (net.Conn, error)) Opt {
	return optFunc(func(c *config) {
		c.zkOnly = append(c.zkOnly, "ZooKeeperDialer")
		c.zk.dialer = zk.Dialer(dial)
	})
}

// DialTLS makes every broker connection TLS with cfg. An empty
// cfg.ServerName is set to the broker's host. In ZooKeeper mode the Client
// dials the brokers' registered TLS addresses (metaqs://).
func DialTLS(cfg *tls.Config) Opt {
	return optFunc(func(c *config) {
		if cfg == nil {
			c.errorf("DialTLS needs a *tls.Config")
		}
		c.conn.tls = cfg
	})
}

// SASLPlain authenticates every broker connection as user with SASL
// PLAIN right after it is established. Use it over TLS unless the network
// is trusted: PLAIN sends the password as it is.
func SASLPlain(user, password string) Opt {
	return optFunc(func(c *config) {
		if user == "" {
			c.errorf("SASLPlain needs a user")
		}
		c.conn.saslUser, c.conn.saslPassword = user, password
	})
}

// DialTimeout bounds each connection attempt. Default 3 s.
func DialTimeout(d time.Duration) Opt {
	return optFunc(func(c *config) {
		if d <= 0 {
			c.errorf("DialTimeout must be positive")
		}
		c.conn.dialTimeout = d
	})
}

// Dialer replaces the TCP dialer of broker connections (proxies, tests).
func Dialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Opt {
	return optFunc(func(c *config) { c.conn.dial = dial })
}

// RequestTimeout bounds requests that have no other timeout: fetches,
// offset lookups, stats. Default 10 s.
func RequestTimeout(d time.Duration) Opt {
	return optFunc(func(c *config) {
		if d <= 0 {
			c.errorf("RequestTimeout must be positive")
		}
		c.conn.requestTimeout = d
	})
}

// RedialBackoff sets the delay between failed connection attempts: it
// starts at min and doubles up to max. Default 50 ms to 2 s.
func RedialBackoff(min, max time.Duration) Opt {
	return optFunc(func(c *config) {
		if min <= 0 || max < min {
			c.errorf("RedialBackoff needs 0 < min <= max")
		}
		c.conn.backoffMin, c.conn.backoffMax = min, max
	})
}

// Logger sets the logger for connection problems, rebalances and
// rejected messages. Default slog.Default().
func Logger(l *slog.Logger) Opt {
	return optFunc(func(c *config) {
		if l == nil {
			c.errorf("Logger needs a *slog.Logger")
		}
		c.logger = l
	})
}

// New builds a Client. It needs Brokers or ZooKeeper. In ZooKeeper mode
// it opens the session (waiting for it at most the session timeout);
// broker connections are made when first needed.
func New(opts ...Opt) (*Client, error) {
	cfg := config{conn: defaultConnOptions(), logger: slog.Default(), parts: map[string][]int32{}, idCache: DefaultMessageIDCacheSize}
	for _, o := range opts {
		if o == nil {
			cfg.errorf("nil option")
			continue
		}
		o.apply(&cfg)
	}
	cfg.check()
	if err := errors.Join(cfg.errs...); err != nil {
		return nil, err
	}
	cfg.conn.logger = cfg.logger
	c := &Client{cfg: cfg}
	if cfg.zkSet {
		timeout := cfg.zk.sessionTimeout
		if timeout <= 0 {
			timeout = 30 * time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cl, err := cfg.zk.open(ctx, cfg.zkConn, cfg.conn.tls != nil, cfg.logger)
		if err != nil {
			return nil, err
		}
		c.zk = cl
	}
	if err := c.buildConsumers(); err != nil {
		if c.zk != nil {
			_ = c.zk.Close()
		}
		return nil, err
	}
	if cfg.spool {
		// Open the spool now: its dir must work, and what an earlier
		// process spooled is resent even if this one never produces.
		if _, _, err := c.producer(); err != nil {
			_ = c.Close(context.Background())
			return nil, err
		}
	}
	return c, nil
}

// check reports the options that do not apply together.
func (c *config) check() {
	switch {
	case len(c.brokers) == 0 && !c.zkSet:
		c.errorf("New needs Brokers(...) or ZooKeeper(...)")
	case len(c.brokers) > 0 && c.zkSet:
		c.errorf("Brokers and ZooKeeper do not go together: choose one")
	}
	if !c.zkSet {
		for _, n := range c.zkOnly {
			c.errorf("%s applies to ZooKeeper discovery only", n)
		}
	}
	consuming := len(c.topics) > 0 || len(c.parts) > 0
	if !consuming {
		for _, n := range c.consOpts {
			c.errorf("%s applies to consuming: add ConsumeTopics or ConsumePartitions", n)
		}
	}
	if len(c.parts) > 0 {
		switch {
		case c.zkSet:
			c.errorf("ConsumePartitions applies to one broker given with Brokers: in ZooKeeper mode a group assigns partitions")
		case len(c.brokers) > 1:
			c.errorf("ConsumePartitions needs exactly one broker (partition numbers are per broker)")
		case c.broadcast:
			c.errorf("ConsumePartitions and Broadcast do not go together")
		}
	}
	if c.zkSet && consuming && c.group == "" {
		c.errorf("consuming through ZooKeeper needs a ConsumerGroup (add Broadcast for every member to get every message); to read partitions without a group, use Brokers")
	}
	if c.broadcast && c.group == "" {
		c.errorf("Broadcast needs a ConsumerGroup (offsets are kept per member under it)")
	}
	if c.retryOpts != nil && (c.group == "" || c.broadcast) {
		c.errorf("RetryTopics needs a ConsumerGroup, not Broadcast (the group's members share its retry topic)")
	}
	if c.storeSet && c.group == "" {
		c.errorf("StoreOffsetsIn needs a ConsumerGroup (offsets are kept per group)")
	}
	if c.group == "" && consuming {
		for _, n := range c.groupOnly {
			c.errorf("%s applies to a ConsumerGroup member", n)
		}
	}
	if len(c.layouts) > 0 && !c.ordered {
		c.errorf("PartitionLayout applies to Ordered producing")
	}
	if c.ordered && c.spool {
		c.errorf("Spool and Ordered do not go together: Ordered keeps the messages it cannot send in its own local store")
	}
	if c.ordered && c.retrySet && c.retry {
		c.errorf("ProduceRetries(true) and Ordered do not go together: a retry changes the partition")
	}
	for _, t := range c.topics {
		if !validToken(t) || strings.ContainsAny(t, "/,") {
			c.errorf("bad topic %q", t)
		}
	}
}

// buildConsumers makes the consumers of the topics to consume.
func (c *Client) buildConsumers() error {
	cfg := &c.cfg
	if cfg.idCache > 0 {
		c.dedup = newIDCache(cfg.idCache)
	}
	base := []consOption{consumerOpt(func(cc *consumerConfig) {
		cc.conn, cc.logger = cfg.conn, cfg.logger
		cc.dedup = c.dedup
		cc.zk, cc.cluster = cfg.zk, c.zk
		cc.reject = Drop() // overridden by RejectPolicy
	})}
	base = append(base, cfg.cOpts...)
	if c.zk != nil && cfg.group != "" {
		// One member id for the Client's consumers (its topics' and its
		// retry topic's): they register once in the group, with every
		// topic (clusterConsumer.joinTopics). Not withConsumerID: a
		// broadcast group is still named after the host.
		id := defaultConsumerID()
		base = append(base, consumerOpt(func(cc *consumerConfig) {
			if cc.consumerID == "" {
				cc.consumerID = id
			}
		}))
	}
	topics := cfg.topics
	retryOpts := cfg.retryOpts
	if retryOpts == nil && !cfg.rejectSet && cfg.group != "" && !cfg.broadcast && len(cfg.topics) > 0 && len(cfg.parts) == 0 {
		// RetryTopics is the default policy of a group's members; a group
		// whose name makes no topic name keeps Drop (and says so).
		if _, err := newRetrier(cfg.group, RetryOptions{}, nil, cfg.logger); err == nil {
			retryOpts, c.retryDefault = &RetryOptions{}, true
		} else {
			cfg.logger.Warn("metaq: the group keeps Reject(Drop()): no retry topics for it", "group", cfg.group, "err", err)
		}
	}
	if retryOpts != nil {
		r, err := newRetrier(cfg.group, *retryOpts, clientSender{c}, cfg.logger)
		if err != nil {
			return err
		}
		c.retrier = r
		base = append(base, withRejectPolicy(r))
		if !slices.Contains(topics, r.retryTopic) {
			topics = append(slices.Clip(topics), r.retryTopic)
		}
	}
	if cfg.group != "" {
		base = append(base, withGroup(cfg.group))
	} else {
		// No group: nothing is committed.
		base = append(base, withOffsetStore(nil, 0))
	}
	if cfg.broadcast {
		base = append(base, withBroadcast())
	}
	add := func(r consumerRun, err error) error {
		if err != nil {
			for _, r := range c.cons {
				_ = r.Close(context.Background())
			}
			c.cons = nil
			return err
		}
		c.cons = append(c.cons, r)
		return nil
	}
	// markRetry notes the consumers just added for the default policy's
	// retry topic (not one the Client was asked to consume).
	markRetry := func(t string, from int) {
		if c.retryDefault && t == c.retrier.retryTopic && !slices.Contains(cfg.topics, t) {
			if c.retryRuns == nil {
				c.retryRuns = map[consumerRun]bool{}
			}
			for _, r := range c.cons[from:] {
				c.retryRuns[r] = true
			}
		}
	}
	for _, t := range topics {
		from := len(c.cons)
		if c.zk != nil {
			cc, err := openClusterConsumer(context.Background(), "", t, base...)
			if err := add(cc, err); err != nil {
				return err
			}
			markRetry(t, from)
			continue
		}
		if c.zk != nil {
			cc, err := openClusterConsumer(context.Background(), "", t, base...)
			if err := add(cc, err); err != nil {
				return err
			}
			continue
		}
		for _, addr := range cfg.brokers {
			opts := base
			if cfg.group != "" && !cfg.broadcast {
				opts = append(slices.Clip(opts), withGroupMembership())
			}
			if cfg.broadcast {
				opts = append(slices.Clip(opts), withGroup(broadcastGroup(cfg.group, opts)))
			}
			cn, err := newBrokerConsumer(addr, t, opts...)
			if err := add(&directConsumer{brokerConsumer: cn, id: -1}, err); err != nil {
				return err
			}
		}
		markRetry(t, from)
	}
	for t, ps := range cfg.parts {
		cn, err := newBrokerConsumer(cfg.brokers[0], t, append(slices.Clip(base), withPartitions(ps...))...)
		if err := add(&directConsumer{brokerConsumer: cn, id: -1}, err); err != nil {
			return err
		}
	}
	return nil
}

// broadcastGroup is the per-member group of a broadcast consumer, as the
// cluster consumer names it: "<group>-<consumer id or host>".
func broadcastGroup(group string, opts []consOption) string {
	var cc consumerConfig
	for _, o := range opts {
		o.applyConsumer(&cc)
	}
	if cc.consumerIDSet {
		return group + "-" + cc.consumerID
	}
	return group + "-" + hostSuffix()
}

// directConsumer is a brokerConsumer of one broker, as a consumerRun.
type directConsumer struct {
	*brokerConsumer
	mu sync.Mutex
	id int // broker id, -1 until learned
}

func (d *directConsumer) assigned() []message.Partition {
	d.mu.Lock()
	id := d.id
	d.mu.Unlock()
	var out []message.Partition
	for _, p := range d.Assigned() {
		out = append(out, message.Partition{BrokerID: id, Partition: p})
	}
	return out
}

func (d *directConsumer) position(topic string, p message.Partition) (int64, bool) {
	d.mu.Lock()
	id := d.id
	d.mu.Unlock()
	if topic != d.topic || (p.BrokerID >= 0 && p.BrokerID != id) {
		return 0, false
	}
	off := d.Position(p.Partition)
	return off, off >= 0
}

func (cc *clusterConsumer) assigned() []message.Partition { return cc.Assigned() }

// position reads the position of p from the brokerConsumer fetching it:
// its broker id must match (-1 matches none: partition numbers repeat
// across brokers).
func (cc *clusterConsumer) position(topic string, p message.Partition) (int64, bool) {
	if topic != cc.topic {
		return 0, false
	}
	cc.mu.Lock()
	var bc *brokerConsumer
	for c, id := range cc.consumers {
		if id == p.BrokerID {
			bc = c
			break
		}
	}
	cc.mu.Unlock()
	if bc == nil {
		return 0, false
	}
	off := bc.Position(p.Partition)
	return off, off >= 0
}

// Close flushes what is being produced, stops consuming (committing the
// positions and leaving the group), and closes every connection and the
// ZooKeeper session, waiting at most until ctx is done. With Spool it
// first stops the resender (what it did not resend stays in the spool)
// and writes every failed send to the spool before closing it. It is
// idempotent.
func (c *Client) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		prod, ordered, sp, q, cons := c.prod, c.ordered, c.spool, c.orderedQ, c.cons
		c.mu.Unlock()
		var errs []error
		if q != nil {
			close(q)
			c.orderedWG.Wait()
		}
		if ordered != nil {
			errs = append(errs, ordered.Close(ctx))
		}
		if sp != nil {
			errs = append(errs, sp.stopResend(ctx))
		}
		if prod != nil && ordered == nil {
			errs = append(errs, prod.Close(ctx))
		}
		if sp != nil {
			// The producer is closed: every failed send is handed over.
			sp.close()
		}
		for _, r := range cons {
			errs = append(errs, r.Close(ctx))
		}
		c.closeRaw()
		if c.zk != nil {
			errs = append(errs, c.zk.Close())
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

var (
	_ consumerRun = (*clusterConsumer)(nil)
	_ consumerRun = (*directConsumer)(nil)
)
