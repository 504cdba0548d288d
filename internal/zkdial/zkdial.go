// Package zkdial bounds a ZooKeeper client's handshake. go-zookeeper
// (v1.0.4, conn.go authenticate) waits 10 x recvTimeout (recvTimeout =
// session timeout * 2/3) for the reply to its connect request: 26.7 s at a
// 4 s session, 200 s at a 30 s one. A ZooKeeper still starting has been
// seen to accept the connection, read the request and never answer, and
// the client then stalls that long before it tries again.
//
// [Bounded] wraps the client's dialer (zk.WithDialer) so that the
// handshake, from the dial to the last byte of the connect response, must
// finish within recvTimeout, the wait go-zookeeper allows every other
// reply (a ping's among them); if it does not, the client's read fails,
// it closes the connection and reconnects. Once the connect response has
// been read the connection's deadlines are the client's own again.
package zkdial

import (
	"encoding/binary"
	"net"
	"sync/atomic"
	"time"
)

// Dialer is go-zookeeper's zk.Dialer (the same function type).
type Dialer = func(network, address string, timeout time.Duration) (net.Conn, error)

// Bounded returns dial (net.DialTimeout if nil) with every connection's
// handshake bounded by sessionTimeout*2/3, the client's recvTimeout before
// the server's reply sets the negotiated one. It is meant for the client
// connected with that sessionTimeout.
func Bounded(dial Dialer, sessionTimeout time.Duration) Dialer {
	if dial == nil {
		dial = net.DialTimeout
	}
	bound := sessionTimeout * 2 / 3
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := dial(network, address, timeout)
		if err != nil || bound <= 0 {
			return c, err
		}
		return newConn(c, time.Now().Add(bound)), nil
	}
}

// conn bounds the handshake: until the connect response has been read,
// every deadline the client sets is capped at end (and a zero one, which
// the client sets for the response's body, becomes end). Only the client's
// connecting goroutine uses the connection until then.
type conn struct {
	net.Conn
	end  time.Time
	done atomic.Bool // the connect response was read: pass deadlines through
	// The connect response is an int32 length and that many bytes.
	hdr         [4]byte
	got         int   // bytes of the response read so far
	need        int64 // 4 + its length, once the length is read
	read, write time.Time
}

func newConn(c net.Conn, end time.Time) *conn {
	hc := &conn{Conn: c, end: end}
	_ = c.SetDeadline(end)
	return hc
}

func (c *conn) cap(t time.Time) time.Time {
	if t.IsZero() || t.After(c.end) {
		return c.end
	}
	return t
}

func (c *conn) SetDeadline(t time.Time) error {
	if c.done.Load() {
		return c.Conn.SetDeadline(t)
	}
	c.read, c.write = t, t
	return c.Conn.SetDeadline(c.cap(t))
}

func (c *conn) SetReadDeadline(t time.Time) error {
	if c.done.Load() {
		return c.Conn.SetReadDeadline(t)
	}
	c.read = t
	return c.Conn.SetReadDeadline(c.cap(t))
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	if c.done.Load() {
		return c.Conn.SetWriteDeadline(t)
	}
	c.write = t
	return c.Conn.SetWriteDeadline(c.cap(t))
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.done.Load() {
		c.count(p[:n])
	}
	return n, err
}

// count follows the connect response through b; when it is complete the
// client's own deadlines are put back.
func (c *conn) count(b []byte) {
	if c.got < len(c.hdr) {
		k := copy(c.hdr[c.got:], b)
		c.got += k
		b = b[k:]
		if c.got < len(c.hdr) {
			return
		}
		c.need = 4 + int64(binary.BigEndian.Uint32(c.hdr[:]))
	}
	c.got += len(b)
	if int64(c.got) < c.need {
		return
	}
	_ = c.Conn.SetReadDeadline(c.read)
	_ = c.Conn.SetWriteDeadline(c.write)
	c.done.Store(true)
}
