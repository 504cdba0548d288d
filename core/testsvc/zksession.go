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
// that records the session id and password of each connect response the
// client receives, so that a test can expire that session with
// ExpireSession.
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
	return &sniffConn{Conn: c, s: s}, nil
}

// Session returns the last session id and password seen (0, nil before any).
func (s *SessionSniffer) Session() (int64, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, append([]byte(nil), s.passwd...)
}

type sniffConn struct {
	net.Conn
	s    *SessionSniffer
	buf  []byte
	done bool
}

// Read passes data through, parsing the first packet: the connect response
// (int32 len, int32 protocolVersion, int32 timeOut, int64 sessionId, int32
// passwdLen, passwd).
func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.done && n > 0 {
		c.buf = append(c.buf, p[:n]...)
		if len(c.buf) >= 4 && len(c.buf) >= 4+int(binary.BigEndian.Uint32(c.buf)) {
			b := c.buf[4:]
			c.done = true
			if len(b) >= 20 {
				id := int64(binary.BigEndian.Uint64(b[8:16]))
				pl := int(int32(binary.BigEndian.Uint32(b[16:20])))
				if id != 0 && pl >= 0 && len(b) >= 20+pl {
					c.s.mu.Lock()
					c.s.id, c.s.passwd = id, append([]byte(nil), b[20:20+pl]...)
					c.s.mu.Unlock()
				}
			}
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
