package broker

import (
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// TestClusterZooKeeperDigestACL starts a broker with [zookeeper]
// auth_user/auth_password and reads its nodes' ACLs with the real
// zkCli.sh: the broker's user has all rights (cdrwa), world:anyone reads
// (r). An unauthenticated zkCli.sh cannot repoint the broker (its set of
// ids/<id>/master fails with NoAuth) but still reads it.
func TestClusterZooKeeperDigestACL(t *testing.T) {
	t.Parallel()
	addr := testsvc.ZooKeeper(t)
	root := "/brokeracl"
	b := clusterBroker(t, addr, root, 5, func(c *conf.Config) {
		c.ZooKeeper.AuthUser, c.ZooKeeper.AuthPassword = "metaq", "zk-secret"
	})
	waitRegistered(t, b)
	_, port, _ := net.SplitHostPort(b.Addr())
	uri := "meta://127.0.0.1:" + port
	master := zkpath.Master(root, 5)
	pub := zkpath.TopicsPub.Node(root, "t", zkpath.MasterName(5))
	private := []string{"'digest,'metaq:x", ": cdrwa", "'world,'anyone", ": r"}

	// One zkCli.sh run: the ACLs and the data, a set of the master node
	// (its NoAuth goes to stderr, naming the node; set prints nothing),
	// and the data again, unchanged.
	lines, stderr, exitErr, err := testsvc.ZkCliSession(t, addr, "getAcl "+master, "getAcl "+pub, "get "+master,
		"set "+master+" meta://10.6.6.6:8123", "get "+master)
	require.NoError(t, err)
	require.NoError(t, exitErr)
	require.Equal(t, append(append(append([]string{}, private...), private...), uri, uri), lines)
	require.Contains(t, stderr, "Insufficient permission : "+master, "unauthenticated set of %s", master)

	c := zkClient(t, addr)
	_, err = c.Set(pub, []byte(`{"numParts":64,"broker":"5-m"}`), -1)
	require.ErrorIs(t, err, zk.ErrNoAuth)
	require.NoError(t, checkBroker(c, root, b))

	// An auto-created topic is registered with the same ACL.
	_, err = b.lookup([]byte("auto"), true)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, func() error {
		_, err := zkGet(c, zkpath.TopicsPub.Node(root, "auto", zkpath.MasterName(5)))
		return err
	})
	acl, _, err := c.GetACL(zkpath.TopicsPub.Node(root, "auto", zkpath.MasterName(5)))
	require.NoError(t, err)
	require.Equal(t, []zk.ACL{{Perms: zk.PermAll, Scheme: "digest", ID: "metaq:x"}, {Perms: zk.PermRead, Scheme: "world", ID: "anyone"}}, acl)
	require.NoError(t, b.Close())
	ok, _, err := c.Exists(zkpath.Broker(root, 5))
	require.NoError(t, err)
	require.False(t, ok, "Close still unregisters")
}

