package broker

import (
	"crypto/tls"
	"log"
	"log/slog"
	"syscall"
	"time"

	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Unauthenticated connections and failed TLS handshakes: the policy
// (caps, eviction, auth_timeout, counting and logging) is core/security's
// Admission and TLSFailures; this file carries it out on *conn.

// admit decides on a connection just accepted (security.Admission.Enter):
// it enters it in b.conns and closes the unauthenticated connections that
// made room, or reports false (over max_connections: the caller refuses it).
func (b *Broker) admit(c *conn) bool {
	cfg := b.config()
	c.unauth = security.MustAuthenticate(c.nc, cfg.Auth.Enabled)
	total, perAddr := cfg.UnauthLimits()
	b.connsMu.Lock()
	if b.closed.Load() {
		b.connsMu.Unlock()
		return false
	}
	victims, ok := b.unauth.Enter(b.conns, c, c.unauth, c.nc.RemoteAddr().String(), c.accepted, security.Limits{MaxConnections: cfg.MaxConnections, Total: total, PerAddr: perAddr})
	b.connsMu.Unlock()
	for _, v := range victims {
		v.C.evict(v.Why) // its fd is closed before the next accept
	}
	return ok
}

// markAuthenticated takes c out of the unauthenticated connections: its
// handshake completed (auth off), it authenticated, or it closed. Read
// loop only (or its goroutine once the read loop returned). It reports
// false when c was no longer among them: the auth_timeout sweep (or an
// eviction) took it first and is closing it, so a login that finished
// just now came too late.
func (c *conn) markAuthenticated() bool {
	if !c.unauth {
		return true
	}
	c.unauth = false
	return c.b.unauth.Remove(c)
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
	err := b.unauth.Evicted(c.nc.RemoteAddr().String(), why)
	c.lastWords(protocol.StatusBusy, err.Error())
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
	return (&security.AuthTimeoutError{Timeout: b.config().AuthTimeout}).Error()
}

// authCloseGrace is how long a connection past auth_timeout has to send
// its 401 before it is closed regardless.
const authCloseGrace = time.Second

// expireAuth closes a connection that did not authenticate in time: one
// still in its TLS handshake at once; otherwise its read loop is woken to
// answer 401 and close, and closed regardless after authCloseGrace.
func (c *conn) expireAuth() {
	c.b.unauth.TimedOut(c.nc.RemoteAddr().String(), &security.AuthTimeoutError{Timeout: c.b.config().AuthTimeout})
	c.authExpired.Store(true)
	if !c.handshook.Load() {
		c.hardClose()
		return
	}
	c.nc.SetReadDeadline(time.Unix(1, 0)) // security.DeadlineReader also checks authExpired (its Stop)
	time.AfterFunc(authCloseGrace, c.hardClose)
}

// authSweep closes the connections past auth_timeout. It runs while the
// broker does, with [auth] or TLS on.
func (b *Broker) authSweep() {
	defer b.wg.Done()
	b.unauth.Sweep(b.done, b.authTimeout, (*conn).expireAuth)
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
	if err := security.Handshake(tc, c.accepted, c.b.authTimeout(), c.b.idleTimeout()); err != nil {
		if !c.evicted.Load() && !c.b.closed.Load() {
			reason, timedOut := security.HandshakeReason(err, c.authExpired.Load())
			if timedOut && c.b.authTimeout() > 0 {
				c.b.unauth.HandshakeTimedOut(c)
			}
			c.b.tlsFails.Failed("protocol", c.nc.RemoteAddr().String(), reason)
		}
		return false
	}
	c.handshook.Store(true)
	if !c.b.config().Auth.Enabled {
		c.markAuthenticated() // auth off: the handshake was all there was
	} else {
		c.auth.CertChecked = true
		c.authFromCert() // a client certificate naming a user authenticates now
	}
	return true
}

// httpErrorLog is the HTTP server's ErrorLog: TLS handshake errors are
// counted and throttled (security.TLSFailures); the rest go to the
// broker's log at warn.
func (b *Broker) httpErrorLog() *log.Logger {
	return b.tlsFails.ErrorLog(slog.NewLogLogger(b.log.With("component", "http").Handler(), slog.LevelWarn))
}
