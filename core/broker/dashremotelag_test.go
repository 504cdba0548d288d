package broker

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/internal/faultnet"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
)

// groupsList is GET /api/v1/groups's answer.
type groupsList struct {
	Groups []struct {
		Group            string `json:"group"`
		Topic            string `json:"topic"`
		Members          int    `json:"members"`
		ZKMembers        *int   `json:"zk_members"`
		ZKOwned          *int   `json:"zk_owned_partitions"`
		LagAll           *int64 `json:"lag_bytes_all_brokers"`
		ElsewhereUnknown *int   `json:"elsewhere_lag_unknown"`
	} `json:"groups"`
	ZKErr string `json:"zookeeper_error"`
}

// groupDescribe is GET /api/v1/groups/{group}'s answer.
type groupDescribe struct {
	Topics    []httpapi.GroupTopic      `json:"topics"`
	Elsewhere []httpapi.RemotePartition `json:"elsewhere"`
	ZKErr     string                    `json:"zookeeper_error"`
}

// TestDashboardRemoteLagAuth: two brokers with [auth] in a cluster, a
// group whose consumers committed to ZooKeeper on the partitions of both.
// Broker 0 has replication_user set (a user who may subscribe to the
// topic): its GET /api/v1/groups/{group} gives the exact lag of broker
// 1's partitions, read from broker 1 with that login. Broker 1 has none:
// the lag of broker 0's partitions is unknown and says why, the rest of
// the answer is there. GET /api/v1/groups counts the group's ZooKeeper
// members.
func TestDashboardRemoteLagAuth(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/dashr-%d", time.Now().UnixNano())
	// Broker 0 reaches broker 1's data port through a proxy, which holds
	// its traffic later (a broker that hangs).
	var proxy *faultnet.Proxy
	var b1Addr string
	peerAddr := func(a string) string {
		if a == b1Addr {
			return proxy.Addr()
		}
		return a
	}
	start := func(id int, replUser string) *Broker {
		b := fixture{knobs: knobs{replAddr: peerAddr}, mods: []func(*conf.Config){func(c *conf.Config) {
			c.UnflushThreshold = 0 // group commit: a put acknowledged is readable (MaxOffset), so the expected lags are read right after the puts
			c.BrokerID = id
			c.Auth = conf.Auth{Enabled: true, FailureDelay: 10, Users: hashedUsers(t)}
			c.Topics = []conf.Topic{{Name: "orders", NumPartitions: ptr(2)}}
			c.ZooKeeper.Connect = zkAddr
			c.ZooKeeper.Root = root
			c.ZooKeeper.SessionTimeout = 30000
			c.ZooKeeper.ConnectionTimeout = 5000
			if replUser != "" {
				c.ReplicationUser, c.ReplicationPassword = replUser, replUser+"-pw"
			}
		}}}.start(t)
		require.Eventually(t, b.Registered, 15*time.Second, 20*time.Millisecond)
		return b
	}
	b1 := start(1, "")
	var err error
	proxy, err = faultnet.Start(b1.Addr())
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	b1Addr = b1.Addr()
	b0 := start(0, "nopub") // nopub may subscribe to orders*, not publish
	// Messages on both brokers: 3 on partition 0, 1 on partition 1.
	for _, b := range []*Broker{b0, b1} {
		c := dialAuth(t, b.Addr(), nil)
		code, msg := c.login("root", "root-pw")
		require.Equal(t, 200, code, msg)
		for _, p := range []int32{0, 0, 0, 1} {
			code, msg := putTo(t, c, "orders", p)
			require.Equal(t, 200, code, msg)
		}
	}
	// Group billing-x: one member, owning broker 0's partition 0; its
	// offsets in ZooKeeper after the first message of partition 0 of
	// each broker and at the start of partition 1.
	first := b1.topics.Get("orders").Parts[0].MaxOffset() / 3
	zkPut(t, b0, zkpath.Member(root, "billing-x", "billing-x_m"), []byte("orders"))
	zkPut(t, b0, zkpath.Owner(root, "billing-x", "orders", 0, 0), []byte("billing-x_m"))
	for id := range 2 {
		zkPut(t, b0, zkpath.Offset(root, "billing-x", "orders", id, 0), fmt.Appendf(nil, "7-%d", first))
		zkPut(t, b0, zkpath.Offset(root, "billing-x", "orders", id, 1), []byte("0"))
	}
	max10, max11 := b1.topics.Get("orders").Parts[0].MaxOffset(), b1.topics.Get("orders").Parts[1].MaxOffset()
	max00, max01 := b0.topics.Get("orders").Parts[0].MaxOffset(), b0.topics.Get("orders").Parts[1].MaxOffset()

	describe := func(b *Broker, user string) groupDescribe {
		t.Helper()
		code, body := newHTTPClient(t, b.HTTPAddr(), nil).as(user, user+"-pw").get("/api/v1/groups/billing-x")
		require.Equal(t, 200, code, "%s", body)
		var d groupDescribe
		require.NoError(t, json.Unmarshal(body, &d), "%s", body)
		require.Empty(t, d.ZKErr)
		return d
	}
	// Broker 0 reads broker 1's offsets logged in as nopub: exact lag.
	d := describe(b0, "alice")
	require.Len(t, d.Elsewhere, 2, "%+v", d.Elsewhere)
	for i, want := range []struct {
		committed, max int64
	}{{first, max10}, {0, max11}} {
		r := d.Elsewhere[i]
		require.Equal(t, "orders", r.Topic)
		require.Equal(t, 1, r.BrokerID)
		require.Equal(t, int32(i), r.Partition)
		require.Equal(t, want.committed, r.Committed)
		require.Equal(t, "zookeeper", r.Source)
		require.NotNil(t, r.MaxOffset, "%+v", r)
		require.Equal(t, want.max, *r.MaxOffset)
		require.NotNil(t, r.LagBytes, "%+v", r)
		require.Equal(t, want.max-want.committed, *r.LagBytes)
		require.Empty(t, r.LagUnknown)
		require.False(t, r.Unreachable)
	}
	require.Positive(t, proxy.Accepts(), "through the proxy")
	// The next read reuses the connection (logged in already).
	accepts := proxy.Accepts()
	again := b0.peers.ReadOnce(httpapi.PeerBroker{ID: 1, Addr: b1Addr})
	require.Empty(t, again.Err)
	require.Equal(t, max10, again.Max["orders"][0])
	require.Equal(t, accepts, proxy.Accepts(), "no new connection")
	// A connection broker 1 closed (its idle_timeout, a restart) is
	// replaced within the same read.
	proxy.Cut(false)
	again = b0.peers.ReadOnce(httpapi.PeerBroker{ID: 1, Addr: b1Addr})
	require.Empty(t, again.Err)
	require.Equal(t, max10, again.Max["orders"][0])
	require.Equal(t, accepts+1, proxy.Accepts(), "a new connection")

	// Broker 1 hangs: within PeerOffsetsEvery the answer is still the one
	// read; then the read is bounded, the lag unknown, saying why, and
	// the answer comes within 3 s.
	proxy.Hold()
	require.Eventually(t, func() bool {
		start := time.Now()
		d := describe(b0, "alice")
		took := time.Since(start)
		require.Less(t, took, 3*time.Second, "the answer is not held up by a broker that hangs")
		r := d.Elsewhere[0]
		if r.LagBytes != nil {
			return false
		}
		t.Logf("broker 1 hanging: lag unknown (%s), answered in %v", r.LagUnknown, took.Round(time.Millisecond))
		require.Contains(t, r.LagUnknown, "broker 1 at "+b1Addr+" did not answer within")
		require.Equal(t, first, r.Committed, "the committed offset is known all the same")
		return true
	}, 20*time.Second, 200*time.Millisecond, "the lag of a broker that hangs is unknown")
	proxy.Release()
	require.Eventually(t, func() bool {
		r := describe(b0, "alice").Elsewhere[0]
		return r.LagBytes != nil && *r.LagBytes == max10-first
	}, 20*time.Second, 200*time.Millisecond, "exact again once broker 1 answers")

	// Its own partitions as before, with their offsets from ZooKeeper
	// (read every groups.ZKOffsetsEvery).
	require.Eventually(t, func() bool {
		d := describe(b0, "alice")
		return len(d.Topics) == 1 && len(d.Topics[0].Partitions) == 2 && d.Topics[0].LagBytes == (max00-first)+max01
	}, 20*time.Second, 100*time.Millisecond, "broker 0's own partitions' lag")

	// Broker 1 has no replication_user: the lag of broker 0's partitions
	// is unknown, and the answer says why.
	d = describe(b1, "root")
	require.Len(t, d.Elsewhere, 2, "%+v", d.Elsewhere)
	for i, r := range d.Elsewhere {
		require.Equal(t, 0, r.BrokerID)
		require.Equal(t, int32(i), r.Partition)
		require.Nil(t, r.LagBytes)
		require.Nil(t, r.MaxOffset)
		require.Equal(t, "broker 0 needs a login (users are configured there) and replication_user is not set: this broker cannot read its offsets", r.LagUnknown)
		require.Equal(t, []int64{first, 0}[i], r.Committed, "the committed offsets are known all the same")
	}
	require.Equal(t, "billing-x_m", d.Elsewhere[0].Owner)
	// The dashboard's group page says so too.
	page := dashDo(t, b1.newMux(), "GET", "/ui/groups/billing-x", nil, basicAuth("root")).Body.String()
	require.Contains(t, page, `id="zk-elsewhere"`)
	require.Contains(t, page, "unknown (broker 0 needs a login (users are configured there) and replication_user is not set")

	// The groups list: the lag here, and on all the brokers with broker
	// 0's partitions unknown; on broker 0 all known.
	page = dashDo(t, b1.newMux(), "GET", "/ui/groups", nil, basicAuth("root")).Body.String()
	require.Contains(t, page, fmt.Sprintf(`<td class="n lagall">%s <span class="muted" title="broker 0 needs a login`, httpapi.HumanBytes((max10-first)+max11)))
	require.Contains(t, page, "(2 of 2 partitions on other brokers unknown)")
	require.Eventually(t, func() bool {
		page = dashDo(t, b0.newMux(), "GET", "/ui/groups", nil, basicAuth("alice")).Body.String()
		return strings.Contains(page, fmt.Sprintf(`<td class="n lagall">%s</td>`, httpapi.HumanBytes((max00-first)+max01+(max10-first)+max11)))
	}, 20*time.Second, 100*time.Millisecond, "broker 0's groups list: the lag on both brokers")

	// GET /api/v1/groups gives the same lag on all the brokers.
	code, body := newHTTPClient(t, b0.HTTPAddr(), nil).as("alice", "alice-pw").get("/api/v1/groups")
	require.Equal(t, 200, code, "%s", body)
	require.Contains(t, string(body), fmt.Sprintf(`"lag_bytes_all_brokers": %d,`, (max00-first)+max01+(max10-first)+max11))
	require.Contains(t, string(body), `"elsewhere_lag_unknown": 0`)

	// GET /api/v1/groups counts ZooKeeper's members and owners.
	code, body = newHTTPClient(t, b1.HTTPAddr(), nil).as("root", "root-pw").get("/api/v1/groups")
	require.Equal(t, 200, code, "%s", body)
	var gl groupsList
	require.NoError(t, json.Unmarshal(body, &gl), "%s", body)
	require.Empty(t, gl.ZKErr)
	found := false
	for _, g := range gl.Groups {
		if g.Group == "billing-x" && g.Topic == "orders" {
			found = true
			require.NotNil(t, g.ZKMembers, "%s", body)
			require.Equal(t, 1, *g.ZKMembers, "%s", body)
			require.Equal(t, 1, *g.ZKOwned, "%s", body)
			require.NotNil(t, g.LagAll, "%s", body)
			require.Equal(t, (max10-first)+max11, *g.LagAll, "%s", body)
			require.Equal(t, 2, *g.ElsewhereUnknown, "%s", body)
		}
	}
	require.True(t, found, "%s", body)
}

// basicAuth is the header of user's basic auth (password user-pw).
func basicAuth(user string) map[string]string {
	r := httptest.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, user+"-pw")
	return map[string]string{"Authorization": r.Header.Get("Authorization")}
}
