package security

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// DeadlineReader is a protocol connection's reader (core/broker conn.go),
// which holds it through the decoder: it enforces the connection's read
// timeouts. It sets the connection's read deadline before every read:
// idle_timeout from the end of the last request while no new one has
// started, request_timeout from the first byte of a request (its header
// line and body must arrive within it); the broker's shutdown (Drain) and
// auth_timeout (Stop) cut the wait short.
type DeadlineReader struct {
	Conn          net.Conn
	Idle, Request time.Duration
	started       time.Time // when the current request's first bytes came; zero while idle
	set           time.Time // the deadline last set
	setReq        bool      // set is a request deadline
	// Drain is the broker's shutdown read deadline (Unix ns, 0 while
	// not stopping): once set, no Read waits past it.
	Drain *atomic.Int64
	// Stop, once set, makes no Read wait (the connection did not
	// authenticate within auth_timeout).
	Stop *atomic.Bool
	// full is whether the last read filled the decoder's buffer: more
	// bytes are then likely waiting in the socket (or, for TLS, already
	// decrypted in the tls.Conn), so the read loop goes on reading rather
	// than writing its replies one small batch at a time.
	full bool
}

// Read sets the read deadline, then reads.
func (r *DeadlineReader) Read(p []byte) (int, error) {
	if !r.started.IsZero() {
		if dl := r.started.Add(r.Request); !r.setReq || !dl.Equal(r.set) {
			r.Conn.SetReadDeadline(dl)
			r.set, r.setReq = dl, true
		}
	} else if r.Idle > 0 {
		// Moving an idle deadline later by a little (an eighth of it, at
		// most a second) is not worth a timer update on every read.
		if dl := time.Now().Add(r.Idle); r.setReq || r.set.IsZero() || dl.Sub(r.set) >= min(r.Idle/8, time.Second) {
			r.Conn.SetReadDeadline(dl)
			r.set, r.setReq = dl, false
		}
	} else if r.setReq {
		r.Conn.SetReadDeadline(time.Time{})
		r.set, r.setReq = time.Time{}, false
	}
	if d := r.drainAt(); d != 0 {
		// After the deadline above, so that Shutdown's deadline is not
		// undone by a connection that read the flag too early.
		dl := time.Unix(0, d)
		r.Conn.SetReadDeadline(dl)
		r.set, r.setReq = dl, true
	}
	if r.Stop != nil && r.Stop.Load() {
		// After the deadlines above, as for drain: expireAuth stores the
		// flag before it sets its own deadline.
		dl := time.Unix(1, 0)
		r.Conn.SetReadDeadline(dl)
		r.set, r.setReq = dl, true
	}
	n, err := r.Conn.Read(p)
	r.full = n == len(p)
	if n > 0 && r.started.IsZero() {
		r.started = time.Now()
	}
	return n, err
}

// FrameDone is called after each Decode: the next request has started if
// bytes of it are already buffered.
func (r *DeadlineReader) FrameDone(more bool) {
	if more {
		r.started = time.Now()
	} else {
		r.started = time.Time{}
	}
}

// InFrame reports whether a request has started and is not decoded yet.
func (r *DeadlineReader) InFrame() bool { return !r.started.IsZero() }

// TimedOut reports whether err is the read deadline passing, and says which.
func (r *DeadlineReader) TimedOut(err error) (string, bool) {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return "", false
	}
	if r.InFrame() {
		return "request not completed within request_timeout " + r.Request.String(), true
	}
	return "idle for idle_timeout " + r.Idle.String(), true
}

// drainAt is the Shutdown read deadline in Unix ns, 0 when not stopping.
func (r *DeadlineReader) drainAt() int64 {
	if r.Drain == nil {
		return 0
	}
	return r.Drain.Load()
}

// Full reports whether the last read filled the decoder's buffer.
func (r *DeadlineReader) Full() bool { return r.full }
