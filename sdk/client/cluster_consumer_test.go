package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/message"
)

// registerBoth writes broker id's topics-sub node for t1 (with the master
// node and topics-pub, as register does).
func (w *zkWriter) registerBoth(id int, addr string, n int) {
	w.register(id, "m", addr, n)
	w.mkdirs(zkpath.TopicsSub.Topic(w.root, topic))
	name := zkpath.MasterName(id)
	_, err := w.c.Create(zkpath.TopicsSub.Node(w.root, topic, name), zkpath.TopicData{NumParts: n, Broker: name.String()}.Bytes(),
		zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(w.t, err)
}

// owners returns the owner nodes of group g for t1: "<b>-<p>" -> consumer id.
func (w *zkWriter) owners(g string) map[string]string {
	dir := zkpath.OwnersTopic(w.root, g, topic)
	kids, _, err := w.c.Children(dir)
	if err == zk.ErrNoNode {
		return map[string]string{}
	}
	require.NoError(w.t, err)
	out := make(map[string]string, len(kids))
	for _, k := range kids {
		b, _, err := w.c.Get(dir + "/" + k)
		if err == zk.ErrNoNode {
			continue
		}
		require.NoError(w.t, err)
		out[k] = string(b)
	}
	return out
}

type clusterOwnership = ownLog[message.Partition]

type cmember struct {
	id   string
	c    *clusterConsumer
	done chan error
}

// startClusterMember starts member id of group g1 consuming (with h, or a
// handler that accepts everything), its fetches recorded in own if not nil.
func startClusterMember(t testing.TB, zkAddr, root, id string, own *clusterOwnership, h Handler,
	opts ...consOption) *cmember {
	t.Helper()
	var hook func(message.Partition, bool)
	if own != nil {
		hook = own.hook(id)
	}
	return startClusterMemberHook(t, zkAddr, root, id, hook, h, opts...)
}

// startClusterMemberHook is startClusterMember with hook, if not nil, as
// the member's own hook.
func startClusterMemberHook(t testing.TB, zkAddr, root, id string, hook func(message.Partition, bool),
	h Handler, opts ...consOption) *cmember {
	t.Helper()
	base := []consOption{quiet, withZKRoot(root), withZKSessionTimeout(4 * time.Second),
		withGroup(groupName), withConsumerID(id), withMaxFetchDelay(20 * time.Millisecond),
		withCommitInterval(200 * time.Millisecond), withDialTimeout(time.Second)}
	c, err := openClusterConsumer(ctxT(t, 20*time.Second), zkAddr, topic, append(base, opts...)...)
	require.NoError(t, err)
	if hook != nil {
		SetClusterOwnHook(c, hook)
	}
	if h == nil {
		h = func(context.Context, *message.Message) error { return nil }
	}
	m := &cmember{id: id, c: c, done: make(chan error, 1)}
	go func() { m.done <- c.Consume(context.Background(), h) }()
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return m
}

func allParts(spec ...int) []message.Partition {
	var out []message.Partition
	for i := 0; i < len(spec); i += 2 {
		for p := range spec[i+1] {
			out = append(out, message.Partition{BrokerID: spec[i], Partition: int32(p)})
		}
	}
	return out
}

// waitClusterAssignment waits until the members' Assigned lists have the
// wanted sizes (-1: any) and together cover want exactly once, and the
// owner nodes in ZooKeeper say the same.
func waitClusterAssignment(t testing.TB, w *zkWriter, want []message.Partition, sizes map[*cmember]int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		seen := map[message.Partition]string{}
		ok := true
		var desc []string
		for m, n := range sizes {
			a := m.c.Assigned()
			desc = append(desc, fmt.Sprintf("%s=%v", m.id, a))
			if n >= 0 && len(a) != n {
				ok = false
			}
			for _, p := range a {
				if _, dup := seen[p]; dup {
					ok = false
				}
				seen[p] = m.c.ConsumerID()
			}
		}
		if ok && len(seen) == len(want) {
			for _, p := range want {
				if _, found := seen[p]; !found {
					ok = false
				}
			}
		} else {
			ok = false
		}
		if ok {
			owners := w.owners(groupName)
			for _, p := range want {
				if owners[p.String()] != seen[p] {
					ok = false
					last = fmt.Sprintf("owner node of %s is %q, fetched by %q", p, owners[p.String()], seen[p])
				}
			}
			if ok && len(owners) == len(want) {
				return
			}
		} else {
			last = strings.Join(desc, " ")
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("assignment did not settle: %s", last)
}

// TestClusterConsumerGroup: three members share two brokers' partitions;
// every message is delivered; a member leaves and another joins; a third
// broker appears and its partitions are taken with no restart; at no time
// do two members fetch one partition.
func TestClusterConsumerGroup(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := zkRoot("/cc-group")
	b1, b2, b3 := startBroker(t), startBroker(t), startBroker(t)
	w := newZKWriter(t, zkAddr, root)
	w.registerBoth(1, b1.addr, 4)
	w.registerBoth(2, b2.addr, 4)

	var mu sync.Mutex
	got := map[string]int{}
	h := func(_ context.Context, m *message.Message) error {
		mu.Lock()
		got[string(m.Body)]++
		mu.Unlock()
		return nil
	}
	own := &clusterOwnership{owner: map[message.Partition]string{}}
	a := startClusterMember(t, zkAddr, root, "a", own, h)
	b := startClusterMember(t, zkAddr, root, "b", own, h)
	c := startClusterMember(t, zkAddr, root, "c", own, h)
	waitClusterAssignment(t, w, allParts(1, 4, 2, 4), map[*cmember]int{a: 3, b: 3, c: 2}, 20*time.Second)
	// DEFAULT: sorted members over partitions sorted by (broker, partition).
	require.Equal(t, allParts(1, 3), a.c.Assigned())

	p := startClusterProducer(t, zkAddr, root)
	l := startLoad(t, p, 2)
	require.Eventually(t, func() bool { return l.count(1) > 100 && l.count(2) > 100 }, 15*time.Second, 10*time.Millisecond)

	require.NoError(t, c.c.Close(ctxT(t, 10*time.Second)))
	waitClusterAssignment(t, w, allParts(1, 4, 2, 4), map[*cmember]int{a: 4, b: 4}, 20*time.Second)
	d := startClusterMember(t, zkAddr, root, "d", own, h)
	waitClusterAssignment(t, w, allParts(1, 4, 2, 4), map[*cmember]int{a: 3, b: 3, d: 2}, 20*time.Second)

	w.registerBoth(3, b3.addr, 4)
	waitClusterAssignment(t, w, allParts(1, 4, 2, 4, 3, 4), map[*cmember]int{a: 4, b: 4, d: 4}, 20*time.Second)
	require.Eventually(t, func() bool { return l.count(3) > 100 }, 15*time.Second, 10*time.Millisecond)
	l.halt()
	acks, errs := l.snapshot()
	require.Empty(t, errs)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range acks {
			if got[k.body] == 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "every acknowledged message delivered")
	own.check(t)
	mu.Lock()
	dups := 0
	for _, n := range got {
		dups += n - 1
	}
	mu.Unlock()
	t.Logf("%d messages, %d redelivered", len(acks), dups)
}

// TestClusterConsumerBroadcast: every broadcast consumer gets every
// message, each in its own group "<g>-<id>".
func TestClusterConsumerBroadcast(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := zkRoot("/cc-bcast")
	b1 := startBroker(t)
	w := newZKWriter(t, zkAddr, root)
	w.registerBoth(1, b1.addr, 4)
	const n = 200
	pr := newProducer(t, b1.addr)
	for i := range n {
		_, err := pr.Send(ctxT(t, 5*time.Second), &message.Message{Topic: topic, Body: []byte("m" + strconv.Itoa(i))})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	got := map[string]map[string]bool{}
	var ms []*cmember
	for _, id := range []string{"x", "y"} {
		got[id] = map[string]bool{}
		h := func(_ context.Context, m *message.Message) error {
			mu.Lock()
			got[id][string(m.Body)] = true
			mu.Unlock()
			return nil
		}
		ms = append(ms, startClusterMember(t, zkAddr, root, id, nil, h, withBroadcast()))
	}
	require.Equal(t, groupName+"-x", ms[0].c.Group())
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got["x"]) == n && len(got["y"]) == n
	}, 20*time.Second, 10*time.Millisecond)
	for _, m := range ms {
		require.Len(t, m.c.Assigned(), 4)
	}
}

