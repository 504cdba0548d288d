package client

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"time"

	"github.com/metaq-go/metaq/internal/brokerstats"
	"github.com/metaq-go/metaq/sdk/message"
)

// Constructors and options only the white-box tests use: the Client builds
// its producers and consumers from its own options (client_opts.go).

// connOption configures any client: brokerProducer, brokerConsumer or brokerAdmin.
type connOption interface {
	prodOption
	consOption
}

type commonOpt func(*connOptions, **slog.Logger)

func (f commonOpt) applyProducer(c *producerConfig) { f(&c.conn, &c.logger) }

func (f commonOpt) applyConsumer(c *consumerConfig) { f(&c.conn, &c.logger) }

// withDialTimeout bounds each connection attempt. Default 3 s.
func withDialTimeout(d time.Duration) connOption {
	return commonOpt(func(o *connOptions, _ **slog.Logger) {
		if d > 0 {
			o.dialTimeout = d
		}
	})
}

// withDialer replaces the TCP dialer (for TLS, proxies or tests).
func withDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) connOption {
	return commonOpt(func(o *connOptions, _ **slog.Logger) { o.dial = dial })
}

// withTLS makes every connection TLS with cfg (nil: plaintext). An empty
// cfg.ServerName is set to the broker address's host.
func withTLS(cfg *tls.Config) connOption {
	return commonOpt(func(o *connOptions, _ **slog.Logger) { o.tls = cfg })
}

// withSASLPlain authenticates every connection as user with SASL PLAIN
// (`auth PLAIN`, RFC 4616) right after it is established, before any other
// request. A refusal fails the calls with an *AuthError (not retried).
// Send it over TLS (withTLS) unless the network is trusted: PLAIN sends
// the password as it is.
func withSASLPlain(user, password string) connOption {
	return commonOpt(func(o *connOptions, _ **slog.Logger) { o.saslUser, o.saslPassword = user, password })
}

// withRedialBackoff sets the delay between failed connection attempts: it
// starts at min and doubles up to max. Default 50 ms to 2 s.
func withRedialBackoff(min, max time.Duration) connOption {
	return commonOpt(func(o *connOptions, _ **slog.Logger) {
		if min > 0 && max >= min {
			o.backoffMin, o.backoffMax = min, max
		}
	})
}

// withLogger sets the logger for connection problems and rejected
// messages. Default slog.Default(); pass a logger with a discarding handler
// to silence the client.
func withLogger(l *slog.Logger) connOption {
	return commonOpt(func(_ *connOptions, lp **slog.Logger) {
		if l != nil {
			*lp = l
		}
	})
}

// zkOption configures the ZooKeeper session of a clusterProducer or a
// clusterConsumer.
type zkOption interface {
	prodOption
	consOption
}

type zkOpt func(*zkConfig)

func (f zkOpt) applyProducer(c *producerConfig) { f(&c.zk) }

func (f zkOpt) applyConsumer(c *consumerConfig) { f(&c.zk) }

// withZKRoot sets the ZooKeeper chroot of the MetaQ nodes. Default "/meta".
func withZKRoot(root string) zkOption {
	return zkOpt(func(c *zkConfig) { c.root = root })
}

// withZKSessionTimeout sets the ZooKeeper session timeout. Default 30 s
// (MetaQ's zkSessionTimeoutMs). For a clusterConsumer it bounds how long
// the partitions of a consumer that died without leaving stay unread.
func withZKSessionTimeout(d time.Duration) zkOption {
	return zkOpt(func(c *zkConfig) {
		if d > 0 {
			c.sessionTimeout = d
		}
	})
}

// withZKDialer replaces the TCP dialer of the ZooKeeper client (proxies,
// tests).
func withZKDialer(dial func(network, addr string, timeout time.Duration) (net.Conn, error)) zkOption {
	return zkOpt(func(c *zkConfig) { c.dialer = dial })
}

// openClusterProducer connects to ZooKeeper (zkConnect: comma-separated
// host:port) and returns a producer for the cluster registered there. It
// waits for the ZooKeeper session until ctx is done.
func openClusterProducer(ctx context.Context, zkConnect string, opts ...prodOption) (*clusterProducer, error) {
	cfg := newProducerConfig(opts)
	if cfg.maxInFlight == 0 {
		cfg.maxInFlight = DefaultMaxInFlight
	}
	cl, err := cfg.zk.open(ctx, zkConnect, cfg.conn.tls != nil, cfg.logger)
	if err != nil {
		return nil, err
	}
	return newClusterProducer(cfg, opts, zkSource{cl: cl, own: true}), nil
}

// withOnReject sets the hook for messages that failed every attempt: the
// same as withRejectPolicy(f); nil restores the default policy.
func withOnReject(f RejectFunc) consOption {
	return consumerOpt(func(c *consumerConfig) {
		c.reject = nil
		if f != nil {
			c.reject = f
		}
	})
}

// newBrokerOffsetStore returns a store that keeps offsets on the broker at
// addr. It connects lazily.
func newBrokerOffsetStore(addr string) (*brokerOffsetStore, error) {
	if err := checkAddr(addr); err != nil {
		return nil, err
	}
	return &brokerOffsetStore{cn: newConn(addr, defaultConnOptions()), id: &brokerID{}, own: true}, nil
}

// brokerStats connects to addr, runs `stats <item>` and returns the reply body.
func brokerStats(ctx context.Context, addr, item string) (string, error) {
	if err := checkAddr(addr); err != nil {
		return "", err
	}
	cn := newConn(addr, defaultConnOptions())
	defer cn.close()
	return stats(ctx, cn, item)
}

