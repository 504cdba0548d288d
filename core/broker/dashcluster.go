package broker

import "github.com/metaq-go/metaq/core/httpapi"

// The dashboard's reads of ZooKeeper (docs/dashboard.md; core/httpapi
// zkread.go) through the broker's registry connection.

// zkRead is the registry's read for the dashboard (nil while not
// connected).
func (b *Broker) zkRead() httpapi.ZKRead {
	b.mu.RLock()
	reg := b.reg
	b.mu.RUnlock()
	if reg == nil {
		return nil
	}
	return reg.Read
}

// clusterRead reads the cluster from ZooKeeper for the cluster page, with
// the lag here of the groups it holds.
func (b *Broker) clusterRead() *httpapi.ClusterRead {
	return httpapi.ReadCluster(b.zkRead(), b.lagsNow)
}

// zkGroupOf reads group g from ZooKeeper for the groups pages (nil when
// ZooKeeper has none, or could not be read: errText says so).
func (b *Broker) zkGroupOf(g string) (*httpapi.ZKGroup, string) {
	return httpapi.ReadZKGroup(b.zkRead(), g)
}
