package httpapi

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metaq-go/metaq/conf"
)

// The HTTP listener's connection cap (http_max_connections, docs/http.md).
//
// A cap that makes newcomers wait for a free slot (netutil.LimitListener)
// lets anyone who can connect take every slot for as long as the server
// keeps a silent or idle connection open: keep-alive connections after one
// unauthenticated GET /healthz, or bare TCP connects that never send a
// byte (or never start their TLS handshake). httpLimiter never makes
// Accept wait. It follows every connection's state through the server's
// ConnState hook:
//
//   - new: accepted, no request read yet (a TLS handshake or a request
//     header on its way, or nothing at all);
//   - active: a request in progress (its header read, until its reply is
//     written);
//   - idle: keep-alive, between requests.
//
// At the cap a newcomer makes room by closing the connection that has
// waited longest in new or idle, taken from the source address holding the
// most connections (so one address flooding the listener loses its own
// connections first; an IPv6 address counts by its /64). Only when every
// connection is active, and none stalled (below), is the newcomer
// refused: a plain 503 with Retry-After and Connection: close (with TLS,
// which it has not negotiated yet, it is just closed). A client whose idle
// keep-alive connection is closed this way sees it closed, as by the idle
// timeout, and connects again.
//
// A connection whose request is in progress can still be stalled by its
// client: a reply it does not read (a Write blocked), or a body it drips
// after the handler has answered without reading it (the server's discard
// of the rest is a Read blocked; after an error reply the gate gives it
// httpErrorBodyGrace and closes the connection, closeAfterError). When no connection is new or idle, the newcomer closes
// the one stalled longest, if a Write of it has been blocked for
// httpStallAfter, or a Read with no handler running (while a handler runs,
// net/http keeps a Read pending to notice a client going away; that one
// is not a stall). Such a client is failing to take its reply.
//
// So that a flood of slow requests cannot make every connection active and
// lock the probes out, at most three quarters of the cap (httpWorkSlots)
// may be running a request other than /healthz and /readyz, and one source
// address at most half of those: more are answered 503 at once (Retry-After, Connection: close), before any
// authentication, which keeps the last quarter turning over. A bcrypt check
// queued on the broker's bcrypt semaphore or a failed login waiting out
// failure_delay holds one of those slots. The probes take no slot and do
// no blocking work (readiness reads atomics and the registration state).

// httpRefusal is what a plaintext newcomer gets when every connection has
// a request in progress.
var httpRefusal = "HTTP/1.1 503 Service Unavailable\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\n" +
	"Retry-After: 1\r\n" +
	"Connection: close\r\n" +
	"Content-Length: " + strconv.Itoa(len(httpRefusalBody)) + "\r\n" +
	"\r\n" + httpRefusalBody

const httpRefusalBody = "every HTTP connection has a request in progress (http_max_connections); retry later\n"

// httpRefusalWrite bounds the write of httpRefusal (a fresh socket takes
// it at once; the deadline only guards the accept loop).
const httpRefusalWrite = 100 * time.Millisecond

// httpStallAfter is how long a Read or Write of a connection with a
// request in progress must have been blocked for it to count as stalled.
const httpStallAfter = time.Second

// monoEpoch is the origin of monoNow, a monotonic clock in nanoseconds
// that fits an atomic.Int64.
var monoEpoch = time.Now()

func monoNow() int64 { return int64(time.Since(monoEpoch)) }

// httpClock is monoNow an hour on: never 0 (no Read or Write pending) or
// 1 (closing, stalledSince), and an hour after both from the start.
func httpClock() int64 { return monoNow() + int64(time.Hour) }

// httpWorkSlots is how many requests other than the probes may be in
// progress at once with max connections: three quarters of them.
func httpWorkSlots(maxConns int) int { return maxConns - maxConns/4 }

// httpLimiter is the HTTP listener's connection cap and request limit.
type httpLimiter struct {
	max  int
	work chan struct{} // one token per request in progress, probes aside

	mu    sync.Mutex
	open  int
	seq   uint64 // orders the connections that wait (new or idle)
	addrs map[string]*httpAddr

	workMu   sync.Mutex
	workBy   map[string]int // work slots held per source address
	workAddr int            // the most one address may hold: half

	conns   atomic.Int64 // open, for metrics
	evicted atomic.Int64 // new, idle or stalled connections closed to make room
	refused atomic.Int64 // newcomers refused: every connection active, none stalled
	busy    atomic.Int64 // requests answered 503: no work slot free
}

func newHTTPLimiter(maxConns int) *httpLimiter {
	if maxConns < 1 { // a Config not from conf.Default
		maxConns = conf.DefaultHTTPMaxConnections
	}
	w := httpWorkSlots(maxConns)
	return &httpLimiter{
		max:      maxConns,
		work:     make(chan struct{}, w),
		workBy:   make(map[string]int),
		workAddr: max(w/2, 1),
		addrs:    make(map[string]*httpAddr),
	}
}

