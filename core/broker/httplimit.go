package broker

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
// connections first). Only when every connection is active is the newcomer
// refused: a plain 503 with Retry-After and Connection: close (with TLS,
// which it has not negotiated yet, it is just closed). A client whose idle
// keep-alive connection is closed this way sees it closed, as by the idle
// timeout, and connects again.
//
// So that a flood of slow requests cannot make every connection active and
// lock the probes out, at most three quarters of the cap (httpWorkSlots)
// may be running a request other than /healthz and /readyz: more are
// answered 503 at once (Retry-After, Connection: close), before any
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

// httpWorkSlots is how many requests other than the probes may be in
// progress at once with max connections: three quarters of them.
func httpWorkSlots(max int) int { return max - max/4 }

// httpLimiter is the HTTP listener's connection cap and request limit.
type httpLimiter struct {
	max  int
	work chan struct{} // one token per request in progress, probes aside

	mu    sync.Mutex
	open  int
	seq   uint64 // orders the connections that wait (new or idle)
	addrs map[string]*httpAddr

	conns   atomic.Int64 // open, for metrics
	evicted atomic.Int64 // new or idle connections closed to make room
	refused atomic.Int64 // newcomers refused: every connection active
	busy    atomic.Int64 // requests answered 503: httpWorkSlots in progress
}

func newHTTPLimiter(max int) *httpLimiter {
	return &httpLimiter{
		max:   max,
		work:  make(chan struct{}, httpWorkSlots(max)),
		addrs: make(map[string]*httpAddr),
	}
}

// httpAddr is one source address's connections.
type httpAddr struct {
	ip      string
	open    int
	waiting connList // its new and idle connections, longest waiting first
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

// httpConn is an accepted connection the limiter counts until it closes.
type httpConn struct {
	net.Conn
	lim  *httpLimiter
	addr *httpAddr

	// Under lim.mu:
	seq        uint64 // when it started waiting (new or idle)
	prev, next *httpConn
	listed     bool // in addr.waiting
	gone       bool // no longer counted
}

// Close closes the connection and frees its slot.
func (c *httpConn) Close() error {
	c.lim.release(c)
	return c.Conn.Close()
}

// admit counts nc. At the cap it takes the slot of the connection that
// has waited longest, returned as victim for the caller to close; with
// none waiting it returns nil (refused).
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
// has waited longest. nil when every connection is active.
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
	if best == nil {
		return nil
	}
	return best.waiting.head
}

// drop stops counting c. Under l.mu.
func (l *httpLimiter) drop(c *httpConn) {
	if c.gone {
		return
	}
	c.gone = true
	c.addr.waiting.remove(c)
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
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	c, ok := nc.(*httpConn)
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

// addrIP is the IP of a remote address (the whole address if it has no
// port).
func addrIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	s := a.String()
	if host, _, err := net.SplitHostPort(s); err == nil {
		return host
	}
	return s
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

// isProbe reports whether r is for /healthz or /readyz, which take no
// request slot.
func isProbe(r *http.Request) bool {
	return r.URL.Path == "/healthz" || r.URL.Path == "/readyz"
}

// gate wraps the broker's routes with the request limit: every request but
// the probes takes one of httpWorkSlots (503 at once when none is free)
// and gets a context that ends after timeout.
func (l *httpLimiter) gate(h http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isProbe(r) {
			h.ServeHTTP(w, r)
			return
		}
		select {
		case l.work <- struct{}{}:
		default:
			l.busy.Add(1)
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusServiceUnavailable, "busy: "+strconv.Itoa(cap(l.work))+
				" HTTP requests in progress (three quarters of http_max_connections); retry later")
			return
		}
		defer func() { <-l.work }()
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

var (
	dHTTPConns   = desc("metaq_http_connections", "HTTP connections open now (at most http_max_connections).")
	dHTTPEvicted = desc("metaq_http_evicted_total", "HTTP connections idle or not yet speaking that were closed to make room for a new one (http_max_connections).")
	dHTTPRefused = desc("metaq_http_refused_total", "HTTP connections refused because every connection had a request in progress (http_max_connections).")
	dHTTPBusy    = desc("metaq_http_busy_total", "HTTP requests answered 503 because three quarters of http_max_connections had requests in progress (probes aside).")
)

// collectHTTP adds the HTTP listener's series to a scrape (metrics.go).
func (b *Broker) collectHTTP(ch chan<- prometheus.Metric) {
	l := b.web.limit.Load()
	if l == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(dHTTPConns, prometheus.GaugeValue, float64(l.conns.Load()))
	ch <- prometheus.MustNewConstMetric(dHTTPEvicted, prometheus.CounterValue, float64(l.evicted.Load()))
	ch <- prometheus.MustNewConstMetric(dHTTPRefused, prometheus.CounterValue, float64(l.refused.Load()))
	ch <- prometheus.MustNewConstMetric(dHTTPBusy, prometheus.CounterValue, float64(l.busy.Load()))
}

// httpStatsLines adds the HTTP listener's counters to `stats` (stats.go).
func (b *Broker) httpStatsLines(kv func(k string, v any)) {
	var conns, evicted, refused, busy int64
	if l := b.web.limit.Load(); l != nil {
		conns, evicted, refused, busy = l.conns.Load(), l.evicted.Load(), l.refused.Load(), l.busy.Load()
	}
	kv("http_connections", conns)
	kv("http_evicted", evicted)
	kv("http_refused", refused)
	kv("http_busy", busy)
}
