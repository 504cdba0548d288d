package registry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
)

func TestMain(m *testing.M) { testsvc.Main(m) }

// logBuf collects log lines.
type logBuf struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuf) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// dumpOnFailure prints the registry's log lines if the test fails, so that
// a failure says what the registry saw.
func (l *logBuf) dumpOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, line := range l.lines {
			t.Logf("registry log: %s", line)
		}
	})
}

func (l *logBuf) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// client is a plain ZooKeeper client for the test's own reads and writes.
func client(t *testing.T, addr string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

func get(c *zk.Conn, path string) (string, *zk.Stat, error) {
	b, st, err := c.Get(path)
	return string(b), st, err
}

// eventually retries f until it returns nil or d has passed.
func eventually(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testOpts(addr, root string, id int, lb *logBuf) Options {
	return Options{
		Connect:        addr,
		Root:           root,
		SessionTimeout: 4 * time.Second,
		BrokerID:       id,
		URI:            fmt.Sprintf("meta://127.0.0.1:%d", 8120+id),
		ConfigChecksum: 3735928559,
		Topics: []Topic{
			{Name: "both", NumPartitions: 4, AcceptPublish: true, AcceptSubscribe: true},
			{Name: "subonly", NumPartitions: 2, AcceptPublish: false, AcceptSubscribe: true},
		},
		Logf:          lb.logf,
		RetryInterval: 100 * time.Millisecond,
	}
}

func open(t *testing.T, opts Options) *Registry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := Open(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	return r
}

// wantLayout is every node broker id (URI meta://127.0.0.1:8120+id) of
// testOpts should have under root, with its data.
func wantLayout(root string, id int) map[string]string {
	uri := fmt.Sprintf("meta://127.0.0.1:%d", 8120+id)
	m := zkpath.MasterName(id)
	return map[string]string{
		zkpath.Broker(root, id):                   uri,
		zkpath.Master(root, id):                   uri,
		zkpath.MasterChecksum(root, id):           "3735928559",
		zkpath.Topics.Node(root, "both", m):       "4",
		zkpath.TopicsPub.Node(root, "both", m):    `{"numParts":4,"broker":"` + m.String() + `"}`,
		zkpath.TopicsSub.Node(root, "both", m):    `{"numParts":4,"broker":"` + m.String() + `"}`,
		zkpath.Topics.Node(root, "subonly", m):    "2",
		zkpath.TopicsSub.Node(root, "subonly", m): `{"numParts":2,"broker":"` + m.String() + `"}`,
	}
}

// checkLayout checks the nodes and their data with the test's client, and
// that all but ids/<id> are ephemeral nodes of session sess.
func checkLayout(c *zk.Conn, root string, id int, sess int64) error {
	for p, want := range wantLayout(root, id) {
		got, st, err := get(c, p)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if got != want {
			return fmt.Errorf("%s = %q, want %q", p, got, want)
		}
		wantOwner := sess
		if p == zkpath.Broker(root, id) {
			wantOwner = 0
		}
		if st.EphemeralOwner != wantOwner {
			return fmt.Errorf("%s owner %#x, want %#x", p, st.EphemeralOwner, wantOwner)
		}
	}
	if ok, _, _ := c.Exists(zkpath.TopicsPub.Node(root, "subonly", zkpath.MasterName(id))); ok {
		return errors.New("topics-pub/subonly exists though accept_publish is false")
	}
	return nil
}

func TestLayoutWithZkCli(t *testing.T) {
	t.Parallel()
	start := time.Now()
	addr := testsvc.ZooKeeper(t)
	root := "/layout/meta"
	lb := &logBuf{}
	r := open(t, testOpts(addr, root, 7, lb))
	require.True(t, r.Registered())
	t.Logf("registered in %v", time.Since(start))
	c := client(t, addr)
	require.NoError(t, checkLayout(c, root, 7, r.SessionID()))

	// The real zkCli.sh reads the same data (one zkCli.sh run for every
	// get: each prints its node's data as one line, in order), and its get
	// of topics-pub/subonly, the last command, fails.
	var gets, wantLines []string
	for _, p := range slices.Sorted(maps.Keys(wantLayout(root, 7))) {
		gets = append(gets, "get "+p)
		wantLines = append(wantLines, wantLayout(root, 7)[p])
	}
	subonlyPub := zkpath.TopicsPub.Node(root, "subonly", zkpath.MasterName(7))
	lines, stderr, exitErr, err := testsvc.ZkCliSession(t, addr, append(gets, "get "+subonlyPub)...)
	require.NoError(t, err)
	require.Equal(t, wantLines, lines)
	require.Error(t, exitErr, "accept_publish = false must not write topics-pub")
	require.Contains(t, stderr, "Node does not exist: "+subonlyPub)

	// AddTopic (an auto-created topic).
	r.AddTopic(Topic{Name: "auto", NumPartitions: 3, AcceptPublish: true, AcceptSubscribe: false})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, r.Wait(ctx))
	v, _, err := get(c, zkpath.TopicsPub.Node(root, "auto", zkpath.MasterName(7)))
	require.NoError(t, err)
	require.Equal(t, `{"numParts":3,"broker":"7-m"}`, v)
	v, _, err = get(c, zkpath.Topics.Node(root, "auto", zkpath.MasterName(7)))
	require.NoError(t, err)
	require.Equal(t, "3", v)
	ok, _, err := c.Exists(zkpath.TopicsSub.Node(root, "auto", zkpath.MasterName(7)))
	require.NoError(t, err)
	require.False(t, ok)

	// Close removes the ephemeral nodes and ids/<id>; parents stay.
	require.NoError(t, r.Close())
	for p := range wantLayout(root, 7) {
		ok, _, err := c.Exists(p)
		require.NoError(t, err)
		require.False(t, ok, p)
	}
	ok, _, err = c.Exists(zkpath.TopicsPub.Topic(root, "both"))
	require.NoError(t, err)
	require.True(t, ok)
	t.Logf("total %v", time.Since(start))
}

func TestCloseKeepsParentWithSlaves(t *testing.T) {
	t.Parallel()
	addr := testsvc.ZooKeeper(t)
	root := "/slaves"
	r := open(t, testOpts(addr, root, 3, &logBuf{}))
	c := client(t, addr)
	_, err := c.Create(zkpath.Slave(root, 3, 0), []byte("meta://127.0.0.1:9999"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	require.NoError(t, r.Close())
	v, _, err := get(c, zkpath.Broker(root, 3))
	require.NoError(t, err)
	require.Equal(t, "", v)
	ok, _, _ := c.Exists(zkpath.Master(root, 3))
	require.False(t, ok)
}

func TestTwoBrokersSideBySide(t *testing.T) {
	t.Parallel()
	addr := testsvc.ZooKeeper(t)
	root := "/two"
	r1 := open(t, testOpts(addr, root, 1, &logBuf{}))
	r2 := open(t, testOpts(addr, root, 2, &logBuf{}))
	c := client(t, addr)
	require.NoError(t, checkLayout(c, root, 1, r1.SessionID()))
	require.NoError(t, checkLayout(c, root, 2, r2.SessionID()))
	kids, _, err := c.Children(zkpath.TopicsSub.Topic(root, "both"))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"1-m", "2-m"}, kids)
	require.NoError(t, r1.Close())
	kids, _, err = c.Children(zkpath.TopicsSub.Topic(root, "both"))
	require.NoError(t, err)
	require.Equal(t, []string{"2-m"}, kids)
	require.NoError(t, checkLayout(c, root, 2, r2.SessionID()))
}

// TestDuplicateBrokerID: a second registry with the same id does not steal
// the master node; it logs an error, keeps retrying, and registers once
// the first one is gone.
func TestDuplicateBrokerID(t *testing.T) {
	t.Parallel()
	addr := testsvc.ZooKeeper(t)
	root := "/dup"
	r1 := open(t, testOpts(addr, root, 5, &logBuf{}))
	lb := &logBuf{}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	opts := testOpts(addr, root, 5, lb)
	opts.URI = "meta://127.0.0.1:1"
	r2, err := Open(ctx, opts)
	require.NoError(t, err)
	defer r2.Close()
	require.False(t, r2.Registered())
	eventually(t, 5*time.Second, func() error {
		if !lb.contains("ERROR: duplicate broker id 5?") {
			return errors.New("no duplicate error logged")
		}
		return nil
	})
	c := client(t, addr)
	require.NoError(t, checkLayout(c, root, 5, r1.SessionID()), "the first broker's nodes are untouched")

	require.NoError(t, r1.Close())
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	require.NoError(t, r2.Wait(wctx))
	v, st, err := get(c, zkpath.Master(root, 5))
	require.NoError(t, err)
	require.Equal(t, "meta://127.0.0.1:1", v)
	require.Equal(t, r2.SessionID(), st.EphemeralOwner)
}

// TestOldSessionNodesReplaced: ephemeral nodes that still exist, owned by a
// session this registry held before, are deleted and created again.
// A real expired session's nodes are removed by the server together with
// the session, so the lingering node is staged: a node of another live
// session that the registry is told (through the test hook) was its own.
//
// Not parallel: testHookOpen is package state that every Open reads.
func TestOldSessionNodesReplaced(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	root := "/oldsess"
	old := client(t, addr)
	eventually(t, 10*time.Second, func() error {
		if old.State() != zk.StateHasSession {
			return errors.New("no session")
		}
		return nil
	})
	for _, p := range []string{zkpath.Master(root, 4), zkpath.TopicsSub.Node(root, "both", zkpath.MasterName(4))} {
		for _, anc := range []string{root, zkpath.Brokers(root), zkpath.BrokerIDs(root), zkpath.Broker(root, 4), zkpath.TopicsSub.Dir(root), zkpath.TopicsSub.Topic(root, "both")} {
			if _, err := old.Create(anc, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				require.NoError(t, err)
			}
		}
		_, err := old.Create(p, []byte("stale"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	}
	oldSess := old.SessionID()
	testHookOpen = func(r *Registry) { r.old[oldSess] = true }
	defer func() { testHookOpen = nil }()
	lb := &logBuf{}
	r := open(t, testOpts(addr, root, 4, lb))
	require.True(t, r.Registered())
	require.NoError(t, checkLayout(client(t, addr), root, 4, r.SessionID()))
	require.True(t, lb.contains("left by this broker's expired session"))
}

// TestSessionExpiryReregisters expires the registry's session with a
// second client holding its session id and password, and checks that it
// re-registers everything under a new session by itself, within the
// session timeout plus a margin.
func TestSessionExpiryReregisters(t *testing.T) {
	t.Parallel()
	addr := testsvc.ZooKeeper(t)
	root := "/expiry"
	sn := &testsvc.SessionSniffer{}
	lb := &logBuf{}
	opts := testOpts(addr, root, 9, lb)
	opts.Dialer = sn.Dial
	r := open(t, opts)
	c := client(t, addr)
	first := r.SessionID()
	require.NoError(t, checkLayout(c, root, 9, first))

	for round := 1; round <= 2; round++ {
		id, pw := sn.Session()
		require.Equal(t, r.SessionID(), id)
		start := time.Now()
		testsvc.ExpireSession(t, addr, id, pw)
		eventually(t, opts.SessionTimeout+5*time.Second, func() error {
			s := r.SessionID()
			if s == id || s == 0 {
				return errors.New("still on the old session")
			}
			return checkLayout(c, root, 9, s)
		})
		t.Logf("round %d: re-registered %v after the expiry (session %#x -> %#x)", round, time.Since(start), id, r.SessionID())
		require.True(t, r.Registered())
	}
	require.True(t, lb.contains("re-registering broker 9"))
}

// TestZooKeeperDownAtStart: Open returns when its context ends though
// ZooKeeper is down, and registers once ZooKeeper is up.
func TestZooKeeperDownAtStart(t *testing.T) {
	t.Parallel()
	z := testsvc.NewZooKeeper(t)
	z.Stop()
	lb := &logBuf{}
	lb.dumpOnFailure(t)
	opts := testOpts(z.Addr(), "/down", 1, lb)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	r, err := Open(ctx, opts)
	require.NoError(t, err)
	defer r.Close()
	require.Less(t, time.Since(start), 5*time.Second)
	require.False(t, r.Registered())
	require.True(t, lb.contains("not registered yet"))

	require.NoError(t, z.Start())
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	require.NoError(t, r.Wait(wctx))
	require.NoError(t, checkLayout(client(t, z.Addr()), "/down", 1, r.SessionID()))
}

func TestOpenRejectsBadOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{
		{Connect: "", URI: "meta://h:1"},
		{Connect: "h:1/chroot", URI: "meta://h:1"},
		{Connect: "h:1", URI: "meta://h:1", BrokerID: 1024},
		{Connect: "h:1", URI: "h:1"},
		{Connect: "h:1", URI: "meta://h:1", Root: "meta"},
	} {
		_, err := Open(context.Background(), o)
		require.Error(t, err, "%+v", o)
	}
}

// TestCloseWithZooKeeperDown is bounded.
func TestCloseWithZooKeeperDown(t *testing.T) {
	t.Parallel()
	z := testsvc.NewZooKeeper(t)
	r := open(t, testOpts(z.Addr(), "/closedown", 1, &logBuf{}))
	z.Kill()
	start := time.Now()
	r.Close()
	require.Less(t, time.Since(start), 7*time.Second)
}

// TestInvalidTopicNeverLoops: a topic name ZooKeeper cannot hold ("." and
// "..", or a control character) that reaches the registry anyway (an old
// topics.toml, a caller that skipped the validator) is logged once as an
// error and left out: the other topics register, Registered holds, and
// the registry does not retry it (no "invalid path" from ZooKeeper, no
// repeated log lines) over a few seconds.
func TestInvalidTopicNeverLoops(t *testing.T) {
	t.Parallel()
	addr := testsvc.ZooKeeper(t)
	lb := &logBuf{}
	opts := testOpts(addr, "/badnames", 1, lb)
	opts.Topics = append(opts.Topics, Topic{Name: "..", NumPartitions: 1, AcceptPublish: true, AcceptSubscribe: true})
	r := open(t, opts)
	require.True(t, r.Registered())
	r.AddTopic(Topic{Name: ".", NumPartitions: 1, AcceptPublish: true})
	r.AddTopic(Topic{Name: "..", NumPartitions: 2, AcceptPublish: true})
	r.AddTopic(Topic{Name: "a\x01", NumPartitions: 1, AcceptPublish: true})
	r.AddTopic(Topic{Name: "fine.name", NumPartitions: 1, AcceptPublish: true})
	c := client(t, addr)
	eventually(t, 10*time.Second, func() error {
		if !r.Registered() {
			return errors.New("not registered")
		}
		_, _, err := get(c, zkpath.TopicsPub.Node("/badnames", "fine.name", zkpath.MasterName(1)))
		return err
	})
	time.Sleep(3 * time.Second) // RetryInterval is 100 ms: a loop would log ~30 times
	require.True(t, r.Registered(), "an invalid topic does not hold readiness")

	lb.mu.Lock()
	defer lb.mu.Unlock()
	count := func(s string) int {
		n := 0
		for _, l := range lb.lines {
			if strings.Contains(l, s) {
				n++
			}
		}
		return n
	}
	require.Zero(t, count("invalid path"), "%q", lb.lines)
	require.Equal(t, 3, count("ERROR: not registering topic"), "%q", lb.lines)
	require.Equal(t, 1, count(`not registering topic: invalid topic name "..": reserved`), "%q", lb.lines)
	require.Equal(t, 1, count(`not registering topic: invalid topic name ".": reserved`), "%q", lb.lines)
	require.Equal(t, 1, count(`invalid topic name "a\x01": control character U+0001`), "%q", lb.lines)
	require.LessOrEqual(t, count("registered as"), 3, "%q", lb.lines)
	kids, _, err := c.Children(zkpath.TopicsPub.Dir("/badnames"))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"both", "fine.name"}, kids)
}