// withSaveToLocalWhenFailed makes an orderedProducer keep a message in its
// local store after any failed send (a timeout, a 5xx, ...), not only when
// the partition is unavailable (MetaQ's meta.ordered.saveToLocalWhenFailed).
// A send that failed by timeout may have been stored by the broker, so
// this can duplicate messages. Default false. Only openOrderedProducer uses
// it.
func withSaveToLocalWhenFailed(on bool) prodOption {
	return orderedOpt(func(c *orderedConfig) { c.saveAll = on })
}

// openOrderedProducer connects to ZooKeeper (zkConnect: comma-separated
// host:port) like openClusterProducer, opens the local stores found under
// the base directory and starts draining them.
func openOrderedProducer(ctx context.Context, zkConnect string, opts ...prodOption) (*orderedProducer, error) {
	return newOrderedProducer(opts, func(cpOpts []prodOption) (*clusterProducer, error) {
		return openClusterProducer(ctx, zkConnect, cpOpts...)
	})
}

// withTopicPartitions fixes the partition count of a topic instead of
// learning it from `stats topics` (needed for topics the broker accepts by
// wildcard but does not list).
func withTopicPartitions(topic string, n int) prodOption {
	return producerOpt(func(c *producerConfig) {
		if c.partitions == nil {
			c.partitions = make(map[string]int)
		}
		c.partitions[topic] = n
	})
}

// sendFuture is the result of SendFuture.
type sendFuture struct {
	done chan struct{}
	res  SendResult
	err  error
}

// Done is closed when the send has completed.
func (f *sendFuture) Done() <-chan struct{} { return f.done }

// Wait waits for the send to complete or ctx to be done.
func (f *sendFuture) Wait(ctx context.Context) (SendResult, error) {
	select {
	case <-f.done:
		return f.res, f.err
	case <-ctx.Done():
		return SendResult{}, ctx.Err()
	}
}

// SendFuture sends m asynchronously and returns a future for the outcome.
func (p *brokerProducer) SendFuture(ctx context.Context, m *message.Message) *sendFuture {
	f := &sendFuture{done: make(chan struct{})}
	p.SendAsync(ctx, m, func(r SendResult, err error) {
		f.res, f.err = r, err
		close(f.done)
	})
	return f
}

// withRecoverInterval sets how often the local recovery store is replayed
// while Consume runs. Default DefaultRecoverInterval; the first replay
// comes defaultRecoverDelay (or d, if shorter) after Consume starts.
func withRecoverInterval(d time.Duration) consOption {
	return consumerOpt(func(c *consumerConfig) {
		if d > 0 {
			c.recoverInterval = d
		}
	})
}

// brokerAdmin runs administrative queries against one broker (sdk/admin
// is the public one; this is what the white-box tests need of it).
type brokerAdmin struct {
	cn *conn
}

// newBrokerAdmin returns a brokerAdmin for the broker at addr, with the
// connection options of opts. It connects lazily.
func newBrokerAdmin(addr string, opts ...consOption) (*brokerAdmin, error) {
	if err := checkAddr(addr); err != nil {
		return nil, err
	}
	cfg := consumerConfig{conn: defaultConnOptions()}
	for _, o := range opts {
		o.applyConsumer(&cfg)
	}
	return &brokerAdmin{cn: newConn(addr, cfg.conn)}, nil
}

func (a *brokerAdmin) Close() error {
	a.cn.close()
	return nil
}

// Stats returns the body of `stats <item>` (item may be empty).
func (a *brokerAdmin) Stats(ctx context.Context, item string) (string, error) {
	return stats(ctx, a.cn, item)
}

// testTopic is a topic with the offsets of each partition.
type testTopic struct {
	topicInfo
	// Offsets has one entry per partition that `stats offsets` listed,
	// sorted by partition.
	Offsets []partitionOffsets
}

// Topics returns every topic the broker lists, sorted by name, with the
// offsets of each partition.
func (a *brokerAdmin) Topics(ctx context.Context) ([]testTopic, error) {
	infos, err := statsTopics(ctx, a.cn)
	if err != nil {
		return nil, err
	}
	body, err := stats(ctx, a.cn, "offsets")
	if err != nil {
		return nil, err
	}
	offs, err := parseStatsOffsets(body)
	if err != nil {
		return nil, err
	}
	out := make([]testTopic, len(infos))
	for i, ti := range infos {
		out[i] = testTopic{topicInfo: ti, Offsets: offs[ti.Name]}
	}
	return out, nil
}

// Offset asks the broker for the valid offset nearest to offset in a
// partition (the `offset` command).
func (a *brokerAdmin) Offset(ctx context.Context, topic, group string, partition int32, offset int64) (int64, error) {
	return nearestOffset(ctx, a.cn, topic, group, partition, offset)
}

// partitionOffsets is the readable range of one partition: [Min, Max).
type partitionOffsets struct {
	Partition int32
	Min       int64
	Max       int64
}

// parseStatsOffsets parses `stats offsets` (internal/brokerstats).
func parseStatsOffsets(body string) (map[string][]partitionOffsets, error) {
	ps, err := brokerstats.ParsePartitions(body)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]partitionOffsets, len(ps))
	for t, v := range ps {
		for _, p := range v {
			out[t] = append(out[t], partitionOffsets{Partition: p.Partition, Min: p.Min, Max: p.Max})
		}
	}
	return out, nil
}
