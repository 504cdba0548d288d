package client

import (
	"context"
	"log/slog"
	"net"
	"time"
)

// ProducerOption configures a Producer.
type ProducerOption interface{ applyProducer(*producerConfig) }

// ConsumerOption configures a Consumer.
type ConsumerOption interface{ applyConsumer(*consumerConfig) }

// AdminOption configures an Admin.
type AdminOption interface{ applyAdmin(*adminConfig) }

// Option configures any client: Producer, Consumer or Admin.
type Option interface {
	ProducerOption
	ConsumerOption
	AdminOption
}

type commonOpt func(*connOptions, **slog.Logger)

func (f commonOpt) applyProducer(c *producerConfig) { f(&c.conn, &c.logger) }
func (f commonOpt) applyConsumer(c *consumerConfig) { f(&c.conn, &c.logger) }
func (f commonOpt) applyAdmin(c *adminConfig)       { f(&c.conn, &c.logger) }

// WithDialTimeout bounds each connection attempt. Default 3 s.
func WithDialTimeout(d time.Duration) Option {
	return commonOpt(func(o *connOptions, _ **slog.Logger) {
		if d > 0 {
			o.dialTimeout = d
		}
	})
}

// WithDialer replaces the TCP dialer (for TLS, proxies or tests).
func WithDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return commonOpt(func(o *connOptions, _ **slog.Logger) { o.dial = dial })
}

// WithRedialBackoff sets the delay between failed connection attempts: it
// starts at min and doubles up to max. Default 50 ms to 2 s.
func WithRedialBackoff(min, max time.Duration) Option {
	return commonOpt(func(o *connOptions, _ **slog.Logger) {
		if min > 0 && max >= min {
			o.backoffMin, o.backoffMax = min, max
		}
	})
}

// WithRequestTimeout bounds requests that have no other timeout: fetches,
// offset lookups and stats. Default 10 s (MetaQ's fetchTimeout).
func WithRequestTimeout(d time.Duration) Option {
	return commonOpt(func(o *connOptions, _ **slog.Logger) {
		if d > 0 {
			o.requestTimeout = d
		}
	})
}

// WithLogger sets the logger for connection problems and rejected
// messages. Default slog.Default(); pass a logger with a discarding handler
// to silence the client.
func WithLogger(l *slog.Logger) Option {
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
