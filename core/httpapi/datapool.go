package httpapi

import (
	"net/http"
	"sync"
	"time"

	"github.com/metaq-go/metaq/conf"
)

// The produce handler's in-process data connections are kept for the
// next request of the same user rather than opened and closed for each
// (a connection, its read loop and flusher goroutines, its decoder): a
// produce only puts, which leave nothing on the connection (no group
// membership, transaction or filter), and it has read every reply
// before giving the connection back.

const (
	// maxIdleData bounds the idle connections kept.
	maxIdleData = 32
	// idleDataFor is how long one is kept unused.
	idleDataFor = 30 * time.Second
)

// pooledNetConn is a data connection that can be kept: the broker's
// in-process connection (core/broker/localpipe.go).
type pooledNetConn interface {
	// Closed reports whether either end was closed.
	Closed() bool
	// SetRemote sets the address the broker logs for it.
	SetRemote(remote string)
}

type idleData struct {
	u     *conf.User
	d     *dataConn
	since time.Time
}

// dataPool is the idle data connections, by user (the *conf.User the
// connection logged in as: a reload's new users take new connections).
type dataPool struct {
	mu     sync.Mutex
	idle   []idleData // the most recently kept last
	closed bool
	sweep  *time.Timer
}

// dialKept is dial, taking a kept connection of r's user when there is
// one; give it back with keep.
func (s *Server) dialKept(w http.ResponseWriter, r *http.Request) (*dataConn, bool) {
	u := User(r)
	p := &s.pool
	p.mu.Lock()
	for i := len(p.idle) - 1; i >= 0; i-- {
		if e := p.idle[i]; e.u == u {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			p.mu.Unlock()
			pc := e.d.nc.(pooledNetConn)
			if pc.Closed() { // the broker closed it (shutting down)
				e.d.Close()
				return s.dial(w, r)
			}
			pc.SetRemote(r.RemoteAddr)
			return e.d, true
		}
	}
	p.mu.Unlock()
	d, ok := s.dial(w, r)
	if ok {
		d.u = u
	}
	return d, ok
}

// keep gives back d, whose round trips all ended with their replies read
// (else it closes it).
func (s *Server) keep(d *dataConn) {
	pc, ok := d.nc.(pooledNetConn)
	if !ok || d.tainted || pc.Closed() {
		d.Close()
		return
	}
	p := &s.pool
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		d.Close()
		return
	}
	var drop *dataConn
	if len(p.idle) >= maxIdleData {
		drop = p.idle[0].d
		p.idle = append(p.idle[:0], p.idle[1:]...)
	}
	p.idle = append(p.idle, idleData{u: d.u, d: d, since: time.Now()})
	if p.sweep == nil {
		p.sweep = time.AfterFunc(idleDataFor, p.expire)
	}
	p.mu.Unlock()
	if drop != nil {
		drop.Close()
	}
}

// expire closes the connections kept unused for idleDataFor.
func (p *dataPool) expire() {
	p.mu.Lock()
	cut := time.Now().Add(-idleDataFor)
	n := 0
	for n < len(p.idle) && !p.idle[n].since.After(cut) {
		n++
	}
	old := make([]*dataConn, n)
	for i := range n {
		old[i] = p.idle[i].d
	}
	p.idle = append(p.idle[:0], p.idle[n:]...)
	p.sweep = nil
	if len(p.idle) > 0 && !p.closed {
		p.sweep = time.AfterFunc(time.Until(p.idle[0].since.Add(idleDataFor)), p.expire)
	}
	p.mu.Unlock()
	for _, d := range old {
		d.Close()
	}
}

// close closes the kept connections; none is kept after.
func (p *dataPool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	if p.sweep != nil {
		p.sweep.Stop()
		p.sweep = nil
	}
	p.mu.Unlock()
	for _, e := range idle {
		e.d.Close()
	}
}
