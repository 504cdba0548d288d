package zk_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/offsetstore"
	"github.com/metaq-go/metaq/offsetstore/zk"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/message"
)

// As a client without ADMIN rights on a node reads its ACL: ZooKeeper
// shows a digest id as "user:x" (ZOOKEEPER-1392).
var (
	privateSeen = []gozk.ACL{{Perms: gozk.PermAll, Scheme: "digest", ID: "store:x"}, {Perms: gozk.PermRead, Scheme: "world", ID: "anyone"}}
	sharedSeen  = []gozk.ACL{{Perms: gozk.PermAll, Scheme: "digest", ID: "store:x"},
		{Perms: gozk.PermRead | gozk.PermCreate | gozk.PermDelete, Scheme: "world", ID: "anyone"}}
)

func aclOf(t *testing.T, c *gozk.Conn, p string) []gozk.ACL {
	t.Helper()
	acl, _, err := c.GetACL(p)
	require.NoError(t, err, p)
	return acl
}

// TestDigestACLWithZkCli runs the plugin binary with auth_user and
// auth_password in its config, commits, and reads the offset node's ACL
// back with the real zkCli.sh: the store's user has all rights (cdrwa),
// world:anyone reads (r). Without the identity, zkCli.sh reads the offset
// but its set fails with NoAuth, and no client can delete it or forge a
// new one. R/consumers and the group are private too: a consumer without
// credentials cannot join the group (a clear error naming the node); one
// with the identity registers and claims.
func TestDigestACLWithZkCli(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	root := "/storeacl"
	s := openPlugin(t, newSupervisor(t), map[string]string{
		"connect": addr, "root": root, "auth_user": "store", "auth_password": "pw-1",
	})
	g := fmt.Sprintf("g-%d", time.Now().UnixNano())
	k := key{Group: g, Topic: "t", BrokerID: 2, Partition: 5}
	require.NoError(t, commit(ctx(t), s, []entry{{Key: k, Offset: 77, MsgID: 66}}))
	node := zkpath.Offset(root, g, "t", 2, 5)

	// One zkCli.sh (one JVM): the ACL and data, then a set, last, so that
	// its failure is zkCli.sh's exit status.
	lines, stderr, exitErr, err := testsvc.ZkCliSession(t, addr, "getAcl "+node, "get "+node, "set "+node+" 1-999999")
	require.NoError(t, err)
	require.Equal(t, []string{"'digest,'store:x", ": cdrwa", "'world,'anyone", ": r", "66-77"}, lines)
	require.Error(t, exitErr, "an unauthenticated set of an offset must fail: %v", lines)
	require.Contains(t, stderr, "Insufficient permission")

	c := raw(t, addr)
	require.ErrorIs(t, c.Delete(node, -1), gozk.ErrNoAuth)
	_, err = c.Create(zkpath.Offset(root, g, "t", 2, 6), []byte("1-1"), 0, gozk.WorldACL(gozk.PermAll))
	require.ErrorIs(t, err, gozk.ErrNoAuth, "forging a new offset")
	_, err = c.Create(zkpath.OffsetsTopic(root, g, "u"), nil, 0, gozk.WorldACL(gozk.PermAll))
	require.ErrorIs(t, err, gozk.ErrNoAuth, "forging a new topic's offsets")
	for _, p := range []string{node, zkpath.OffsetsTopic(root, g, "t"), zkpath.Offsets(root, g), zkpath.Group(root, g), zkpath.Consumers(root)} {
		require.Equal(t, privateSeen, aclOf(t, c, p), p)
	}
	require.Equal(t, sharedSeen, aclOf(t, c, root), root)
	for _, p := range []string{zkpath.Group(root, "newgroup"), zkpath.Members(root, g), zkpath.Owners(root, g)} {
		_, err = c.Create(p, nil, 0, gozk.WorldACL(gozk.PermAll))
		require.ErrorIs(t, err, gozk.ErrNoAuth, "an anonymous create of %s", p)
	}
	res, err := load(ctx(t), s, []key{k})
	require.NoError(t, err)
	require.Equal(t, int64(77), res[0].Offset, "unchanged")

	// The store keeps writing its own nodes.
	require.NoError(t, commit(ctx(t), s, []entry{{Key: k, Offset: 78, MsgID: 67}}))
	got, err := testsvc.ZkCliGet(t, addr, node)
	require.NoError(t, err)
	require.Equal(t, []string{"67-78"}, got)

	// A consumer without credentials cannot join the group.
	cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	anon, err := cluster.Open(cctx, cluster.Options{Connect: addr, Root: root, SessionTimeout: 10 * time.Second})
	require.NoError(t, err)
	defer anon.Close()
	_, err = anon.JoinGroup(cctx, g, "c0", []string{"t"})
	require.ErrorIs(t, err, cluster.ErrForeignNode)
	require.ErrorIs(t, err, gozk.ErrNoAuth)
	require.ErrorContains(t, err, zkpath.Group(root, g))
	require.ErrorContains(t, err, "give this client the cluster's identity")

	// One with the identity joins and claims.
	cl, err := cluster.Open(cctx, cluster.Options{Connect: addr, Root: root, SessionTimeout: 10 * time.Second,
		Auth: cluster.Auth{User: "store", Password: "pw-1"}})
	require.NoError(t, err)
	defer cl.Close()
	m, err := cl.JoinGroup(cctx, g, "c1", []string{"t"})
	require.NoError(t, err)
	p := message.Partition{BrokerID: 2, Partition: 5}
	require.NoError(t, m.Claim("t", p))
	require.NoError(t, m.Release("t", p))
	require.NoError(t, m.Leave())
}

