package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/queuecheck"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
)

// TestFailoverSwitchover: `metaq failover --broker-id 1` (docs/replication.md,
// Switchover). With no slave in sync it is refused and changes nothing.
// Under load from 4 producers it hands broker id 1 from its master to the
// in-sync slave: the slave takes epoch 2, the producers go on against it,
// the old master rejoins as slave 0 without cutting anything and gets
// named in sync, and the queue checker finds every acknowledged message
// exactly once (nothing lost, not even a tail; no duplicates), the acks'
// epochs never overlapping.
func TestFailoverSwitchover(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterSpec{Config: failoverConfig(), SessionTimeout: foSession})
	bin := testsvc.GoBuild(t, "github.com/metaq-go/metaq/cmd/metaq")
	cli := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"failover", "--zk", c.ZK, "--root", c.Root, "--timeout", "5s", "--wait", "30s"}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	master := startRepl(t, c, 1, -1, "")
	waitStat(t, master, "failover_role", "master", 20*time.Second)
	require.Eventually(t, func() bool {
		ok, _, err := c.zkConn().Exists(zkpath.Master(c.Root, 1))
		return err == nil && ok
	}, 10*time.Second, 10*time.Millisecond, "ids/1/master registered")
	out, err := cli("--broker-id", "1")
	require.Error(t, err, "a switchover with no slave: %s", out)
	require.Contains(t, out, "no slave is in sync")
	require.Equal(t, "master", master.stats(t)["failover_role"])
	_, err = cli("--broker-id", "7")
	require.Error(t, err, "no such broker id")

	slave := startRepl(t, c, 1, 1, "")
	waitStat(t, master, "failover_insync", "s1", 20*time.Second)
	h := queuecheck.New()
	load := startFoLoad(t, c, h, "sw")
	time.Sleep(time.Second)
	epoch := statInt(t, master, "epoch")
	began := time.Now()
	out, err = cli("--broker-id", "1")
	require.NoError(t, err, "metaq failover: %s", out)
	took := time.Since(began)
	require.Contains(t, out, "slave 1 holds epoch")
	t.Logf("metaq failover took %v: %s", took, strings.TrimSpace(out))
	require.Equal(t, epoch+1, statInt(t, slave, "epoch"))
	require.Equal(t, "master", slave.stats(t)["failover_role"])
	// The producers go on against the new master.
	load.firstAckBy(t, slave.Addr, began, 10*time.Second)
	waitStat(t, slave, "failover_insync", "s0", 30*time.Second)
	time.Sleep(500 * time.Millisecond)
	load.halt()
	checkOn(t, h, slave)
	checkEpochs(t, load.acks)
	checkRejoined(t, h, slave, master)
	require.False(t, master.logContains("never acknowledged"), "a switchover left a tail to cut")
	rep := h.Check()
	t.Logf("puts not acknowledged (refused while the switchover drained, or unknown): %d of %d", rep.Sends-rep.Acked, rep.Sends)
}
