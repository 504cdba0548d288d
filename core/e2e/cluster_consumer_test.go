package e2e

// Consumer groups across real broker processes (reference §5–6): members
// are `metaq consume --zk` processes (so that one can be killed with
// SIGKILL) or in-process ClusterConsumers.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
	mqclient "github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

// delivery is one message a member handled.
type delivery struct {
	At     time.Time
	By     string
	Broker int
	Part   int32
	Offset int64
	Body   string
}

type recKey struct {
	broker int
	part   int32
	off    int64
}

// deliveries collects what every member of a test handled.
type deliveries struct {
	mu  sync.Mutex
	all []delivery
}

func (d *deliveries) add(x delivery) {
	d.mu.Lock()
	d.all = append(d.all, x)
	d.mu.Unlock()
}

func (d *deliveries) snapshot() []delivery {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]delivery(nil), d.all...)
}

func (d *deliveries) count(by string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, x := range d.all {
		if x.By == by {
			n++
		}
	}
	return n
}

// missing returns the acks not delivered to anyone.
func (d *deliveries) missing(acks []clusterAck) []clusterAck {
	d.mu.Lock()
	seen := make(map[recKey]bool, len(d.all))
	for _, x := range d.all {
		seen[recKey{x.Broker, x.Part, x.Offset}] = true
	}
	d.mu.Unlock()
	var out []clusterAck
	for _, a := range acks {
		if !seen[recKey{a.Broker, a.Part, a.Offset}] {
			out = append(out, a)
		}
	}
	return out
}

// consumerProc is a `metaq consume --zk --json` process.
type consumerProc struct {
	id   string
	cmd  *exec.Cmd
	done chan struct{}
	errb strings.Builder
}

func startConsumerProc(t *testing.T, bin string, c *testCluster, group, id string, d *deliveries) *consumerProc {
	t.Helper()
	cmd := exec.Command(bin, "--timeout", "20s", "consume", "--zk", c.ZK, "--root", c.Root, "--topic", clusterTopic,
		"--group", group, "--id", id, "--json", "--session-timeout", clusterSessionTimeout.String())
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	p := &consumerProc{id: id, cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = &syncWriter{w: &p.errb}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m struct {
				Broker    int    `json:"broker"`
				Partition int32  `json:"partition"`
				Offset    int64  `json:"offset"`
				Body      string `json:"body"`
			}
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				continue
			}
			d.add(delivery{At: time.Now(), By: id, Broker: m.Broker, Part: m.Partition, Offset: m.Offset, Body: m.Body})
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		<-p.done
		if t.Failed() {
			t.Logf("consumer %s stderr:\n%s", id, p.errb.String())
		}
	})
	return p
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// owners reads the owner nodes of group's clusterTopic: "<b>-<p>" -> id.
func (c *testCluster) owners(t testing.TB, group string) map[string]string {
	dir := zkpath.OwnersTopic(c.Root, group, clusterTopic)
	kids, _, err := c.zk.Children(dir)
	if err == zk.ErrNoNode {
		return map[string]string{}
	}
	require.NoError(t, err)
	out := make(map[string]string, len(kids))
	for _, k := range kids {
		b, _, err := c.zk.Get(dir + "/" + k)
		if err == zk.ErrNoNode {
			continue
		}
		require.NoError(t, err)
		out[k] = string(b)
	}
	return out
}