// TestAuthRestrictsOpenOffsets: an offset written before auth was on (or
// by MetaQ's own client) has ZooKeeper's open ACL; the store with auth
// restricts it, and its offsets parents, when it first writes it.
func TestAuthRestrictsOpenOffsets(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/storeopen-%d", time.Now().UnixNano()) // unique per run: the ZooKeeper is shared
	old := open(t, map[string]string{"connect": addr, "root": root})
	k := key{Group: "g", Topic: "t", BrokerID: 0, Partition: 0}
	require.NoError(t, commit(ctx(t), old, []entry{{Key: k, Offset: 1, MsgID: 1}}))
	c := raw(t, addr)
	node := zkpath.Offset(root, "g", "t", 0, 0)
	require.Equal(t, gozk.WorldACL(gozk.PermAll), aclOf(t, c, node), "without auth: MetaQ's open ACL")

	s := open(t, map[string]string{"connect": addr, "root": root, "auth_user": "store", "auth_password": "pw-1"})
	res, err := load(ctx(t), s, []key{k})
	require.NoError(t, err)
	require.Equal(t, int64(1), res[0].Offset)
	require.NoError(t, commit(ctx(t), s, []entry{{Key: k, Offset: 2, MsgID: 2}}))
	for _, p := range []string{node, zkpath.OffsetsTopic(root, "g", "t"), zkpath.Offsets(root, "g")} {
		require.Equal(t, privateSeen, aclOf(t, c, p), p)
	}
	for _, p := range []string{zkpath.Group(root, "g"), zkpath.Consumers(root)} {
		require.Equal(t, privateSeen, aclOf(t, c, p), p)
	}
	require.Equal(t, gozk.WorldACL(gozk.PermAll), aclOf(t, c, root), "R (shared) stays as it is")
	_, err = c.Set(node, []byte("1-1"), -1)
	require.ErrorIs(t, err, gozk.ErrNoAuth)
	// The store without auth can no longer write it.
	require.Error(t, commit(ctx(t), old, []entry{{Key: k, Offset: 3, MsgID: 3}}))
}

// TestAuthAfterSessionExpiry: the identity is logged in again on the new
// session after an expiry (go-zookeeper re-sends it): the store then
// creates a new topic's offsets under the private offsets node.
func TestAuthAfterSessionExpiry(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits for a session to expire")
	}
	z := testsvc.NewZooKeeper(t)
	s := open(t, map[string]string{"connect": z.Addr(), "timeout_ms": "1000", "session_timeout_ms": "2000",
		"auth_user": "store", "auth_password": "pw-1"})
	k := key{Group: "g", Topic: "t", BrokerID: 1, Partition: 0}
	require.NoError(t, commit(ctx(t), s, []entry{{Key: k, Offset: 1, MsgID: 1}}))
	z.Stop()
	time.Sleep(3 * time.Second)
	require.NoError(t, z.Start())
	k2 := key{Group: "g", Topic: "new", BrokerID: 1, Partition: 0}
	var err error
	for deadline := time.Now().Add(40 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if err = commit(ctx(t), s, []entry{{Key: k2, Offset: 5, MsgID: 5}}); err == nil {
			break
		}
		require.NotErrorIs(t, err, gozk.ErrNoAuth, "the new session must be logged in")
	}
	require.NoError(t, err)
	require.Equal(t, privateSeen, aclOf(t, raw(t, z.Addr()), zkpath.Offset(zkpath.DefaultRoot, "g", "new", 1, 0)))
}

func TestAuthConfigErrors(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	for name, conf := range map[string]map[string]string{
		"user only":     {"connect": addr, "auth_user": "u"},
		"password only": {"connect": addr, "auth_password": "p"},
		"colon in user": {"connect": addr, "auth_user": "a:b", "auth_password": "p"},
	} {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			err := zk.New().Init(ctx(t), &offsetstore.InitRequest{Config: conf})
			require.ErrorIs(t, err, offsetstore.ErrBadConfig)
			require.NotContains(t, err.Error(), "\"p\"", "the password is never echoed")
		})
	}
}

// digestClient is a raw client logged in as user (another identity than
// the store's: someone squatting nodes).
func digestClient(t *testing.T, addr, user, pw string) *gozk.Conn {
	t.Helper()
	c := raw(t, addr)
	require.NoError(t, c.AddAuth("digest", []byte(user+":"+pw)))
	return c
}