// TestClusterZooKeeperConsumersClosed: with digest auth, a broker and its
// ZooKeeper offset store (the plugin binary) close R/consumers to clients
// without the identity. An anonymous zkCli.sh cannot pre-create a new
// group or an offset node (Insufficient permission); the broker's fetch
// never serves an offset node another identity squatted (it reads as
// nothing stored); a commit to a group node someone else squatted fails
// with a reply naming the node and saying it is owned by another
// ZooKeeper identity.
func TestClusterZooKeeperConsumersClosed(t *testing.T) {
	t.Parallel()
	addr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/consumersclosed-%d", time.Now().UnixNano())
	const id = 6
	anon := zkClient(t, addr)
	// What an anonymous client (or a cluster without auth) left open, and
	// nodes another identity ("evil") squatted meanwhile.
	for _, p := range []string{root, zkpath.Consumers(root), zkpath.Group(root, "sq2"), zkpath.Offsets(root, "sq2"), zkpath.OffsetsTopic(root, "sq2", "t")} {
		_, err := anon.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err, p)
	}
	evil := zkClient(t, addr)
	require.NoError(t, evil.AddAuth("digest", []byte("evil:evil-pw")))
	evilACL := append(zk.DigestACL(zk.PermAll, "evil", "evil-pw"), zk.WorldACL(zk.PermRead)...)
	_, err := evil.Create(zkpath.Group(root, "squat"), nil, 0, evilACL)
	require.NoError(t, err)
	squatted := zkpath.Offset(root, "sq2", "t", id, 0)
	_, err = evil.Create(squatted, []byte("5-500"), 0, evilACL)
	require.NoError(t, err)

	dir := t.TempDir()
	testsvc.GoBuildTo(t, "github.com/metaq-go/metaq/cmd/metaq-offsetstore-zk", filepath.Join(dir, "metaq-offsetstore-zk"))
	b := clusterBroker(t, addr, root, id, func(c *conf.Config) {
		c.ZooKeeper.AuthUser, c.ZooKeeper.AuthPassword = "metaq", "zk-secret"
		c.PluginDir = dir
		c.Plugins = []conf.Plugin{{Kind: conf.PluginKindOffsetStore, Name: "zk", Path: "metaq-offsetstore-zk",
			Config: map[string]string{"connect": addr, "root": root, "auth_user": "metaq", "auth_password": "zk-secret"}}}
		c.OffsetStore = "zk"
	})
	waitRegistered(t, b)
	c := dialRaw(t, b.Addr())

	// A group the store writes.
	r := c.roundTrip(t, commitFrame("good", []protocol.OffsetEntry{{Topic: "t", Partition: 0, Offset: 40, MsgID: 4}}))
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))

	// The registration swept R/consumers: private now, and so is the
	// open group left behind.
	waitFor(t, 10*time.Second, func() error {
		for _, p := range []string{zkpath.Consumers(root), zkpath.OffsetsTopic(root, "sq2", "t")} {
			acl, _, err := anon.GetACL(p)
			if err != nil {
				return err
			}
			if len(acl) != 2 {
				return fmt.Errorf("%s: ACL %v", p, acl)
			}
		}
		return nil
	})

	// zkCli.sh without credentials: no new group, no offset node.
	// (One zkCli.sh run: each create's NoAuth goes to stderr, naming the
	// node; the last one's failure is zkCli.sh's exit status.)
	var creates []string
	anonPaths := []string{zkpath.Group(root, "newgroup"), zkpath.Offset(root, "good", "t", id, 1), zkpath.Offset(root, "sq2", "t", id, 1)}
	for _, p := range anonPaths {
		creates = append(creates, "create "+p+" 1-999")
	}
	out, stderr, exitErr, err := testsvc.ZkCliSession(t, addr, creates...)
	require.NoError(t, err)
	require.Error(t, exitErr, "an anonymous create must fail: %q", out)
	for _, p := range anonPaths {
		require.Contains(t, stderr, "Insufficient permission : "+p, "an anonymous create of %s must fail", p)
	}
	for _, p := range []string{zkpath.Group(root, "newgroup"), zkpath.Offsets(root, "good"), zkpath.Members(root, "good"), zkpath.Owners(root, "good")} {
		_, err := anon.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
		require.ErrorIs(t, err, zk.ErrNoAuth, p)
	}

	// The squatted offset node is never served.
	for range 2 {
		r = c.roundTrip(t, fetchFrame("sq2", []protocol.OffsetEntry{{Topic: "t", Partition: 0}}))
		require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
		got, err := protocol.ParseOffsetLines(r.Body, true)
		require.NoError(t, err)
		require.Equal(t, []protocol.OffsetEntry{{Topic: "t", Partition: 0, Offset: -1, MsgID: -1}}, got, "a squatted offset reads as nothing stored")
	}
	// Nor written through: the commit says whose it is.
	r = c.roundTrip(t, commitFrame("sq2", []protocol.OffsetEntry{{Topic: "t", Partition: 0, Offset: 41, MsgID: 5}}))
	require.Equal(t, protocol.StatusInternalError, r.Code, string(r.Body))
	require.Contains(t, string(r.Body), "ZooKeeper node "+squatted+" is owned by another ZooKeeper identity")

	// A squatted group: every commit fails with a clear reason.
	r = c.roundTrip(t, commitFrame("squat", []protocol.OffsetEntry{{Topic: "t", Partition: 1, Offset: 7, MsgID: 1}}))
	require.Equal(t, protocol.StatusInternalError, r.Code, string(r.Body))
	body := string(r.Body)
	require.Contains(t, body, "commit failed: ")
	require.Contains(t, body, "ZooKeeper node "+zkpath.Group(root, "squat")+" is owned by another ZooKeeper identity (ACL digest:evil:x cdrwa, world:anyone r), not digest:metaq")
	require.Contains(t, body, "delete it or setAcl it")
	require.NotContains(t, body, "zk-secret")

	// The good group still reads back.
	r = c.roundTrip(t, fetchFrame("good", []protocol.OffsetEntry{{Topic: "t", Partition: 0}}))
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	got, err := protocol.ParseOffsetLines(r.Body, true)
	require.NoError(t, err)
	require.Equal(t, []protocol.OffsetEntry{{Topic: "t", Partition: 0, Offset: 40, MsgID: 4}}, got)
}
