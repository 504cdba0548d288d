package broker

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/metaq-go/metaq/conf"
)

// tlsState holds the broker's TLS material ([tls] in server.toml). The
// certificate and the client CA pool are swapped atomically by reload, so
// SIGHUP (Broker.ReloadTLS) changes what new handshakes see without
// touching established connections.
type tlsState struct {
	cfg conf.TLS
	// server is the config of new handshakes: GetConfigForClient returns
	// it, and its GetCertificate reads cert.
	server atomic.Pointer[tls.Config]
	cert   atomic.Pointer[tls.Certificate]
}

// newTLSState loads the certificate, key and client CA of c.
func newTLSState(c conf.TLS) (*tlsState, error) {
	s := &tlsState{cfg: c}
	if err := s.reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// reload reads the files again; on any error the current material stays.
func (s *tlsState) reload() error {
	cert, err := tls.LoadX509KeyPair(s.cfg.CertFile, s.cfg.KeyFile)
	if err != nil {
		return fmt.Errorf("tls: load cert_file %s and key_file %s: %w", s.cfg.CertFile, s.cfg.KeyFile, err)
	}
	sc := &tls.Config{
		MinVersion: s.cfg.MinTLSVersion(),
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.cert.Load(), nil
		},
	}
	if s.cfg.ClientCAFile != "" {
		pem, err := os.ReadFile(s.cfg.ClientCAFile)
		if err != nil {
			return fmt.Errorf("tls: client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("tls: client_ca_file %s: no PEM certificate in it", s.cfg.ClientCAFile)
		}
		sc.ClientCAs = pool
		sc.ClientAuth = tls.VerifyClientCertIfGiven
		if s.cfg.RequireClientCert {
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
