package broker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/security"
)

// The HTTP listener (http_port, docs/http.md): /metrics, /healthz,
// /readyz and the JSON admin API under /api/v1/. newMux builds every
// route in one place; a dashboard adds its pages there.
//
// Security follows the wire protocol's: with [tls] the listener serves
// HTTPS with the broker's certificate (reloaded with it); with [auth]
// enabled every request but /healthz and /readyz needs a user, from HTTP
// basic auth (the user's bcrypt password) or a verified client
// certificate whose CN names a user, and every change (any method but
// GET and HEAD) an admin user.

// HTTP limits: a request's header must arrive within
// http_read_header_timeout (a TLS handshake too: net/http gives it the
// shortest of the read-header, read and write timeouts), the whole request
// within httpReadTimeout, and its reply be written within httpWriteTimeout,
// which also ends the context of every request but the probes; a
// keep-alive connection waits http_idle_timeout for its next request.
// Bodies are at most httpMaxBody bytes. http_max_connections bounds the
// connections (httplimit.go).
const (
	httpReadTimeout  = 30 * time.Second
	httpWriteTimeout = 60 * time.Second
	httpMaxHeader    = 16 << 10
	httpMaxBody      = 1 << 20
	// httpShutdownTimeout bounds Close's wait for HTTP requests in flight.
	httpShutdownTimeout = 5 * time.Second
	// maxAuthCache bounds the cache of verified basic-auth credentials.
	maxAuthCache = 1024
)

// webState is the broker's HTTP side.
type webState struct {
	mu  sync.Mutex
	srv *http.Server
	ln  net.Listener
	// limit is the listener's connection cap and request limit
	// (httplimit.go), set by ServeHTTP.
	limit atomic.Pointer[httpLimiter]

	// authCache maps sha256(user NUL password) of credentials that
	// passed bcrypt to their user, so that a scrape every second does
	// not cost a bcrypt each. A user whose entry in the config changed
	// (a reload gives a new *conf.User) misses the cache.
	authMu    sync.Mutex
	authCache map[[32]byte]*conf.User

	// dash is the dashboard's state (dashsample.go).
	dash dashState
}

// listenHTTP binds http_port for Start (nil when it is 0).
func (b *Broker) listenHTTP() (net.Listener, error) {
	addr, on := b.config().HTTPAddr()
	if !on {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen http (http_port): %w", err)
	}
	return ln, nil
}

// ServeHTTP serves the HTTP API (docs/http.md) on ln in the background:
// HTTPS with the broker's certificate when [tls] is configured. Start
// calls it with http_port's listener; tests may pass their own. Close
// shuts it down.
func (b *Broker) ServeHTTP(ln net.Listener) error {
	w := &b.web
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.srv != nil {
		return errors.New("http: already serving")
	}
	if b.closed.Load() {
		return errBrokerClosed
	}
	cfg := b.config()
	lim := newHTTPLimiter(cfg.HTTPMaxConnections)
	ln = &httpListener{Listener: ln, lim: lim, tls: b.tls != nil}
	scheme := "http"
	if b.tls != nil {
		ln = tls.NewListener(ln, b.tls.listenerConfig())
		scheme = "https"
	}
	srv := &http.Server{
		Handler:           b.newMux(),
		ReadHeaderTimeout: httpMillis(cfg.HTTPReadHeaderTimeout, conf.DefaultHTTPReadHeaderTimeout),
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       httpMillis(cfg.HTTPIdleTimeout, conf.DefaultHTTPIdleTimeout),
		MaxHeaderBytes:    httpMaxHeader,
		ErrorLog:          nil,
	}
	srv.ErrorLog = b.httpErrorLog() // tlsfail.go: TLS handshake errors counted and throttled
	w.srv, w.ln = srv, ln
	lim.hook(srv, httpWriteTimeout) // httplimit.go: ConnState, ConnContext, the request gate
	w.limit.Store(lim)
	b.wg.Add(1)
	go b.sampleLoop() // dashsample.go
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.logf("http: %v", err)
		}
	}()
	b.logf("broker %d serving HTTP on %s://%s (metrics, health, admin API, dashboard at /ui/)", b.config().BrokerID, scheme, ln.Addr())
	return nil
}

// HTTPAddr returns the HTTP listening address, or "" when it is off.
func (b *Broker) HTTPAddr() string {
	b.web.mu.Lock()
	defer b.web.mu.Unlock()
	if b.web.ln == nil {
		return ""
	}
	return b.web.ln.Addr().String()
}

