package broker

import (
	"crypto/tls"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// TestReloadTLS checks that ReloadTLS swaps the certificate for new
// connections, keeps established ones, and keeps the old certificate when
// the new files are bad.
func TestReloadTLS(t *testing.T) {
	t.Parallel()
	certs := testsvc.NewCerts(t)
	b := secureBroker(t, certs, &syncLog{}, 0)
	serial := func(c *authClient) string {
		return c.nc.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	old := dialAuth(t, b.TLSAddr(), certs.ClientConfig(t, ""))
	code, body := old.login("alice", "alice-pw")
	require.Equal(t, 200, code, body)
	first := serial(old)

	// secureBroker's certificate files are server.pem and server-key.pem:
	// issue a new one in their place.
	_, _, next := certs.Server(t, "server")
	require.NoError(t, b.ReloadTLS())
	fresh := dialAuth(t, b.TLSAddr(), certs.ClientConfig(t, ""))
	code, body = fresh.call(protocol.AppendVersion)
	require.Equal(t, 200, code, body)
	require.Equal(t, next.String(), serial(fresh))
	require.NotEqual(t, first, serial(fresh))

	// The old connection still works, authenticated.
	code, body = old.put("orders")
	require.Equal(t, 200, code, body)

	// A bad certificate file: the reload fails and the current one stays.
	require.NoError(t, os.WriteFile(b.config().TLS.CertFile, []byte("not a certificate"), 0o600))
	require.Error(t, b.ReloadTLS())
	again := dialAuth(t, b.TLSAddr(), certs.ClientConfig(t, ""))
	code, body = again.call(protocol.AppendVersion)
	require.Equal(t, 200, code, body)
	require.Equal(t, next.String(), serial(again))
}

// TestTLSOnly checks that port = 0 with [tls] serves TLS only.
func TestTLSOnly(t *testing.T) {
	t.Parallel()
	certs := testsvc.NewCerts(t)
	cf, kf, _ := certs.Server(t, "server")
	cfg := testConfig()
	cfg.Host, cfg.Port, cfg.DataDir = "127.0.0.1", 0, t.TempDir()
	cfg.Topics = []conf.Topic{{Name: "t"}}
	cfg.TLS.CertFile, cfg.TLS.KeyFile = cf, kf
	require.NoError(t, testsvc.StartOnFreePort(func(port int) error {
		cfg.TLSPort = port
		b, err := New(cfg, Options{Logf: func(string, ...any) {}})
		if err != nil {
			return err
		}
		if err := b.Start(); err != nil {
			b.Close()
			return err
		}
		t.Cleanup(func() { b.Close() })
		require.Empty(t, b.Addr())
		require.NotEmpty(t, b.TLSAddr())
		c := dialAuth(t, b.TLSAddr(), certs.ClientConfig(t, ""))
		code, body := c.stats("")
		require.Equal(t, 200, code, body)
		return nil
	}))
}
