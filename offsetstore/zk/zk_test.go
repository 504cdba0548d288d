package zk_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/offsetstore"
	"github.com/metaq-go/metaq/offsetstore/offsetstoretest"
	"github.com/metaq-go/metaq/offsetstore/zk"
	"github.com/metaq-go/metaq/sdk/offsets"
)

// One ZooKeeper for the package; fault tests start their own.
func TestMain(m *testing.M) { testsvc.Main(m) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// open returns an initialised store; it is closed when t ends.
func open(t *testing.T, conf map[string]string) *zk.Store {
	t.Helper()
	s := zk.New()
	require.NoError(t, s.Init(ctx(t), &offsetstore.InitRequest{Config: conf}))
	t.Cleanup(func() { s.Close() })
	return s
}

// raw is a plain client of the test's own, for writing and reading znodes
// behind the store's back.
func raw(t *testing.T, addr string) *gozk.Conn {
	t.Helper()
	c, _, err := gozk.Connect([]string{addr}, 10*time.Second, gozk.WithLogInfo(false))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func TestConformance(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	offsetstoretest.Run(t, func(t *testing.T) offsets.Store {
		return open(t, map[string]string{"connect": addr})
	})
}

func TestConformanceWrapped(t *testing.T) {
	// The same store behind offsetstore.Wrap (the middleware Open adds).
	addr := testsvc.ZooKeeper(t)
	offsetstoretest.Run(t, func(t *testing.T) offsets.Store {
		return offsetstore.Wrap(open(t, map[string]string{"connect": addr, "root": "/wrapped"}), 0)
	})
}

func TestDurable(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	offsetstoretest.RunDurable(t, func(t *testing.T) offsets.Store {
		return open(t, map[string]string{"connect": addr, "root": "/durable"})
	})
}

// TestZNodeLayout reads the store's znodes back with the real zkCli.sh:
// MetaQ's path and "<msgId>-<offset>" data under the default root /meta.
func TestZNodeLayout(t *testing.T) {
	t.Parallel()
	addr := testsvc.ZooKeeper(t)
	s := open(t, map[string]string{"connect": addr}) // default root
	group := fmt.Sprintf("layout-%d", time.Now().UnixNano())
	entries := []entry{
		{Key: key{Group: group, Topic: "meta-test", BrokerID: 0, Partition: 1}, Offset: 456, MsgID: 123},
		{Key: key{Group: group, Topic: "meta-test", BrokerID: 3, Partition: 10}, Offset: 7, MsgID: -1},
		{Key: key{Group: group, Topic: "other", BrokerID: 12, Partition: 0}, Offset: 1 << 40, MsgID: 1<<62 + 1},
	}
	require.NoError(t, commit(ctx(t), s, entries))

	// One zkCli.sh (one JVM) for the three gets and the ls: it prints
	// their outputs in order.
	var cmds, want []string
	for _, c := range []struct{ path, data string }{
		{zkpath.Offset(zkpath.DefaultRoot, group, "meta-test", 0, 1), "123-456"},
		{zkpath.Offset(zkpath.DefaultRoot, group, "meta-test", 3, 10), "-1-7"},
		{zkpath.Offset(zkpath.DefaultRoot, group, "other", 12, 0), fmt.Sprintf("%d-%d", int64(1<<62+1), int64(1<<40))},
	} {
		cmds, want = append(cmds, "get "+c.path), append(want, c.data)
	}
	cmds, want = append(cmds, "ls "+zkpath.OffsetsTopic(zkpath.DefaultRoot, group, "meta-test")), append(want, "[0-1, 3-10]")
	lines, err := testsvc.ZkCliScript(t, addr, cmds...)
	require.NoError(t, err)
	require.Equal(t, want, lines, "zkCli.sh %q", cmds)

	// The nodes are persistent: a new session still sees them.
	c := raw(t, addr)
	for _, p := range []string{zkpath.Offset(zkpath.DefaultRoot, group, "meta-test", 0, 1), zkpath.Group(zkpath.DefaultRoot, group)} {
		_, st, err := c.Get(p)
		require.NoError(t, err)
		require.Zero(t, st.EphemeralOwner, "%s must be persistent", p)
	}

	// An overwrite changes the data in place.
	entries[0].Offset, entries[0].MsgID = 999, 124
	require.NoError(t, commit(ctx(t), s, entries[:1]))
	lines, err = testsvc.ZkCliGet(t, addr, zkpath.Offset(zkpath.DefaultRoot, group, "meta-test", 0, 1))
	require.NoError(t, err)
	require.Contains(t, lines, "124-999")
}

// TestLoadMetaQFormats reads nodes as MetaQ wrote them, including the
// bare "<offset>" of MetaQ before 1.4.
func TestLoadMetaQFormats(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	c := raw(t, addr)
	root := fmt.Sprintf("/formats-%d", time.Now().UnixNano())
	for _, p := range []string{root, zkpath.Consumers(root), zkpath.Group(root, "g"), zkpath.Offsets(root, "g"), zkpath.OffsetsTopic(root, "g", "t")} {
		_, err := c.Create(p, nil, 0, gozk.WorldACL(gozk.PermAll))
		require.NoError(t, err)
	}
	nodes := map[string]string{
		"0-0": "123-456",     // 1.4+
		"0-1": "789",         // before 1.4: offset only
		"0-2": "-1-5",        // unknown msgId
		"0-3": " 42-43\n",    // hand-edited, with whitespace
		"1-0": "-9",          // a bare negative: MetaQ parses it as the offset
		"1-1": "not-offsets", // corrupt
	}
	for n, d := range nodes {
		_, err := c.Create(zkpath.OffsetsTopic(root, "g", "t")+"/"+n, []byte(d), 0, gozk.WorldACL(gozk.PermAll))
		require.NoError(t, err)
	}
	s := open(t, map[string]string{"connect": addr, "root": root})
	at := func(b int, p int32) key {
		return key{Group: "g", Topic: "t", BrokerID: b, Partition: p}
	}
	res, err := load(ctx(t), s, []key{at(0, 0), at(0, 1), at(0, 2), at(0, 3), at(1, 0), at(5, 5)})
	require.NoError(t, err)
	want := []struct {
		off, id int64
		found   bool
	}{{456, 123, true}, {789, -1, true}, {5, -1, true}, {43, 42, true},
		{-9, -1, false}, // a negative offset is no position (offsetstore's middleware makes it -1)
		{-1, -1, false}}
	for i, w := range want {
		require.Equal(t, w.found, res[i].Found, "result %d", i)
		require.Equal(t, w.off, res[i].Offset, "result %d", i)
		require.Equal(t, w.id, res[i].MsgID, "result %d", i)
	}
	_, err = load(ctx(t), s, []key{at(0, 0), at(1, 1)})
	require.Error(t, err, "a corrupt node must not read as missing")
	require.Contains(t, err.Error(), "not-offsets")
}

func TestRootOption(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/chroot-%d/metaq/", time.Now().UnixNano()) // nested, trailing slash
	s := open(t, map[string]string{"connect": addr, "root": root, "session_timeout_ms": "5000", "timeout_ms": "3000"})
	k := key{Group: "g", Topic: "t", BrokerID: 1, Partition: 2}
	require.NoError(t, commit(ctx(t), s, []entry{{Key: k, Offset: 10, MsgID: 11}}))
	data, _, err := raw(t, addr).Get(zkpath.Offset(zkpath.Root(root), "g", "t", 1, 2))
	require.NoError(t, err)
	require.Equal(t, "11-10", string(data))
}

// TestNodeDeletedBehindOurBack: the store caches which nodes exist; an
// operator deleting one must not make commits fail.
func TestNodeDeletedBehindOurBack(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/deleted-%d", time.Now().UnixNano())
	s := open(t, map[string]string{"connect": addr, "root": root})
	k := key{Group: "g", Topic: "t", BrokerID: 1, Partition: 0}
	require.NoError(t, commit(ctx(t), s, []entry{{Key: k, Offset: 1, MsgID: 1}}))
	c := raw(t, addr)
	require.NoError(t, c.Delete(zkpath.Offset(root, "g", "t", 1, 0), -1))
	require.NoError(t, c.Delete(zkpath.OffsetsTopic(root, "g", "t"), -1))
	require.NoError(t, commit(ctx(t), s, []entry{{Key: k, Offset: 2, MsgID: 2}}))
	res, err := load(ctx(t), s, []key{k})
	require.NoError(t, err)
	require.True(t, res[0].Found)
	require.Equal(t, int64(2), res[0].Offset)
}

// TestLargeBatch commits more keys than one multi-op carries.
func TestLargeBatch(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	s := open(t, map[string]string{"connect": addr, "root": "/large"})
	g := fmt.Sprintf("g%d", time.Now().UnixNano())
	n := zk.MaxMultiOps*2 + 17
	var es []entry
	var keys []key
	for i := 0; i < n; i++ {
		e := entry{Key: key{Group: g, Topic: fmt.Sprintf("t%d", i%7), BrokerID: i % 3, Partition: int32(i)}, Offset: int64(i) * 3, MsgID: int64(i)}
		es = append(es, e)
		keys = append(keys, e.Key)
	}
	require.NoError(t, commit(ctx(t), s, es))
	res, err := load(ctx(t), s, keys)
	require.NoError(t, err)
	for i := range es {
		require.True(t, res[i].Found)
		require.Equal(t, es[i], res[i].Entry)
	}
}

func TestConfigErrors(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	for name, conf := range map[string]map[string]string{
		"no connect":      {},
		"chroot suffix":   {"connect": addr + "/meta"},
		"relative root":   {"connect": addr, "root": "meta"},
		"bad root":        {"connect": addr, "root": "/a/../b"},
		"bad timeout":     {"connect": addr, "session_timeout_ms": "soon"},
		"zero timeout":    {"connect": addr, "timeout_ms": "0"},
		"unknown key":     {"connect": addr, "zkRoot": "/meta"},
		"misspelled root": {"connect": addr, "Root": "/meta"},
	} {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			err := zk.New().Init(ctx(t), &offsetstore.InitRequest{Config: conf})
			require.ErrorIs(t, err, offsetstore.ErrBadConfig)
		})
	}
}

