package broker

import (
	"net"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
)

// TestClusterZooKeeperDigestACL starts a broker with [zookeeper]
// auth_user/auth_password and reads its nodes' ACLs with the real
// zkCli.sh: the broker's user has all rights (cdrwa), world:anyone reads
// (r). An unauthenticated zkCli.sh cannot repoint the broker (its set of
// ids/<id>/master fails with NoAuth) but still reads it.
func TestClusterZooKeeperDigestACL(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	root := "/brokeracl"
	b := clusterBroker(t, addr, root, 5, func(c *conf.Config) {
		c.ZooKeeper.AuthUser, c.ZooKeeper.AuthPassword = "metaq", "zk-secret"
	})
	require.True(t, b.Registered())
	_, port, _ := net.SplitHostPort(b.Addr())
	uri := "meta://127.0.0.1:" + port
	master := zkpath.Master(root, 5)
	pub := zkpath.TopicsPub.Node(root, "t", zkpath.MasterName(5))
	private := []string{"'digest,'metaq:x", ": cdrwa", "'world,'anyone", ": r"}

	lines, err := testsvc.ZkCliScript(t, addr, "getAcl "+master, "getAcl "+pub, "get "+master)
	require.NoError(t, err)
	require.Equal(t, append(append(append([]string{}, private...), private...), uri), lines)

	out, err := testsvc.ZkCli(t, addr, "set", master, "meta://10.6.6.6:8123")
	require.Error(t, err, "unauthenticated set of %s: %s", master, out)
	require.Contains(t, err.Error(), "Insufficient permission")
	got, err := testsvc.ZkCliGet(t, addr, master)
	require.NoError(t, err)
	require.Equal(t, []string{uri}, got)

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