// TestClusterConsumerSessionExpiry: a member whose ZooKeeper session is
// expired stops fetching, registers again and gets its share back; the
// other member takes over meanwhile without overlap.
func TestClusterConsumerSessionExpiry(t *testing.T) {
	t.Parallel()
	// A ZooKeeper of its own, as before the package shared one: the
	// expiry's timing on a server the other tests keep busy let b stop a
	// partition before it learnt it was dropped (once in several runs).
	zkAddr := testsvc.NewZooKeeper(t).Addr()
	root := zkRoot("/cc-expiry")
	b1 := startBroker(t)
	w := newZKWriter(t, zkAddr, root)
	w.registerBoth(1, b1.addr, 4)
	own := &clusterOwnership{owner: map[message.Partition]string{}}
	sn := &testsvc.SessionSniffer{}
	a := startClusterMember(t, zkAddr, root, "a", own, nil)
	b := startClusterMember(t, zkAddr, root, "b", own, nil, withZKDialer(sn.Dial))
	waitClusterAssignment(t, w, allParts(1, 4), map[*cmember]int{a: 2, b: 2}, 20*time.Second)
	id, pw := sn.Session()
	require.NotZero(t, id)
	testsvc.ExpireSession(t, zkAddr, id, pw)
	waitClusterAssignment(t, w, allParts(1, 4), map[*cmember]int{a: 2, b: 2}, 30*time.Second)
	s2, _ := sn.Session()
	require.NotEqual(t, id, s2, "b is on a new session")
	own.check(t)
	select {
	case err := <-b.done:
		t.Fatalf("b stopped: %v", err)
	default:
	}
}