// httpAddr is one source address's connections.
type httpAddr struct {
	ip      string
	open    int
	waiting connList // its new and idle connections, longest waiting first
	all     allList  // all its connections
}

// connList is a list of connections linked through httpConn.prev/next.
type connList struct{ head, tail *httpConn }

func (l *connList) push(c *httpConn) {
	c.prev, c.next, c.listed = l.tail, nil, true
	if l.tail != nil {
		l.tail.next = c
	} else {
		l.head = c
	}
	l.tail = c
}

func (l *connList) remove(c *httpConn) {
	if !c.listed {
		return
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.tail = c.prev
	}
	c.prev, c.next, c.listed = nil, nil, false
}

// allList is a list of connections linked through httpConn.aprev/anext.
type allList struct{ head, tail *httpConn }

func (l *allList) push(c *httpConn) {
	c.aprev, c.anext = l.tail, nil
	if l.tail != nil {
		l.tail.anext = c
	} else {
		l.head = c
	}
	l.tail = c
}

func (l *allList) remove(c *httpConn) {
	if c.aprev != nil {
		c.aprev.anext = c.anext
	} else {
		l.head = c.anext
	}
	if c.anext != nil {
		c.anext.aprev = c.aprev
	} else {
		l.tail = c.aprev
	}
	c.aprev, c.anext = nil, nil
}

// httpConn is an accepted connection the limiter counts until it closes.
type httpConn struct {
	net.Conn
	lim  *httpLimiter
	addr *httpAddr

	// readSince and writeSince are when the pending Read and Write began
	// (httpClock), 0 when none is pending; handlers counts the
	// handlers running for the connection.
	readSince, writeSince atomic.Int64
	handlers              atomic.Int32
	// closing is set by an error reply that closes the connection
	// (closeAfterError): once no handler runs it is only finishing.
	closing atomic.Bool

	// Under lim.mu:
	seq          uint64    // when it started waiting (new or idle)
	prev, next   *httpConn // in addr.waiting
	aprev, anext *httpConn // in addr.all
	listed       bool      // in addr.waiting
	gone         bool      // no longer counted
}

func (c *httpConn) Read(p []byte) (int, error) {
	c.readSince.Store(httpClock())
	n, err := c.Conn.Read(p)
	c.readSince.Store(0)
	return n, err
}

func (c *httpConn) Write(p []byte) (int, error) {
	c.writeSince.Store(httpClock())
	n, err := c.Conn.Write(p)
	c.writeSince.Store(0)
	return n, err
}

// stalledSince is when c's client stalled (a Write blocked, or a Read
// blocked with no handler running), 0 if it has not; 1 (long ago) for a
// connection closing after an error reply whose handler has returned.
func (c *httpConn) stalledSince() int64 {
	if c.closing.Load() && c.handlers.Load() == 0 {
		return 1
	}
	w := c.writeSince.Load()
	if r := c.readSince.Load(); r != 0 && c.handlers.Load() == 0 && (w == 0 || r < w) {
		return r
	}
	return w
}

// Close closes the connection and frees its slot.
func (c *httpConn) Close() error {
	c.lim.release(c)
	return c.Conn.Close()
}

// admit counts nc. At the cap it takes the slot of the connection victim
// picks, returned for the caller to close; with none to pick it returns
// nil (refused).
func (l *httpLimiter) admit(nc net.Conn) (c, victim *httpConn) {
	ip := addrIP(nc.RemoteAddr())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open >= l.max {
		if victim = l.victim(); victim == nil {
			l.refused.Add(1)
			return nil, nil
		}
		l.drop(victim)
		l.evicted.Add(1)
	}
	a := l.addrs[ip]
	if a == nil {
		a = &httpAddr{ip: ip}
		l.addrs[ip] = a
	}
	c = &httpConn{Conn: nc, lim: l, addr: a}
	a.all.push(c)
	a.open++
	l.open++
	l.conns.Store(int64(l.open))
	l.seq++
	c.seq = l.seq
	a.waiting.push(c)
	return c, victim
}

// victim picks the connection to close for a newcomer: of the addresses
// with a connection waiting, the one with the most connections open (on a
// tie, the one whose connection waited longest), and its connection that
// has waited longest. With none waiting, a connection closing after an
// error reply, else the one stalled longest (httpStallAfter). nil when
// every connection is active and none stalled.
func (l *httpLimiter) victim() *httpConn {
	var best *httpAddr
	for _, a := range l.addrs {
		h := a.waiting.head
		if h == nil {
			continue
		}
		if best == nil || a.open > best.open || a.open == best.open && h.seq < best.waiting.head.seq {
			best = a
		}
	}
	if best != nil {
		return best.waiting.head
	}
	var stalled *httpConn
	var since int64
	limit := httpClock() - int64(httpStallAfter)
	for _, a := range l.addrs {
		for c := a.all.head; c != nil; c = c.anext {
			if s := c.stalledSince(); s != 0 && s <= limit && (stalled == nil || s < since) {
				stalled, since = c, s
			}
		}
	}
	return stalled
}