// waitOwners waits until every partition of brokers has an owner node and
// the owners are exactly ids (consumer ids "<group>_<id>").
func (c *testCluster) waitOwners(t testing.TB, group string, brokers []int, ids []string, within time.Duration) {
	t.Helper()
	tc, _ := c.Cfg.TopicConfig(clusterTopic)
	want := map[string]bool{}
	for _, id := range ids {
		want[group+"_"+id] = true
	}
	deadline := time.Now().Add(within)
	var last map[string]string
	for time.Now().Before(deadline) {
		last = c.owners(t, group)
		ok := len(last) == len(brokers)*tc.NumPartitions
		got := map[string]bool{}
		for _, b := range brokers {
			for p := range tc.NumPartitions {
				o, found := last[fmt.Sprintf("%d-%d", b, p)]
				if !found || !want[o] {
					ok = false
				}
				got[o] = true
			}
		}
		if ok && len(got) == len(want) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("owners did not settle on %v within %v: %v", ids, within, last)
}

// TestClusterKill9Consumer: three `metaq consume --zk` members of one group
// share two brokers' partitions under load; one is killed with SIGKILL.
// Its partitions move to the other two within its ZooKeeper session
// timeout (plus the rebalance); every acknowledged message is delivered
// (no gaps); redelivered messages are only the killed member's last
// uncommitted ones, bounded by the commit period (5 s).
func TestClusterKill9Consumer(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterSpec{Brokers: 2})
	bin := testsvc.GoBuild(t, "github.com/metaq-go/metaq/cmd/metaq")
	const group = "kg"
	d := &deliveries{}
	var procs []*consumerProc
	for _, id := range []string{"c1", "c2", "c3"} {
		procs = append(procs, startConsumerProc(t, bin, c, group, id, d))
	}
	c.waitOwners(t, group, []int{1, 2}, []string{"c1", "c2", "c3"}, 30*time.Second)

	p := c.newProducer(t)
	l := startClusterLoad(t, p, clusterTopic, 2)
	require.Eventually(t, func() bool { return d.count("c1") > 30 && d.count("c2") > 30 && d.count("c3") > 30 },
		20*time.Second, 10*time.Millisecond, "every member gets messages")
	time.Sleep(time.Second)

	killed := time.Now()
	require.NoError(t, procs[1].cmd.Process.Signal(syscall.SIGKILL))
	<-procs[1].done
	c.waitOwners(t, group, []int{1, 2}, []string{"c1", "c3"}, clusterSessionTimeout+15*time.Second)
	moved := time.Since(killed)
	t.Logf("partitions of the killed member moved after %v (session timeout %v)", moved.Round(time.Millisecond), clusterSessionTimeout)
	require.Less(t, moved, clusterSessionTimeout+10*time.Second)

	n1, n3 := d.count("c1"), d.count("c3")
	require.Eventually(t, func() bool { return d.count("c1") > n1+30 && d.count("c3") > n3+30 }, 20*time.Second, 10*time.Millisecond)
	l.halt()
	acks, errs := l.snapshot()
	require.Empty(t, errs)
	require.Eventually(t, func() bool { return len(d.missing(acks)) == 0 }, 30*time.Second, 50*time.Millisecond,
		"acknowledged messages never delivered")

	// Redeliveries: each record handled more than once was handled by the
	// killed member within the commit period before the kill, then by
	// its new owner.
	all := d.snapshot()
	byRec := map[recKey][]delivery{}
	for _, x := range all {
		k := recKey{x.Broker, x.Part, x.Offset}
		byRec[k] = append(byRec[k], x)
	}
	dups := 0
	for k, xs := range byRec {
		if len(xs) == 1 {
			continue
		}
		dups += len(xs) - 1
		require.Len(t, xs, 2, "record %v handled %d times", k, len(xs))
		require.Equal(t, "c2", xs[0].By, "record %v redelivered but not from the killed member: %+v", k, xs)
		require.NotEqual(t, "c2", xs[1].By)
		require.True(t, xs[0].At.After(killed.Add(-mqclient.DefaultCommitInterval-2*time.Second)),
			"record %v redelivered although handled %v before the kill (commit period %v)", k,
			killed.Sub(xs[0].At), mqclient.DefaultCommitInterval)
	}
	t.Logf("%d acked, %d deliveries, %d redelivered (the killed member's uncommitted tail)", len(acks), len(all), dups)
}

