package cluster_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/message"
)

// seenBy is acl as a client without ADMIN rights reads it: ZooKeeper
// shows digest ids as "user:x" (ZOOKEEPER-1392).
func seenBy(acl []zk.ACL) []zk.ACL {
	out := make([]zk.ACL, len(acl))
	for i, a := range acl {
		if a.Scheme == "digest" {
			a.ID = "member:x"
		}
		out[i] = a
	}
	return out
}

func aclOf(t *testing.T, c *zk.Conn, p string) []zk.ACL {
	t.Helper()
	acl, _, err := c.GetACL(p)
	require.NoError(t, err, p)
	return acl
}

// TestGroupWithAuth: a member with Options.Auth registers and claims with
// PrivateACL leaves under PrivateACL parents (R alone is shared). A member
// without credentials cannot join the group: the error names the node and
// says what to do; an outsider cannot change the member's nodes, nor
// create a group, member or owner node.
func TestGroupWithAuth(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	root := "/groupauth"
	auth := cluster.Auth{User: "member", Password: "pw"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ca := open(t, cluster.Options{Connect: addr, Root: root, SessionTimeout: 10 * time.Second, Auth: auth})
	ma, err := ca.JoinGroup(ctx, "g", "a", []string{"t"})
	require.NoError(t, err)
	p0, p1 := message.Partition{BrokerID: 1, Partition: 0}, message.Partition{BrokerID: 1, Partition: 1}
	require.NoError(t, ma.Claim("t", p0))

	c := zkClient(t, addr)
	for _, p := range []string{zkpath.Member(root, "g", "g_a"), zkpath.Owner(root, "g", "t", 1, 0),
		zkpath.Consumers(root), zkpath.Group(root, "g"), zkpath.Members(root, "g"),
		zkpath.Owners(root, "g"), zkpath.OwnersTopic(root, "g", "t")} {
		require.Equal(t, seenBy(auth.PrivateACL()), aclOf(t, c, p), p)
	}
	require.Equal(t, seenBy(auth.SharedACL()), aclOf(t, c, root), root)
	_, err = c.Set(zkpath.Owner(root, "g", "t", 1, 0), []byte("g_evil"), -1)
	require.ErrorIs(t, err, zk.ErrNoAuth)
	_, err = c.SetACL(zkpath.Group(root, "g"), zk.WorldACL(zk.PermRead), -1)
	require.ErrorIs(t, err, zk.ErrNoAuth, "a parent's ACL stays the creator's")
	for _, p := range []string{zkpath.Group(root, "g2"), zkpath.Member(root, "g", "g_x"), zkpath.Owner(root, "g", "t", 1, 1),
		zkpath.OwnersTopic(root, "g", "u")} {
		_, err = c.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
		require.ErrorIs(t, err, zk.ErrNoAuth, p)
	}

	// A member without credentials (a MetaQ client) cannot join.
	cb := open(t, cluster.Options{Connect: addr, Root: root, SessionTimeout: 10 * time.Second})
	_, err = cb.JoinGroup(ctx, "g", "b", []string{"t"})
	require.ErrorIs(t, err, cluster.ErrForeignNode)
	require.ErrorContains(t, err, "ZooKeeper node "+zkpath.Members(root, "g")+" is owned by another ZooKeeper identity (ACL digest:member:x cdrwa, world:anyone r)")
	_, err = cb.JoinGroup(ctx, "newgroup", "b", []string{"t"})
	require.ErrorIs(t, err, cluster.ErrForeignNode)
	require.ErrorContains(t, err, zkpath.Consumers(root))

	// A second member with the identity joins beside the first.
	cm := open(t, cluster.Options{Connect: addr, Root: root, SessionTimeout: 10 * time.Second, Auth: auth})
	mb, err := cm.JoinGroup(ctx, "g", "b", []string{"t"})
	require.NoError(t, err)
	require.ErrorIs(t, mb.Claim("t", p0), cluster.ErrOwned)
	require.NoError(t, mb.Claim("t", p1))
	require.Eventually(t, func() bool { return len(ma.Members("t")) == 2 }, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, mb.Release("t", p1))
	require.NoError(t, mb.Leave())
	require.NoError(t, ma.Release("t", p0))
	require.NoError(t, ma.Leave())
}

// TestOpenAuthLogsIn: the session Open returns is logged in.
func TestOpenAuthLogsIn(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	root := "/openauth"
	auth := cluster.Auth{User: "member", Password: "pw"}
	c := zkClient(t, addr)
	require.NoError(t, c.AddAuth("digest", []byte("member:pw")))
	_, err := c.Create(root, nil, 0, auth.PrivateACL())
	require.NoError(t, err)

	cl := open(t, cluster.Options{Connect: addr, Root: root, SessionTimeout: 10 * time.Second, Auth: auth})
	_, err = cl.Conn().Create(root+"/x", nil, 0, auth.PrivateACL())
	require.NoError(t, err, "creating under a node only the user may create under")
	other := open(t, cluster.Options{Connect: addr, Root: root, SessionTimeout: 10 * time.Second})
	_, err = other.Conn().Create(root+"/y", nil, 0, zk.WorldACL(zk.PermAll))
	require.ErrorIs(t, err, zk.ErrNoAuth)

	_, err = cluster.Open(context.Background(), cluster.Options{Connect: addr, Auth: cluster.Auth{User: "u"}})
	require.ErrorContains(t, err, "go together")
}

// registerURI writes broker id's master node (and master_tls if tlsURI is
// set) with the given URIs, and its topics-pub node.
func registerURI(t *testing.T, c *zk.Conn, root string, id int, uri, tlsURI, topic string, parts int) {
	t.Helper()
	mkdirs(t, c, zkpath.Broker(root, id))
	_, err := c.Create(zkpath.Master(root, id), []byte(uri), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	if tlsURI != "" {
		_, err = c.Create(zkpath.MasterTLS(root, id), []byte(tlsURI), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	}
	mkdirs(t, c, zkpath.TopicsPub.Topic(root, topic))
	name := zkpath.MasterName(id)
	_, err = c.Create(zkpath.TopicsPub.Node(root, topic, name), zkpath.TopicData{NumParts: parts, Broker: name.String()}.Bytes(),
		zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
}

// waitBrokers waits until v's snapshot lists want.
func waitBrokers(t *testing.T, v *cluster.TopicView, want map[int]cluster.Broker) *cluster.Snapshot {
	t.Helper()
	var s *cluster.Snapshot
	waitView(t, v, want, func() map[int]cluster.Broker { s = v.Snapshot(); return s.Brokers }, maps.Equal[map[int]cluster.Broker])
	return s
}

// TestTLSBrokers: the view reads meta:// and metaqs:// masters and
// master_tls, follows master_tls appearing and going, and DialAddr picks
// an address or names the broker that cannot be reached.
func TestTLSBrokers(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	root := "/tlsview"
	c := zkClient(t, addr)
	registerURI(t, c, root, 1, "meta://127.0.0.1:8001", "", "t", 1)
	registerURI(t, c, root, 2, "metaqs://127.0.0.1:9002", "", "t", 1)
	registerURI(t, c, root, 3, "meta://127.0.0.1:8003", "metaqs://127.0.0.1:9003", "t", 1)
	cl := open(t, cluster.Options{Connect: addr, Root: root, SessionTimeout: 10 * time.Second})
	v := cl.WatchPublish("t")
	s := waitBrokers(t, v, map[int]cluster.Broker{
		1: {ID: 1, Addr: "127.0.0.1:8001"},
		2: {ID: 2, TLSAddr: "127.0.0.1:9002"},
		3: {ID: 3, Addr: "127.0.0.1:8003", TLSAddr: "127.0.0.1:9003"},
	})
	require.Equal(t, parts(1, 1, 2, 1, 3, 1), s.Partitions)
	require.Equal(t, map[int]string{1: "127.0.0.1:8001", 3: "127.0.0.1:8003"}, s.Addrs)

	for _, tc := range []struct {
		id      int
		tls     bool
		want    string
		wantErr error
		msg     string
	}{
		{1, false, "127.0.0.1:8001", nil, ""},
		{1, true, "", cluster.ErrNoTLS, "broker 1 serves plaintext only"},
		{2, false, "", cluster.ErrTLSOnly, "broker 2 is TLS-only"},
		{2, true, "127.0.0.1:9002", nil, ""},
		{3, false, "127.0.0.1:8003", nil, ""},
		{3, true, "127.0.0.1:9003", nil, ""},
	} {
		got, err := s.Brokers[tc.id].DialAddr(tc.tls)
		if tc.wantErr != nil {
			require.ErrorIs(t, err, tc.wantErr)
			require.Contains(t, err.Error(), tc.msg)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}

	// master_tls appears for broker 1 and goes for broker 3.
	_, err := c.Create(zkpath.MasterTLS(root, 1), []byte("metaqs://127.0.0.1:9001"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	require.NoError(t, c.Delete(zkpath.MasterTLS(root, 3), -1))
	waitBrokers(t, v, map[int]cluster.Broker{
		1: {ID: 1, Addr: "127.0.0.1:8001", TLSAddr: "127.0.0.1:9001"},
		2: {ID: 2, TLSAddr: "127.0.0.1:9002"},
		3: {ID: 3, Addr: "127.0.0.1:8003"},
	})

	l, err := cluster.ReadLayout(cl.Conn(), root)
	require.NoError(t, err)
	require.Equal(t, []cluster.BrokerInfo{
		{ID: 1, Master: "meta://127.0.0.1:8001", MasterTLS: "metaqs://127.0.0.1:9001"},
		{ID: 2, Master: "metaqs://127.0.0.1:9002"},
		{ID: 3, Master: "meta://127.0.0.1:8003"},
	}, l.Brokers)
	require.Equal(t, cluster.Broker{ID: 1, Addr: "127.0.0.1:8001", TLSAddr: "127.0.0.1:9001"}, l.Brokers[0].Broker())
	require.Equal(t, cluster.Broker{ID: 2, TLSAddr: "127.0.0.1:9002"}, l.Brokers[1].Broker())
}

func TestParseURI(t *testing.T) {
	for _, tc := range []struct {
		uri     string
		addr    string
		tls, ok bool
	}{
		{"meta://h:1", "h:1", false, true},
		{" meta://10.0.0.1:8123/ ", "10.0.0.1:8123", false, true},
		{"metaqs://h:2", "h:2", true, true},
		{"metaqs://[::1]:2", "[::1]:2", true, true},
		{"meta://h", "", false, false},
		{"metaqs://:2", "", false, false},
		{"http://h:1", "", false, false},
		{"", "", false, false},
	} {
		addr, tls, ok := cluster.ParseURI(tc.uri)
		require.Equal(t, []any{tc.addr, tc.tls, tc.ok}, []any{addr, tls, ok}, "%q", tc.uri)
	}
}

func TestAuthValidate(t *testing.T) {
	require.NoError(t, cluster.Auth{}.Validate())
	require.NoError(t, cluster.Auth{User: "u", Password: "p"}.Validate())
	for _, a := range []cluster.Auth{{User: "u"}, {Password: "p"}, {User: "a:b", Password: "p"}} {
		err := a.Validate()
		require.Error(t, err, "%+v", a)
	}
	require.Equal(t, "digest:u", cluster.Auth{User: "u", Password: "p"}.String())
	require.Equal(t, zk.WorldACL(zk.PermAll), cluster.Auth{}.PrivateACL(), "no identity: MetaQ's open ACL")
	require.Equal(t, zk.WorldACL(zk.PermAll), cluster.Auth{}.SharedACL())
}

// TestAuthACLs: which ACL a path gets, which ACLs count as the identity's,
// and how an ACL is shown in an error (never a digest hash).
func TestAuthACLs(t *testing.T) {
	a := cluster.Auth{User: "metaq", Password: "pw"}
	for p, shared := range map[string]bool{
		"/": true, "/apps": true, "/apps/meta": true,
		"/apps/meta/consumers": false, "/apps/meta/consumers/g": false, "/apps/meta/brokers": false, "/apps/other": false,
	} {
		want := a.PrivateACL()
		if shared {
			want = a.SharedACL()
		}
		require.Equal(t, want, a.ACL("/apps/meta", p), p)
	}
	require.True(t, a.Owns(a.PrivateACL()))
	require.True(t, a.Owns([]zk.ACL{a.SharedACL()[1], a.SharedACL()[0]}), "order does not matter")
	require.True(t, a.IsPrivate(a.PrivateACL()))
	require.False(t, a.IsPrivate(a.SharedACL()))
	require.False(t, a.Owns(zk.WorldACL(zk.PermAll)))
	evil := append(zk.DigestACL(zk.PermAll, "evil", "x"), zk.WorldACL(zk.PermRead)...)
	require.False(t, a.Owns(evil))
	// A digest id with this user name but another password is not ours.
	require.False(t, a.Owns(append(zk.DigestACL(zk.PermAll, "metaq", "other"), zk.WorldACL(zk.PermRead)...)))
	require.Equal(t, "digest:evil:x cdrwa, world:anyone r", cluster.FormatACL(evil))
	require.False(t, cluster.Auth{}.IsPrivate(zk.WorldACL(zk.PermAll)))
}