// closeHTTP stops the HTTP server: no new requests, those in flight get
// httpShutdownTimeout to finish.
func (b *Broker) closeHTTP() {
	b.web.mu.Lock()
	srv := b.web.srv
	b.web.mu.Unlock()
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		srv.Close()
	}
}

// newMux builds every HTTP route. Routes are Go 1.22 patterns
// ("METHOD /path/{name}"); a dashboard's pages go here too.
func (b *Broker) newMux() http.Handler {
	mux := http.NewServeMux()
	open := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, h) }
	user := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, b.needUser(h, false)) }
	admin := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, b.needUser(h, true)) }

	open("GET /healthz", b.handleHealthz)
	open("GET /readyz", b.handleReadyz)
	mux.Handle("GET /metrics", b.needUser(b.handleMetrics, false))
	b.adminRoutes(user, admin)     // admin_http.go
	b.dashRoutes(mux, user, admin) // dashboard.go
	// Go's profiler, for admins: go tool pprof http://host:8120/debug/pprof/profile?seconds=10
	admin("GET /debug/pprof/", pprof.Index)
	admin("GET /debug/pprof/cmdline", pprof.Cmdline)
	admin("GET /debug/pprof/profile", pprof.Profile)
	admin("GET /debug/pprof/symbol", pprof.Symbol)
	admin("GET /debug/pprof/trace", pprof.Trace)
	mux.Handle("/", b.needUser(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+shownName(r.Method)+" "+shownName(r.URL.Path)+" (see docs/http.md)")
	}, false))
	return b.httpGuard(http.MaxBytesHandler(mux, httpMaxBody)) // httpguard.go
}

// needUser wraps h with the [auth] check: with auth on, a user is needed
// (401 otherwise), and an admin when admin is set or the method changes
// something (403 otherwise).
func (b *Broker) needUser(h http.HandlerFunc, admin bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !b.config().Auth.Enabled {
			h(w, r)
			return
		}
		deny := func(r *http.Request, code int, msg string) {
			if strings.HasPrefix(r.URL.Path, "/ui/") { // the dashboard: an HTML page that says why
				b.uiError(w, r, code, msg)
			} else {
				writeError(w, code, msg)
			}
		}
		u, reason, retry := b.httpUser(r)
		if u == nil {
			w.Header().Set("WWW-Authenticate", `Basic realm="metaq", charset="UTF-8"`)
			if retry > 0 {
				w.Header().Set("Retry-After", security.RetryAfterSeconds(retry))
			}
			deny(r, http.StatusUnauthorized, reason)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), userKey{}, u))
		change := r.Method != http.MethodGet && r.Method != http.MethodHead
		if admin || change {
			if err := security.Authorize(true, u, security.Admin, r.Method+" "+r.URL.Path); err != nil {
				deny(r, http.StatusForbidden, err.Error())
				return
			}
		}
		h(w, r)
	})
}

type userKey struct{}

// requestUser is the authenticated user of r, nil with auth off.
func requestUser(r *http.Request) *conf.User {
	u, _ := r.Context().Value(userKey{}).(*conf.User)
	return u
}

// httpUser authenticates r: a verified client certificate naming a user,
// else basic auth. It returns the user or why not; retry > 0 when the
// login limiter refused the attempt unchecked (the caller sets
// Retry-After).
//
// Basic auth goes through the login limiter the wire uses (checkPassword),
// the cache of verified credentials included: a locked user or source is
// refused even with cached credentials, so that the lock does not answer a
// right guess differently. Only successes are cached, so every failure is
// a bcrypt check the limiter counts.
func (b *Broker) httpUser(r *http.Request) (u *conf.User, reason string, retry time.Duration) {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.PeerCertificates) > 0 {
		if u, ok := b.config().Auth.UserByName(r.TLS.PeerCertificates[0].Subject.CommonName); ok {
			return u, "", 0
		}
	}
	name, password, ok := r.BasicAuth()
	if !ok {
		return nil, "authentication required: use HTTP basic auth with an [[auth.user]] name and password", 0
	}
	start := time.Now()
	cfg := b.config()
	var why string
	if retry = b.auth.logins.Refused(name, r.RemoteAddr); retry == 0 {
		key := sha256.Sum256([]byte(name + "\x00" + password))
		cu, known := cfg.Auth.UserByName(name)
		w := &b.web
		w.authMu.Lock()
		cached := w.authCache[key]
		w.authMu.Unlock()
		if known && cached == cu {
			b.auth.logins.Succeeded(name, r.RemoteAddr)
			return cu, "", 0
		}
		if u, retry, why = b.checkPassword(cfg, "", name, password, r.RemoteAddr); u != nil {
			w.authMu.Lock()
			if w.authCache == nil || len(w.authCache) >= maxAuthCache {
				w.authCache = make(map[[32]byte]*conf.User)
			}
			w.authCache[key] = u
			w.authMu.Unlock()
			return u, "", 0
		}
	}
	reason = loginFailed(name)
	if retry > 0 {
		b.stats.authThrottled.Add(1)
		reason += ": too many failed logins, " + security.RetryAfter(retry)
	} else {
		b.stats.authFailures.Add(1)
		b.logf("http %s: auth failed for user %s: %s", r.RemoteAddr, quoteName(name), why)
	}
	// As on the wire: a failure is answered after failure_delay.
	delay := time.Until(start.Add(time.Duration(cfg.Auth.FailureDelay) * time.Millisecond))
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
		case <-b.done:
		}
		t.Stop()
	}
	return nil, reason, retry
}

