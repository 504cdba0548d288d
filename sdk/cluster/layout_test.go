package cluster_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/cluster"
)

// TestReadLayoutSessionEndsMidRead reads the layout over and over while
// broker 1's session ends (its ephemeral nodes go at once): a layout that
// lists broker 1 with a master lists its topic too. Read the other way
// round (brokers, then topics), a read could see the master and miss the
// registrations, and the dashboard's cluster console then remembered broker
// 1 without partitions: shown down, but its partitions not unreachable
// (TestDashboardBrowserCluster failed so under load). Brokers 2 to 6, up
// throughout, make the read long.
func TestReadLayoutSessionEndsMidRead(t *testing.T) {
	t.Parallel()
	addr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/layout-mid-%d", time.Now().UnixNano())
	others := zkClient(t, addr)
	for id := 2; id <= 6; id++ {
		register(t, others, root, id, "m", fmt.Sprintf("127.0.0.1:%d", 9000+id), "orders", 3)
	}
	reader := zkClient(t, addr)
	complete := func(l *cluster.Layout) (up bool) {
		t.Helper()
		i := slices.IndexFunc(l.Brokers, func(b cluster.BrokerInfo) bool { return b.ID == 1 })
		if i < 0 || l.Brokers[i].Master == "" {
			return false
		}
		for _, tb := range l.Topics {
			if tb.Name == "orders" && slices.ContainsFunc(tb.Brokers, func(tp cluster.TopicPartition) bool { return tp.Broker == "1-m" }) {
				return true
			}
		}
		require.Fail(t, "broker 1 listed with a master and without its registration of orders", "%+v", l)
		return true
	}
	reads := 0
	for range 20 {
		b1 := zkClient(t, addr)
		register(t, b1, root, 1, "m", "127.0.0.1:9001", "orders", 3)
		done := make(chan struct{})
		go func() {
			defer close(done)
			time.Sleep(time.Millisecond)
			b1.Close() // the session ends: the server removes its nodes in one step
		}()
		for end := time.Now().Add(10 * time.Second); ; {
			l, err := cluster.ReadLayout(reader, root)
			require.NoError(t, err)
			reads++
			if !complete(l) {
				break
			}
			require.True(t, time.Now().Before(end), "broker 1 still listed 10 s after its session closed")
		}
		<-done
	}
	t.Logf("%d reads", reads)
}
