package broker

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"github.com/metaq-go/metaq/conf"
)

// tlsState holds the broker's TLS material ([tls] in server.toml). The
// certificate and the client CA pool are swapped atomically by reload, so
// SIGHUP (Broker.ReloadTLS) changes what new handshakes see without
// touching established connections.
type tlsState struct {
	// mu serializes reloads; cfg is the [tls] table last loaded (under mu).
	mu  sync.Mutex
	cfg conf.TLS
	// server is the config of new handshakes: GetConfigForClient returns
	// it, and its GetCertificate reads cert.
	server atomic.Pointer[tls.Config]
	cert   atomic.Pointer[tls.Certificate]
}

// newTLSState loads the certificate, key and client CA of c.
func newTLSState(c conf.TLS) (*tlsState, error) {
	s := &tlsState{cfg: c}
	if err := s.load(c); err != nil {
		return nil, err
	}
	return s, nil
}

// reload reads the files again; on any error the current material stays.
func (s *tlsState) reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.load(s.cfg)
}

// reloadFrom loads the material [tls] table c names (Reload: the paths may
// have changed) and makes c current; on error nothing changes.
func (s *tlsState) reloadFrom(c conf.TLS) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.load(c); err != nil {
		return err
	}
	s.cfg = c
	return nil
}

// load reads the files of c and swaps them in. The caller holds mu.
func (s *tlsState) load(c conf.TLS) error {
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return fmt.Errorf("tls: load cert_file %s and key_file %s: %w", c.CertFile, c.KeyFile, err)
	}
	sc := &tls.Config{
		MinVersion: c.MinTLSVersion(),
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.cert.Load(), nil
		},
	}
	if c.ClientCAFile != "" {
		pem, err := os.ReadFile(c.ClientCAFile)
		if err != nil {
			return fmt.Errorf("tls: client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("tls: client_ca_file %s: no PEM certificate in it", c.ClientCAFile)
		}
		sc.ClientCAs = pool
		sc.ClientAuth = tls.VerifyClientCertIfGiven
		if c.RequireClientCert {
			sc.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	s.cert.Store(&cert)
	s.server.Store(sc)
	return nil
}

// listenerConfig is the config the TLS listener is built with: each
// handshake takes the current material.
func (s *tlsState) listenerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: s.cfg.MinTLSVersion(),
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.server.Load(), nil
		},
	}
}

var errNoTLS = errors.New("tls: not configured (no [tls] cert_file)")

// ReloadTLS reads [tls] cert_file, key_file and client_ca_file again (the
// server's SIGHUP). New handshakes use the new material; established
// connections keep theirs. On error nothing changes.
func (b *Broker) ReloadTLS() error {
	if b.tls == nil {
		return errNoTLS
	}
	return b.tls.reload()
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
