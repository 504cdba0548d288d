package client

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"time"
)

// prodOption configures a brokerProducer.
type prodOption interface{ applyProducer(*producerConfig) }

// consOption configures a brokerConsumer.
type consOption interface{ applyConsumer(*consumerConfig) }

// adminOption configures an brokerAdmin.
type adminOption interface{ applyAdmin(*adminConfig) }

// connOption configures any client: brokerProducer, brokerConsumer or brokerAdmin.
type connOption interface {
	prodOption
	consOption
	adminOption
}

type commonOpt func(*connOptions, **slog.Logger)

func (f commonOpt) applyProducer(c *producerConfig) { f(&c.conn, &c.logger) }
func (f commonOpt) applyConsumer(c *consumerConfig) { f(&c.conn, &c.logger) }
func (f commonOpt) applyAdmin(c *adminConfig)       { f(&c.conn, &c.logger) }

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

// withRequestTimeout bounds requests that have no other timeout: fetches,
// offset lookups and stats. Default 10 s (MetaQ's fetchTimeout).
func withRequestTimeout(d time.Duration) connOption {
	return commonOpt(func(o *connOptions, _ **slog.Logger) {
		if d > 0 {
			o.requestTimeout = d
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

type producerOpt func(*producerConfig)

func (f producerOpt) applyProducer(c *producerConfig) { f(c) }

type consumerOpt func(*consumerConfig)

func (f consumerOpt) applyConsumer(c *consumerConfig) { f(c) }
