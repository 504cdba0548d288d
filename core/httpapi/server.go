// Package httpapi is the broker's HTTP listener (http_port, docs/http.md):
// /metrics, /healthz, /readyz, the JSON admin API under /api/v1/ and the
// dashboard under /ui/. It sees the broker only through Backend, which
// core/broker implements in one glue file (httpbackend.go): handlers get
// typed values and typed errors from it, never the broker's own types.
//
// Security follows the wire protocol's: with [tls] the listener serves
// HTTPS with the broker's certificate (reloaded with it); with [auth]
// enabled every request but /healthz and /readyz needs a user, from HTTP
// basic auth (the user's bcrypt password) or a verified client
// certificate whose CN names a user, and every change (any method but
// GET and HEAD) an admin user.
package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/logx"
)

// HTTP limits: a request's header must arrive within
// http_read_header_timeout (a TLS handshake too: net/http gives it the
// shortest of the read-header, read and write timeouts), the whole request
// within httpReadTimeout, and its reply be written within
// http_write_timeout, which also ends the context of every request but the
// probes and event streams (an event stream lasts as long as its client
// stays, each write within http_write_timeout: events.go); a keep-alive
// connection waits http_idle_timeout for its next request.
// Bodies are at most MaxBody bytes. http_max_connections bounds the
// connections (limit.go).
const (
	httpReadTimeout = 30 * time.Second
	httpMaxHeader   = 16 << 10
	// MaxBody bounds a request body.
	MaxBody = 1 << 20
	// httpShutdownTimeout bounds Close's wait for HTTP requests in flight.
	httpShutdownTimeout = 5 * time.Second
	// maxAuthCache bounds the cache of verified basic-auth credentials.
	maxAuthCache = 1024
)

// Config is the HTTP listener's slice of the broker's configuration.
type Config struct {
	BrokerID int
	// Host is the broker's host name: with [auth] off, a request's Host
	// must name it (or localhost, an address, an AllowedHosts entry).
	Host         string
	AllowedHosts []string
	// MaxConnections is http_max_connections (read when serving starts).
	MaxConnections int
	// ReadHeaderTimeout and IdleTimeout are http_read_header_timeout and
	// http_idle_timeout (read when serving starts).
	ReadHeaderTimeout, IdleTimeout time.Duration
	// Auth is the [auth] section: users, failure_delay.
	Auth *conf.Auth
	// DefaultPartitions is num_partitions, the dashboard's default for a
	// new topic.
	DefaultPartitions int
	// ConsumerTimeout (ms) and MaxConsumers are http_consumer_timeout and
	// http_max_consumers (consumers.go).
	ConsumerTimeout, MaxConsumers int
	// WriteTimeout is http_write_timeout (read when serving starts): a
	// reply's time from the end of its request; an event stream's per
	// write.
	WriteTimeout time.Duration
	// EventKeepAlive is http_event_keepalive: the wait between the
	// comments of an idle event stream.
	EventKeepAlive time.Duration
	// MaxPutBody bounds a MetaQ /put's body: max_message_size, the
	// largest put the broker takes (MaxBody if unset or smaller).
	MaxPutBody int
}

// bodyLimit bounds request bodies: MaxBody, or for MetaQ's /put the
// broker's max_message_size (Config.MaxPutBody) when that is larger. A
// body whose Content-Length is over the limit is refused before a byte
// of it is read (its handler's 413): a client that asked to be told
// first (Expect: 100-continue, as curl does for bodies over 1 MiB) gets
// the 413 without sending the body.
func (s *Server) bodyLimit(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r2 := *r
		limit := int64(s.maxBody(r))
		if r.ContentLength > limit {
			r2.Body = tooLarge{limit}
		} else {
			r2.Body = http.MaxBytesReader(w, r.Body, limit)
		}
		h.ServeHTTP(w, &r2)
	})
}

