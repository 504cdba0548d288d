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

// zkOption configures the ZooKeeper session of a clusterProducer or a
// clusterConsumer.
type zkOption interface {
	prodOption
	consOption
}

type zkConfig struct {
	root           string
	sessionTimeout time.Duration
	dialer         zk.Dialer
	auth           cluster.Auth
	replicas       bool // ReadFromReplicas
}

// open opens the ZooKeeper session at connect, logging its diagnostics
// at debug level. useTLS picks the brokers' TLS addresses (withTLS).
func (z zkConfig) open(ctx context.Context, connect string, useTLS bool, logger *slog.Logger) (*cluster.Cluster, error) {
	cl, err := cluster.Open(ctx, cluster.Options{Connect: connect, Root: z.root, SessionTimeout: z.sessionTimeout, Dialer: z.dialer,
		Auth: z.auth, UseTLS: useTLS, ReadFromReplicas: z.replicas,
		Logf: func(format string, args ...any) { logger.Debug(fmt.Sprintf(format, args...)) }})
	if err != nil {
		return nil, fmt.Errorf("metaq: %w", err)
	}
	return cl, nil
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

// withZooKeeperAuth logs the ZooKeeper session in with the digest scheme
// (user:password). The consumer group's nodes are then created with ACLs
// that let only that user change them (docs/security.md).
func withZooKeeperAuth(user, password string) zkOption {
	return zkOpt(func(c *zkConfig) { c.auth = cluster.Auth{User: user, Password: password} })
}
