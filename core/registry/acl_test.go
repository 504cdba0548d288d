package registry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/cluster"
)

// testAuth is the brokers' ZooKeeper identity in these tests.
var testAuth = cluster.Auth{User: "broker", Password: "s3cret"}

// zkCliACL is what `zkCli.sh getAcl` prints, without the identity, for a
// node the identity a created: PrivateACL, or SharedACL when shared.
// ZooKeeper (since 3.5.5, ZOOKEEPER-1392) shows a client without ADMIN
// rights on the node a digest id as "user:x", not the password's hash.
func zkCliACL(a cluster.Auth, shared bool) []string {
	world := ": r"
	if shared {
		world = ": cdr"
	}
	return []string{"'digest,'" + a.User + ":x", ": cdrwa", "'world,'anyone", world}
}

// getACL reads path's ACL with the test's client (no identity).
func getACL(t *testing.T, c *zk.Conn, path string) []zk.ACL {
	t.Helper()
	acl, _, err := c.GetACL(path)
	require.NoError(t, err, path)
	return acl
}

// seen is acl as a client without ADMIN rights reads it: digest ids
// redacted to "user:x" (see zkCliACL).
func seen(acl []zk.ACL) []zk.ACL {
	out := make([]zk.ACL, len(acl))
	for i, a := range acl {
		if a.Scheme == "digest" {
			a.ID = a.ID[:strings.IndexByte(a.ID, ':')] + ":x"
		}
		out[i] = a
	}
	return out
}

// TestDigestACLWithZkCli registers a broker with digest auth and reads the
// ACLs back with the real zkCli.sh: the broker's user has all rights on
// ids/<id>/master and its topics-pub node, world:anyone reads. A client
// without the identity reads everything but cannot repoint the broker:
// zkCli.sh's set of the master node fails with NoAuth, and so do deleting
// it (the parent is closed too) and registering a broker id of its own.
func TestDigestACLWithZkCli(t *testing.T) {
	t.Parallel()
	addr := testsvc.ZooKeeper(t)
	root := "/aclcli/meta"
	opts := testOpts(addr, root, 7, &logBuf{})
	opts.Auth = testAuth
	r := open(t, opts)
	require.True(t, r.Registered())
	master := zkpath.Master(root, 7)
	pub := zkpath.TopicsPub.Node(root, "both", zkpath.MasterName(7))

	// One zkCli.sh run: the ACLs and data as anyone sees them; a set of
	// the master node, which fails with NoAuth and leaves the data as it
	// was; then, with the identity (zkCli.sh addauth), the digest id shows
	// in full: user:base64(sha1(user:password)).
	lines, stderr, exitErr, err := testsvc.ZkCliSession(t, addr, "getAcl "+master, "getAcl "+pub, "getAcl "+root, "get "+master,
		"set "+master+" meta://evil:1", "get "+master,
		"addauth digest broker:s3cret", "getAcl "+master)
	require.NoError(t, err)
	require.NoError(t, exitErr)
	want := append(append(append(zkCliACL(testAuth, false), zkCliACL(testAuth, false)...),
		zkCliACL(testAuth, true)...), "meta://127.0.0.1:8127")
	want = append(want, "meta://127.0.0.1:8127") // reads still work, and the data is unchanged
	want = append(want, "'digest,'"+zk.DigestACL(zk.PermAll, "broker", "s3cret")[0].ID, ": cdrwa", "'world,'anyone", ": r")
	require.Equal(t, want, lines)
	require.Contains(t, stderr, "Insufficient permission : "+master, "an unauthenticated set of the master node must fail with NoAuth")

	// The same with a Go client, for every way to repoint the broker.
	c := client(t, addr)
	_, err = c.Set(master, []byte("meta://evil:1"), -1)
	require.ErrorIs(t, err, zk.ErrNoAuth)
	require.ErrorIs(t, c.Delete(master, -1), zk.ErrNoAuth)
	_, err = c.Create(zkpath.Broker(root, 99), []byte("meta://evil:1"), 0, zk.WorldACL(zk.PermAll))
	require.ErrorIs(t, err, zk.ErrNoAuth)
	_, err = c.Create(zkpath.TopicsPub.Node(root, "both", zkpath.MasterName(99)), []byte(`{"numParts":9,"broker":"99-m"}`), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.ErrorIs(t, err, zk.ErrNoAuth)
	_, err = c.SetACL(master, zk.WorldACL(zk.PermAll), -1)
	require.ErrorIs(t, err, zk.ErrNoAuth)
	// Every node the registry made is closed; the root stays creatable.
	for p := range wantLayout(root, 7) {
		require.Equal(t, seen(testAuth.PrivateACL()), getACL(t, c, p), p)
	}
	for _, p := range []string{zkpath.Brokers(root), zkpath.BrokerIDs(root), zkpath.TopicsPub.Topic(root, "both")} {
		require.Equal(t, seen(testAuth.PrivateACL()), getACL(t, c, p), p)
	}
	require.Equal(t, seen(testAuth.SharedACL()), getACL(t, c, root))
	require.Equal(t, seen(testAuth.SharedACL()), getACL(t, c, "/aclcli"))
	// R/consumers is made private (just after the registration): nobody
	// else can create a group.
	eventually(t, 10*time.Second, func() error {
		if acl := getACL(t, c, zkpath.Consumers(root)); len(acl) != 2 {
			return fmt.Errorf("ACL %v", acl)
		}
		return nil
	})
	require.Equal(t, seen(testAuth.PrivateACL()), getACL(t, c, zkpath.Consumers(root)))
	_, err = c.Create(zkpath.Group(root, "newgroup"), nil, 0, zk.WorldACL(zk.PermAll))
	require.ErrorIs(t, err, zk.ErrNoAuth, "a client without credentials cannot create a group")

	// The broker itself still writes its nodes, and Close cleans up.
	require.NoError(t, r.Close())
	ok, _, err := c.Exists(zkpath.Broker(root, 7))
	require.NoError(t, err)
	require.False(t, ok)
}

// dropDialer dials through a SessionSniffer and can cut the live
// connections (the client then reconnects to the same session).
type dropDialer struct {
	sn    testsvc.SessionSniffer
	mu    sync.Mutex
	conns []net.Conn
	dials int
}

func (d *dropDialer) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := d.sn.Dial(network, addr, timeout)
	if err == nil {
		d.mu.Lock()
		d.conns = append(d.conns, c)
		d.dials++
		d.mu.Unlock()
	}
	return c, err
}