// tooLarge is the body of a request whose Content-Length is over its
// limit: reading it fails as http.MaxBytesReader's would at the limit.
type tooLarge struct{ limit int64 }

func (b tooLarge) Read([]byte) (int, error) { return 0, &http.MaxBytesError{Limit: b.limit} }
func (b tooLarge) Close() error             { return nil }

// maxBody is the limit of r's body (bodyLimit).
func (s *Server) maxBody(r *http.Request) int {
	if r.URL.Path == "/put" {
		if n := s.cfg.Load().MaxPutBody; n > MaxBody {
			return n
		}
	}
	return MaxBody
}

// FromConf is the HTTP listener's configuration in c.
func FromConf(c *conf.Config) Config {
	ms := func(v, def int) time.Duration {
		if v <= 0 { // a Config not from conf.Default
			v = def
		}
		return time.Duration(v) * time.Millisecond
	}
	cfg := Config{
		BrokerID:          c.BrokerID,
		Host:              c.Host,
		AllowedHosts:      c.HTTPAllowedHosts,
		MaxConnections:    c.HTTPMaxConnections,
		ReadHeaderTimeout: ms(c.HTTPReadHeaderTimeout, conf.DefaultHTTPReadHeaderTimeout),
		IdleTimeout:       ms(c.HTTPIdleTimeout, conf.DefaultHTTPIdleTimeout),
		WriteTimeout:      ms(c.HTTPWriteTimeout, conf.DefaultHTTPWriteTimeout),
		EventKeepAlive:    ms(c.HTTPEventKeepAlive, conf.DefaultHTTPEventKeepAlive),
		Auth:              &c.Auth,
		DefaultPartitions: c.NumPartitions,
		ConsumerTimeout:   c.HTTPConsumerTimeout,
		MaxConsumers:      c.HTTPMaxConsumers,
		MaxPutBody:        max(c.MaxMessageSize, MaxBody),
	}
	if cfg.ConsumerTimeout <= 0 { // a Config not from conf.Default
		cfg.ConsumerTimeout = conf.DefaultHTTPConsumerTimeout
	}
	if cfg.MaxConsumers <= 0 {
		cfg.MaxConsumers = conf.DefaultHTTPMaxConsumers
	}
	return cfg
}

// Listen binds c's http_port for the broker's Start (nil when it is 0).
func Listen(c *conf.Config) (net.Listener, error) {
	addr, on := c.HTTPAddr()
	if !on {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen http (http_port): %w", err)
	}
	return ln, nil
}

// authOn says whether [auth] is enabled.
func (c *Config) authOn() bool { return c.Auth != nil && c.Auth.Enabled }

// Options are what the broker gives the server besides its Backend.
type Options struct {
	// Log is the broker's logger.
	Log *slog.Logger
	// ErrorLog is the net/http server's error log (the broker counts and
	// throttles TLS handshake failures in it).
	ErrorLog *log.Logger
}

// Server is the HTTP listener. Its zero value is not usable: see New.
type Server struct {
	be   Backend
	cfg  atomic.Pointer[Config]
	logf func(format string, args ...any)
	errs *log.Logger
	done chan struct{}

	mu     sync.Mutex
	srv    *http.Server
	ln     net.Listener
	closed bool
	wg     sync.WaitGroup
	// limit is the listener's connection cap and request limit
	// (limit.go), set by Serve.
	limit atomic.Pointer[httpLimiter]

	// authCache maps sha256(user NUL password) of credentials that
	// passed bcrypt to their user, so that a scrape every second does
	// not cost a bcrypt each. A user whose entry in the config changed
	// (a reload gives a new *conf.User) misses the cache.
	authMu    sync.Mutex
	authCache map[[32]byte]*conf.User

	// scrapes bounds the filtered scrapes of non-admin users (metrics.go).
	scrapes chan struct{}
	// dash is the dashboard's state (dashsample.go).
	dash dashState
	// console is the cluster console's memory of brokers (console.go).
	console ConsoleMemory
	// data is the data plane's series (data.go).
	data *dataMetrics
	// cons is the HTTP consumer instances (consumers.go).
	cons consumers
	// pool is the produce handler's idle data connections (datapool.go).
	pool dataPool
}

