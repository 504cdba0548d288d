package zk_test

import (
	"context"
	"fmt"
	"strings"
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
// new one. The group's shared parents still let a consumer without
// credentials register and claim partitions.
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

	lines, err := testsvc.ZkCliScript(t, addr, "getAcl "+node, "get "+node)
	require.NoError(t, err)
	require.Equal(t, []string{"'digest,'store:x", ": cdrwa", "'world,'anyone", ": r", "66-77"}, lines)
	out, err := testsvc.ZkCli(t, addr, "set", node, "1-999999")
	require.Error(t, err, "an unauthenticated set of an offset must fail: %s", out)
	require.Contains(t, err.Error(), "Insufficient permission")

	c := raw(t, addr)
	require.ErrorIs(t, c.Delete(node, -1), gozk.ErrNoAuth)
	_, err = c.Create(zkpath.Offset(root, g, "t", 2, 6), []byte("1-1"), 0, gozk.WorldACL(gozk.PermAll))
	require.ErrorIs(t, err, gozk.ErrNoAuth, "forging a new offset")
	_, err = c.Create(zkpath.OffsetsTopic(root, g, "u"), nil, 0, gozk.WorldACL(gozk.PermAll))
	require.ErrorIs(t, err, gozk.ErrNoAuth, "forging a new topic's offsets")
	for _, p := range []string{node, zkpath.OffsetsTopic(root, g, "t"), zkpath.Offsets(root, g)} {
		require.Equal(t, privateSeen, aclOf(t, c, p), p)
	}
	for _, p := range []string{root, zkpath.Consumers(root), zkpath.Group(root, g)} {
		require.Equal(t, sharedSeen, aclOf(t, c, p), p)
	}
	res, err := load(ctx(t), s, []key{k})
	require.NoError(t, err)
	require.Equal(t, int64(77), res[0].Offset, "unchanged")

	// The store keeps writing its own nodes.
	require.NoError(t, commit(ctx(t), s, []entry{{Key: k, Offset: 78, MsgID: 67}}))
	got, err := testsvc.ZkCliGet(t, addr, node)
	require.NoError(t, err)
	require.Equal(t, []string{"67-78"}, got)

	// A consumer without credentials joins the same group and claims.
	cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := cluster.Open(cctx, cluster.Options{Connect: addr, Root: root, SessionTimeout: 10 * time.Second})
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
	root := "/storeopen"
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
	require.Equal(t, gozk.WorldACL(gozk.PermAll), aclOf(t, c, zkpath.Group(root, "g")), "a shared parent stays open")
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
