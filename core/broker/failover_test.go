package broker

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
)

// TestFailoverInProcess: a sync master with failover and its slave in one
// process (for the race detector): the slave gets named in sync, the
// master closes (its nodes go at once), the slave promotes itself at
// epoch 2 and takes puts alone, refuses syncs, and names a new slave in
// sync once it has joined; the closed master's data directory is refused
// as a failover slave's.
func TestFailoverInProcess(t *testing.T) {
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/failover-inproc-%d", time.Now().UnixNano())
	fo := func(c *conf.Config) {
		c.Failover = true
		c.ZooKeeper.SessionTimeout = 2000
	}
	mdir := t.TempDir()
	master := replBroker(t, zkAddr, root, mdir, "", -1, func(c *conf.Config) { fo(c); c.Replication = conf.ReplicationSync })
	slave := replBroker(t, zkAddr, root, t.TempDir(), "", 1, fo)
	mc := dialRaw(t, master.Addr())
	waitFor(t, 15*time.Second, func() error {
		if v := mc.stats(t, "")["failover_insync"]; v != "s1" {
			return fmt.Errorf("failover_insync %q", v)
		}
		return nil
	})
	ok, fail := pipelinedPuts(t, master.Addr(), 200)
	require.Equal(t, 200, ok, fail)
	sc := dialRaw(t, slave.Addr())
	require.Equal(t, "1", mc.stats(t, "")["epoch"])
	require.Equal(t, "slave", sc.stats(t, "")["failover_role"])
	require.NoError(t, master.Close())

	waitFor(t, 15*time.Second, func() error {
		st := sc.stats(t, "")
		if st["failover_role"] != "master" {
			return fmt.Errorf("failover_role %q", st["failover_role"])
		}
		return nil
	})
	st := sc.stats(t, "")
	require.Equal(t, "2", st["epoch"])
	require.Equal(t, "false", st["slave"])
	if slave.HTTPAddr() == "" {
		hln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		require.NoError(t, slave.ServeHTTP(hln))
	}
	code, scrape := newHTTPClient(t, slave.HTTPAddr(), nil).get("/metrics")
	require.Equal(t, 200, code, "%s", scrape)
	require.Equal(t, 2.0, metricValue(t, scrape, `metaq_replication_epoch`))
	require.Equal(t, 1.0, metricValue(t, scrape, `metaq_replication_failover_role{role="master"}`))
	ok, fail = pipelinedPuts(t, slave.Addr(), 100)
	require.Equal(t, 100, ok, fail)

	// The old master's directory may hold a tail nobody acknowledged.
	cfg := conf.Default()
	cfg.DataDir, cfg.SlaveID, cfg.Failover = mdir, 1, true
	cfg.ZooKeeper.Connect, cfg.ZooKeeper.Root, cfg.BrokerID = zkAddr, root, 3
	cfg.Topics = []conf.Topic{{Name: "t"}}
	cfg.NumPartitions = 2
	b, err := New(cfg, Options{Logf: t.Logf})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	err = b.Serve(ln)
	require.ErrorContains(t, err, "failover-held")
	ln.Close()
	b.Close()

	s2 := replBroker(t, zkAddr, root, t.TempDir(), "", 2, fo)
	waitFor(t, 20*time.Second, func() error {
		if v := sc.stats(t, "")["failover_insync"]; v != "s2" {
			return fmt.Errorf("failover_insync %q", v)
		}
		return nil
	})
	ok, fail = pipelinedPuts(t, slave.Addr(), 100)
	require.Equal(t, 100, ok, fail)
	requireSameEnds(t, slave, s2, "t")
}
