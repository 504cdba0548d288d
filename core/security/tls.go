package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"sync"
	"sync/atomic"

	"github.com/metaq-go/metaq/conf"
)

// TLS holds the broker's TLS material ([tls] in server.toml). The
// certificate and the client CA pool are swapped atomically by a reload,
// so SIGHUP (Broker.ReloadTLS) changes what new handshakes see without
// touching established connections.
type TLS struct {
	// mu serializes reloads; cfg is the [tls] table last loaded (under mu).
	mu  sync.Mutex
	cfg conf.TLS
	// server is the config of new handshakes: GetConfigForClient returns
	// it, and its GetCertificate reads cert.
	server atomic.Pointer[tls.Config]
	cert   atomic.Pointer[tls.Certificate]
}

// ErrNoTLS is a TLS listener or reload asked of a broker without [tls].
var ErrNoTLS = errors.New("tls: not configured (no [tls] cert_file)")

// TLSError is TLS material that cannot be loaded: Setting names the
// [tls] setting at fault (cert_file, which covers key_file, or
// client_ca_file), Msg says what was being done and Err why (nil when Msg
// says it all).
type TLSError struct {
	Setting string
	Msg     string
	Err     error
}

func (e *TLSError) Error() string {
	if e.Err == nil {
		return e.Msg
	}
	return e.Msg + ": " + e.Err.Error()
}

func (e *TLSError) Unwrap() error { return e.Err }

// NewTLS loads the certificate, key and client CA of c. A file that
// cannot be loaded is a *TLSError.
func NewTLS(c conf.TLS) (*TLS, error) {
	s := &TLS{cfg: c}
	if err := s.load(c); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload reads the files again; on any error the current material stays.
func (s *TLS) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.load(s.cfg)
}

// ReloadFrom loads the material [tls] table c names (the broker's Reload:
// the paths may have changed) and makes c current; on error nothing
// changes.
func (s *TLS) ReloadFrom(c conf.TLS) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.load(c); err != nil {
		return err
	}
	s.cfg = c
	return nil
}

// load reads the files of c and swaps them in. The caller holds mu.
func (s *TLS) load(c conf.TLS) error {
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return &TLSError{"cert_file", "tls: load cert_file " + c.CertFile + " and key_file " + c.KeyFile, err}
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
			return &TLSError{"client_ca_file", "tls: client_ca_file", err}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return &TLSError{"client_ca_file", "tls: client_ca_file " + c.ClientCAFile + ": no PEM certificate in it", nil}
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

// ListenerConfig is the config a TLS listener is built with: each
// handshake takes the current material.
func (s *TLS) ListenerConfig() *tls.Config {
	s.mu.Lock()
	min := s.cfg.MinTLSVersion()
	s.mu.Unlock()
	return &tls.Config{
		MinVersion: min,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.server.Load(), nil
		},
	}
}