// drop closes the live connections and returns how many dials were made.
func (d *dropDialer) drop() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.Close()
	}
	d.conns = nil
	return d.dials
}

func (d *dropDialer) dialCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dials
}

// TestAuthSurvivesReconnectAndExpiry checks that the digest identity is
// sent again (by go-zookeeper, from AddAuth's list) after a dropped
// connection and after a session expiry: the registry then creates nodes
// under parents only its user may create under (a new topic; the whole
// layout on the new session), which fails with NoAuth on a session that is
// not logged in.
func TestAuthSurvivesReconnectAndExpiry(t *testing.T) {
	t.Parallel()
	addr := testsvc.ZooKeeper(t)
	root := "/aclre"
	d := &dropDialer{}
	lb := &logBuf{}
	opts := testOpts(addr, root, 9, lb)
	opts.Auth = testAuth
	opts.Dialer = d.Dial
	r := open(t, opts)
	c := client(t, addr)
	first := r.SessionID()
	require.NoError(t, checkLayout(c, root, 9, first))

	// 1. The connection drops; the client reconnects to the same session.
	dials := d.drop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	eventually(t, 10*time.Second, func() error {
		if d.dialCount() == dials || r.conn.State() != zk.StateHasSession {
			return errors.New("not reconnected")
		}
		return nil
	})
	require.Equal(t, first, r.SessionID(), "same session after a dropped connection")
	r.AddTopic(Topic{Name: "afterdrop", NumPartitions: 1, AcceptPublish: true})
	require.NoError(t, r.Wait(ctx))
	p := zkpath.TopicsPub.Node(root, "afterdrop", zkpath.MasterName(9))
	v, _, err := get(c, p)
	require.NoError(t, err)
	require.Equal(t, `{"numParts":1,"broker":"9-m"}`, v)
	require.Equal(t, seen(testAuth.PrivateACL()), getACL(t, c, p))

	// 2. The session expires; the new session is logged in as well.
	id, pw := d.sn.Session()
	require.Equal(t, first, id)
	testsvc.ExpireSession(t, addr, id, pw)
	eventually(t, opts.SessionTimeout+10*time.Second, func() error {
		s := r.SessionID()
		if s == id || s == 0 {
			return errors.New("still on the old session")
		}
		if !r.Registered() {
			return errors.New("not registered yet")
		}
		return checkLayout(c, root, 9, s)
	})
	require.Equal(t, seen(testAuth.PrivateACL()), getACL(t, c, zkpath.Master(root, 9)))
	r.AddTopic(Topic{Name: "afterexpiry", NumPartitions: 1, AcceptPublish: true})
	require.NoError(t, r.Wait(ctx))
	require.False(t, lb.contains("Insufficient") || lb.contains("not authenticated"), "no NoAuth logged")
}

