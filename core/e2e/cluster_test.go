package e2e

// Multi-process cluster tests: real metaq-server processes registered in a
// real ZooKeeper, a ClusterProducer discovering them (reference §5-6). The
// harness is in cluster_helpers_test.go.

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/message"
)

// TestClusterKill9UnderLoad: three brokers from conf/server.toml (meta-test
// is group commit: acked = fsynced), a ClusterProducer sending with
// retries. Broker 2 is killed with SIGKILL: sends keep succeeding on
// brokers 1 and 3, both while broker 2's znodes are still there (sends to
// its partitions fail and are retried elsewhere) and after its session has
// expired. Broker 2 restarted with the same id, port and data registers
// again and the producer sends to it again, with no producer restart.
// Killed again and restarted at once, before the killed process's session
// has expired, it registers by itself once that session is gone. No send
// fails, and every acknowledged message, including those broker 2 acked
// before each kill, is read back at the broker, partition and offset its
// SendResult names.
func TestClusterKill9UnderLoad(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := startCluster(t, clusterSpec{Brokers: 3})
	tc, ok := c.Cfg.TopicConfig(clusterTopic)
	require.True(t, ok, "conf/server.toml has no %s topic", clusterTopic)
	require.Zero(t, tc.UnflushThreshold, "%s must be in group-commit mode (ack after fsync) for the no-loss check", clusterTopic)
	t.Logf("3 brokers up in %v", time.Since(start))

	p := c.newProducer(t)
	l := startClusterLoad(t, p, clusterTopic, 4)
	for id := 1; id <= 3; id++ {
		l.waitCount(t, id, 30, 15*time.Second)
	}

	b2 := c.broker(2)
	killed := time.Now()
	b2.kill9(t)
	// Broker 2's znodes stay until its session expires: the producer
	// still lists its partitions, and retries their sends on 1 and 3.
	n1, n3 := l.count(1), l.count(3)
	l.waitCount(t, 1, n1+50, 10*time.Second)
	l.waitCount(t, 3, n3+50, 10*time.Second)
	_, regErr := c.registration(2)
	t.Logf("%v after the kill: broker 1 +%d, broker 3 +%d acks; broker 2 still registered: %v",
		time.Since(killed).Round(time.Millisecond), l.count(1)-n1, l.count(3)-n3, regErr == nil)
	c.waitUnregistered(t, 2, c.spec.SessionTimeout+10*time.Second)
	t.Logf("broker 2's znodes gone %v after the kill", time.Since(killed).Round(time.Millisecond))
	n1, n3 = l.count(1), l.count(3)
	l.waitCount(t, 1, n1+50, 10*time.Second)
	l.waitCount(t, 3, n3+50, 10*time.Second)
	require.Zero(t, l.errCount(), "sends failed while brokers 1 and 3 were up")

	restarted := time.Now()
	n2 := l.count(2)
	b2.restart(t)
	sess := c.waitRegistered(t, 2, 15*time.Second)
	t.Logf("broker 2 restarted and registered in %v", time.Since(restarted).Round(time.Millisecond))
	l.waitCount(t, 2, n2+50, 15*time.Second)
	t.Logf("broker 2 acked %d sends %v after its restart", l.count(2)-n2, time.Since(restarted).Round(time.Millisecond))

	// Kill it again and restart it at once, before the killed process's
	// session has expired: that session still holds ids/2/master, so the
	// new process registers only once it expires, by itself.
	killed = time.Now()
	b2.kill9(t)
	b2.restart(t)
	ready := time.Since(killed)
	ns := c.waitRegisteredOther(t, 2, sess, c.spec.SessionTimeout+10*time.Second)
	held := b2.logContains("duplicate broker id 2?")
	t.Logf("immediate restart: ready %v and registered %v after the kill (session %#x -> %#x; waited for the old session: %v)",
		ready.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond), sess, ns, held)
	// (It may have acked sends before it registered: the old znodes name
	// the same address, and it serves before it registers.)
	n2 = l.count(2)
	l.waitCount(t, 2, n2+50, 15*time.Second)
	t.Logf("broker 2 acks after its re-registration: +50 in %v", time.Since(killed).Round(time.Millisecond))
	l.halt()

	acks, errs := l.snapshot()
	require.Empty(t, errs, "%d of %d sends failed", len(errs), len(acks)+len(errs))
	var after2 int
	for _, a := range acks {
		if a.Broker == 2 && a.At.After(restarted) {
			after2++
		}
	}
	require.Positive(t, after2, "no ack from broker 2 after its restart")
	checked := c.verifyAcked(t, acks)
	t.Logf("%d acks, all read back (per broker %v; broker 2 after restart %d); total %v",
		len(acks), checked, after2, time.Since(start).Round(time.Millisecond))
}

