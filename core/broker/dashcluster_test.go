package broker

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/internal/faultnet"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
)

// zkPut creates p with data, and its parents, through b's session.
func zkPut(t *testing.T, b *Broker, path string, data []byte) {
	t.Helper()
	b.mu.RLock()
	reg := b.reg
	b.mu.RUnlock()
	require.NoError(t, reg.Read(func(c *zk.Conn, _ string) error {
		parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
		for i := range parts {
			p := "/" + strings.Join(parts[:i+1], "/")
			var d []byte
			if i == len(parts)-1 {
				d = data
			}
			if _, err := c.Create(p, d, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		return nil
	}))
}

// TestDashboardClusterAuthz: in cluster mode with [auth], the cluster
// console, the groups list and a group's page show a user only the
// topics they may describe and the groups they may use with topics they
// may subscribe to; an admin sees everything. The groups' members and
// owners come from ZooKeeper.
func TestDashboardClusterAuthz(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/dashz-%d", time.Now().UnixNano())
	b := startBroker(t, 1000, func(c *conf.Config) {
		c.Auth = conf.Auth{Enabled: true, FailureDelay: 10, Users: hashedUsers(t)}
		c.Topics = []conf.Topic{{Name: "orders-a"}, {Name: "secret"}}
		c.ZooKeeper.Connect = zkAddr
		c.ZooKeeper.Root = root
		c.ZooKeeper.SessionTimeout = 4000
		c.ZooKeeper.ConnectionTimeout = 5000
	})
	require.Eventually(t, b.Registered, 15*time.Second, 20*time.Millisecond)
	// Groups as consumers register them: billing-a on orders-a, spies on
	// secret, billing-b on both.
	for _, g := range []struct{ group, member, topics string }{
		{"billing-a", "billing-a_x", "orders-a"}, {"spies", "spies_1", "secret"}, {"billing-b", "billing-b_y", "orders-a,secret"},
	} {
		zkPut(t, b, zkpath.Member(root, g.group, g.member), []byte(g.topics))
		for _, topic := range strings.Split(g.topics, ",") {
			zkPut(t, b, zkpath.Owner(root, g.group, topic, 0, 0), []byte(g.member))
		}
	}
	h := b.newMux()
	as := func(user string) map[string]string {
		r := httptest.NewRequest("GET", "/", nil)
		r.SetBasicAuth(user, user+"-pw")
		return map[string]string{"Authorization": r.Header.Get("Authorization")}
	}
	get := func(user, path string, code int) string {
		t.Helper()
		w := dashDo(t, h, "GET", path, nil, as(user))
		require.Equal(t, code, w.Code, "%s %s: %s", user, path, w.Body)
		return w.Body.String()
	}

	// root sees every topic and group.
	page := get("root", "/ui/", 200)
	for _, s := range []string{`data-topic="orders-a"`, `data-topic="secret"`, `data-group="spies"`, `data-group="billing-a"`, "secret 0-0: billing-b_y"} {
		require.Contains(t, page, s)
	}
	// alice: orders-a, and the billing-* groups on it only.
	page = get("alice", "/ui/", 200)
	require.Contains(t, page, `data-topic="orders-a"`)
	require.Contains(t, page, `data-group="billing-a"`)
	require.Contains(t, page, "orders-a 0-0: billing-a_x")
	require.Contains(t, page, "orders-a 0-0: billing-b_y")
	require.NotContains(t, page, "secret")
	require.NotContains(t, page, "spies")

	// The groups list: members from ZooKeeper.
	page = get("alice", "/ui/groups", 200)
	require.Contains(t, page, `<td class="n members">1</td><td class="n owners">1</td>`)
	require.NotContains(t, page, "secret")
	require.NotContains(t, page, "spies")
	page = get("root", "/ui/groups", 200)
	require.Contains(t, page, "spies")
	// GET /api/v1/groups lists them as the page does, with ZooKeeper's
	// members and owned partitions.
	api := get("alice", "/api/v1/groups", 200)
	for _, s := range []string{`"group": "billing-a"`, `"topic": "orders-a"`, `"zk_members": 1`, `"zk_owned_partitions": 1`} {
		require.Contains(t, api, s)
	}
	require.NotContains(t, api, "secret")
	require.NotContains(t, api, "spies")
	require.Contains(t, get("root", "/api/v1/groups", 200), `"group": "spies"`)

	// A group's page: the member and owner, the other topic left out.
	page = get("alice", "/ui/groups/billing-b", 200)
	require.Contains(t, page, `id="zk-members"`)
	require.Contains(t, page, "billing-b_y")
	require.NotContains(t, page, "secret")
	require.Contains(t, get("root", "/ui/groups/billing-b", 200), "secret")
	get("alice", "/ui/groups/spies", 403)
}

// TestDashboardClusterZKStalled: a ZooKeeper that stops answering makes
// the cluster page say so within httpapi.ZKTimeout (and a bit), marking no
// broker down; answering again, the page is whole again.
func TestDashboardClusterZKStalled(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	proxy, err := faultnet.Start(zkAddr)
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	b := startBroker(t, 1000, func(c *conf.Config) {
		c.ZooKeeper.Connect = proxy.Addr()
		c.ZooKeeper.Root = fmt.Sprintf("/dashs-%d", time.Now().UnixNano())
		c.ZooKeeper.SessionTimeout = 10000
		c.ZooKeeper.ConnectionTimeout = 5000
	})
	require.Eventually(t, b.Registered, 15*time.Second, 20*time.Millisecond)
	h := b.newMux()
	page := dashDo(t, h, "GET", "/ui/", nil, nil).Body.String()
	require.Contains(t, page, `<tr data-broker="0">`)
	require.NotContains(t, page, `id="zk-error"`)

	proxy.Hold()
	start := time.Now()
	w := dashDo(t, h, "GET", "/ui/", nil, nil)
	took := time.Since(start)
	proxy.Release()
	require.Equal(t, 200, w.Code)
	require.Less(t, took, httpapi.ZKTimeout+2*time.Second, "the page is not held by ZooKeeper")
	require.Contains(t, w.Body.String(), `id="zk-error"`)
	require.NotContains(t, w.Body.String(), `class="down"`)
	require.Eventually(t, func() bool {
		page := dashDo(t, h, "GET", "/ui/", nil, nil).Body.String()
		return strings.Contains(page, `<tr data-broker="0">`) && !strings.Contains(page, `id="zk-error"`)
	}, 15*time.Second, 100*time.Millisecond)
}