// TestClusterAddBrokerConsumersRebalance: two in-process ClusterConsumer
// members and a ClusterProducer under load; a third broker process starts
// from the same config with a new id: the producer sends to it and the
// members rebalance onto its partitions, with no restart, and every
// acknowledged message is delivered.
func TestClusterAddBrokerConsumersRebalance(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterSpec{Brokers: 2})
	const group = "ag"
	d := &deliveries{}
	quiet := mqclient.Logger(slog.New(slog.DiscardHandler))
	var members []*mqclient.Client
	for _, id := range []string{"a", "b"} {
		m, err := mqclient.New(mqclient.ZooKeeper(c.ZK, c.Root), quiet, mqclient.ZooKeeperSessionTimeout(clusterSessionTimeout),
			mqclient.ConsumeTopics(clusterTopic), mqclient.ConsumerGroup(group), mqclient.ConsumerID(id),
			mqclient.FetchMaxWait(50*time.Millisecond), mqclient.DialTimeout(time.Second))
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			done <- m.Consume(context.Background(), func(_ context.Context, msg *message.Message) error {
				d.add(delivery{At: time.Now(), By: id, Broker: msg.BrokerID, Part: msg.Partition, Offset: msg.Offset, Body: string(msg.Body)})
				return nil
			})
		}()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			require.NoError(t, m.Close(ctx))
			<-done
		})
		members = append(members, m)
	}
	c.waitOwners(t, group, []int{1, 2}, []string{"a", "b"}, 30*time.Second)

	p := c.newProducer(t)
	l := startClusterLoad(t, p, clusterTopic, 3)
	l.waitCount(t, 1, 30, 15*time.Second)
	added := time.Now()
	c.startBroker(t, 3)
	l.waitCount(t, 3, 50, 15*time.Second)
	c.waitOwners(t, group, []int{1, 2, 3}, []string{"a", "b"}, 20*time.Second)
	t.Logf("members own broker 3's partitions %v after its start", time.Since(added).Round(time.Millisecond))
	tc, _ := c.Cfg.TopicConfig(clusterTopic)
	require.Eventually(t, func() bool {
		n := 0
		for _, m := range members {
			for _, p := range m.Assigned() {
				if p.BrokerID == 3 {
					n++
				}
			}
		}
		return n == tc.NumPartitions
	}, 20*time.Second, 20*time.Millisecond, "members fetch broker 3's partitions")
	// Broker 3's messages reach the members.
	require.Eventually(t, func() bool {
		for _, x := range d.snapshot() {
			if x.Broker == 3 {
				return true
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond)
	l.halt()
	acks, errs := l.snapshot()
	require.Empty(t, errs)
	require.Eventually(t, func() bool { return len(d.missing(acks)) == 0 }, 30*time.Second, 50*time.Millisecond,
		"acknowledged messages never delivered")

	// The CLI sees the live members and their partitions, and refuses to
	// reset the group's offsets under them.
	bin := testsvc.GoBuild(t, "github.com/metaq-go/metaq/cmd/metaq")
	out, err := exec.Command(bin, "group", "describe", group, "--zk", c.ZK, "--root", c.Root, "--topic", clusterTopic).CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, want := range []string{"ag_a", "ag_b", clusterTopic + "  3 "} {
		require.Contains(t, string(out), want)
	}
	t.Logf("metaq group describe:\n%s", out)
	out, err = exec.Command(bin, "group", "reset-offsets", group, "--zk", c.ZK, "--root", c.Root, "--to", "earliest", "--execute").CombinedOutput()
	require.Error(t, err, "reset under live members: %s", out)
	require.Contains(t, string(out), "live member")

	all := d.snapshot()
	t.Logf("%d acked (per broker %d/%d/%d), %d deliveries", len(acks), l.count(1), l.count(2), l.count(3), len(all))
}

// TestClusterConsumerJoinLeave100 runs 10 ClusterConsumer members over 100
// partitions (two broker processes with 50 each) through a random
// sequence of joins and leaves: after every change the owner nodes settle
// on exactly the live members, covering every partition once, and what
// the members fetch agrees with them.
func TestClusterConsumerJoinLeave100(t *testing.T) {
	t.Parallel()
	cfg := "data_dir = \"data\"\nnum_partitions = 50\nunflush_threshold = 1000\nunflush_interval = 1000\n\n[[topic]]\nname = \"" +
		clusterTopic + "\"\n"
	c := startCluster(t, clusterSpec{Brokers: 2, Config: cfg})
	const group = "jl"
	quiet := mqclient.Logger(slog.New(slog.DiscardHandler))
	type live struct {
		c    *mqclient.Client
		done chan error
	}
	members := map[string]*live{}
	join := func(id string) {
		m, err := mqclient.New(mqclient.ZooKeeper(c.ZK, c.Root), quiet, mqclient.ZooKeeperSessionTimeout(clusterSessionTimeout),
			mqclient.ConsumeTopics(clusterTopic), mqclient.ConsumerGroup(group), mqclient.ConsumerID(id),
			mqclient.FetchMaxWait(500*time.Millisecond), mqclient.DialTimeout(time.Second))
		require.NoError(t, err)
		l := &live{c: m, done: make(chan error, 1)}
		go func() {
			l.done <- m.Consume(context.Background(), func(context.Context, *message.Message) error { return nil })
		}()
		t.Cleanup(func() { _ = m.Close(context.Background()) })
		members[id] = l
	}
	leave := func(id string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, members[id].c.Close(ctx))
		delete(members, id)
	}
	ids := func() []string {
		var out []string
		for id := range members {
			out = append(out, id)
		}
		sort.Strings(out)
		return out
	}
	check := func(step int) {
		t.Helper()
		c.waitOwners(t, group, []int{1, 2}, ids(), 30*time.Second)
		// What the members fetch agrees with the owner nodes.
		require.Eventually(t, func() bool {
			owners := c.owners(t, group)
			n := 0
			for id, m := range members {
				for _, p := range m.c.Assigned() {
					if owners[fmt.Sprintf("%d-%d", p.BrokerID, p.Partition)] != group+"_"+id {
						return false
					}
					n++
				}
			}
			return n == 100
		}, 20*time.Second, 10*time.Millisecond, "step %d: fetched partitions differ from owner nodes", step)
	}
	for i := range 10 {
		join("m" + strconv.Itoa(i))
	}
	check(0)
	rng := rand.New(rand.NewPCG(7, 11))
	next := 10
	start := time.Now()
	for step := 1; step <= 12; step++ {
		cur := ids()
		if len(cur) > 1 && (len(cur) >= 10 || rng.IntN(2) == 0) {
			leave(cur[rng.IntN(len(cur))])
		} else {
			join("m" + strconv.Itoa(next))
			next++
		}
		check(step)
	}
	t.Logf("12 joins/leaves settled in %v", time.Since(start).Round(time.Millisecond))
}
