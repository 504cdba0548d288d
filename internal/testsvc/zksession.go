package testsvc

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// SessionSniffer is a ZooKeeper client Dialer (go-zookeeper's zk.WithDialer)
// for one client. It records the session id and password of each connect
// response the client receives, so that a test can expire that session with
// ExpireSession.
//
// It also keeps tests that reconnect a client clear of a data race inside
// go-zookeeper v1.0.4 (samuel/go-zookeeper#178, #260): when a client
// re-attaches to its session it re-sets its watches, reading Conn.lastZxid,
// while its new receive loop may already be writing it for the reply to
// another request. -race reports that as a failure of whichever test cut
// the connection or expired the session. So on every reconnection (to
// the same session or, after an expiry, a new one) the sniffer holds back
// the server's frames after the connect response until the
// client has written its SetWatches request (or, for a client with no
// watches, which sends none, for at most a second): every write of the
// field then happens after the read.
type SessionSniffer struct {
	mu     sync.Mutex
	id     int64
	passwd []byte
}

// Dial dials like net.DialTimeout and watches the connection's first packet.
func (s *SessionSniffer) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c, s: s, gate: make(chan struct{})}, nil
}

// Session returns the last session id and password seen (0, nil before any).
func (s *SessionSniffer) Session() (int64, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, append([]byte(nil), s.passwd...)
}

// opSetWatches is ZooKeeper's SetWatches request type.
const opSetWatches = 101

// maxReattachHold bounds how long replies wait for SetWatches.
const maxReattachHold = time.Second

type sniffConn struct {
	net.Conn
	s *SessionSniffer
	// The reading side (go-zookeeper reads with one goroutine at a time).
	buf     []byte // the connect response, until complete
	done    bool   // the connect response was seen
	pending []byte // read past the connect response, held with it
	held    bool   // on a reconnection: frames wait for gate
	// gate is closed when SetWatches has been written.
	gate     chan struct{}
	gateOnce sync.Once
	// The writing side (one writer at a time), which follows the request
	// frames (int32 length, int32 xid, int32 type, body; the first, the
	// connect request, has no type) across Write calls.
	whdr    []byte // the current frame's first bytes, up to 12
	wleft   int    // bytes of the current frame still to come
	wframes int
}

// Read passes data through, parsing the first packet: the connect response
// (int32 len, int32 protocolVersion, int32 timeOut, int64 sessionId, int32
// passwdLen, passwd).
func (c *sniffConn) Read(p []byte) (int, error) {
	if c.held {
		c.held = false
		t := time.NewTimer(maxReattachHold)
		select {
		case <-c.gate:
		case <-t.C:
		}
		t.Stop()
	}
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	n, err := c.Conn.Read(p)
	if c.done || n == 0 {
		return n, err
	}
	c.buf = append(c.buf, p[:n]...)
	if len(c.buf) < 4 || len(c.buf) < 4+int(binary.BigEndian.Uint32(c.buf)) {
		return n, err
	}
	c.done = true
	total := 4 + int(binary.BigEndian.Uint32(c.buf))
	if extra := len(c.buf) - total; extra > 0 {
		c.pending = append([]byte(nil), c.buf[total:]...)
		n -= extra
	}
	b := c.buf[4:total]
	if len(b) >= 20 {
		id := int64(binary.BigEndian.Uint64(b[8:16]))
		pl := int(int32(binary.BigEndian.Uint32(b[16:20])))
		if id != 0 && pl >= 0 && len(b) >= 20+pl {
			c.s.mu.Lock()
			// Any reconnection, to the old session or (after an expiry) a
			// new one: the client may re-set watches in both cases, since
			// watches it set again after the expiry can be queued before
			// the new session's SetWatches.
			c.held = c.s.id != 0
			c.s.id, c.s.passwd = id, append([]byte(nil), b[20:20+pl]...)
			c.s.mu.Unlock()
		}
	}
	c.buf = nil
	return n, err
}

// Write passes data through, noting when a SetWatches request goes out.
func (c *sniffConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	for b := p[:n]; len(b) > 0; {
		if len(c.whdr) < 4 { // the frame's length
			k := min(4-len(c.whdr), len(b))
			c.whdr, b = append(c.whdr, b[:k]...), b[k:]
			if len(c.whdr) == 4 {
				c.wleft, c.wframes = int(binary.BigEndian.Uint32(c.whdr)), c.wframes+1
				if c.wleft == 0 {
					c.whdr = c.whdr[:0]
				}
			}
			continue
		}
		k := min(len(b), c.wleft)
		if len(c.whdr) < 12 {
			k = min(k, 12-len(c.whdr))
			c.whdr = append(c.whdr, b[:k]...)
			if len(c.whdr) == 12 && c.wframes > 1 && int32(binary.BigEndian.Uint32(c.whdr[8:12])) == opSetWatches {
				c.gateOnce.Do(func() { close(c.gate) })
			}
		}
		b, c.wleft = b[k:], c.wleft-k
		if c.wleft == 0 {
			c.whdr = c.whdr[:0]
		}
	}
	return n, err
}

// ExpireSession joins session id with its password on a second connection
// to the ZooKeeper at addr and closes it: ZooKeeper's standard way to expire
// a client's session. The server ends the session (deleting its ephemeral
// nodes); the original client learns it is expired when it reconnects.
func ExpireSession(t testing.TB, addr string, id int64, passwd []byte) {
	t.Helper()
	if err := expireSession(addr, id, passwd); err != nil {
		t.Fatalf("expire ZooKeeper session %#x: %v", id, err)
	}
}

func expireSession(addr string, id int64, passwd []byte) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	// ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd.
	req := binary.BigEndian.AppendUint32(nil, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, 4000)
	req = binary.BigEndian.AppendUint64(req, uint64(id))
	req = binary.BigEndian.AppendUint32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	if err := writePacket(c, req); err != nil {
		return err
	}
	resp, err := readPacket(c)
	if err != nil {
		return err
	}
	if len(resp) < 16 || int64(binary.BigEndian.Uint64(resp[8:16])) != id {
		return fmt.Errorf("the server did not accept the session's credentials")
	}
	// closeSession: RequestHeader{xid 1, type -11}.
	hdr := binary.BigEndian.AppendUint32(nil, 1)
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(0xFFFFFFF5))
	if err := writePacket(c, hdr); err != nil {
		return err
	}
	_, err = readPacket(c) // ReplyHeader
	return err
}

func writePacket(c net.Conn, b []byte) error {
	_, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...))
	return err
}

func readPacket(c net.Conn) ([]byte, error) {
	var l [4]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(l[:]))
	_, err := io.ReadFull(c, b)
	return b, err
}
