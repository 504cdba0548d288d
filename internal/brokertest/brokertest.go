// Package brokertest (test helpers, not API) starts a real metaq-go broker
// for tests: in-process (Start: core/broker on a free 127.0.0.1 port with a
// temporary data directory) or as the metaq-server binary (StartServer).
// Both are stopped when the test ends; their logs are kept and printed
// when it fails.
//
//	b := brokertest.Start(t, brokertest.Topics("t1"), brokertest.Partitions(4))
//	cl, err := client.New(client.Brokers(b.Addr()))
//
// core/broker's own internal tests cannot import this package (it imports
// core/broker); they keep a thin helper of their own.
package brokertest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/broker"
)

// closeTimeout bounds Broker.Stop.
const closeTimeout = 30 * time.Second

// Option changes how Start configures and runs the broker.
type Option func(*options)

type options struct {
	base    *conf.Config
	edits   []func(*conf.Config)
	bopts   broker.Options
	listen  string
	tlsOnly bool
	quiet   bool
	http    bool
}

// Config starts from cfg (used as it is, not copied) instead of the
// default configuration; the other options still apply on top of it. A
// config with port = 0 and no Listen option listens on a free port of
// cfg.Host.
func Config(cfg *conf.Config) Option { return func(o *options) { o.base = cfg } }

// Edit applies f to the configuration, after the options before it.
func Edit(f func(*conf.Config)) Option { return func(o *options) { o.edits = append(o.edits, f) } }

// Topics configures the topics (each with the default partition count).
func Topics(names ...string) Option {
	return Edit(func(c *conf.Config) {
		c.Topics = nil
		for _, n := range names {
			c.Topics = append(c.Topics, conf.Topic{Name: n})
		}
	})
}

// Partitions sets the default partition count per topic.
func Partitions(n int) Option { return Edit(func(c *conf.Config) { c.NumPartitions = n }) }

// GroupCommit selects group commit (unflush_threshold = 0: a put is
// acknowledged after fsync), the default.
func GroupCommit() Option { return Threshold(0) }

// Threshold selects threshold mode: fsync once more than n messages are
// unflushed, acknowledging after write (n = 0 is group commit).
func Threshold(n int) Option { return Edit(func(c *conf.Config) { c.UnflushThreshold = n }) }

// TLS turns on the TLS listener with t (certificates from
// testsvc.NewCerts, for example) on a free 127.0.0.1 port, beside the
// plaintext one (see TLSOnly).
func TLS(t conf.TLS) Option {
	return Edit(func(c *conf.Config) {
		c.TLS = t
		if c.TLSPort == 0 {
			c.TLSPort = 8443 // validated only: Start listens itself
		}
	})
}

// TLSOnly leaves out the plaintext listener (needs TLS).
func TLSOnly() Option { return func(o *options) { o.tlsOnly = true } }

// Auth sets the [auth] table.
func Auth(a conf.Auth) Option { return Edit(func(c *conf.Config) { c.Auth = a }) }

// ZooKeeper runs the broker in cluster mode as broker id, registered under
// root ("" is MetaQ's default) in the ZooKeeper at connect
// (testsvc.ZooKeeper). Start returns once the broker is registered or
// zookeeper.connection_timeout has passed.
func ZooKeeper(connect, root string, id int) Option {
	return Edit(func(c *conf.Config) {
		c.BrokerID = id
		c.ZooKeeper.Connect = connect
		if root != "" {
			c.ZooKeeper.Root = root
		}
	})
}

// BrokerOptions sets the run-time options (a nil Logf keeps the log in
// Broker.Logs).
func BrokerOptions(bo broker.Options) Option { return func(o *options) { o.bopts = bo } }

// Listen has the plaintext listener on addr (say, the address of a broker
// that was stopped, to restart it in place) instead of a free port.
func Listen(addr string) Option { return func(o *options) { o.listen = addr } }

// Quiet drops the broker's log instead of printing it when the test fails.
func Quiet() Option { return func(o *options) { o.quiet = true } }

// HTTP serves the broker's HTTP API (docs/http.md) on a free port of
// 127.0.0.1 too; Broker.HTTPAddr gives it.
func HTTP() Option { return func(o *options) { o.http = true } }

// Broker is a running in-process broker.
type Broker struct {
	*broker.Broker
	// Config is the configuration it runs with (DataDir its data).
	Config *conf.Config
	// Logs holds its log lines (empty with Quiet or a BrokerOptions Logf).
	Logs *Logs
}

// Default is the configuration Start begins with: conf.Default with a
// temporary data directory, host 127.0.0.1, one topic "t" of one
// partition.
func Default(tb testing.TB) *conf.Config {
	cfg := conf.Default()
	cfg.Host = "127.0.0.1"
	cfg.Port = 0
	cfg.DataDir = tb.TempDir()
	cfg.NumPartitions = 1
	cfg.Topics = []conf.Topic{{Name: "t"}}
	return cfg
}

