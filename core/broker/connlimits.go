package broker

import (
	"container/list"
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// Unauthenticated connections (issue 22, finding 3; docs/security.md).
//
// With [auth] on, a connection is unauthenticated from its accept until
// auth PLAIN succeeds or its verified client certificate names a user;
// with TLS (auth on or off) it is too while its handshake runs. Such
// connections:
//
//   - must authenticate (and finish the handshake) within auth_timeout of
//     their accept, or are answered 401 and closed (authSweep);
//   - have caps of their own, max_unauthenticated_connections in all and
//     max_unauthenticated_per_address per source IP, both below
//     max_connections. A new connection over a cap closes the OLDEST
//     unauthenticated connection of that scope to make room rather than
//     being refused: idle connections, however many, are always older
//     than a client's fresh one, so they cannot lock it out; a flood
//     mostly evicts itself. A new connection at max_connections likewise
//     closes the oldest unauthenticated one if there is one; only when
//     every slot is held by an authenticated client (or, auth off, a
//     plaintext one) is it refused with 503.
//
// Evictions and timeouts are counted (stats unauth_evicted, auth_timeouts)
// and logged at most once a minute per source address.

// unauthSet is the broker's unauthenticated connections, oldest first, in
// all and by source address. Lock order: Broker.connsMu before mu.
type unauthSet struct {
	mu     sync.Mutex
	all    list.List             // *conn, by accept time
	byAddr map[string]*list.List // *conn, by accept time, per source IP

	evicted  atomic.Int64 // closed to make room for a newer connection
	timeouts atomic.Int64 // closed by auth_timeout
	log      *logThrottle
}

// unauthEntry is a connection's place in the unauthSet (conn.ua, under
// unauthSet.mu); nil once it authenticated or was taken out.
type unauthEntry struct {
	addr      string
	at        time.Time // accepted
	all, mine *list.Element
}

func newUnauthSet() *unauthSet {
	return &unauthSet{byAddr: make(map[string]*list.List), log: newLogThrottle(throttleEvery, throttleMaxKeys)}
}

// len returns how many connections are unauthenticated now.
func (s *unauthSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.all.Len()
}

// addLocked enters c, accepted at, from addr. The caller holds mu.
func (s *unauthSet) addLocked(c *conn, addr string, at time.Time) {
	l := s.byAddr[addr]
	if l == nil {
		l = list.New()
		s.byAddr[addr] = l
	}
	c.ua = &unauthEntry{addr: addr, at: at, all: s.all.PushBack(c), mine: l.PushBack(c)}
}

// removeLocked takes c out; it reports whether c was in. The caller holds
// mu.
func (s *unauthSet) removeLocked(c *conn) bool {
	e := c.ua
	if e == nil {
		return false
	}
	s.all.Remove(e.all)
	if l := s.byAddr[e.addr]; l != nil {
		l.Remove(e.mine)
		if l.Len() == 0 {
			delete(s.byAddr, e.addr)
		}
	}
	c.ua = nil
	return true
}

// oldestLocked returns the oldest connection of l (nil if empty).
func oldestLocked(l *list.List) *conn {
	if l == nil || l.Len() == 0 {
		return nil
	}
	return l.Front().Value.(*conn)
}

// room is why admit closed a connection: the cap it made room under.
type room struct {
	c   *conn
	why string
}

// admitLocked makes room for a new unauthenticated connection from addr
// under the caps (total, perAddr) and enters c. It returns the
// connections taken out to make room, which the caller closes (evict)
// once it released its locks. The caller holds Broker.connsMu; admitLocked
// takes mu.
func (s *unauthSet) admitLocked(c *conn, addr string, at time.Time, total, perAddr int) []room {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []room
	for l := s.byAddr[addr]; l != nil && l.Len() >= perAddr; {
		v := oldestLocked(l)
		s.removeLocked(v)
		out = append(out, room{v, "max_unauthenticated_per_address " + strconv.Itoa(perAddr)})
		l = s.byAddr[addr]
	}
	for s.all.Len() >= total {
		v := oldestLocked(&s.all)
		s.removeLocked(v)
		out = append(out, room{v, "max_unauthenticated_connections " + strconv.Itoa(total)})
	}
	s.addLocked(c, addr, at)
	return out
}

// evictOldestLocked takes out the oldest unauthenticated connection
// other than keep (nil if none). The caller holds Broker.connsMu.
func (s *unauthSet) evictOldestLocked(keep *conn) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	for e := s.all.Front(); e != nil; e = e.Next() {
		if v := e.Value.(*conn); v != keep {
			s.removeLocked(v)
			return v
		}
	}
	return nil
}

// expired takes out the connections accepted before cutoff, oldest
// first.
func (s *unauthSet) expired(cutoff time.Time) []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*conn
	for {
		v := oldestLocked(&s.all)
		if v == nil || !v.ua.at.Before(cutoff) {
			return out
		}
		s.removeLocked(v)
		out = append(out, v)
	}
}

