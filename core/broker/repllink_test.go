package broker

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// replSecure starts an in-process member of broker id 3 (slave < 0: the
// master) with [auth] on (testUsers) and the replication keys of mod;
// with certs it is TLS-only (port = 0, a TLS listener with a server
// certificate of certs' CA), else plaintext. It returns the broker and
// the address clients dial.
func replSecure(t *testing.T, zkAddr, root string, slave int, certs *testsvc.Certs, logs *syncLog, mod func(*conf.Config)) (*Broker, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var plain, tln net.Listener
	mods := []func(*conf.Config){replConf(zkAddr, root, slave), func(cfg *conf.Config) {
		cfg.Host = "127.0.0.1"
		cfg.Auth = conf.Auth{Enabled: true, FailureDelay: 100, Users: hashedUsers(t)}
	}}
	if mod != nil {
		mods = append(mods, mod)
	}
	mods = append(mods, func(cfg *conf.Config) {
		if certs != nil {
			cf, kf, _ := certs.Server(t, fmt.Sprintf("server-%d", slave+1))
			cfg.TLS = conf.TLS{CertFile: cf, KeyFile: kf, MinVersion: "1.2"}
			cfg.Port, cfg.TLSPort = 0, ln.Addr().(*net.TCPAddr).Port
			tln = ln
		} else {
			cfg.Port = ln.Addr().(*net.TCPAddr).Port
			plain = ln
		}
	})
	b := fixture{mods: mods, opts: Options{Logf: logs.Logf}, serve: func(b *Broker) error { return b.ServeListeners(plain, tln) }}.start(t)
	return b, ln.Addr().String()
}

// securePuts puts n messages over both partitions of t on c (logged in
// as a user who may publish) and requires every one acknowledged.
func securePuts(t *testing.T, c *authClient, n int) {
	t.Helper()
	for i := range n {
		data := []byte(fmt.Sprintf("secure-%d", i))
		code, body := c.call(func(d []byte, op int32) []byte {
			return protocol.AppendPut(d, "t", int32(i%2), 0, int64(message.Checksum(data)), op, data)
		})
		require.Equal(t, 200, code, "put %d: %s", i, body)
	}
}

// authMode is one subtest of replAuthModes: plaintext or TLS-only.
type authMode struct {
	root string         // a fresh ZooKeeper root
	c    *testsvc.Certs // the brokers' certificates; nil in plaintext
	tc   *tls.Config    // a client's TLS config; nil in plaintext
}

// replCreds logs replication in as root, verifying TLS against the test
// CA in TLS-only mode.
func (m authMode) replCreds(cfg *conf.Config) {
	cfg.ReplicationUser, cfg.ReplicationPassword = "root", "root-pw"
	if m.c != nil {
		cfg.ReplicationTLSCAFile = m.c.CAFile
	}
}

// replAuthModes runs fn as the subtests plaintext and tls-only, each
// with its own ZooKeeper root /<prefix>-<nanoseconds>.
func replAuthModes(t *testing.T, prefix string, fn func(t *testing.T, m authMode)) {
	certs := testsvc.NewCerts(t)
	for _, withTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plaintext", true: "tls-only"}[withTLS], func(t *testing.T) {
			m := authMode{root: fmt.Sprintf("/%s-%d", prefix, time.Now().UnixNano())}
			if withTLS {
				m.c, m.tc = certs, certs.ClientConfig(t, "")
			}
			fn(t, m)
		})
	}
}