// TestAuthRestrictsOpenNodes: nodes under R/brokers left with ZooKeeper's
// open ACL (a cluster that ran without auth) are restricted by a broker
// with auth; nodes with another ACL are left alone. So are R/consumers and
// the group directories under it (open, or an earlier version's shared
// ACL); a squatted group (a foreign identity's ACL) is logged once as an
// error naming it.
func TestAuthRestrictsOpenNodes(t *testing.T) {
	t.Parallel()
	addr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/aclopen-%d", time.Now().UnixNano()) // it creates open nodes first: a fresh root each run (-count)
	c := client(t, addr)
	for _, p := range []string{root, zkpath.Brokers(root), zkpath.BrokerIDs(root), zkpath.Broker(root, 4), zkpath.Consumers(root)} {
		_, err := c.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	}
	other := zk.WorldACL(zk.PermRead | zk.PermCreate | zk.PermDelete | zk.PermWrite)
	_, err := c.Create(zkpath.Topics.Dir(root), nil, 0, other)
	require.NoError(t, err)
	legacy := []string{zkpath.Group(root, "g"), zkpath.Members(root, "g"), zkpath.Owners(root, "g"),
		zkpath.OwnersTopic(root, "g", "t"), zkpath.Offsets(root, "g"), zkpath.OffsetsTopic(root, "g", "t")}
	for _, p := range legacy {
		_, err := c.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	}
	mine := client(t, addr)
	require.NoError(t, mine.AddAuth("digest", []byte(testAuth.User+":"+testAuth.Password)))
	_, err = mine.Create(zkpath.Group(root, "shared"), nil, 0, testAuth.SharedACL())
	require.NoError(t, err)
	evil := client(t, addr)
	require.NoError(t, evil.AddAuth("digest", []byte("evil:pw")))
	evilACL := append(zk.DigestACL(zk.PermAll, "evil", "pw"), zk.WorldACL(zk.PermRead)...)
	_, err = evil.Create(zkpath.Group(root, "squat"), nil, 0, evilACL)
	require.NoError(t, err)
	lb := &logBuf{}
	opts := testOpts(addr, root, 4, lb)
	opts.Auth = testAuth
	open(t, opts)
	for _, p := range []string{zkpath.Brokers(root), zkpath.BrokerIDs(root), zkpath.Broker(root, 4)} {
		require.Equal(t, seen(testAuth.PrivateACL()), getACL(t, c, p), p)
	}
	require.True(t, lb.contains(zkpath.Broker(root, 4)+" had the open ACL"))
	require.Equal(t, other, getACL(t, c, zkpath.Topics.Dir(root)), "not the open ACL: left alone")
	require.Equal(t, zk.WorldACL(zk.PermAll), getACL(t, c, root), "the root is shared: left open")
	_, err = c.Set(zkpath.Broker(root, 4), []byte("meta://evil:1"), -1)
	require.ErrorIs(t, err, zk.ErrNoAuth)
	eventually(t, 10*time.Second, func() error { // just after the registration
		if !lb.contains("restricted 7 node(s) under " + zkpath.Consumers(root)) {
			return errors.New("not swept yet")
		}
		return nil
	})
	for _, p := range append([]string{zkpath.Consumers(root), zkpath.Group(root, "shared")}, legacy...) {
		require.Equal(t, seen(testAuth.PrivateACL()), getACL(t, c, p), p)
	}
	require.True(t, lb.contains("restricted 7 node(s) under "+zkpath.Consumers(root)), "%q", lb.lines)
	require.Equal(t, seen(evilACL), getACL(t, c, zkpath.Group(root, "squat")), "foreign: left alone")
	lb.mu.Lock()
	n := 0
	for _, l := range lb.lines {
		if strings.Contains(l, "ERROR: ZooKeeper node "+zkpath.Group(root, "squat")+" is owned by another ZooKeeper identity") {
			n++
		}
	}
	lb.mu.Unlock()
	require.Equal(t, 1, n, "%q", lb.lines)
	_, err = c.Create(zkpath.Offset(root, "g", "t", 4, 0), []byte("1-1"), 0, zk.WorldACL(zk.PermAll))
	require.ErrorIs(t, err, zk.ErrNoAuth, "no offset can be forged under a restricted group")
}

// TestNoAuthKeepsOpenACL: without auth every node keeps MetaQ's open ACL.
func TestNoAuthKeepsOpenACL(t *testing.T) {
	t.Parallel()
	addr := testsvc.ZooKeeper(t)
	root := "/aclnone"
	open(t, testOpts(addr, root, 2, &logBuf{}))
	c := client(t, addr)
	for p := range wantLayout(root, 2) {
		require.Equal(t, zk.WorldACL(zk.PermAll), getACL(t, c, p), p)
	}
	require.Equal(t, zk.WorldACL(zk.PermAll), getACL(t, c, root))
}

