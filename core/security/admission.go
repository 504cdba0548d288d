package security

import (
	"container/list"
	"crypto/tls"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metaq-go/metaq/internal/logx"
)

// Unauthenticated connections (issue 22, finding 3; docs/security.md).
//
// With [auth] on, a connection is unauthenticated from its accept until
// auth PLAIN succeeds or its verified client certificate names a user;
// with TLS (auth on or off) it is too while its handshake runs. Such
// connections:
//
//   - must authenticate (and finish the handshake) within auth_timeout of
//     their accept, or are answered 401 and closed (Sweep);
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

// Admission is the admission policy of unauthenticated connections: it
// keeps them, oldest first, in all and by source address, and chooses
// which to close. C is the broker's connection handle; the broker closes
// the connections Admission names. Lock order: the broker's connection
// table before Admission's.
type Admission[C comparable] struct {
	mu     sync.Mutex
	all    list.List             // C, by accept time
	byAddr map[string]*list.List // C, by accept time, per source IP
	in     map[C]*admitted

	evicted  atomic.Int64 // closed to make room for a newer connection
	timeouts atomic.Int64 // closed by auth_timeout
	log      *logThrottle
	logf     func(format string, args ...any)
}

// admitted is a connection's place in the Admission.
type admitted struct {
	addr      string
	at        time.Time // accepted
	all, mine *list.Element
}

// Eviction is a connection taken out to make room, and the cap it made
// room under (Why: "max_connections 100").
type Eviction[C comparable] struct {
	C   C
	Why string
}

// NewAdmission returns an empty Admission that logs to log (info).
func NewAdmission[C comparable](log *slog.Logger) *Admission[C] {
	return &Admission[C]{byAddr: make(map[string]*list.List), in: make(map[C]*admitted),
		log: newLogThrottle(throttleEvery, throttleMaxKeys), logf: logx.Printf(log, slog.LevelInfo)}
}

// Len returns how many connections are unauthenticated now.
func (s *Admission[C]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.all.Len()
}

// removeLocked takes c out; it reports whether c was in. The caller holds
// mu.
func (s *Admission[C]) removeLocked(c C) bool {
	e := s.in[c]
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
	delete(s.in, c)
	return true
}

// Remove takes c out (it authenticated, or closed); it reports whether c
// was in.
func (s *Admission[C]) Remove(c C) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.removeLocked(c)
}

// oldest returns the oldest connection of l (false if empty).
func oldest[C comparable](l *list.List) (C, bool) {
	if l == nil || l.Len() == 0 {
		var zero C
		return zero, false
	}
	return l.Front().Value.(C), true
}

// Limits are the caps a new connection is admitted under: max_connections
// in all, and for unauthenticated ones max_unauthenticated_connections
// (Total) and max_unauthenticated_per_address (PerAddr).
type Limits struct{ MaxConnections, Total, PerAddr int }

// Enter decides on a connection c just accepted from remote ("ip:port")
// at, unauthenticated or not (unauth): it enters c in conns, the broker's
// open connections (the caller holds their lock), after taking out of
// conns the unauthenticated connections that make room for it; or it
// reports false (over max_connections: the caller refuses c). The caller
// closes the connections returned once it released its lock.
func (s *Admission[C]) Enter(conns map[C]struct{}, c C, unauth bool, remote string, at time.Time, l Limits) ([]Eviction[C], bool) {
	var out []Eviction[C]
	if unauth {
		out = s.admit(c, remote, at, l.Total, l.PerAddr)
		for _, v := range out {
			delete(conns, v.C)
		}
	}
	for len(conns) >= l.MaxConnections {
		v, ok := s.evictOldest(c, l.MaxConnections)
		if !ok {
			break
		}
		delete(conns, v.C)
		out = append(out, v)
	}
	if len(conns) >= l.MaxConnections {
		if unauth {
			s.Remove(c)
		}
		return out, false
	}
	conns[c] = struct{}{}
	return out, true
}

// admit makes room for a new unauthenticated connection c from remote,
// accepted at, under the caps (total, perAddr) and enters c. It returns
// the connections taken out to make room.
func (s *Admission[C]) admit(c C, remote string, at time.Time, total, perAddr int) []Eviction[C] {
	addr := sourceKey(remote)
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Eviction[C]
	for l := s.byAddr[addr]; l != nil && l.Len() >= perAddr; {
		v, _ := oldest[C](l)
		s.removeLocked(v)
		out = append(out, Eviction[C]{v, "max_unauthenticated_per_address " + strconv.Itoa(perAddr)})
		l = s.byAddr[addr]
	}
	for s.all.Len() >= total {
		v, _ := oldest[C](&s.all)
		s.removeLocked(v)
		out = append(out, Eviction[C]{v, "max_unauthenticated_connections " + strconv.Itoa(total)})
	}
	l := s.byAddr[addr]
	if l == nil {
		l = list.New()
		s.byAddr[addr] = l
	}
	s.in[c] = &admitted{addr: addr, at: at, all: s.all.PushBack(c), mine: l.PushBack(c)}
	return out
}