// handleHealthz answers 200 while the process serves HTTP.
func (b *Broker) handleHealthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "version": Version, "broker_id": b.config().BrokerID})
}

// readyCheck is one condition of /readyz.
type readyCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

type readyState []readyCheck

func (s readyState) ok() bool {
	for _, c := range s {
		if !c.OK {
			return false
		}
	}
	return true
}

// ReplicaInSync, if set, is asked by /readyz whether this broker, as a
// slave in sync mode, is in sync with its master; it replaces the
// built-in check of a slave (replobs.go). nil: the built-in check.
type ReplicaInSync func() (ok bool, detail string)

// readiness evaluates /readyz: storage recovered, no journal failed, the
// listeners open, registered in ZooKeeper in cluster mode, and for a
// slave in sync mode, in sync with its master.
func (b *Broker) readiness() readyState {
	var s readyState
	s = append(s, readyCheck{Name: "storage", OK: b.recovered.Load(), Detail: "partitions opened and recovered"})
	jok, jdetail := true, ""
	for dir, j := range b.journals {
		if err := j.Err(); err != nil {
			jok, jdetail = false, "journal of "+dir+" failed: "+err.Error()
			break
		}
	}
	s = append(s, readyCheck{Name: "journal", OK: jok, Detail: jdetail})
	s = append(s, readyCheck{Name: "serving", OK: b.serving.Load() && !b.closed.Load(), Detail: "client listeners open"})
	if b.config().ZooKeeper.Enabled() {
		reg := b.Registered()
		// zookeeper.connect is secret (it may carry credentials, and
		// /readyz needs no user): the root names the cluster.
		d := "registered in ZooKeeper (root " + b.config().ZooKeeper.Root + ")"
		if !reg {
			d = "not registered in ZooKeeper (root " + b.config().ZooKeeper.Root + "; unreachable, or the session is being re-established)"
		}
		s = append(s, readyCheck{Name: "zookeeper", OK: reg, Detail: d})
	}
	if c, ok := b.replicaCheck(); ok { // replobs.go
		s = append(s, c)
	}
	return s
}

// handleReadyz answers 200 when every readiness check passes, 503 with
// the failing ones otherwise.
func (b *Broker) handleReadyz(w http.ResponseWriter, r *http.Request) {
	s := b.readiness()
	code, status := http.StatusOK, "ready"
	if !s.ok() {
		code, status = http.StatusServiceUnavailable, "not ready"
	}
	writeJSON(w, code, map[string]any{"status": status, "checks": s})
}

// writeJSON writes v as the JSON body of a reply with code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// apiError is the body of every error reply: {"error": ..., "status": ...}.
type apiError struct {
	Error  string `json:"error"`
	Status int    `json:"status"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, apiError{Error: capMsg(msg), Status: code})
}

// decodeBody decodes r's JSON body into v: unknown fields, duplicate keys
// (jsonDupKeys), trailing data and bodies over httpMaxBody are errors,
// answered 400 or 413 here (ok false). httpGuard checked the body's
// Content-Type.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	data, err := io.ReadAll(r.Body)
	if err == nil {
		err = jsonDupKeys(data) // httpguard.go
	}
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		err = dec.Decode(v)
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "request body over "+strconv.Itoa(httpMaxBody)+" bytes")
			return false
		}
		if errors.Is(err, io.EOF) {
			err = errors.New("empty body: a JSON object is required")
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok { // it quotes the whole key
			if k, e := strconv.Unquote(f); e == nil {
				err = errors.New("unknown field " + quoteName(k))
			}
		}
		writeError(w, http.StatusBadRequest, "bad JSON body: "+err.Error())
		return false
	}
	return true
}