// Start runs a broker configured by opts and closes it when tb ends. It
// fails tb if the broker cannot start.
func Start(tb testing.TB, opts ...Option) *Broker {
	tb.Helper()
	b, err := start(tb, opts)
	if err != nil {
		tb.Fatalf("brokertest: %v", err)
	}
	return b
}

func start(tb testing.TB, opts []Option) (*Broker, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	cfg := o.base
	if cfg == nil {
		cfg = Default(tb)
	}
	for _, f := range o.edits {
		f(cfg)
	}
	b := &Broker{Config: cfg, Logs: &Logs{}}
	if o.bopts.Logf == nil {
		o.bopts.Logf = b.Logs.Logf
		if o.quiet {
			o.bopts.Logf = func(string, ...any) {}
		}
	}
	bb, err := broker.New(cfg, o.bopts)
	if err != nil {
		return nil, fmt.Errorf("broker.New: %w", err)
	}
	b.Broker = bb
	tb.Cleanup(func() {
		b.Stop(tb)
		if tb.Failed() && b.Logs.Len() > 0 {
			tb.Logf("broker log:\n%s", b.Logs.Tail(8<<10))
		}
	})
	var ln, tln net.Listener
	host := cfg.Host
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	if !o.tlsOnly {
		addr := o.listen
		if addr == "" {
			addr = net.JoinHostPort(host, fmt.Sprint(cfg.Port))
		}
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
	}
	if cfg.TLS.CertFile != "" {
		if tln, err = net.Listen("tcp", net.JoinHostPort(host, "0")); err != nil {
			if ln != nil {
				ln.Close()
			}
			return nil, fmt.Errorf("listen tls: %w", err)
		}
	}
	if err := bb.ServeListeners(ln, tln); err != nil {
		for _, l := range []net.Listener{ln, tln} {
			if l != nil {
				l.Close()
			}
		}
		return nil, fmt.Errorf("serve: %w", err)
	}
	if o.http {
		hln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("listen http: %w", err)
		}
		if err := bb.ServeHTTP(hln); err != nil {
			hln.Close()
			return nil, fmt.Errorf("serve http: %w", err)
		}
	}
	return b, nil
}

// Stop closes the broker (Close may be called before: it is idempotent),
// failing tb if that fails or takes more
// than 30 s.
func (b *Broker) Stop(tb testing.TB) {
	tb.Helper()
	done := make(chan error, 1)
	go func() { done <- b.Close() }()
	select {
	case err := <-done:
		if err != nil {
			tb.Errorf("brokertest: broker close: %v", err)
		}
	case <-time.After(closeTimeout):
		tb.Errorf("brokertest: broker close did not return within %v", closeTimeout)
	}
}

// Logs collects log lines, up to 4 MiB; it is safe for concurrent use.
type Logs struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Logf appends one line.
func (l *Logs) Logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() < 4<<20 {
		fmt.Fprintf(&l.b, format, args...)
		l.b.WriteByte('\n')
	}
}

// Write appends p as it is.
func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() < 4<<20 {
		l.b.Write(p)
	}
	return len(p), nil
}

// String returns everything logged.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Len is the number of bytes logged.
func (l *Logs) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

// Tail returns the last n bytes of the log.
func (l *Logs) Tail(n int) string {
	s := l.String()
	if len(s) > n {
		s = "...\n" + s[len(s)-n:]
	}
	return s
}

// Contains reports whether s was logged.
func (l *Logs) Contains(s string) bool { return bytes.Contains([]byte(l.String()), []byte(s)) }

// StartMain runs a quiet in-process broker for a TestMain, where there is
// no testing.TB (testable examples need one before m.Run): topics of one
// partition each, so that examples print in order, in a fresh temporary
// directory, with its HTTP API on another free port (its stats http_addr
// gives it). It returns the broker's address, the directory (for scratch
// files next to the data) and a stop func that closes the broker and
// removes the directory. It panics on failure: the test binary cannot run.
func StartMain(topics ...string) (addr, dir string, stop func()) {
	dir, err := os.MkdirTemp("", "metaq-brokertest-")
	if err != nil {
		panic(err)
	}
	cfg := conf.Default()
	cfg.Port = 8123 // validated only: the broker serves the listener below
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.NumPartitions = 1
	for _, t := range topics {
		cfg.Topics = append(cfg.Topics, conf.Topic{Name: t})
	}
	b, err := broker.New(cfg, broker.Options{Logf: func(string, ...any) {}})
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	if err := b.Serve(ln); err != nil {
		panic(err)
	}
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	if err := b.ServeHTTP(hln); err != nil {
		panic(err)
	}
	return b.Addr(), dir, func() {
		_ = b.Close()
		_ = os.RemoveAll(dir)
	}
}