// TestReplicationAuthTLS: replication between brokers with [auth]
// enabled, plaintext and TLS-only. The slave pulls and the sync master
// links with replication_user (SASL PLAIN over the link, TLS verified
// against replication_tls_ca_file for a TLS-only peer): the partitions
// join sync, every put is acknowledged and both copies end equal. A
// non-admin user may not send sync or bind a sync link. A slave with a
// wrong password copies nothing and logs the refusal, and its sync master
// acknowledges nothing.
func TestReplicationAuthTLS(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	replAuthModes(t, "repl-auth", func(t *testing.T, m authMode) {
		root, c, tc := m.root, m.c, m.tc
		creds := m.replCreds
		var mlogs, slogs syncLog
		slave, saddr := replSecure(t, zkAddr, root, 1, c, &slogs, creds)
		master, maddr := replSecure(t, zkAddr, root, -1, c, &mlogs, func(cfg *conf.Config) {
			creds(cfg)
			cfg.Replication = conf.ReplicationSync
		})
		waitFor(t, 15*time.Second, func() error {
			if txt := master.statsText(); !strings.Contains(txt, "sync_partitions_in_sync 2/2\r\n") {
				return fmt.Errorf("not in sync:\n%s\nmaster log:\n%s\nslave log:\n%s", txt, mlogs.String(), slogs.String())
			}
			return nil
		})
		pc := dialAuth(t, maddr, tc)
		code, body := pc.login("alice", "alice-pw")
		require.Equal(t, 200, code, body)
		code, body = pc.put("t")
		require.Equal(t, 403, code, "alice may not publish to t: %s", body)
		rc := dialAuth(t, maddr, tc)
		code, body = rc.login("root", "root-pw")
		require.Equal(t, 200, code, body)
		securePuts(t, rc, 50)
		requireSameEnds(t, master, slave, "t")
		require.Contains(t, slave.statsText(), "slave_connected true\r\n")
		require.NotContains(t, master.statsText(), "sync_shipped 0\r\n")

		// A user without admin may not sync nor bind a sync link.
		ac := dialAuth(t, saddr, tc)
		code, body = ac.login("alice", "alice-pw")
		require.Equal(t, 200, code, body)
		data := []byte("forged")
		code, body = ac.call(func(d []byte, op int32) []byte {
			return protocol.AppendSync(d, "t", 0, 0, 1<<40, int64(message.Checksum(data)), op, data)
		})
		require.Equal(t, 403, code, "sync by a non-admin user: %s", body)
		require.Contains(t, body, "ship syncs")
		code, body = ac.stats(syncEpochItem + "1")
		require.Equal(t, 403, code, "binding a sync link as a non-admin user: %s", body)
	})

	t.Run("wrong-password", func(t *testing.T) {
		root := fmt.Sprintf("/repl-auth-bad-%d", time.Now().UnixNano())
		var mlogs, slogs syncLog
		slave, _ := replSecure(t, zkAddr, root, 1, nil, &slogs, func(c *conf.Config) {
			c.ReplicationUser, c.ReplicationPassword = "root", "wrong"
		})
		master, maddr := replSecure(t, zkAddr, root, -1, nil, &mlogs, func(c *conf.Config) {
			c.ReplicationUser, c.ReplicationPassword = "root", "wrong"
			c.Replication = conf.ReplicationSync
		})
		waitFor(t, 10*time.Second, func() error {
			if !strings.Contains(slogs.String(), "replication login refused") {
				return fmt.Errorf("the slave did not log the refusal:\n%s", slogs.String())
			}
			if !strings.Contains(mlogs.String(), "replication login refused") {
				return fmt.Errorf("the master did not log the refusal:\n%s", mlogs.String())
			}
			return nil
		})
		require.Contains(t, slave.statsText(), "slave_connected false\r\n")
		rc := dialAuth(t, maddr, nil)
		code, body := rc.login("root", "root-pw")
		require.Equal(t, 200, code, body)
		code, body = rc.put("t")
		require.Equal(t, 500, code, "a sync master without a linked slave acknowledged: %s", body)
		require.Contains(t, body, "Slave is disconnected")
		require.Contains(t, master.statsText(), "sync_slave none\r\n")
		for _, l := range slave.topics.Get("t").Parts {
			require.Zero(t, l.MaxOffset(), "the slave copied without logging in")
		}
	})
}