// drop stops counting c. Under l.mu.
func (l *httpLimiter) drop(c *httpConn) {
	if c.gone {
		return
	}
	c.gone = true
	c.addr.waiting.remove(c)
	c.addr.all.remove(c)
	c.addr.open--
	if c.addr.open == 0 {
		delete(l.addrs, c.addr.ip)
	}
	l.open--
	l.conns.Store(int64(l.open))
}

func (l *httpLimiter) release(c *httpConn) {
	l.mu.Lock()
	l.drop(c)
	l.mu.Unlock()
}

// connState is the server's ConnState hook. With TLS the server sees the
// *tls.Conn around the listener's *httpConn.
func (l *httpLimiter) connState(nc net.Conn, s http.ConnState) {
	c, ok := connOf(nc)
	if !ok || c.lim != l {
		return
	}
	switch s {
	case http.StateActive, http.StateHijacked:
		l.mu.Lock()
		if !c.gone {
			c.addr.waiting.remove(c)
		}
		l.mu.Unlock()
	case http.StateIdle:
		l.mu.Lock()
		if !c.gone {
			c.addr.waiting.remove(c)
			l.seq++
			c.seq = l.seq
			c.addr.waiting.push(c)
		}
		l.mu.Unlock()
	case http.StateClosed:
		l.release(c)
	}
}

// addrIP is the source a remote address counts under: its IP, the /64
// prefix of an IPv6 one (a host is commonly given a /64), or the whole
// address if it is not an IP address.
func addrIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return sourceOf(ta.IP)
	}
	return hostSource(a.String())
}

// hostSource is addrIP of a "host:port" string (http.Request.RemoteAddr).
func hostSource(hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if ip := net.ParseIP(host); ip != nil {
		return sourceOf(ip)
	}
	return host
}

