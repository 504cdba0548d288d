package security

import (
	"crypto/tls"
	"net"
	"sync"
)

// HeldConn is the TCP connection under a broker TLS connection (Listener).
// tls.Conn writes every record (at most 16 KiB) with a Write of its own;
// while a value reply is being sent the connection holds them and writes
// them out together, HeldMax bytes at a time, so a 1 MiB value costs a
// few syscalls instead of 64. Its buffer comes from a pool and goes back
// on Release: idle connections hold none.
type HeldConn struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	buf  *[]byte
}

// HeldMax is how many bytes of records a held connection gathers before
// writing them.
const HeldMax = 128 << 10

var heldBufs = sync.Pool{New: func() any { b := make([]byte, 0, HeldMax+20<<10); return &b }}

// heldListener wraps the TCP listener under the TLS one.
type heldListener struct{ net.Listener }

func (l heldListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &HeldConn{Conn: c}, nil
}

// Listener is the TLS listener over the TCP listener ln: each handshake
// takes the current material (ListenerConfig), and its connections are
// over HeldConns.
func (s *TLS) Listener(ln net.Listener) net.Listener {
	return tls.NewListener(heldListener{ln}, s.ListenerConfig())
}

// HeldOf returns the HeldConn under nc, if nc is a Listener's connection.
func HeldOf(nc net.Conn) *HeldConn {
	if tc, ok := nc.(*tls.Conn); ok {
		if h, ok := tc.NetConn().(*HeldConn); ok {
			return h
		}
	}
	return nil
}

func (h *HeldConn) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.hold {
		return h.Conn.Write(p)
	}
	*h.buf = append(*h.buf, p...)
	if len(*h.buf) >= HeldMax {
		if err := h.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (h *HeldConn) flushLocked() error {
	b := *h.buf
	*h.buf = b[:0]
	if len(b) == 0 {
		return nil
	}
	_, err := h.Conn.Write(b)
	return err
}

// HoldWrites starts gathering the records written.
func (h *HeldConn) HoldWrites() {
	h.mu.Lock()
	h.hold, h.buf = true, heldBufs.Get().(*[]byte)
	h.mu.Unlock()
}

// Release writes what was gathered and stops holding; its error is the
// write's (the records were reported written to tls.Conn).
func (h *HeldConn) Release() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	err := h.flushLocked()
	h.hold = false
	if cap(*h.buf) <= 2*HeldMax {
		heldBufs.Put(h.buf)
	}
	h.buf = nil
	return err
}
