package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/metaq-go/metaq/internal/queuecheck"
	"github.com/metaq-go/metaq/internal/testsvc"
)

// TestSyncFailoverAuthTLS: the failover of TestSyncFailoverKill9 (one
// round) with real metaq-server binaries whose only client listener is
// TLS (port = 0, tls_port) and with [auth] enabled; every replication
// connection logs in as replication_user over TLS verified against
// replication_tls_ca_file (docs/replication.md, Authentication and TLS on
// the replication link). A slave with a wrong replication_password is
// refused by the master (the slave logs it) and never named in sync; the
// right one is. A put over a TLS connection that did not log in gets 401
// and is on neither copy. Under load from logged-in producers the holder
// is killed with kill -9: the slave promotes itself and holds every
// acknowledged message exactly once at its offset; the killed broker,
// restarted on its data directory, rejoins as slave over the same
// authenticated TLS link and its copy equals the new holder's.
func TestSyncFailoverAuthTLS(t *testing.T) {
	t.Parallel()
	certs := testsvc.NewCerts(t)
	certFile, keyFile, _ := certs.Server(t, "server")
	hash, err := bcrypt.GenerateFromPassword([]byte("root-pw"), bcrypt.MinCost)
	require.NoError(t, err)
	config := syncConfig(fmt.Sprintf("failover = true\nreplication_user = \"root\"\nreplication_tls_ca_file = %q\n", certs.CAFile)) +
		fmt.Sprintf("\n[auth]\nenabled = true\n\n[[auth.user]]\nname = \"root\"\npassword_hash = %q\nadmin = true\n", hash)
	c := startCluster(t, clusterSpec{Config: config, SessionTimeout: foSession})
	tc := certs.ClientConfig(t, "")
	// The test's raw clients (stats, reads, the load) connect over TLS
	// and log in.
	c.dialer = func(addr string) (*client, error) {
		cl, err := dialTLSClient(addr, tc)
		if err != nil {
			return nil, err
		}
		r, err := cl.auth("root", "root-pw")
		if err == nil && r.Code != 200 {
			err = fmt.Errorf("login to %s: %v", addr, r)
		}
		if err != nil {
			cl.close()
			return nil, err
		}
		return cl, nil
	}
	// Each member's own file: TLS only on its port, the given
	// replication_password.
	secure := func(password string) func(string, int) string {
		return func(text string, port int) string {
			text = strings.Replace(text, "\nport = 8123\n",
				fmt.Sprintf("\nport = 0\ntls_port = %d\nreplication_password = %q\n", port, password), 1)
			return text + fmt.Sprintf("\n[tls]\ncert_file = %q\nkey_file = %q\n", certFile, keyFile)
		}
	}
	holder := startReplEdit(t, c, 1, -1, "", secure("root-pw"))
	// TLS only: the ready line names the TLS address (a plaintext
	// listener's otherwise).
	require.True(t, holder.logContains("metaq-server tls on "+holder.Addr), "%s: no TLS listener on its port", holder)
	require.True(t, holder.logContains("metaq-server ready on "+holder.Addr), "%s serves plaintext too", holder)

	slave := startReplEdit(t, c, 1, 1, "", secure("root-pw"))
	waitStat(t, holder, "failover_insync", "s1", 20*time.Second)
	waitStat(t, holder, "sync_partitions_in_sync", "6/6", 10*time.Second)

	// A logged-in put is acknowledged; one over a connection that did
	// not log in is refused and stored nowhere (the checks below would
	// report it as unexpected).
	h := queuecheck.New()
	cl := holder.dial(t)
	for i := range 8 {
		body := fmt.Sprintf("login-%d", i)
		_, off := mustPut(t, cl, "repl", int32(i%4), []byte(body))
		h.Send("login", fmt.Sprintf("repl-%d", i%4), body, queuecheck.Acked, off)
	}
	anon := dialTLS(t, holder.Addr, tc)
	r, err := anon.put("repl", 0, []byte("anonymous-put"))
	require.NoError(t, err)
	require.Equal(t, 401, r.Code, "put before login: %v", r)
	h.Send("anon", "repl-0", "anonymous-put", queuecheck.Failed, 0)

	// One round of kill -9 of the holder under load; the killed broker
	// rejoins as slave (checkRejoined: equal copies, every ack once).
	killRounds(t, c, holder, slave, h, 1, true, func(_ int, took time.Duration) {
		require.Less(t, took, foSession+2*time.Second, "producers did not succeed again within session timeout + 2 s")
	})

	// A slave with a wrong replication_password (a new member, slave 2,
	// once the rejoined one is stopped): the holder refuses its login,
	// the slave logs so, and nothing is named in sync.
	require.False(t, holder.logContains("replication login refused"), "%s: a login of its replication link was refused", holder)
	holder.stop(t)
	bad := startReplEdit(t, c, 1, 2, "", secure("wrong-pw"))
	require.Eventually(t, func() bool { return bad.logContains(`replication login refused: auth as replication_user "root"`) },
		5*time.Second, 20*time.Millisecond, "%s did not log the refused login", bad)
	for range 10 {
		st := slave.stats(t)
		require.Equal(t, "-", st["failover_insync"], "%s names a slave in sync", slave)
		require.True(t, strings.HasPrefix(st["sync_partitions_in_sync"], "0/"), "sync_partitions_in_sync %q", st["sync_partitions_in_sync"])
		time.Sleep(100 * time.Millisecond)
	}
	require.False(t, bad.logContains("wrong-pw"), "%s logged its password", bad)
}