// New returns a server for be under cfg; Serve starts it.
func New(cfg Config, be Backend, opts Options) *Server {
	l := opts.Log
	if l == nil {
		l = slog.Default()
	}
	s := &Server{be: be, logf: logx.Printf(l, slog.LevelInfo), errs: opts.ErrorLog, done: make(chan struct{}),
		scrapes: make(chan struct{}, metricsScrapes), data: newDataMetrics()}
	s.cfg.Store(&cfg)
	return s
}

// Reload applies a new configuration: auth, allowed hosts. The connection
// cap and the timeouts keep the values they had when serving started.
func (s *Server) Reload(cfg Config) { s.cfg.Store(&cfg) }

func (s *Server) config() *Config { return s.cfg.Load() }

// Serve serves the HTTP API (docs/http.md) on ln in the background:
// HTTPS with tc when it is not nil. Close shuts it down.
func (s *Server) Serve(ln net.Listener, tc *tls.Config) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return errors.New("http: already serving")
	}
	if s.closed {
		return ErrClosed
	}
	cfg := s.config()
	lim := newHTTPLimiter(cfg.MaxConnections)
	ln = &httpListener{Listener: ln, lim: lim, tls: tc != nil}
	scheme := "http"
	if tc != nil {
		ln = tls.NewListener(ln, tc)
		scheme = "https"
	}
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    httpMaxHeader,
		ErrorLog:          s.errs,
	}
	s.srv, s.ln = srv, ln
	lim.hook(srv, cfg.WriteTimeout) // limit.go: ConnState, ConnContext, the request gate
	s.limit.Store(lim)
	s.wg.Add(1)
	go s.sampleLoop() // dashsample.go
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logf("http: %v", err)
		}
	}()
	s.logf("broker %d serving HTTP on %s://%s (metrics, health, admin API, dashboard at /ui/)", cfg.BrokerID, scheme, ln.Addr())
	return nil
}

// ErrClosed is Serve's error after Close.
var ErrClosed = errors.New("broker closed")

// Addr returns the listening address, or "" when not serving.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Close stops the server: no new requests, those in flight get
// httpShutdownTimeout to finish. It waits for the server's goroutines.
func (s *Server) Close() {
	s.mu.Lock()
	srv := s.srv
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	s.mu.Unlock()
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			srv.Close()
		}
	}
	s.wg.Wait()
	s.pool.close()
}

// Handler builds every HTTP route, behind the guard (guard.go). Routes
// are Go 1.22 patterns ("METHOD /path/{name}").
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	open := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, h) }
	user := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, s.needUser(h, false)) }
	admin := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, s.needUser(h, true)) }

	open("GET /healthz", s.handleHealthz)
	open("GET /readyz", s.handleReadyz)
	user("GET /metrics", s.handleMetrics)
	s.dataRoutes(mux)              // data.go: MetaQ's /put, /get, /offset; the records API
	s.adminRoutes(user, admin)     // admin.go
	s.dashRoutes(mux, user, admin) // dashboard.go
	// Go's profiler, for admins: go tool pprof http://host:8120/debug/pprof/profile?seconds=10
	admin("GET /debug/pprof/", pprof.Index)
	admin("GET /debug/pprof/cmdline", pprof.Cmdline)
	admin("GET /debug/pprof/profile", pprof.Profile)
	admin("GET /debug/pprof/symbol", pprof.Symbol)
	admin("GET /debug/pprof/trace", pprof.Trace)
	user("/", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusNotFound, "no such endpoint: "+ShownName(r.Method)+" "+ShownName(r.URL.Path)+" (see docs/http.md)")
	})
	return s.guard(s.bodyLimit(mux))
}
