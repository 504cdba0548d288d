package client

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/sdk/cluster"
)

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
