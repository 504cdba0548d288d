package httpapi

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/sdk/cluster"
)

// TestDashboardClusterConsole: the cluster view built from a read of
// ZooKeeper: brokers with masters and slaves, topics with the brokers
// holding them, groups with members and owners; a broker that went is
// shown down with its partitions and owners unreachable; a user sees only
// the topics they may describe and the groups they may use.
func TestDashboardClusterConsole(t *testing.T) {
	var d ConsoleMemory
	now := time.Now()
	both := &cluster.Layout{
		Brokers: []cluster.BrokerInfo{
			{ID: 0, Master: "meta://127.0.0.1:1", Slaves: map[string]string{"slave1": "meta://127.0.0.1:3"}},
			{ID: 1, Master: "meta://127.0.0.1:2"},
		},
		Topics: []cluster.TopicBrokers{
			{Name: "orders", Brokers: []cluster.TopicPartition{
				{Broker: "0-m", BrokerID: 0, NumParts: 3, Publish: true, Subscribe: true},
				{Broker: "0-s1", BrokerID: 0, NumParts: 3, Subscribe: true},
				{Broker: "1-m", BrokerID: 1, NumParts: 2, Publish: true, Subscribe: true}}},
			{Name: "secret", Brokers: []cluster.TopicPartition{{Broker: "1-m", BrokerID: 1, NumParts: 1, Publish: true, Subscribe: true}}},
		},
	}
	groups := []ZKGroup{
		{Group: "billing", Topics: []string{"orders"},
			Members: []ZKMember{{ID: "c1", Topics: []string{"orders"}, Partitions: 3}, {ID: "c2", Topics: []string{"orders"}, Partitions: 2}},
			Owners: []ZKOwner{{Topic: "orders", BrokerID: 0, Partition: 0, Owner: "c1"},
				{Topic: "orders", BrokerID: 1, Partition: 1, Owner: "c2"}}},
		{Group: "spies", Topics: []string{"secret"}},
	}
	c := d.Build(security.Viewer{}, 0, &ClusterRead{Layout: both, Groups: groups}, now)
	require.Len(t, c.Brokers, 2)
	require.True(t, c.Brokers[0].Self)
	require.False(t, c.Brokers[1].Down)
	require.Equal(t, [][2]string{{"slave 1", "meta://127.0.0.1:3"}}, c.Brokers[0].Slaves)
	require.Len(t, c.Topics, 2)
	require.Equal(t, "orders", c.Topics[0].Name)
	require.Equal(t, 5, c.Topics[0].Total, "the masters' partitions")
	require.Len(t, c.Topics[0].Holders, 3)
	require.Len(t, c.Groups, 2)
	require.Len(t, c.Groups[0].Members, 2)
	require.False(t, c.Groups[0].Owners[1].Unreachable)

	// A failed read says nothing about who went.
	c = d.Build(security.Viewer{}, 0, &ClusterRead{Layout: &cluster.Layout{}, Err: "ZooKeeper did not answer"}, now.Add(time.Second))
	require.Empty(t, c.Brokers)
	require.Equal(t, "ZooKeeper did not answer", c.Err)

	// Broker 1's session ended: its nodes are gone.
	one := &cluster.Layout{Brokers: both.Brokers[:1], Topics: []cluster.TopicBrokers{
		{Name: "orders", Brokers: both.Topics[0].Brokers[:2]}}}
	c = d.Build(security.Viewer{}, 0, &ClusterRead{Layout: one, Groups: groups}, now.Add(2*time.Second))
	require.Len(t, c.Brokers, 2)
	require.True(t, c.Brokers[1].Down)
	require.Equal(t, "meta://127.0.0.1:2", c.Brokers[1].Master, "the address it had")
	require.Equal(t, now.Add(2*time.Second), c.Brokers[1].DownSince)
	require.Equal(t, 3, c.Topics[0].Total)
	require.Equal(t, 2, c.Topics[0].Down)
	h := c.Topics[0].Holders[2]
	require.Equal(t, ConsoleHolder{BrokerID: 1, Name: "1-m", NumParts: 2, Publish: true, Subscribe: true, Master: true, Unreachable: true}, h)
	require.Equal(t, "secret", c.Topics[1].Name)
	require.True(t, c.Topics[1].Holders[0].Unreachable)
	require.False(t, c.Groups[0].Owners[0].Unreachable)
	require.True(t, c.Groups[0].Owners[1].Unreachable)

	// An id registered with no master is down too.
	c = d.Build(security.Viewer{}, 0, &ClusterRead{Layout: &cluster.Layout{Brokers: []cluster.BrokerInfo{{ID: 0, Master: "meta://127.0.0.1:1"}, {ID: 1}}}}, now.Add(3*time.Second))
	require.True(t, c.Brokers[1].Down)
	require.Len(t, c.Brokers, 2)

	// Back: up again, nothing unreachable.
	c = d.Build(security.Viewer{}, 0, &ClusterRead{Layout: both, Groups: groups}, now.Add(4*time.Second))
	require.False(t, c.Brokers[1].Down)
	require.Zero(t, c.Topics[0].Down)

	// A user who may describe orders and use group billing only.
	alice := &conf.User{Name: "alice", Subscribe: []string{"orders"}, Groups: []string{"billing"}}
	c = d.Build(security.Viewer{On: true, User: alice}, 0, &ClusterRead{Layout: both, Groups: groups}, now.Add(5*time.Second))
	require.Len(t, c.Topics, 1)
	require.Equal(t, "orders", c.Topics[0].Name)
	require.Len(t, c.Groups, 1)
	require.Equal(t, "billing", c.Groups[0].Group)
	for _, s := range []string{"secret", "spies"} {
		for _, tp := range c.Topics {
			require.NotContains(t, strings.ToLower(tp.Name), s)
		}
	}
}
