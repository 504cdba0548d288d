package e2e

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// dialTLS connects a raw client to addr over TLS.
func dialTLS(t testing.TB, addr string, cfg *tls.Config) *client {
	t.Helper()
	c, err := dialTLSClient(addr, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { c.nc.Close() })
	return c
}

// dialTLSClient connects a raw client to addr over TLS.
func dialTLSClient(addr string, cfg *tls.Config) (*client, error) {
	nc, err := tls.DialWithDialer(&net.Dialer{Timeout: ioTimeout}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	return &client{nc: nc, dec: protocol.NewDecoder(nc, protocol.Limits{MaxBody: 64 << 20})}, nil
}

func (c *client) auth(user, password string) (reply, error) {
	op := c.nextOpaque()
	return c.call(protocol.AppendAuthPlain(nil, user, password, op), op)
}

func serial(c *client) string {
	return c.nc.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// TestServerTLSAuth runs the real metaq-server TLS-only (port = 0) with
// auth and mTLS: a password and a client certificate log in, a wrong
// password gets 401, and SIGHUP reloads the certificate for new
// connections without dropping an established one.
func TestServerTLSAuth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certs := testsvc.NewCerts(t)
	cf, kf, first := certs.Server(t, "server")
	hash, err := bcrypt.GenerateFromPassword([]byte("alice-pw"), bcrypt.MinCost)
	require.NoError(t, err)
	var p *brokertest.Server
	require.NoError(t, testsvc.StartOnFreePort(func(port int) error {
		config := filepath.Join(dir, "server.toml")
		toml := fmt.Sprintf(`data_dir = %q
host = "127.0.0.1"
journal_file_size = 1048576
port = 0
tls_port = %d

[tls]
cert_file = %q
key_file = %q
client_ca_file = %q

[auth]
enabled = true
failure_delay = 200

[[auth.user]]
name = "alice"
password_hash = %q
publish = ["orders*"]
subscribe = ["orders*"]
groups = ["billing-*"]

[[topic]]
name = "orders"
`, filepath.Join(dir, "data"), port, cf, kf, certs.CAFile, hash)
		if err := os.WriteFile(config, []byte(toml), 0o600); err != nil {
			return err
		}
		var err error
		p, err = brokertest.Launch(brokertest.ServerBinary(t), nil, "--config", config)
		if err != nil && p != nil {
			p.Kill()
			return fmt.Errorf("%w\n%s", err, p.Logs.String())
		}
		return err
	}))
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("metaq-server log:\n%s", p.Logs.Tail(8<<10))
		}
	})
	require.Contains(t, p.Logs.String(), "metaq-server tls on "+p.Addr)

	old := dialTLS(t, p.Addr, certs.ClientConfig(t, ""))
	r, err := old.put("orders", 0, []byte("x"))
	require.NoError(t, err)
	require.Equal(t, 401, r.Code, "%v", r)
	ok(t)(old.auth("alice", "alice-pw"))
	ok(t)(old.put("orders", 0, []byte("x")))
	require.Equal(t, first.String(), serial(old))

	bad := dialTLS(t, p.Addr, certs.ClientConfig(t, ""))
	start := time.Now()
	r, err = bad.auth("alice", "wrong")
	require.NoError(t, err)
	require.Equal(t, 401, r.Code, "%v", r)
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
	require.NotContains(t, p.Logs.String(), "wrong")

	mtls := dialTLS(t, p.Addr, certs.ClientConfig(t, "alice"))
	ok(t)(mtls.put("orders", 0, []byte("by cert")))
	r, err = mtls.put("secret", 0, []byte("x"))
	require.NoError(t, err)
	require.Equal(t, 403, r.Code, "%v", r)

	// SIGHUP with a new certificate in the same files.
	_, _, next := certs.Server(t, "server")
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool {
		return strings.Contains(p.Logs.String(), "SIGHUP: applied: TLS certificates reloaded from")
	},
		10*time.Second, 10*time.Millisecond)
	fresh := dialTLS(t, p.Addr, certs.ClientConfig(t, ""))
	ok(t)(fresh.auth("alice", "alice-pw"))
	require.Equal(t, next.String(), serial(fresh))
	ok(t)(old.put("orders", 0, []byte("after reload")))

	// A bad certificate: the broker logs the error and keeps the current
	// configuration, certificate included.
	require.NoError(t, os.WriteFile(cf, []byte("garbage"), 0o600))
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Contains(p.Logs.String(), "rejected; the running configuration stays") },
		10*time.Second, 10*time.Millisecond)
	again := dialTLS(t, p.Addr, certs.ClientConfig(t, "alice"))
	ok(t)(again.put("orders", 0, []byte("still up")))
	require.Equal(t, next.String(), serial(again))
}