// mustAuthenticate reports whether a connection starts unauthenticated:
// with [auth] on, or on the TLS listener (its handshake).
func (b *Broker) mustAuthenticate(nc net.Conn) bool {
	if b.config().Auth.Enabled {
		return true
	}
	_, isTLS := nc.(*tls.Conn)
	return isTLS
}

// admit decides on a connection just accepted: it enters it in b.conns,
// closing unauthenticated ones to make room as the package comment says,
// or reports false (over max_connections: the caller refuses it).
func (b *Broker) admit(c *conn) bool {
	cfg := b.config()
	unauth := b.mustAuthenticate(c.nc)
	c.unauth = unauth
	var victims []room
	b.connsMu.Lock()
	if b.closed.Load() {
		b.connsMu.Unlock()
		return false
	}
	if unauth {
		total, perAddr := cfg.UnauthLimits()
		victims = b.unauth.admitLocked(c, sourceKey(c.nc.RemoteAddr().String()), c.accepted, total, perAddr)
		for _, v := range victims {
			delete(b.conns, v.c) // its fd is closed below, before the next accept
		}
	}
	for len(b.conns) >= cfg.MaxConnections {
		v := b.unauth.evictOldestLocked(c)
		if v == nil {
			break
		}
		delete(b.conns, v)
		victims = append(victims, room{v, "max_connections " + strconv.Itoa(cfg.MaxConnections)})
	}
	ok := len(b.conns) < cfg.MaxConnections
	if ok {
		b.conns[c] = struct{}{}
	} else if unauth {
		b.unauth.mu.Lock()
		b.unauth.removeLocked(c)
		b.unauth.mu.Unlock()
	}
	b.connsMu.Unlock()
	for _, v := range victims {
		v.c.evict(v.why)
	}
	return ok
}

// markAuthenticated takes c out of the unauthenticated connections: its
// handshake completed (auth off), it authenticated, or it closed. Read
// loop only (or its goroutine once the read loop returned).
func (c *conn) markAuthenticated() {
	if !c.unauth {
		return
	}
	c.unauth = false
	s := c.b.unauth
	s.mu.Lock()
	s.removeLocked(c)
	s.mu.Unlock()
}

// hardClose closes the connection now: the socket first (under TLS, the
// TCP one, so that no close_notify write can wait for the client).
func (c *conn) hardClose() {
	c.closeSocket()
	c.close()
}

// closeSocket closes the TCP socket, and nothing else: the connection's
// goroutines see it and end (serve closes the rest).
func (c *conn) closeSocket() {
	if tc, ok := c.nc.(*tls.Conn); ok {
		tc.NetConn().Close()
		return
	}
	c.nc.Close()
}

// lastWords writes a reply straight to a plaintext socket if it can do so
// without waiting (nothing else being written, room in the socket
// buffer); on TLS it writes nothing. For connections closed at once.
func (c *conn) lastWords(code int, msg string) {
	if c.raw == nil || !c.wmu.TryLock() {
		return
	}
	defer c.wmu.Unlock()
	buf := protocol.AppendResult(nil, code, msg, 0)
	c.raw.Write(func(fd uintptr) bool {
		syscall.Write(int(fd), buf)
		return true // one attempt: never wait
	})
}

// evict closes an unauthenticated connection to make room (why names the
// cap).
func (c *conn) evict(why string) {
	b := c.b
	c.evicted.Store(true)
	b.unauth.evicted.Add(1)
	remote := c.nc.RemoteAddr().String()
	if ok, note := b.unauth.log.allow(sourceKey(remote)); ok {
		b.logf("conn %s: unauthenticated connection closed to make room for a newer one (%s)%s", remote, why, note)
	}
	c.lastWords(protocol.StatusBusy, "unauthenticated connection closed to make room for a newer one ("+why+")")
	// The socket now, on the accept loop: its descriptor is free before
	// the next accept. The rest (close takes the group and transaction
	// locks, and wakes a read loop waiting out a failed auth's delay) on
	// a goroutine of its own, so that the accept loop never waits.
	c.closeSocket()
	b.wg.Add(1) // the accept loop holds one: Shutdown's Wait has not begun
	go func() { defer b.wg.Done(); c.close() }()
}

// authTimeout is auth_timeout; 0 means none.
func (b *Broker) authTimeout() time.Duration {
	return time.Duration(b.config().AuthTimeout) * time.Millisecond
}

// authTimeoutMsg is the reply to a connection closed by auth_timeout.
func (b *Broker) authTimeoutMsg() string {
	return "authentication timeout (auth_timeout " + strconv.Itoa(b.config().AuthTimeout) + " ms)"
}

// authCloseGrace is how long a connection past auth_timeout has to send
// its 401 before it is closed regardless.
const authCloseGrace = time.Second