// TestClusterConsumerJoinLeave100: 10 members over 100 partitions
// through a random sequence of joins and leaves; after every change the
// assignment settles covering every partition exactly once.
func TestClusterConsumerJoinLeave100(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := zkRoot("/cc-100")
	big := func(c *conf.Config) { c.NumPartitions = 50 }
	b1, b2 := startBroker(t, big), startBroker(t, big)
	w := newZKWriter(t, zkAddr, root)
	w.registerBoth(1, b1.addr, 50)
	w.registerBoth(2, b2.addr, 50)
	want := allParts(1, 50, 2, 50)
	own := &clusterOwnership{owner: map[message.Partition]string{}}
	live := map[string]*cmember{}
	sizes := func() map[*cmember]int {
		out := map[*cmember]int{}
		for _, m := range live {
			out[m] = -1
		}
		return out
	}
	for i := range 10 {
		id := "m" + strconv.Itoa(i)
		live[id] = startClusterMember(t, zkAddr, root, id, own, nil, withMaxFetchDelay(200*time.Millisecond))
	}
	waitClusterAssignment(t, w, want, sizes(), 30*time.Second)
	rng := rand.New(rand.NewPCG(1, 2))
	next := 10
	for step := range 12 {
		ids := slices.Sorted(func(yield func(string) bool) {
			for id := range live {
				if !yield(id) {
					return
				}
			}
		})
		if len(live) > 1 && (len(live) >= 10 || rng.IntN(2) == 0) {
			id := ids[rng.IntN(len(ids))]
			require.NoError(t, live[id].c.Close(ctxT(t, 10*time.Second)), "step %d close %s", step, id)
			delete(live, id)
		} else {
			id := "m" + strconv.Itoa(next)
			next++
			live[id] = startClusterMember(t, zkAddr, root, id, own, nil, withMaxFetchDelay(200*time.Millisecond))
		}
		waitClusterAssignment(t, w, want, sizes(), 30*time.Second)
	}
	own.check(t)
}

