package httpapi

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/sdk/cluster"
)

// TestRemotePartitions: the partitions of a group on other brokers come
// from the brokers' registrations, ZooKeeper's offsets and owners (a
// broker that went keeps its partitions listed, unreachable); this
// broker's are left out; the brokers up are asked once each; the lag is
// the broker's max offset minus the offset store's committed offset, else
// ZooKeeper's; a broker's failure, a partition it does not list and a
// missing offset each leave the lag unknown with the reason.
func TestRemotePartitions(t *testing.T) {
	x := &ZKGroupRead{
		Group: &ZKGroup{Group: "g", Topics: []string{"orders"}},
		Layout: &cluster.Layout{
			Brokers: []cluster.BrokerInfo{
				{ID: 0, Master: "meta://127.0.0.1:1"},
				{ID: 1, Master: "meta://127.0.0.1:2"},
				{ID: 2, MasterTLS: "metaqs://127.0.0.1:3"},
				{ID: 3}, // down
			},
			Topics: []cluster.TopicBrokers{
				{Name: "orders", Brokers: []cluster.TopicPartition{
					{Broker: "0-m", BrokerID: 0, NumParts: 2}, {Broker: "1-m", BrokerID: 1, NumParts: 2},
					{Broker: "1-s1", BrokerID: 1, NumParts: 5}, {Broker: "2-m", BrokerID: 2, NumParts: 1}}},
				{Name: "other", Brokers: []cluster.TopicPartition{{Broker: "1-m", BrokerID: 1, NumParts: 4}}},
			},
		},
		Offsets: map[cluster.OwnerKey]int64{
			{Topic: "orders", BrokerID: 0, Partition: 0}: 5, // this broker's
			{Topic: "orders", BrokerID: 1, Partition: 0}: 10,
			{Topic: "orders", BrokerID: 2, Partition: 0}: 7,
			{Topic: "orders", BrokerID: 3, Partition: 1}: 3,
		},
	}
	elsewhere := []ZKOwner{{Topic: "orders", BrokerID: 1, Partition: 1, Owner: "g_a"}}
	rows, peers := RemotePartitions(security.Viewer{}, x, 0, elsewhere, nil)
	require.Equal(t, []PeerBroker{{ID: 1, Addr: "127.0.0.1:2"}, {ID: 2, Addr: "127.0.0.1:3", TLS: true}}, peers)
	type key struct {
		b int
		p int32
	}
	var got []key
	for _, r := range rows {
		require.Equal(t, "orders", r.Topic)
		got = append(got, key{r.BrokerID, r.Partition})
	}
	require.Equal(t, []key{{1, 0}, {1, 1}, {2, 0}, {3, 1}}, got, "the masters' partitions, and broker 3's from its offsets")
	require.Equal(t, "g_a", rows[1].Owner)
	require.True(t, rows[3].Unreachable)
	require.Equal(t, "broker 3 unreachable", rows[3].LagUnknown)

	FinishRemote(rows, map[cluster.OwnerKey]int64{{Topic: "orders", BrokerID: 1, Partition: 1}: 4, {Topic: "orders", BrokerID: 1, Partition: 0}: -1}, "",
		map[int]PeerOffsets{1: {Max: map[string]map[int32]int64{"orders": {0: 30, 1: 4}}}, 2: {Err: "broker 2 at 127.0.0.1:3 did not answer within 1.5s"}})
	lag := func(r RemotePartition) int64 { require.NotNil(t, r.LagBytes, "%+v", r); return *r.LagBytes }
	require.Equal(t, int64(20), lag(rows[0]))
	require.Equal(t, "zookeeper", rows[0].Source)
	require.Equal(t, int64(0), lag(rows[1]), "committed at the end")
	require.Equal(t, "offset_store", rows[1].Source)
	require.Nil(t, rows[2].LagBytes)
	require.Equal(t, "broker 2 at 127.0.0.1:3 did not answer within 1.5s", rows[2].LagUnknown)
	require.Equal(t, int64(7), rows[2].Committed)
	require.Nil(t, rows[3].LagBytes)
	sum, unknown := RemoteLags(rows)
	require.Equal(t, int64(20), sum["orders"])
	require.Equal(t, 2, unknown["orders"])

	// A partition the broker does not list, one with no committed offset.
	rows, _ = RemotePartitions(security.Viewer{}, x, 0, nil, []string{"orders"})
	FinishRemote(rows, nil, "plugin down", map[int]PeerOffsets{1: {Max: map[string]map[int32]int64{"orders": {1: 9}}}})
	require.Equal(t, "broker 1 does not list partition 0 of orders", rows[0].LagUnknown)
	require.Equal(t, "no committed offset known (offset store: plugin down)", rows[1].LagUnknown)
	require.Equal(t, int64(9), *rows[1].MaxOffset)
	// Only the topics asked for.
	rows, peers = RemotePartitions(security.Viewer{}, x, 0, nil, []string{"other"})
	require.Empty(t, rows)
	require.Empty(t, peers)
}
