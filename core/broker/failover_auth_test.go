package broker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
)

// TestFailoverAuthTLS: failover between the members of a sync pair with
// [auth] enabled, plaintext and TLS-only (replSecure; every replication
// connection logs in as replication_user, TLS verified against
// replication_tls_ca_file). The slave gets named in sync; `stats
// switchover` is refused to a non-admin user (403) and before login (401);
// sent by an admin it hands the epoch to the slave, and the old master
// rejoins as slave 0 (stats epoch-start over a logged-in, TLS connection)
// and gets named in sync, its copy equal to the holder's. Then the holder
// is lost (Close: its nodes go at once), the other promotes itself, and
// the lost one, restarted on its data directory, rejoins the same way.
func TestFailoverAuthTLS(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	replAuthModes(t, "failover-auth", func(t *testing.T, m authMode) {
		root, c, tc := m.root, m.c, m.tc
		mdir, sdir := t.TempDir(), t.TempDir()
		member := func(dir string) func(*conf.Config) {
			return func(cfg *conf.Config) {
				cfg.DataDir = dir
				cfg.Failover = true
				cfg.Replication = conf.ReplicationSync
				// 6 s, not 2: the holder's lease is session_timeout/2,
				// read again every session_timeout/6, and a 1 s lease ran
				// out under load (puts answered "fenced"); the members
				// leave by Close or switchover, never by session expiry.
				cfg.ZooKeeper.SessionTimeout = 6000
				m.replCreds(cfg)
			}
		}
		mlogs, slogs := &syncLog{}, &syncLog{}
		master, maddr := replSecure(t, zkAddr, root, -1, c, mlogs, member(mdir))
		slave, saddr := replSecure(t, zkAddr, root, 1, c, slogs, member(sdir))
		logs := func() string {
			return "master log:\n" + mlogs.String() + "\nslave log:\n" + slogs.String()
		}
		waitInSync := func(holder *Broker, want string) {
			t.Helper()
			waitFor(t, 20*time.Second, func() error {
				if txt := holder.statsText(); !strings.Contains(txt, "failover_insync "+want+"\r\n") {
					return fmt.Errorf("not %s in sync:\n%s\n%s", want, txt, logs())
				}
				return nil
			})
		}
		waitRole := func(b *Broker, role string) {
			t.Helper()
			waitFor(t, 15*time.Second, func() error {
				if txt := b.statsText(); !strings.Contains(txt, "failover_role "+role+"\r\n") {
					return fmt.Errorf("not %s:\n%s\n%s", role, txt, logs())
				}
				return nil
			})
		}
		waitLog := func(l *syncLog, line string) {
			t.Helper()
			waitFor(t, 5*time.Second, func() error {
				if !strings.Contains(l.String(), line) {
					return fmt.Errorf("no %q logged:\n%s", line, logs())
				}
				return nil
			})
		}
		rootConn := func(addr string) *authClient {
			rc := dialAuth(t, addr, tc)
			code, body := rc.login("root", "root-pw")
			require.Equal(t, 200, code, body)
			return rc
		}
		waitInSync(master, "s1")
		securePuts(t, rootConn(maddr), 50)
		requireSameEnds(t, master, slave, "t")

		// A switchover: refused before login and to a non-admin user,
		// changing nothing; an admin's hands the epoch to slave 1.
		anon := dialAuth(t, maddr, tc)
		code, body := anon.stats(switchoverItem)
		require.Equal(t, 401, code, "switchover before login: %s", body)
		code, body = anon.stats(epochStartItem + "1")
		require.Equal(t, 401, code, "epoch-start before login: %s", body)
		ac := dialAuth(t, maddr, tc)
		code, body = ac.login("alice", "alice-pw")
		require.Equal(t, 200, code, body)
		code, body = ac.stats(switchoverItem)
		require.Equal(t, 403, code, "switchover by a non-admin user: %s", body)
		require.Contains(t, master.statsText(), "failover_role master\r\n")
		code, body = rootConn(maddr).stats(switchoverItem)
		require.Equal(t, 200, code, "switchover: %s\n%s", body, logs())
		require.Contains(t, body, "slave 1 holds epoch 2")
		require.Regexp(t, `audit: failover.switchover component=audit user=root remote=127\.0\.0\.1:\d+ via=protocol action=failover.switchover status=200 result="switchover: slave 1 holds epoch 2`, mlogs.String())
		waitInSync(slave, "s0") // the old master rejoined as slave 0
		require.Contains(t, master.statsText(), "failover_role slave\r\n")
		waitLog(mlogs, "failover: member s0 of broker 3 copies from broker 3 slave 1 at epoch 2")
		securePuts(t, rootConn(saddr), 50)
		requireSameEnds(t, slave, master, "t")

		// The holder is lost: the old master (slave 0, in sync)
		// promotes itself at epoch 3 and takes puts; the lost one,
		// restarted on its own data directory, rejoins as slave 1.
		require.NoError(t, slave.Close())
		waitRole(master, "master")
		require.Contains(t, master.statsText(), "\r\nepoch 3\r\n")
		securePuts(t, rootConn(maddr), 50)
		slogs = &syncLog{}
		slave, _ = replSecure(t, zkAddr, root, 1, c, slogs, member(sdir))
		waitInSync(master, "s1")
		require.Contains(t, slave.statsText(), "failover_role slave\r\n")
		waitLog(slogs, "failover: member s1 of broker 3 copies from broker 3 slave 0 at epoch 3")
		securePuts(t, rootConn(maddr), 50)
		requireSameEnds(t, master, slave, "t")
	})
}