func TestInitUnreachable(t *testing.T) {
	t.Parallel()
	// A port nobody listens on, as a stopped ZooKeeper's is (without
	// starting and stopping one).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	start := time.Now()
	err = zk.New().Init(ctx(t), &offsetstore.InitRequest{Config: map[string]string{"connect": addr, "timeout_ms": "1500"}})
	require.Error(t, err)
	require.Contains(t, err.Error(), addr)
	require.Less(t, time.Since(start), 10*time.Second, "Init must be bounded by timeout_ms")
}

func TestNotInitializedAndClosed(t *testing.T) {
	s := zk.New()
	k := key{Group: "g", Topic: "t"}
	require.ErrorIs(t, commit(ctx(t), s, []entry{{Key: k}}), offsetstore.ErrNotInitialized)
	_, err := load(ctx(t), s, []key{k})
	require.ErrorIs(t, err, offsetstore.ErrNotInitialized)
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Init(ctx(t), &offsetstore.InitRequest{Config: map[string]string{"connect": "127.0.0.1:1"}}), offsets.ErrClosed)
}

func TestInvalidKeys(t *testing.T) {
	s := open(t, map[string]string{"connect": testsvc.ZooKeeper(t), "root": "/invalid"})
	for _, k := range []key{
		{Group: "a/b", Topic: "t"},
		{Group: "g", Topic: ".."},
		{Group: "g", Topic: "."},
		{Group: "g\x00", Topic: "t"},
		{Group: "", Topic: "t"},
		{Group: "g", Topic: "t", Partition: -1},
		// message.ValidateGroup
		{Group: "..", Topic: "t"},
		{Group: "g\xff", Topic: "t"},
		{Group: "g\ufffd", Topic: "t"},
		{Group: "g\n", Topic: "t"},
		{Group: "g h", Topic: "t"},
		{Group: strings.Repeat("g", 256), Topic: "t"},
	} {
		require.ErrorIs(t, commit(ctx(t), s, []entry{{Key: k, Offset: 1}}), offsets.ErrInvalid, "%+v", k)
		_, err := load(ctx(t), s, []key{k})
		require.ErrorIs(t, err, offsets.ErrInvalid, "%+v", k)
	}
	require.ErrorIs(t, commit(ctx(t), s, []entry{{Key: key{Group: "g", Topic: "t"}, Offset: -1}}), offsets.ErrInvalid)
	// Printable UTF-8 is a valid node name.
	for _, g := range []string{"日本語", "a.b", "...", strings.Repeat("g", 255)} {
		k := key{Group: g, Topic: "t"}
		require.NoError(t, commit(ctx(t), s, []entry{{Key: k, Offset: 3}}), "%q", g)
		res, err := load(ctx(t), s, []key{k})
		require.NoError(t, err)
		require.True(t, res[0].Found, "%q", g)
	}
}