// BenchmarkClusterRebalance measures how long 9 members take to cover 100
// partitions again after a tenth leaves cleanly (stop, commit, release,
// deregister; no session timeout), until the owner nodes in ZooKeeper
// agree with what the members fetch. Baseline from the same run: one
// ZooKeeper write round trip (create + delete of an ephemeral node).
func BenchmarkClusterRebalance(b *testing.B) {
	zkAddr := testsvc.ZooKeeper(b)
	root := zkRoot("/cc-bench")
	big := func(c *conf.Config) { c.NumPartitions = 50 }
	b1, b2 := startBroker(b, big), startBroker(b, big)
	w := newZKWriter(b, zkAddr, root)
	w.registerBoth(1, b1.addr, 50)
	w.registerBoth(2, b2.addr, 50)
	want := allParts(1, 50, 2, 50)

	// Baseline: ZooKeeper write round trips.
	var zkRTT time.Duration
	const rtts = 50
	w.mkdirs(root + "/rtt")
	start := time.Now()
	for i := range rtts {
		p := fmt.Sprintf("%s/rtt/n%d", root, i)
		_, err := w.c.Create(p, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		require.NoError(b, err)
		require.NoError(b, w.c.Delete(p, -1))
	}
	zkRTT = time.Since(start) / rtts

	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		members := map[*cmember]int{}
		var first *cmember
		for j := range 10 {
			m := startClusterMember(b, zkAddr, root, fmt.Sprintf("r%d-%d", i, j), nil, nil,
				withMaxFetchDelay(200*time.Millisecond))
			members[m] = -1
			if first == nil {
				first = m
			}
		}
		waitClusterAssignment(b, w, want, members, 60*time.Second)
		delete(members, first)
		b.StartTimer()
		t0 := time.Now()
		require.NoError(b, first.c.Close(context.Background()))
		waitClusterAssignment(b, w, want, members, 60*time.Second)
		total += time.Since(t0)
		b.StopTimer()
		for m := range members {
			require.NoError(b, m.c.Close(context.Background()))
		}
		b.StartTimer()
	}
	per := total / time.Duration(b.N)
	b.ReportMetric(float64(per.Microseconds())/1000, "ms/rebalance")
	b.ReportMetric(float64(zkRTT.Microseconds())/1000, "ms/zk-write-rtt")
	b.ReportMetric(float64(per)/float64(zkRTT), "rebalance/zk-rtt")
}

// zkFault is a ZooKeeper dialer for one client that loses the reply to the
// first request containing marker (the server handles the request; the
// client never hears back) and can cut the connection. The session
// survives a cut: the client reconnects to it (through a
// testsvc.SessionSniffer, which keeps the re-attachment clear of a data race
// in go-zookeeper).
type zkFault struct {
	sn     testsvc.SessionSniffer
	marker []byte
	sent   chan struct{} // closed when the marked request went out
	mu     sync.Mutex
	fired  bool
	xid    int32 // the marked request's
	conn   net.Conn
}

func newZKFault(marker string) *zkFault {
	return &zkFault{marker: []byte(marker), sent: make(chan struct{})}
}

// cut closes the current connection.
func (f *zkFault) cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = f.conn.Close()
}

func (f *zkFault) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := f.sn.Dial(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.conn = c
	f.mu.Unlock()
	return &faultConn{Conn: c, f: f}, nil
}

// faultConn passes ZooKeeper frames (int32 length, then for requests and
// replies an int32 xid) through, but for the marked request's reply.
type faultConn struct {
	net.Conn
	f       *zkFault
	in, out []byte
	dropped bool
}