// evictOldest takes out the oldest unauthenticated connection other than
// keep, to make room under max_connections maxConns; false if none.
func (s *Admission[C]) evictOldest(keep C, maxConns int) (Eviction[C], bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for e := s.all.Front(); e != nil; e = e.Next() {
		if v := e.Value.(C); v != keep {
			s.removeLocked(v)
			return Eviction[C]{v, "max_connections " + strconv.Itoa(maxConns)}, true
		}
	}
	return Eviction[C]{}, false
}

// expired takes out the connections accepted before cutoff, oldest
// first.
func (s *Admission[C]) expired(cutoff time.Time) []C {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []C
	for {
		v, ok := oldest[C](&s.all)
		if !ok || !s.in[v].at.Before(cutoff) {
			return out
		}
		s.removeLocked(v)
		out = append(out, v)
	}
}

// EvictedError is the reply to a connection closed to make room.
type EvictedError struct{ Why string }

func (e *EvictedError) Error() string {
	return "unauthenticated connection closed to make room for a newer one (" + e.Why + ")"
}

// Evicted counts and logs (throttled) a connection from remote closed
// to make room (Eviction.Why), and returns what to tell it.
func (s *Admission[C]) Evicted(remote, why string) error {
	s.evicted.Add(1)
	if ok, note := s.log.allow(sourceKey(remote)); ok {
		s.logf("conn %s: unauthenticated connection closed to make room for a newer one (%s)%s", remote, why, note)
	}
	return &EvictedError{Why: why}
}

// AuthTimeoutError is the reply to a connection closed by auth_timeout
// (Timeout ms).
type AuthTimeoutError struct{ Timeout int }

func (e *AuthTimeoutError) Error() string {
	return "authentication timeout (auth_timeout " + strconv.Itoa(e.Timeout) + " ms)"
}

// TimedOut counts and logs (throttled) a connection from remote past
// auth_timeout (err, an *AuthTimeoutError).
func (s *Admission[C]) TimedOut(remote string, err error) {
	s.timeouts.Add(1)
	if ok, note := s.log.allow(sourceKey(remote)); ok {
		s.logf("conn %s: %s, closing%s", remote, err.Error(), note)
	}
}

// HandshakeTimedOut takes out c, whose handshake deadline passed before
// Sweep saw it: an auth timeout too, counted once (whoever takes it out).
func (s *Admission[C]) HandshakeTimedOut(c C) {
	if s.Remove(c) {
		s.timeouts.Add(1)
	}
}

// Sweep closes (expire) the connections past auth_timeout (timeout; 0
// means none) until done is closed.
func (s *Admission[C]) Sweep(done <-chan struct{}, timeout func() time.Duration, expire func(C)) {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	for {
		to := timeout()
		every := time.Second
		if to > 0 {
			every = min(max(to/10, 10*time.Millisecond), 250*time.Millisecond)
		}
		t.Reset(every)
		select {
		case <-done:
			return
		case now := <-t.C:
			if to <= 0 {
				continue
			}
			for _, c := range s.expired(now.Add(-to)) {
				expire(c)
			}
		}
	}
}

// Evictions is how many connections were closed to make room so far.
func (s *Admission[C]) Evictions() int64 { return s.evicted.Load() }

// Timeouts is how many connections were closed by auth_timeout so far.
func (s *Admission[C]) Timeouts() int64 { return s.timeouts.Load() }

var (
	dUnauthConns  = prometheus.NewDesc("metaq_unauthenticated_connections", "Connections open now that have not authenticated yet (with [auth]) or are in their TLS handshake.", nil, nil)
	dUnauthEvict  = prometheus.NewDesc("metaq_unauthenticated_evicted_total", "Unauthenticated connections closed to make room for a newer one (max_unauthenticated_connections, max_unauthenticated_per_address, max_connections).", nil, nil)
	dAuthTimeouts = prometheus.NewDesc("metaq_auth_timeouts_total", "Connections closed because they had not authenticated (or finished their TLS handshake) within auth_timeout.", nil, nil)
)

// Stats writes the stats lines of the Admission.
func (s *Admission[C]) Stats(kv func(string, any)) {
	kv("unauth_connections", s.Len())
	kv("unauth_evicted", s.evicted.Load())
	kv("auth_timeouts", s.timeouts.Load())
}

// Collect sends the Admission's metrics.
func (s *Admission[C]) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(dUnauthConns, prometheus.GaugeValue, float64(s.Len()))
	ch <- prometheus.MustNewConstMetric(dUnauthEvict, prometheus.CounterValue, float64(s.evicted.Load()))
	ch <- prometheus.MustNewConstMetric(dAuthTimeouts, prometheus.CounterValue, float64(s.timeouts.Load()))
}

// MustAuthenticate reports whether a connection nc starts
// unauthenticated (and so counts in the Admission): with [auth] on
// (authOn), or on the TLS listener (until its handshake completes).
func MustAuthenticate(nc net.Conn, authOn bool) bool {
	if authOn {
		return true
	}
	_, isTLS := nc.(*tls.Conn)
	return isTLS
}