// TestConnectionLoss: with ZooKeeper down, commits and loads fail with a
// clear error within the timeout (never a false success); once it is back
// the same store works again, and a commit that failed cannot overwrite a
// later one.
func TestConnectionLoss(t *testing.T) {
	t.Parallel()
	z := testsvc.NewZooKeeper(t)
	s := open(t, map[string]string{"connect": z.Addr(), "timeout_ms": "1500", "session_timeout_ms": "30000"})
	k := key{Group: "g", Topic: "t", BrokerID: 1, Partition: 0}
	commit := func(off int64) error {
		return commit(ctx(t), s, []entry{{Key: k, Offset: off, MsgID: off}})
	}
	require.NoError(t, commit(1))

	z.Kill()
	start := time.Now()
	err := commit(2)
	require.Error(t, err, "a commit while ZooKeeper is down must fail")
	require.Contains(t, err.Error(), "offsetstore/zk: commit")
	require.Less(t, time.Since(start), 5*time.Second, "the failure must come within timeout_ms")
	_, err = load(ctx(t), s, []key{k})
	require.Error(t, err)
	require.Error(t, commit(3), "a second commit must fail too, not report success")

	require.NoError(t, z.Start())
	// The client reconnects on its own; the session survived.
	require.Eventually(t, func() bool { return commit(4) == nil }, 30*time.Second, 200*time.Millisecond)
	res, err := load(ctx(t), s, []key{k})
	require.NoError(t, err)
	require.True(t, res[0].Found)
	require.Equal(t, int64(4), res[0].Offset, "the failed commits 2 and 3 must not land after 4")
}

