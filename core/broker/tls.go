package broker

import (
	"crypto/tls"
	"net"
	"sync"

	"github.com/metaq-go/metaq/core/security"
)

// ReloadTLS reads [tls] cert_file, key_file and client_ca_file again (the
// server's SIGHUP). New handshakes use the new material; established
// connections keep theirs. On error nothing changes.
func (b *Broker) ReloadTLS() error {
	if b.tls == nil {
		return security.ErrNoTLS
	}
	return b.tls.Reload()
}

// heldConn is the TCP connection under a broker TLS connection. tls.Conn
// writes every record (at most 16 KiB) with a Write of its own; while a
// value reply is being sent the connection holds them and writes them
// out together, heldMax bytes at a time, so a 1 MiB value costs a few
// syscalls instead of 64. Its buffer comes from a pool and goes back on
// release: idle connections hold none.
type heldConn struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	buf  *[]byte
}

// heldMax is how many bytes of records a held connection gathers before
// writing them.
const heldMax = 128 << 10

// copyBufs are the buffers value replies over TLS are read into.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, heldMax); return &b }}

var heldBufs = sync.Pool{New: func() any { b := make([]byte, 0, heldMax+20<<10); return &b }}

// heldListener wraps the TCP listener under the TLS one.
type heldListener struct{ net.Listener }

func (l heldListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &heldConn{Conn: c}, nil
}

// heldOf returns the heldConn under nc, if nc is a broker TLS connection.
func heldOf(nc net.Conn) *heldConn {
	if tc, ok := nc.(*tls.Conn); ok {
		if h, ok := tc.NetConn().(*heldConn); ok {
			return h
		}
	}
	return nil
}

func (h *heldConn) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.hold {
		return h.Conn.Write(p)
	}
	*h.buf = append(*h.buf, p...)
	if len(*h.buf) >= heldMax {
		if err := h.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (h *heldConn) flushLocked() error {
	b := *h.buf
	*h.buf = b[:0]
	if len(b) == 0 {
		return nil
	}
	_, err := h.Conn.Write(b)
	return err
}

// holdWrites starts gathering the records written.
func (h *heldConn) holdWrites() {
	h.mu.Lock()
	h.hold, h.buf = true, heldBufs.Get().(*[]byte)
	h.mu.Unlock()
}

// release writes what was gathered and stops holding; its error is the
// write's (the records were reported written to tls.Conn).
func (h *heldConn) release() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	err := h.flushLocked()
	h.hold = false
	if cap(*h.buf) <= 2*heldMax {
		heldBufs.Put(h.buf)
	}
	h.buf = nil
	return err
}
