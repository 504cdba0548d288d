package broker

import (
	"encoding/json"
	"fmt"
	"github.com/metaq-go/metaq/core/httpapi"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// zkCreateAll creates path with data, and its missing parents empty.
func zkCreateAll(t *testing.T, c *zk.Conn, path string, data string) {
	t.Helper()
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for i := 1; i < len(parts); i++ {
		_, err := c.Create("/"+strings.Join(parts[:i], "/"), nil, 0, zk.WorldACL(zk.PermAll))
		if err != nil && err != zk.ErrNodeExists {
			require.NoError(t, err)
		}
	}
	_, err := c.Create(path, []byte(data), 0, zk.WorldACL(zk.PermAll))
	if err == zk.ErrNodeExists {
		_, err = c.Set(path, []byte(data), -1)
	}
	require.NoError(t, err)
}

// groupEntryOf returns the group list's entry of group and topic, or nil.
func groupEntryOf(b *Broker, group, topic string) *httpapi.GroupEntry {
	for _, e := range (httpBackend{b}).Groups(viewer{}) {
		if e.Group == group && e.Topic == topic {
			return e
		}
	}
	return nil
}

// putN puts n one-byte messages into partition p of topic t and returns
// the record size.
func putN(t *testing.T, c *authClient, topic string, p int32, n int) {
	t.Helper()
	for range n {
		code, msg := c.call(func(d []byte, op int32) []byte { return protocol.AppendPut(d, topic, p, 0, -1, op, []byte("m")) })
		require.Equal(t, 200, code, msg)
	}
}

func scrapeOf(t *testing.T, b *Broker) []byte {
	t.Helper()
	w := dashDo(t, b.newMux(), "GET", "/metrics", nil, nil)
	require.Equal(t, 200, w.Code, "%s", w.Body)
	return w.Body.Bytes()
}

// TestLagFromZooKeeper: in cluster mode the broker reads MetaQ's
// consumer offsets from a real ZooKeeper for every group there (its own
// partitions only), and lag, the group list, the group describe and the
// dashboard use them; a group that owns partitions but keeps its offsets
// elsewhere is listed with lag unknown; per partition the newest commit
// wins between ZooKeeper and the commits seen here; the refresh loop
// picks up new groups by itself.
func TestLagFromZooKeeper(t *testing.T) {
	t.Parallel()
	addr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/lagzk-%d", time.Now().UnixNano())
	b := clusterBroker(t, addr, root, 3)
	c := dialAuth(t, b.Addr(), nil)
	putN(t, c, "t", 0, 4)
	putN(t, c, "t", 1, 2)
	l0, l1 := b.topics.Get("t").Parts[0], b.topics.Get("t").Parts[1]
	require.Eventually(t, func() bool { return l0.MessageCount() == 4 && l1.MessageCount() == 2 }, 10*time.Second, 5*time.Millisecond)
	rec := l0.MaxOffset() / 4
	max0 := l0.MaxOffset()

	zc := zkClient(t, addr)
	// g-zk commits to ZooKeeper itself (ZkOffsetStorage): one record of
	// partition 0 consumed.
	zkCreateAll(t, zc, zkpath.Offset(root, "g-zk", "t", 3, 0), string(zkpath.OffsetData(11, rec)))
	zkCreateAll(t, zc, zkpath.Offset(root, "g-zk", "t", 1, 0), "1-0")       // another broker's partition
	zkCreateAll(t, zc, zkpath.Offset(root, "g-zk", "elsewhere", 3, 0), "0") // a topic not here
	zkCreateAll(t, zc, zkpath.Owner(root, "g-zk", "t", 3, 0), "g-zk_c1")
	// g-mysql consumes t (owner nodes) but keeps its offsets in MySQL.
	zkCreateAll(t, zc, zkpath.Owner(root, "g-mysql", "t", 3, 0), "g-mysql_c1")
	// g-bad has an offset node that is not one.
	zkCreateAll(t, zc, zkpath.Offset(root, "g-bad", "t", 3, 1), "garbage")
	require.NoError(t, b.committed.RefreshZK())

	e := groupEntryOf(b, "g-zk", "t")
	require.NotNil(t, e, "%+v", httpBackend{b}.Groups(viewer{}))
	require.True(t, e.InZooKeeper)
	require.True(t, e.LagKnown)
	require.False(t, e.Committed)
	require.Nil(t, groupEntryOf(b, "g-zk", "elsewhere"))
	e = groupEntryOf(b, "g-mysql", "t")
	require.NotNil(t, e)
	require.False(t, e.LagKnown)
	require.Equal(t, groups.NoteOffsetsElsewhere, e.Note)
	e = groupEntryOf(b, "g-bad", "t")
	require.NotNil(t, e)
	require.False(t, e.LagKnown)
	require.Contains(t, e.Note, `offset node "garbage"`)

	scrape := scrapeOf(t, b)
	require.Equal(t, float64(max0-rec), metricValue(t, scrape, `metaq_consumer_group_lag_bytes{group="g-zk",topic="t"}`))
	require.NotContains(t, string(scrape), `group="g-mysql"`, "no lag series for an unknown lag")

	// The describe: the offset store has nothing, ZooKeeper has it.
	h := b.newMux()
	w := dashDo(t, h, "GET", "/api/v1/groups/g-zk", nil, nil)
	require.Equal(t, 200, w.Code, "%s", w.Body)
	var desc struct {
		Topics []httpapi.GroupTopic `json:"topics"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &desc))
	require.Len(t, desc.Topics, 1)
	p0, p1 := desc.Topics[0].Partitions[0], desc.Topics[0].Partitions[1]
	require.Equal(t, rec, p0.Committed)
	require.Equal(t, "zookeeper", p0.Source)
	require.Equal(t, max0-rec, *p0.LagBytes)
	require.Equal(t, int64(-1), p1.Committed)
	require.Nil(t, p1.LagBytes)
	// The dashboard: the lag, the source, and "unknown".
	w = dashDo(t, h, "GET", "/ui/groups", nil, nil)
	require.Equal(t, 200, w.Code)
	page := w.Body.String()
	require.Contains(t, page, `href="/ui/groups/g-mysql"`)
	require.Contains(t, page, "client-side MySQL or file offset store")
	require.Contains(t, page, ">unknown<")
	require.Contains(t, page, "ZooKeeper")
	w = dashDo(t, h, "GET", "/ui/groups/g-zk", nil, nil)
	require.Equal(t, 200, w.Code)
	require.Contains(t, w.Body.String(), "(ZooKeeper)")
	w = dashDo(t, h, "GET", "/ui/groups/g-mysql", nil, nil)
	require.Equal(t, 200, w.Code)
	require.Contains(t, w.Body.String(), "unknown")

	// The newest commit wins: one through this broker (two records)...
	time.Sleep(5 * time.Millisecond)
	code, msg := c.call(func(d []byte, op int32) []byte {
		return protocol.AppendCommit(d, "g-zk", []protocol.OffsetEntry{{Topic: "t", Partition: 0, Offset: 2 * rec, MsgID: -1}}, op)
	})
	require.Equal(t, 200, code, msg)
	require.NoError(t, b.committed.RefreshZK())
	require.Equal(t, float64(max0-2*rec), metricValue(t, scrapeOf(t, b), `metaq_consumer_group_lag_bytes{group="g-zk",topic="t"}`))
	// ... then one in ZooKeeper (three records).
	time.Sleep(5 * time.Millisecond)
	_, err := zc.Set(zkpath.Offset(root, "g-zk", "t", 3, 0), zkpath.OffsetData(12, 3*rec), -1)
	require.NoError(t, err)
	require.NoError(t, b.committed.RefreshZK())
	require.Equal(t, float64(max0-3*rec), metricValue(t, scrapeOf(t, b), `metaq_consumer_group_lag_bytes{group="g-zk",topic="t"}`))

	// The loop reads by itself every groups.ZKOffsetsEvery.
	zkCreateAll(t, zc, zkpath.Offset(root, "g-later", "t", 3, 1), "0")
	require.Eventually(t, func() bool {
		e := groupEntryOf(b, "g-later", "t")
		return e != nil && e.InZooKeeper
	}, 3*groups.ZKOffsetsEvery, 50*time.Millisecond)
}

// TestLagSurvivesRestart: the commits a broker sees are saved in
// <data_dir>/committed-offsets.json (only when they changed), so that
// after a restart the group is listed and its lag is in /metrics and on
// the dashboard before it commits again; a file that does not parse is
// moved aside and the broker starts without it.
func TestLagSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	inDir := func(c *conf.Config) { c.DataDir = dir }
	b := startBroker(t, 0, inDir)
	c := dialAuth(t, b.Addr(), nil)
	putN(t, c, "t", 0, 3)
	l0 := b.topics.Get("t").Parts[0]
	require.Eventually(t, func() bool { return l0.MessageCount() == 3 }, 10*time.Second, 5*time.Millisecond)
	rec, max0 := l0.MaxOffset()/3, l0.MaxOffset()
	code, msg := c.call(func(d []byte, op int32) []byte {
		return protocol.AppendCommit(d, "g1", []protocol.OffsetEntry{{Topic: "t", Partition: 0, Offset: rec, MsgID: -1}}, op)
	})
	require.Equal(t, 200, code, msg)

	// A save writes the file; another without a commit between does not.
	path := filepath.Join(dir, groups.CommittedFileName)
	require.NoError(t, b.committed.Save())
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.NoError(t, os.Chtimes(path, time.Time{}, st.ModTime().Add(-time.Hour)))
	require.NoError(t, b.committed.Save())
	st2, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, st.ModTime().Add(-time.Hour), st2.ModTime(), "nothing changed: not written again")
	_, err = os.Stat(path + ".tmp")
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NoError(t, b.Close())

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var saved struct {
		BrokerID int `json:"broker_id"`
		Groups   []struct {
			Group, Topic string
			Offsets      [][]int64
		} `json:"groups"`
	}
	require.NoError(t, json.Unmarshal(data, &saved))
	require.Equal(t, 0, saved.BrokerID)
	require.Len(t, saved.Groups, 1)
	require.Equal(t, "g1", saved.Groups[0].Group)
	require.Equal(t, "t", saved.Groups[0].Topic)
	require.Equal(t, rec, saved.Groups[0].Offsets[0][0])

	// Restarted: g1's lag is known before it commits again.
	b = startBroker(t, 0, inDir)
	e := groupEntryOf(b, "g1", "t")
	require.NotNil(t, e)
	require.True(t, e.Committed)
	require.True(t, e.LagKnown)
	require.Equal(t, float64(max0-rec), metricValue(t, scrapeOf(t, b), `metaq_consumer_group_lag_bytes{group="g1",topic="t"}`))
	w := dashDo(t, b.newMux(), "GET", "/ui/groups", nil, nil)
	require.Contains(t, w.Body.String(), `href="/ui/groups/g1"`)
	require.Contains(t, w.Body.String(), httpapi.HumanBytes(max0-rec))
	require.NoError(t, b.Close())

	// A file that does not parse: kept as .bad; the broker starts.
	require.NoError(t, os.WriteFile(path, []byte(`{"version": 1, "broker_id": 0, "groups": [{"group": "g1"`), 0o644))
	b = startBroker(t, 0, inDir)
	require.Nil(t, groupEntryOf(b, "g1", "t"))
	_, err = os.Stat(path + ".bad")
	require.NoError(t, err)
	require.NoError(t, b.Close())
}
