package client

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/sdk/cluster"
)

// ZKOption configures the ZooKeeper session of a ClusterProducer or a
// ClusterConsumer.
type ZKOption interface {
	ProducerOption
	ConsumerOption
}

type zkConfig struct {
	root           string
	sessionTimeout time.Duration
	dialer         zk.Dialer
}

// open opens the ZooKeeper session at connect, logging its diagnostics
// at debug level.
func (z zkConfig) open(ctx context.Context, connect string, logger *slog.Logger) (*cluster.Cluster, error) {
	cl, err := cluster.Open(ctx, cluster.Options{Connect: connect, Root: z.root, SessionTimeout: z.sessionTimeout, Dialer: z.dialer,
		Logf: func(format string, args ...any) { logger.Debug(fmt.Sprintf(format, args...)) }})
	if err != nil {
		return nil, fmt.Errorf("metaq: %w", err)
	}
	return cl, nil
}

type zkOpt func(*zkConfig)

func (f zkOpt) applyProducer(c *producerConfig) { f(&c.zk) }
func (f zkOpt) applyConsumer(c *consumerConfig) { f(&c.zk) }

// WithZKRoot sets the ZooKeeper chroot of the MetaQ nodes. Default "/meta".
func WithZKRoot(root string) ZKOption {
	return zkOpt(func(c *zkConfig) { c.root = root })
}

// WithZKSessionTimeout sets the ZooKeeper session timeout. Default 30 s
// (MetaQ's zkSessionTimeoutMs). For a ClusterConsumer it bounds how long
// the partitions of a consumer that died without leaving stay unread.
func WithZKSessionTimeout(d time.Duration) ZKOption {
	return zkOpt(func(c *zkConfig) {
		if d > 0 {
			c.sessionTimeout = d
		}
	})
}

// WithZKDialer replaces the TCP dialer of the ZooKeeper client (proxies,
// tests).
func WithZKDialer(dial func(network, addr string, timeout time.Duration) (net.Conn, error)) ZKOption {
	return zkOpt(func(c *zkConfig) { c.dialer = dial })
}