// TestSessionExpiry: after the session expires (ZooKeeper down longer
// than the session timeout), the store gets a new session by itself.
func TestSessionExpiry(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits for a session to expire")
	}
	z := testsvc.NewZooKeeper(t)
	s := open(t, map[string]string{"connect": z.Addr(), "timeout_ms": "1000", "session_timeout_ms": "2000"})
	k := key{Group: "g", Topic: "t", BrokerID: 1, Partition: 0}
	// The first commit may miss timeout_ms on a loaded machine while the
	// fresh ZooKeeper warms up: that is set-up, not what is tested.
	require.Eventually(t, func() bool {
		return commit(ctx(t), s, []entry{{Key: k, Offset: 1, MsgID: 1}}) == nil
	}, 20*time.Second, 100*time.Millisecond)
	z.Stop()
	time.Sleep(3 * time.Second)
	require.NoError(t, z.Start())
	deadline := time.Now().Add(40 * time.Second)
	for {
		err := commit(ctx(t), s, []entry{{Key: k, Offset: 5, MsgID: 5}})
		if err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "no successful commit after the session expired: %v", err)
		time.Sleep(250 * time.Millisecond)
	}
	res, err := load(ctx(t), s, []key{k})
	require.NoError(t, err)
	require.Equal(t, int64(5), res[0].Offset)
}

func TestCloseDuringOutage(t *testing.T) {
	t.Parallel()
	z := testsvc.NewZooKeeper(t)
	s := open(t, map[string]string{"connect": z.Addr(), "timeout_ms": "5000"})
	z.Kill()
	errc := make(chan error, 1)
	go func() {
		errc <- commit(context.Background(), s, []entry{{Key: key{Group: "g", Topic: "t"}, Offset: 1}})
	}()
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, s.Close())
	select {
	case err := <-errc:
		require.Error(t, err)
		require.True(t, errors.Is(err, offsets.ErrClosed) || strings.Contains(err.Error(), "offsetstore/zk"), "%v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("commit did not return after Close")
	}
}

// TestStuckHandshakeReconnects: a ZooKeeper that accepts the connection
// and never answers the connect request (one still starting did that) does
// not hold Init for go-zookeeper's 10 x recvTimeout (recvTimeout =
// session_timeout_ms*2/3: 13.3 s here, 200 s at the default 30 s): the
// handshake gives up after about recvTimeout and the client reconnects
// (after its 1 s pause once every server was tried).
func TestStuckHandshakeReconnects(t *testing.T) {
	t.Parallel()
	addr, check := testsvc.StuckHandshake(t)
	start := time.Now()
	open(t, map[string]string{"connect": addr, "session_timeout_ms": "2000", "timeout_ms": "20000"})
	check(time.Since(start), 2*time.Second)
}