func sourceOf(ip net.IP) string {
	if ip.To4() == nil && len(ip) == net.IPv6len {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}

// httpListener applies the limiter to the connections it accepts. Accept
// never waits for a slot.
type httpListener struct {
	net.Listener
	lim *httpLimiter
	// tls: the connections get a TLS handshake next, so a refused one is
	// closed without a plaintext reply.
	tls bool
}

func (ln *httpListener) Accept() (net.Conn, error) {
	for {
		nc, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c, victim := ln.lim.admit(nc)
		if victim != nil {
			victim.Close()
		}
		if c != nil {
			return c, nil
		}
		if !ln.tls {
			nc.SetWriteDeadline(time.Now().Add(httpRefusalWrite))
			io.WriteString(nc, httpRefusal)
		}
		nc.Close()
	}
}

// connOf is the limiter's connection under nc (a *tls.Conn with TLS).
func connOf(nc net.Conn) (*httpConn, bool) {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	c, ok := nc.(*httpConn)
	return c, ok
}

type httpConnKey struct{}

// hook fits the limiter to srv, whose listener is an httpListener of l
// (under TLS or not): it follows the connections' states, and its
// handler gets the request limit and a context that ends after timeout.
func (l *httpLimiter) hook(srv *http.Server, timeout time.Duration) {
	srv.ConnState = l.connState
	srv.ConnContext = func(ctx context.Context, nc net.Conn) context.Context {
		if c, ok := connOf(nc); ok {
			return context.WithValue(ctx, httpConnKey{}, c)
		}
		return ctx
	}
	srv.Handler = l.gate(srv.Handler, timeout)
}

// isProbe reports whether r is for /healthz or /readyz, which take no
// request slot.
func isProbe(r *http.Request) bool {
	return r.URL.Path == "/healthz" || r.URL.Path == "/readyz"
}

// gate wraps h with the request limit: every request but the probes takes
// one of httpWorkSlots, at most half of them per source address (503 at
// once when none is free), and gets a context that ends after timeout
// (an event stream's does not: it ends with its client).
func (l *httpLimiter) gate(h http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(httpConnKey{}).(*httpConn); ok {
			c.handlers.Add(1)
			defer c.handlers.Add(-1)
		}
		if isProbe(r) {
			h.ServeHTTP(w, r)
			return
		}
		ip := hostSource(r.RemoteAddr)
		if !l.takeWork(ip) {
			l.busy.Add(1)
			w.Header().Set("Retry-After", "1")
			closeAfterError(w, r, r.ContentLength != 0)
			WriteError(w, http.StatusServiceUnavailable, "busy: too many HTTP requests in progress ("+
				strconv.Itoa(cap(l.work))+" at most, "+strconv.Itoa(l.workAddr)+" per address: three quarters of http_max_connections); retry later")
			return
		}
		defer l.doneWork(ip)
		ctx, cancel := r.Context(), context.CancelFunc(func() {})
		if !isEventStream(r) { // events.go: its writes have deadlines
			ctx, cancel = context.WithTimeout(ctx, timeout)
		}
		defer cancel()
		if r.ContentLength != 0 {
			w = &closeOnError{ResponseWriter: w, r: r}
		}
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// closeOnError ends the connection after an error reply to a request
// with a body (closeAfterError).
type closeOnError struct {
	http.ResponseWriter
	r     *http.Request
	wrote bool
}

func (w *closeOnError) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		if code >= 400 {
			closeAfterError(w.ResponseWriter, w.r, true)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *closeOnError) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap gives http.ResponseController the server's writer.
func (w *closeOnError) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// httpErrorBodyGrace is how long the rest of a body is waited for after
// an error reply (closeAfterError).
const httpErrorBodyGrace = 250 * time.Millisecond

// closeAfterError marks an error reply Connection: close and, for a
// request with a body, gives the rest of the body httpErrorBodyGrace: the
// handler (401 without credentials, say) may not have read it, and after
// the reply net/http reads up to 256 KiB of it, for as long as the client
// takes to send it (up to the 30 s read timeout), before it closes. Once
// its handler has returned, the connection is the first a newcomer may
// close at the cap after the waiting ones.
func closeAfterError(w http.ResponseWriter, r *http.Request, body bool) {
	w.Header().Set("Connection", "close")
	if c, ok := r.Context().Value(httpConnKey{}).(*httpConn); ok {
		c.closing.Store(true)
	}
	if body {
		http.NewResponseController(w).SetReadDeadline(time.Now().Add(httpErrorBodyGrace))
	}
}

// takeWork takes a work slot for a request from ip, if one is free and ip
// holds fewer than workAddr.
func (l *httpLimiter) takeWork(ip string) bool {
	l.workMu.Lock()
	defer l.workMu.Unlock()
	if l.workBy[ip] >= l.workAddr {
		return false
	}
	select {
	case l.work <- struct{}{}:
	default:
		return false
	}
	l.workBy[ip]++
	return true
}

func (l *httpLimiter) doneWork(ip string) {
	l.workMu.Lock()
	defer l.workMu.Unlock()
	<-l.work
	if l.workBy[ip]--; l.workBy[ip] <= 0 {
		delete(l.workBy, ip)
	}
}

var (
	dHTTPConns   = prometheus.NewDesc("metaq_http_connections", "HTTP connections open now (at most http_max_connections).", nil, nil)
	dHTTPEvicted = prometheus.NewDesc("metaq_http_evicted_total", "HTTP connections idle, not yet speaking or stalling their reply that were closed to make room for a new one (http_max_connections).", nil, nil)
	dHTTPRefused = prometheus.NewDesc("metaq_http_refused_total", "HTTP connections refused because every connection had a request in progress and none stalled (http_max_connections).", nil, nil)
	dHTTPBusy    = prometheus.NewDesc("metaq_http_busy_total", "HTTP requests answered 503 because three quarters of http_max_connections had requests in progress (probes aside).", nil, nil)
)

// Stats are the HTTP listener's counters (zero while it is not serving).
type Stats struct {
	// Connections is the connections open now.
	Connections int64
	// Evicted counts new, idle or stalled connections closed to make room.
	Evicted int64
	// Refused counts newcomers refused: every connection active, none stalled.
	Refused int64
	// Busy counts requests answered 503: no work slot free.
	Busy int64
}

// Stats returns the listener's counters, for the broker's stats.
func (s *Server) Stats() Stats {
	l := s.limit.Load()
	if l == nil {
		return Stats{}
	}
	return Stats{Connections: l.conns.Load(), Evicted: l.evicted.Load(), Refused: l.refused.Load(), Busy: l.busy.Load()}
}

// Collect adds the HTTP listener's series to a scrape (nothing while it
// is not serving).
func (s *Server) Collect(ch chan<- prometheus.Metric) {
	if s.limit.Load() == nil {
		return
	}
	st := s.Stats()
	ch <- prometheus.MustNewConstMetric(dHTTPConns, prometheus.GaugeValue, float64(st.Connections))
	ch <- prometheus.MustNewConstMetric(dHTTPEvicted, prometheus.CounterValue, float64(st.Evicted))
	ch <- prometheus.MustNewConstMetric(dHTTPRefused, prometheus.CounterValue, float64(st.Refused))
	ch <- prometheus.MustNewConstMetric(dHTTPBusy, prometheus.CounterValue, float64(st.Busy))
	s.data.collect(ch) // data.go
}
