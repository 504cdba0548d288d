package broker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
)

// TestAuditHeuristics: an XA branch completed heuristically over the wire
// protocol is audited with the user ("-" with auth off), the remote
// address, the xid and the outcome (issue 22, finding 10a).
func TestAuditHeuristics(t *testing.T) {
	t.Parallel()
	logs := &syncLog{}
	b := fixture{mods: []func(*conf.Config){func(cfg *conf.Config) {
		cfg.Host = "127.0.0.1"
		cfg.UnflushThreshold = 1
	}}, opts: Options{Logf: logs.Logf}}.start(t)
	c := &txClient{wireConn: dialWire(t, b.Addr())}
	for _, key := range []string{"XID:1:aa:bb:q", "XID:2:aa:bb:q"} {
		c.ok("transaction " + key + " s BEGIN q 1\r\n")
		c.put(key, 0, key)
		require.Equal(t, "0", c.ok("transaction "+key+" s PREPARE q 2\r\n"))
	}
	c.ok("transaction XID:1:aa:bb:q s HEURISTIC_COMMIT 3\r\n")
	c.ok("transaction XID:2:aa:bb:q s HEURISTIC_ROLLBACK 4\r\n")
	require.Regexp(t, `audit: tx.heuristic component=audit user=- remote=127\.0\.0\.1:\d+ via=protocol action=tx.heuristic xid=XID:1:aa:bb:q outcome=commit state=prepared`, logs.String())
	require.Regexp(t, `audit: tx.heuristic component=audit user=- remote=127\.0\.0\.1:\d+ via=protocol action=tx.heuristic xid=XID:2:aa:bb:q outcome=rollback prepared=true`, logs.String())
}

// TestAuditStatsReset: `stats reset` clears counters, so it is audited
// like the other admin changes.
func TestAuditStatsReset(t *testing.T) {
	t.Parallel()
	logs := &syncLog{}
	b := fixture{mods: []func(*conf.Config){func(cfg *conf.Config) {
		cfg.Host = "127.0.0.1"
		cfg.NumPartitions = conf.Default().NumPartitions
	}}, opts: Options{Logf: logs.Logf}}.start(t)
	w := dialWire(t, b.Addr())
	require.Contains(t, w.call("stats reset 1\r\n"), "reset ok")
	require.Regexp(t, `audit: stats.reset component=audit user=- remote=127\.0\.0\.1:\d+ via=protocol action=stats.reset`, logs.String())
}