// Write sees one whole frame per call (go-zookeeper writes each request
// with one Write).
func (c *faultConn) Write(p []byte) (int, error) {
	c.f.mu.Lock()
	if !c.f.fired && len(p) >= 8 && bytes.Contains(p, c.f.marker) {
		c.f.fired, c.f.xid = true, int32(binary.BigEndian.Uint32(p[4:8]))
		close(c.f.sent)
	}
	c.f.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *faultConn) Read(p []byte) (int, error) {
	for len(c.out) == 0 {
		for len(c.in) < 4 || len(c.in) < 4+int(binary.BigEndian.Uint32(c.in)) {
			var buf [4096]byte
			n, err := c.Conn.Read(buf[:])
			c.in = append(c.in, buf[:n]...)
			if err != nil {
				return 0, err
			}
		}
		n := 4 + int(binary.BigEndian.Uint32(c.in))
		frame := c.in[:n]
		c.f.mu.Lock()
		drop := c.f.fired && !c.dropped && n >= 8 && int32(binary.BigEndian.Uint32(frame[4:8])) == c.f.xid
		c.f.mu.Unlock()
		if drop {
			c.dropped = true
		} else {
			c.out = append(c.out, frame...)
		}
		c.in = append([]byte(nil), c.in[n:]...)
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

// TestClusterConsumerClaimReplyLost: a member's claim is created in
// ZooKeeper but its reply is lost with the connection (the session
// survives), and meanwhile the partition went to another member. The first
// must release the node it does not know it holds, or the other waits for
// it forever and the partition is never read.
func TestClusterConsumerClaimReplyLost(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := zkRoot("/cc-lost-claim")
	b1 := startBroker(t)
	w := newZKWriter(t, zkAddr, root)
	w.registerBoth(1, b1.addr, 4)
	owners := zkpath.OwnersTopic(root, groupName, topic)
	w.mkdirs(owners) // so that the first create of 1-3 makes the node
	f := newZKFault(zkpath.Owner(root, groupName, topic, 1, 3))
	own := &clusterOwnership{owner: map[message.Partition]string{}}
	a := startClusterMember(t, zkAddr, root, "a", own, nil, withZKDialer(f.Dial),
		withZKSessionTimeout(30*time.Second))
	select {
	case <-f.sent:
	case <-time.After(20 * time.Second):
		t.Fatal("a never claimed 1-3")
	}
	require.Eventually(t, func() bool { return w.owners(groupName)["1-3"] == a.c.ConsumerID() },
		5*time.Second, 5*time.Millisecond, "the claim reached ZooKeeper")
	// b joins; a (waiting for the reply) learns of it; with a and b, 1-3 is b's.
	b := startClusterMember(t, zkAddr, root, "b", own, nil)
	require.Eventually(t, func() bool {
		kids, _, err := w.c.Children(zkpath.Members(root, groupName))
		return err == nil && slices.Contains(kids, b.c.ConsumerID())
	}, 10*time.Second, 5*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	f.cut()
	// DEFAULT: a takes 1-0 and 1-1, b takes 1-2 and 1-3.
	waitClusterAssignment(t, w, allParts(1, 4), map[*cmember]int{a: 2, b: 2}, 20*time.Second)
	own.check(t)
}

// TestClusterConsumerReleaseFails: a member whose release of a partition it
// gives up fails keeps trying to release it, but never reads it again: the
// partition is not its own any more (the failed delete may even have been
// done).
func TestClusterConsumerReleaseFails(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := zkRoot("/cc-release-fails")
	b1 := startBroker(t)
	w := newZKWriter(t, zkAddr, root)
	w.registerBoth(1, b1.addr, 4)
	var mu sync.Mutex
	var restarted []message.Partition
	var watch atomic.Bool
	own := &clusterOwnership{owner: map[message.Partition]string{}}
	hook := own.hook("a")
	a := startClusterMemberHook(t, zkAddr, root, "a", func(p message.Partition, owned bool) {
		hook(p, owned)
		if owned && watch.Load() && p.Partition >= 2 {
			mu.Lock()
			restarted = append(restarted, p)
			mu.Unlock()
		}
	}, nil)
	waitClusterAssignment(t, w, allParts(1, 4), map[*cmember]int{a: 4}, 20*time.Second)

	// Owner nodes can no longer be deleted: a's releases fail.
	owners := zkpath.OwnersTopic(root, groupName, topic)
	_, err := w.c.SetACL(owners, zk.WorldACL(zk.PermAll&^zk.PermDelete), -1)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = w.c.SetACL(owners, zk.WorldACL(zk.PermAll), -1) })
	watch.Store(true)
	startClusterMember(t, zkAddr, root, "b", own, nil)
	require.Eventually(t, func() bool { return slices.Equal(a.c.Assigned(), allParts(1, 2)) },
		10*time.Second, time.Millisecond)
	time.Sleep(time.Second) // a retries its releases meanwhile
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, restarted, "a fetches partitions it is giving up")
	require.Equal(t, allParts(1, 2), a.c.Assigned())
}