// TestClusterAddBrokerUnderLoad: two brokers and a ClusterProducer
// sending; a third broker started from the same config file with a new id
// gets sends to its partitions within a bounded time, with no producer
// restart. No send fails; every ack is read back.
func TestClusterAddBrokerUnderLoad(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := startCluster(t, clusterSpec{Brokers: 2})
	p := c.newProducer(t)
	l := startClusterLoad(t, p, clusterTopic, 4)
	l.waitCount(t, 1, 30, 15*time.Second)
	l.waitCount(t, 2, 30, 15*time.Second)

	added := time.Now()
	c.startBroker(t, 3)
	registered := time.Since(added)
	l.waitCount(t, 3, 50, 15*time.Second)
	t.Logf("broker 3 registered %v and got 50 acks %v after its start",
		registered.Round(time.Millisecond), time.Since(added).Round(time.Millisecond))

	n1, n2 := l.count(1), l.count(2)
	l.waitCount(t, 1, n1+20, 10*time.Second)
	l.waitCount(t, 2, n2+20, 10*time.Second)
	l.halt()

	acks, errs := l.snapshot()
	// Round robin over the producer's partition list reached every
	// partition of the three brokers.
	tc, _ := c.Cfg.TopicConfig(clusterTopic)
	var want []message.Partition
	for id := 1; id <= 3; id++ {
		for i := range tc.NumPartitions {
			want = append(want, message.Partition{BrokerID: id, Partition: int32(i)})
		}
	}
	seen := map[message.Partition]bool{}
	for _, a := range acks {
		seen[message.Partition{BrokerID: a.Broker, Partition: a.Part}] = true
	}
	for _, w := range want {
		require.True(t, seen[w], "no ack from partition %v", w)
	}
	require.Empty(t, errs, "%d of %d sends failed", len(errs), len(acks)+len(errs))
	checked := c.verifyAcked(t, acks)
	t.Logf("%d acks, all read back (per broker %v); total %v", len(acks), checked, time.Since(start).Round(time.Millisecond))
}

// TestClusterSessionExpiryReregisters expires broker 1's ZooKeeper session
// from outside, twice (a second client joins it with the id and password
// sniffed by the harness's proxy and closes it): the broker process
// re-registers every node by itself under a new session, with no restart,
// and keeps serving: the producer's sends go to it again. No send fails
// (broker 2 takes them meanwhile); every ack is read back.
func TestClusterSessionExpiryReregisters(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := startCluster(t, clusterSpec{Brokers: 2, SniffSessions: true})
	p := c.newProducer(t)
	l := startClusterLoad(t, p, clusterTopic, 4)
	b1 := c.broker(1)
	pid := b1.pid()

	for round := 1; round <= 2; round++ {
		sess := c.waitRegistered(t, 1, 15*time.Second)
		sniffed, _ := b1.zkSession(t)
		require.Equal(t, sess, sniffed, "the sniffed session is not the one broker 1's nodes belong to")
		l.waitCount(t, 1, l.count(1)+30, 15*time.Second)

		expired := time.Now()
		require.Equal(t, sess, b1.expireSession(t))
		ns := c.waitRegisteredOther(t, 1, sess, c.spec.SessionTimeout+10*time.Second)
		t.Logf("round %d: re-registered %v after the expiry (session %#x -> %#x)",
			round, time.Since(expired).Round(time.Millisecond), sess, ns)
		require.True(t, b1.running(), "broker 1 exited")
		require.Equal(t, pid, b1.pid(), "broker 1 was restarted")
		n := l.count(1)
		l.waitCount(t, 1, n+30, 15*time.Second)
		t.Logf("round %d: broker 1 acks again %v after the expiry", round, time.Since(expired).Round(time.Millisecond))
	}
	require.True(t, b1.logContains("re-registering broker 1"), "broker 1 did not log its re-registration")
	l.halt()

	acks, errs := l.snapshot()
	require.Empty(t, errs, "%d of %d sends failed", len(errs), len(acks)+len(errs))
	checked := c.verifyAcked(t, acks)
	t.Logf("%d acks, all read back (per broker %v); total %v", len(acks), checked, time.Since(start).Round(time.Millisecond))
}

