package client

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/metaq-go/metaq/internal/clientlink"
	"github.com/metaq-go/metaq/sdk/cluster"
)

// The hooks sdk/admin reaches a Client's connections through
// (internal/clientlink): they are not part of the Client's API.
func init() {
	clientlink.H = clientlink.Hooks{
		Dial: func(cl any, addr string) clientlink.Conn {
			return &linkConn{cn: newConn(addr, cl.(*Client).cfg.conn)}
		},
		Brokers: func(cl any) []string { return slices.Clone(cl.(*Client).cfg.brokers) },
		ZooKeeper: func(cl any) (*cluster.Cluster, bool) {
			c := cl.(*Client)
			return c.zk, c.cfg.conn.tls != nil
		},
		OnlyConnecting: func(cl any) error {
			c := cl.(*Client).cfg
			if len(c.prodOpts) > 0 || c.ordered || len(c.layouts) > 0 || c.retrySet {
				return errors.New("admin: producing options do not apply to an Admin")
			}
			if len(c.topics) > 0 || len(c.parts) > 0 || len(c.consOpts) > 0 {
				return errors.New("admin: consuming options do not apply to an Admin")
			}
			return nil
		},
		RequestTimeout: func(cl any) time.Duration { return cl.(*Client).cfg.conn.requestTimeout },
	}
}

// linkConn is a conn as a clientlink.Conn.
type linkConn struct{ cn *conn }

func (l *linkConn) RoundTrip(ctx context.Context, encode func(dst []byte, opaque int32) []byte) ([]byte, error) {
	ctx, cancel := withDefaultTimeout(ctx, l.cn.opts.requestTimeout)
	defer cancel()
	c, err := l.cn.roundTrip(ctx, encode)
	if err != nil {
		return nil, err
	}
	defer putCall(c)
	if c.code != 200 {
		return nil, resultError(c.code, c.body)
	}
	return slices.Clone(c.body), nil
}

func (l *linkConn) Close() { l.cn.close() }