// TestSquattedNodes: nodes someone else created first, with their own
// ACL, are never written through nor served. A squatted group gives a
// commit error naming the node and saying it is owned by another
// ZooKeeper identity; a squatted offset node is taken as absent by Load
// (warned once) and its commit fails the same way; a group an earlier
// version made shared is restricted to the private ACL.
func TestSquattedNodes(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/squat-%d", time.Now().UnixNano()) // unique per run: the ZooKeeper is shared
	cons := zkpath.Consumers(root)
	anon := raw(t, addr)
	// A tree made before auth was on (open), as MetaQ makes it.
	for _, p := range []string{root, cons, zkpath.Group(root, "sq2"), zkpath.Offsets(root, "sq2"), zkpath.OffsetsTopic(root, "sq2", "t")} {
		_, err := anon.Create(p, nil, 0, gozk.WorldACL(gozk.PermAll))
		require.NoError(t, err, p)
	}
	evil := digestClient(t, addr, "evil", "evil-pw")
	evilACL := append(gozk.DigestACL(gozk.PermAll, "evil", "evil-pw"), gozk.WorldACL(gozk.PermRead)...)
	_, err := evil.Create(zkpath.Group(root, "sq"), nil, 0, evilACL)
	require.NoError(t, err)
	squatted := zkpath.Offset(root, "sq2", "t", 0, 0)
	_, err = evil.Create(squatted, []byte("5-500"), 0, evilACL)
	require.NoError(t, err)
	// An earlier version's shared group, made by the store's identity.
	storeAuth := cluster.Auth{User: "store", Password: "pw-1"}
	mine := digestClient(t, addr, "store", "pw-1")
	_, err = mine.Create(zkpath.Group(root, "old"), nil, 0, storeAuth.SharedACL())
	require.NoError(t, err)

	var mu sync.Mutex
	var warnings []string
	s := zk.New()
	s.Logf = func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		warnings = append(warnings, fmt.Sprintf(format, args...))
	}
	require.NoError(t, s.Init(ctx(t), &offsetstore.InitRequest{Config: map[string]string{
		"connect": addr, "root": root, "auth_user": "store", "auth_password": "pw-1"}}))
	t.Cleanup(func() { s.Close() })

	// The squatted group: a clear commit error, nothing written.
	err = commit(ctx(t), s, []entry{{Key: key{Group: "sq", Topic: "t", BrokerID: 0, Partition: 0}, Offset: 1, MsgID: 1}})
	require.ErrorIs(t, err, cluster.ErrForeignNode)
	require.ErrorContains(t, err, "ZooKeeper node "+zkpath.Group(root, "sq")+" is owned by another ZooKeeper identity")
	require.ErrorContains(t, err, "digest:evil:x cdrwa, world:anyone r")
	require.NotContains(t, err.Error(), "evil-pw")
	ok, _, err := anon.Exists(zkpath.Offsets(root, "sq"))
	require.NoError(t, err)
	require.False(t, ok)

	// The squatted offset node: not served, warned about once.
	k := key{Group: "sq2", Topic: "t", BrokerID: 0, Partition: 0}
	for range 2 {
		res, err := load(ctx(t), s, []key{k})
		require.NoError(t, err)
		require.Equal(t, int64(-1), res[0].Offset, "a squatted offset is taken as absent")
	}
	mu.Lock()
	require.Len(t, warnings, 1, "%q", warnings)
	require.Contains(t, warnings[0], "not serving offset node "+squatted)
	mu.Unlock()
	err = commit(ctx(t), s, []entry{{Key: k, Offset: 7, MsgID: 7}})
	require.ErrorIs(t, err, cluster.ErrForeignNode)
	require.ErrorContains(t, err, squatted)
	data, _, err := anon.Get(squatted)
	require.NoError(t, err)
	require.Equal(t, "5-500", string(data), "never written through")
	// The open parents on the way were adopted (restricted), so nobody
	// else can add offsets under them any more.
	for _, p := range []string{cons, zkpath.Group(root, "sq2"), zkpath.Offsets(root, "sq2"), zkpath.OffsetsTopic(root, "sq2", "t")} {
		require.Equal(t, privateSeen, aclOf(t, anon, p), p)
	}
	_, err = anon.Create(zkpath.Offset(root, "sq2", "t", 0, 1), []byte("1-1"), 0, gozk.WorldACL(gozk.PermAll))
	require.ErrorIs(t, err, gozk.ErrNoAuth)

	// The earlier version's shared group is made private as the store
	// writes under it.
	require.NoError(t, commit(ctx(t), s, []entry{{Key: key{Group: "old", Topic: "t", BrokerID: 0, Partition: 0}, Offset: 3, MsgID: 3}}))
	require.Equal(t, privateSeen, aclOf(t, anon, zkpath.Group(root, "old")))
}