// expireAuth closes a connection that did not authenticate in time: one
// still in its TLS handshake at once; otherwise its read loop is woken to
// answer 401 and close, and closed regardless after authCloseGrace.
func (c *conn) expireAuth() {
	b := c.b
	b.unauth.timeouts.Add(1)
	remote := c.nc.RemoteAddr().String()
	if ok, note := b.unauth.log.allow(sourceKey(remote)); ok {
		b.logf("conn %s: %s, closing%s", remote, b.authTimeoutMsg(), note)
	}
	c.authExpired.Store(true)
	if !c.handshook.Load() {
		c.hardClose()
		return
	}
	c.nc.SetReadDeadline(time.Unix(1, 0)) // deadlineReader also checks authExpired
	time.AfterFunc(authCloseGrace, c.hardClose)
}

// authSweep closes the connections past auth_timeout. It runs while the
// broker does, with [auth] or TLS on.
func (b *Broker) authSweep() {
	defer b.wg.Done()
	t := time.NewTimer(time.Second)
	defer t.Stop()
	for {
		timeout := b.authTimeout()
		every := time.Second
		if timeout > 0 {
			every = min(max(timeout/10, 10*time.Millisecond), 250*time.Millisecond)
		}
		t.Reset(every)
		select {
		case <-b.done:
			return
		case now := <-t.C:
			if timeout <= 0 {
				continue
			}
			for _, c := range b.unauth.expired(now.Add(-timeout)) {
				c.expireAuth()
			}
		}
	}
}

// handshake runs the TLS handshake of a TLS connection on its own
// goroutine (never the accept loop's), within auth_timeout of its accept
// (idle_timeout if that is 0). It reports whether the connection may go
// on; a failure is counted and logged (throttled).
func (c *conn) handshake() bool {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		c.handshook.Store(true)
		return true
	}
	var dl time.Time
	if at := c.b.authTimeout(); at > 0 {
		dl = c.accepted.Add(at)
	} else if it := c.b.idleTimeout(); it > 0 {
		dl = c.accepted.Add(it)
	}
	tc.SetDeadline(dl)
	err := tc.Handshake()
	tc.SetDeadline(time.Time{})
	if err != nil {
		if !c.evicted.Load() && !c.b.closed.Load() {
			reason := err.Error()
			if c.authExpired.Load() || isTimeout(err) {
				reason = "not completed within auth_timeout (" + reason + ")"
			}
			if isTimeout(err) && c.b.authTimeout() > 0 {
				// Its deadline passed before authSweep saw it: an auth
				// timeout too, counted once (whoever takes it out).
				s := c.b.unauth
				s.mu.Lock()
				was := s.removeLocked(c)
				s.mu.Unlock()
				if was {
					s.timeouts.Add(1)
				}
			}
			c.b.handshakeFailed("protocol", c.nc.RemoteAddr().String(), reason)
		}
		return false
	}
	c.handshook.Store(true)
	if !c.b.config().Auth.Enabled {
		c.markAuthenticated() // auth off: the handshake was all there was
	} else {
		c.auth.certChecked = true
		c.authFromCert() // a client certificate naming a user authenticates now
	}
	return true
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// connLimitStats writes the stats lines of this file.
func (b *Broker) connLimitStats(kv func(string, any)) {
	kv("unauth_connections", b.unauth.len())
	kv("unauth_evicted", b.unauth.evicted.Load())
	kv("auth_timeouts", b.unauth.timeouts.Load())
	kv("tls_handshake_failures", b.tlsFails.protocol.Load()+b.tlsFails.http.Load())
}

var (
	dUnauthConns  = desc("metaq_unauthenticated_connections", "Connections open now that have not authenticated yet (with [auth]) or are in their TLS handshake.")
	dUnauthEvict  = desc("metaq_unauthenticated_evicted_total", "Unauthenticated connections closed to make room for a newer one (max_unauthenticated_connections, max_unauthenticated_per_address, max_connections).")
	dAuthTimeouts = desc("metaq_auth_timeouts_total", "Connections closed because they had not authenticated (or finished their TLS handshake) within auth_timeout.")
	dTLSFailures  = desc("metaq_tls_handshake_failures_total", "Failed TLS handshakes, by listener: protocol (tls_port) or http (the HTTPS port).", "listener")
)

// collectConnLimits sends the metrics of this file (metrics.go Collect).
func (b *Broker) collectConnLimits(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(dUnauthConns, prometheus.GaugeValue, float64(b.unauth.len()))
	ch <- prometheus.MustNewConstMetric(dUnauthEvict, prometheus.CounterValue, float64(b.unauth.evicted.Load()))
	ch <- prometheus.MustNewConstMetric(dAuthTimeouts, prometheus.CounterValue, float64(b.unauth.timeouts.Load()))
	ch <- prometheus.MustNewConstMetric(dTLSFailures, prometheus.CounterValue, float64(b.tlsFails.protocol.Load()), "protocol")
	ch <- prometheus.MustNewConstMetric(dTLSFailures, prometheus.CounterValue, float64(b.tlsFails.http.Load()), "http")
}
