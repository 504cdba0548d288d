package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/message"
)

func TestMain(m *testing.M) { testsvc.Main(m) }

// zkClient is a plain client that writes the nodes a broker would.
func zkClient(t *testing.T, addr string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func mkdirs(t *testing.T, c *zk.Conn, path string) {
	t.Helper()
	p := ""
	for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
		p += "/" + part
		_, err := c.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
		if err != nil && err != zk.ErrNodeExists {
			require.NoError(t, err)
		}
	}
}

// register writes broker id's §5 nodes: ids/<id> (P), ids/<id>/master (E)
// and topics-pub/<topic>/<id>-<role> (E), role "m" or "s0".
func register(t *testing.T, c *zk.Conn, root string, id int, role, addr, topic string, parts int) {
	t.Helper()
	ids := zkpath.Broker(root, id)
	mkdirs(t, c, ids)
	uri := []byte("meta://" + addr)
	name := zkpath.MasterName(id)
	if role == "m" {
		_, err := c.Set(ids, uri, -1)
		require.NoError(t, err)
		_, err = c.Create(zkpath.Master(root, id), uri, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	} else {
		name = zkpath.BrokerName{ID: id, Slave: 0}
		_, err := c.Create(zkpath.Slave(root, id, 0), uri, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	}
	mkdirs(t, c, zkpath.TopicsPub.Topic(root, topic))
	data := zkpath.TopicData{NumParts: parts, Broker: zkpath.MasterName(id).String()}.Bytes()
	_, err := c.Create(zkpath.TopicsPub.Node(root, topic, name), data, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
}

func unregister(t *testing.T, c *zk.Conn, root string, id int, topic string) {
	t.Helper()
	require.NoError(t, c.Delete(zkpath.TopicsPub.Node(root, topic, zkpath.MasterName(id)), -1))
	require.NoError(t, c.Delete(zkpath.Master(root, id), -1))
}

func open(t *testing.T, o cluster.Options) *cluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := cluster.Open(ctx, o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func parts(spec ...int) []message.Partition {
	var out []message.Partition
	for i := 0; i < len(spec); i += 2 {
		for p := range spec[i+1] {
			out = append(out, message.Partition{BrokerID: spec[i], Partition: int32(p)})
		}
	}
	return out
}

// waitParts waits until v lists want.
func waitParts(t *testing.T, v *cluster.TopicView, want []message.Partition) {
	t.Helper()
	waitView(t, v, want, func() []message.Partition { return v.Partitions() }, slices.Equal[[]message.Partition])
}

// waitView waits (15 s at most, woken by v's changes) until get returns
// what equals want, and fails the test with the difference otherwise.
func waitView[T any](t *testing.T, v *cluster.TopicView, want T, get func() T, equal func(a, b T) bool) T {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := get()
		if equal(got, want) {
			return got
		}
		if time.Now().After(deadline) {
			require.Equal(t, want, got)
		}
		select {
		case <-v.Changes():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestDiscoverySortedMastersOnly(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	root := "/disc"
	w := zkClient(t, addr)
	// Broker 10 before broker 2, so that text order would differ.
	register(t, w, root, 10, "m", "127.0.0.1:9010", "t", 3)
	register(t, w, root, 2, "m", "127.0.0.1:9002", "t", 12)
	register(t, w, root, 2, "s0", "127.0.0.1:9102", "t", 12)
	register(t, w, root, 7, "s0", "127.0.0.1:9107", "t", 5) // a slave without master
	c := open(t, cluster.Options{Connect: addr, Root: root, SessionTimeout: 4 * time.Second})
	v := c.WatchPublish("t")
	require.Same(t, v, c.WatchPublish("t"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, v.Wait(ctx))
	want := parts(2, 12, 10, 3)
	require.Equal(t, want, v.Partitions())
	require.Equal(t, "127.0.0.1:9002", v.Addr(2))
	require.Equal(t, "127.0.0.1:9010", v.Addr(10))
	require.Equal(t, "", v.Addr(7))

	// A new broker appears; one vanishes; the topic of another view is absent.
	register(t, w, root, 5, "m", "127.0.0.1:9005", "t", 2)
	waitParts(t, v, parts(2, 12, 5, 2, 10, 3))
	unregister(t, w, root, 2, "t")
	waitParts(t, v, parts(5, 2, 10, 3))
	require.Equal(t, "", v.Addr(2))
	// A master URI change (broker restarted elsewhere) is followed.
	_, err := w.Set(zkpath.Master(root, 5), []byte("meta://127.0.0.1:9999"), -1)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return v.Addr(5) == "127.0.0.1:9999" }, 10*time.Second, 20*time.Millisecond)

	// A topic created after the view started.
	u := c.WatchPublish("later")
	require.NoError(t, u.Wait(ctx))
	require.Empty(t, u.Partitions())
	register(t, w, root, 3, "m", "127.0.0.1:9003", "later", 4)
	waitParts(t, u, parts(3, 4))
}

// TestSessionExpiryRecovers expires the view's session with a second
// client holding its session id and password; the view must re-read on
// the new session and keep following changes.
func TestSessionExpiryRecovers(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	root := "/expiry"
	w := zkClient(t, addr)
	register(t, w, root, 1, "m", "127.0.0.1:9001", "t", 2)
	sn := &testsvc.SessionSniffer{}
	c := open(t, cluster.Options{Connect: addr, Root: root, SessionTimeout: 4 * time.Second, Dialer: sn.Dial})
	v := c.WatchPublish("t")
	waitParts(t, v, parts(1, 2))
	for round := range 2 {
		id, pw := sn.Session()
		require.NotZero(t, id)
		testsvc.ExpireSession(t, addr, id, pw)
		require.Eventually(t, func() bool { s := c.SessionID(); return s != 0 && s != id }, 20*time.Second, 20*time.Millisecond)
		// Changes made after the expiry are seen on the new session.
		bid := 20 + round
		register(t, w, root, bid, "m", fmt.Sprintf("127.0.0.1:%d", 9100+bid), "t", 1)
		want := parts(1, 2)
		for r := 0; r <= round; r++ {
			want = append(want, message.Partition{BrokerID: 20 + r})
		}
		waitParts(t, v, want)
	}
	unregister(t, w, root, 1, "t")
	waitParts(t, v, []message.Partition{{BrokerID: 20}, {BrokerID: 21}})
}

// TestStuckHandshakeReconnects: a ZooKeeper that accepts the connection
// and never answers the connect request (one still starting did that) does
// not hold Open for go-zookeeper's 10 x recvTimeout (recvTimeout =
// SessionTimeout*2/3: 13.3 s here, 200 s at the default 30 s session): the
// handshake gives up after about recvTimeout and the client reconnects
// (after its 1 s pause once every server was tried).
func TestStuckHandshakeReconnects(t *testing.T) {
	t.Parallel()
	addr, check := testsvc.StuckHandshake(t)
	const session = 2 * time.Second
	start := time.Now()
	open(t, cluster.Options{Connect: addr, SessionTimeout: session})
	check(time.Since(start), session)
}
