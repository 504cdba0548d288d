package repl

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/tlsio"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Dialer opens replication connections: replication_user's login,
// replication_tls_ca_file and [tls] min_version of the configuration it
// was built from.
type Dialer struct {
	// Addr maps a peer's registered address to the one to dial (tests);
	// nil dials it as is.
	Addr           func(string) string
	User, Password string
	CAFile         string
	MinTLS         uint16 // 0: TLS 1.2
}

// DialerFromConf is cfg's replication dialer; addr maps addresses (nil:
// none).
func DialerFromConf(cfg *conf.Config, addr func(string) string) Dialer {
	d := Dialer{Addr: addr, User: cfg.ReplicationUser, Password: cfg.ReplicationPassword, CAFile: cfg.ReplicationTLSCAFile}
	if cfg.TLS.MinVersion != "" {
		d.MinTLS = cfg.TLS.MinTLSVersion()
	}
	return d
}

// Dial opens a replication connection (a slave's pulls, a sync
// master's link and control connection) to the peer at addr, host:port
// as registered in ZooKeeper: TCP, then TLS when the peer is TLS-only
// (tlsPeer: it registered metaqs://), verified against
// replication_tls_ca_file, then, with replication_user set, a SASL PLAIN
// login as that user of the peer (docs/replication.md, "Authentication
// and TLS"). timeout bounds each step.
func (dl Dialer) Dial(ctx context.Context, addr string, tlsPeer bool, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	to := addr
	if dl.Addr != nil {
		to = dl.Addr(addr)
	}
	nc, err := d.DialContext(ctx, "tcp", to)
	if err != nil {
		return nil, err
	}
	if tlsPeer {
		tc, err := dl.tlsConfig(addr)
		if err != nil {
			nc.Close()
			return nil, err
		}
		c := tls.Client(tlsio.BufferReads(nc), tc)
		nc.SetDeadline(time.Now().Add(timeout))
		if err := c.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		nc.SetDeadline(time.Time{})
		nc = c
	}
	if dl.User != "" {
		if err := login(nc, dl.User, dl.Password, timeout); err != nil {
			nc.Close()
			return nil, fmt.Errorf("%s: %w", addr, err)
		}
	}
	return nc, nil
}

// tlsConfig is the client side of a replication TLS connection to
// addr: the peer's certificate is verified against replication_tls_ca_file
// (or the system's roots) for addr's host.
func (dl Dialer) tlsConfig(addr string) (*tls.Config, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if dl.MinTLS != 0 {
		tc.MinVersion = dl.MinTLS
	}
	if f := dl.CAFile; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("replication_tls_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("replication_tls_ca_file %s: no PEM certificate in it", f)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

// errLogin marks a refused replication login.
var errLogin = errors.New("replication login refused")

// login sends auth PLAIN on nc and waits for its answer.
func login(nc net.Conn, user, password string, timeout time.Duration) error {
	// The broker answers a failed login after its failure_delay (up to
	// 60 s; 1 s by default): wait for that too.
	nc.SetDeadline(time.Now().Add(timeout + 61*time.Second))
	defer nc.SetDeadline(time.Time{})
	const opaque = 1
	if _, err := nc.Write(protocol.AppendAuthPlain(nil, user, password, opaque)); err != nil {
		return err
	}
	// A decoder of its own: nothing else is in flight, so it reads the
	// reply and nothing after it.
	dec := protocol.NewDecoder(nc, protocol.Limits{MaxBody: 64 << 10})
	defer dec.Release()
	var r protocol.Request
	if err := dec.Decode(&r); err != nil {
		return fmt.Errorf("auth as replication_user %q: %w", user, err)
	}
	if r.Op != protocol.OpResult || r.Code != protocol.StatusOK {
		return fmt.Errorf("%w: auth as replication_user %q: %d %s", errLogin, user, r.Code, protocol.Printable(r.Body))
	}
	return nil
}
