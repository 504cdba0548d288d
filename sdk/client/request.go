package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"

	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// What sdk/admin (and any other tool speaking to the brokers directly)
// builds on, as franz-go's kadm builds on kgo.Client.Request: one raw
// request to a broker over the Client's connection to it, the HTTP admin
// API with the Client's TLS and credentials, and what the Client was told
// about the cluster.

// Request sends one request to the broker at addr ("host:port", any
// broker, not only those of the discovery) and returns a copy of the body
// of its 200 reply; another status is a *BrokerError, a refused
// authentication an *AuthError. encode appends the request with the
// given opaque to dst (the sdk/protocol Append functions). The connection
// to addr is made on first use with the Client's TLS, SASL and timeouts,
// kept until Close, and redialled after a failure. The request is bounded
// by ctx and by RequestTimeout.
func (c *Client) Request(ctx context.Context, addr string, encode func(dst []byte, opaque int32) []byte) ([]byte, error) {
	cn, err := c.rawConn(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.conn.requestTimeout)
	defer cancel()
	call, err := cn.roundTrip(ctx, encode)
	if err != nil {
		return nil, err
	}
	defer putCall(call)
	if call.code != protocol.StatusOK {
		return nil, resultError(call.code, call.body)
	}
	return slices.Clone(call.body), nil
}

// rawConn returns the Request connection to addr, made on first use.
func (c *Client) rawConn(addr string) (*conn, error) {
	if err := checkAddr(addr); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	cn := c.raw[addr]
	if cn == nil {
		if c.raw == nil {
			c.raw = map[string]*conn{}
		}
		cn = newConn(addr, c.cfg.conn)
		c.raw[addr] = cn
	}
	return cn, nil
}

// maxAdminReply bounds the body of an AdminHTTP reply.
const maxAdminReply = 8 << 20

// AdminHTTP sends one request to the HTTP admin API (docs/http.md) of a
// broker at httpAddr ("host:port"): method and path (with its query),
// body as JSON (nil: none). It goes over HTTPS with the Client's DialTLS
// config, carries the SASLPlain user as HTTP basic auth, and is bounded
// by ctx and RequestTimeout. It returns the reply, whose Body is already
// read (at most 8 MiB) and closed, and that body. A reply of any status is
// not an error; a failure to get one is, naming the API's URL.
func (c *Client) AdminHTTP(ctx context.Context, httpAddr, method, path string, body []byte) (*http.Response, []byte, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, nil, ErrClosed
	}
	o := c.cfg.conn
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	scheme := "http"
	if o.tls != nil {
		scheme = "https"
		tr.TLSClientConfig = o.tls.Clone()
	}
	base := scheme + "://" + httpAddr
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if o.saslUser != "" {
		req.SetBasicAuth(o.saslUser, o.saslPassword)
	}
	hc := &http.Client{Transport: tr, Timeout: o.requestTimeout}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("admin API at %s: %w", base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminReply))
	if err != nil {
		return nil, nil, fmt.Errorf("admin API at %s: %w", base, err)
	}
	return resp, data, nil
}

// SeedBrokers returns the addresses given with Brokers (nil in ZooKeeper
// mode).
func (c *Client) SeedBrokers() []string { return slices.Clone(c.cfg.brokers) }

// Cluster returns the ZooKeeper session of a Client made with ZooKeeper
// (nil in direct mode).
func (c *Client) Cluster() *cluster.Cluster { return c.zk }

// DialsTLS reports whether the Client's broker connections use TLS
// (DialTLS), so that the brokers' registered TLS addresses are the ones
// to dial.
func (c *Client) DialsTLS() bool { return c.cfg.conn.tls != nil }

// WithRequestTimeout returns ctx bounded by the Client's RequestTimeout,
// for work of its own (a ZooKeeper read, say) that should give up as a
// request does.
func (c *Client) WithRequestTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.conn.requestTimeout)
}

// closeRaw closes the Request connections (Close).
func (c *Client) closeRaw() {
	c.mu.Lock()
	raw := c.raw
	c.raw = nil
	c.mu.Unlock()
	for _, cn := range raw {
		cn.close()
	}
}