// TestTLSRegistration: a broker with both listeners registers meta:// in
// ids/<id>/master (MetaQ's clients read it) and metaqs:// in master_tls; a
// TLS-only broker registers metaqs:// as master. sdk/cluster reads both,
// and Close removes master_tls with the rest.
func TestTLSRegistration(t *testing.T) {
	t.Parallel()
	addr := testsvc.ZooKeeper(t)
	root := "/tlsreg"
	c := client(t, addr)

	both := testOpts(addr, root, 1, &logBuf{})
	both.URI, both.TLSURI = "meta://127.0.0.1:8121", "metaqs://127.0.0.1:8521"
	rb := open(t, both)
	tlsOnly := testOpts(addr, root, 2, &logBuf{})
	tlsOnly.URI, tlsOnly.TLSURI = "", "metaqs://127.0.0.1:8522"
	rt := open(t, tlsOnly)

	for p, want := range map[string]string{
		zkpath.Broker(root, 1):    "meta://127.0.0.1:8121",
		zkpath.Master(root, 1):    "meta://127.0.0.1:8121",
		zkpath.MasterTLS(root, 1): "metaqs://127.0.0.1:8521",
		zkpath.Broker(root, 2):    "metaqs://127.0.0.1:8522",
		zkpath.Master(root, 2):    "metaqs://127.0.0.1:8522",
	} {
		got, _, err := get(c, p)
		require.NoError(t, err, p)
		require.Equal(t, want, got, p)
	}
	ok, _, err := c.Exists(zkpath.MasterTLS(root, 2))
	require.NoError(t, err)
	require.False(t, ok, "a TLS-only broker has no master_tls")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := cluster.Open(ctx, cluster.Options{Connect: addr, Root: root, SessionTimeout: 10 * time.Second})
	require.NoError(t, err)
	defer cl.Close()
	l, err := cluster.ReadLayout(cl.Conn(), root)
	require.NoError(t, err)
	require.Equal(t, []cluster.BrokerInfo{
		{ID: 1, Master: "meta://127.0.0.1:8121", MasterTLS: "metaqs://127.0.0.1:8521", ConfigChecksum: "3735928559"},
		{ID: 2, Master: "metaqs://127.0.0.1:8522", ConfigChecksum: "3735928559"},
	}, l.Brokers, "master_tls is neither a slave nor dropped")
	v := cl.WatchPublish("both")
	require.NoError(t, v.Wait(ctx))
	eventually(t, 10*time.Second, func() error {
		if n := len(v.Partitions()); n != 8 {
			return fmt.Errorf("%d partitions, want 8", n)
		}
		return nil
	})
	s := v.Snapshot()
	require.Equal(t, map[int]cluster.Broker{
		1: {ID: 1, Addr: "127.0.0.1:8121", TLSAddr: "127.0.0.1:8521"},
		2: {ID: 2, TLSAddr: "127.0.0.1:8522"},
	}, s.Brokers)
	require.Equal(t, map[int]string{1: "127.0.0.1:8121"}, s.Addrs, "Addrs: plaintext only")
	_, err = s.Brokers[2].DialAddr(false)
	require.ErrorIs(t, err, cluster.ErrTLSOnly)
	require.Contains(t, err.Error(), "broker 2 is TLS-only")
	a, err := s.Brokers[2].DialAddr(true)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:8522", a)

	require.NoError(t, rb.Close())
	require.NoError(t, rt.Close())
	for _, p := range []string{zkpath.Broker(root, 1), zkpath.Broker(root, 2)} {
		ok, _, err := c.Exists(p)
		require.NoError(t, err)
		require.False(t, ok, p)
	}
}

func TestOpenRejectsBadURIsAndAuth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(*Options)
		want   string
	}{
		{"no URI", func(o *Options) { o.URI = "" }, "no broker URI"},
		{"TLS URI scheme", func(o *Options) { o.TLSURI = "meta://h:1" }, "does not start with metaqs://"},
		{"plain URI scheme", func(o *Options) { o.URI = "metaqs://h:1" }, "does not start with meta://"},
		{"user without password", func(o *Options) { o.Auth = cluster.Auth{User: "u"} }, "go together"},
		{"colon in user", func(o *Options) { o.Auth = cluster.Auth{User: "a:b", Password: "p"} }, "must not contain ':'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOpts("127.0.0.1:1", "/x", 1, &logBuf{})
			tc.change(&o)
			_, err := Open(context.Background(), o)
			require.Error(t, err)
			require.True(t, strings.Contains(err.Error(), tc.want), "%v", err)
		})
	}
}