// TestClusterLayoutWithZkCli: two broker processes started from
// conf/server.toml, read with the real zkCli.sh (one run): the tree under
// the root is exactly MetaQ's §5 layout for both (ids/<id> and
// ids/<id>/master = meta://127.0.0.1:<its port>, master_config_checksum =
// the CRC32 of the config file, topics/<t>/<id>-m, topics-pub and
// topics-sub/<t>/<id>-m JSON, for both topics of the file), and
// sdk/cluster.ReadLayout reads the same cluster. (TestLayoutWithZkCli in
// core/registry checks one in-process registration with made-up values.)
func TestClusterLayoutWithZkCli(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := startCluster(t, clusterSpec{Brokers: 2})
	want := map[string]string{}
	for id := 1; id <= 2; id++ {
		for p, v := range c.wantNodes(id, c.broker(id).Port) {
			want[p] = v
		}
	}
	// Every node and its parents up to the root: ls -R lists them all.
	tree := map[string]bool{}
	for p := range want {
		for q := p; strings.HasPrefix(q, c.Root); q = path.Dir(q) {
			tree[q] = true
		}
	}
	paths := sortedKeys(want)
	cmds := []string{"ls -R " + c.Root}
	for _, p := range paths {
		cmds = append(cmds, "get "+p)
	}
	lines := zkCliScript(t, c.ZK, cmds...)

	var listed []string
	var values []string
	for _, l := range lines {
		if strings.HasPrefix(l, c.Root) {
			listed = append(listed, l)
		} else {
			values = append(values, l)
		}
	}
	sort.Strings(listed)
	wantTree := make([]string, 0, len(tree))
	for p := range tree {
		wantTree = append(wantTree, p)
	}
	sort.Strings(wantTree)
	require.Equal(t, wantTree, listed, "zkCli.sh ls -R %s", c.Root)
	wantValues := make([]string, len(paths))
	for i, p := range paths {
		wantValues[i] = want[p]
	}
	require.Equal(t, wantValues, values, "zkCli.sh get of %v", paths)
	// Spot checks of the data, spelled out (wantNodes builds them; the
	// paths are zkpath's, whose tests spell those out).
	for id := 1; id <= 2; id++ {
		b := c.broker(id)
		require.Equal(t, "meta://"+b.Addr, want[zkpath.Master(c.Root, id)])
		require.Equal(t, fmt.Sprintf(`{"numParts":4,"broker":"%d-m"}`, id), want[zkpath.TopicsPub.Node(c.Root, "meta-test", zkpath.MasterName(id))])
		require.Equal(t, fmt.Sprintf(`{"numParts":8,"broker":"%d-m"}`, id), want[zkpath.TopicsSub.Node(c.Root, "meta-fast", zkpath.MasterName(id))])
	}

	l := c.layout(t)
	crc := strconv.FormatUint(uint64(c.ConfigCRC), 10)
	require.Equal(t, []cluster.BrokerInfo{
		{ID: 1, Master: "meta://" + c.broker(1).Addr, ConfigChecksum: crc},
		{ID: 2, Master: "meta://" + c.broker(2).Addr, ConfigChecksum: crc},
	}, l.Brokers)
	var topics []string
	for _, tb := range l.Topics {
		topics = append(topics, tb.Name)
		tc, _ := c.Cfg.TopicConfig(tb.Name)
		require.Equal(t, []cluster.TopicPartition{
			{Broker: "1-m", BrokerID: 1, NumParts: tc.NumPartitions, Publish: true, Subscribe: true},
			{Broker: "2-m", BrokerID: 2, NumParts: tc.NumPartitions, Publish: true, Subscribe: true},
		}, tb.Brokers, tb.Name)
	}
	names := append([]string(nil), c.Cfg.TopicNames()...)
	sort.Strings(names)
	require.Equal(t, names, topics)
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}
