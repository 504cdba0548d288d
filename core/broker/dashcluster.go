package broker

import (
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/sdk/cluster"
)

// The dashboard's reads of ZooKeeper (docs/dashboard.md): the cluster
// page's (the layout and the groups, which core/httpapi console.go
// merges with the brokers it saw before) and a group's page's, re-read
// on each page view within dashZKTimeout.

// readZK runs f on b's registry connection and returns its result,
// bounded by dashZKTimeout: errText says why there is none. f runs in a
// goroutine of its own; after a timeout its result is dropped (never
// shared with the caller).
func readZK[T any](b *Broker, f func(c *zk.Conn, root string) (T, error)) (out T, errText string) {
	b.mu.RLock()
	reg := b.reg
	b.mu.RUnlock()
	if reg == nil {
		return out, "not connected to ZooKeeper yet"
	}
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() {
		var x res
		x.err = reg.Read(func(c *zk.Conn, root string) error {
			var err error
			x.v, err = f(c, root)
			return err
		})
		ch <- x
	}()
	select {
	case x := <-ch:
		if x.err != nil {
			return out, "reading ZooKeeper: " + x.err.Error()
		}
		return x.v, ""
	case <-time.After(dashZKTimeout):
		return out, "ZooKeeper did not answer within " + dashZKTimeout.String()
	}
}

// clusterRead reads the cluster from ZooKeeper for the cluster page, with
// the lag here of the groups it holds.
func (b *Broker) clusterRead() *httpapi.ClusterRead {
	x, errText := readZK(b, func(c *zk.Conn, root string) (httpapi.ClusterRead, error) {
		var x httpapi.ClusterRead
		r := root
		if r == "" {
			r = "/"
		}
		var err error
		if x.Layout, err = cluster.ReadLayout(c, r); err != nil {
			return x, err
		}
		x.Groups, x.Truncated, err = readZKGroups(c, root, httpapi.MaxZKGroups)
		return x, err
	})
	x.Err = errText
	if len(x.Groups) > 0 {
		lags := b.lagsNow()
		x.Lags = make(map[[2]string]int64, len(lags))
		for k, n := range lags {
			x.Lags[[2]string{k.Group, k.Topic}] = n
		}
	}
	return &x
}

// zkGroupOf reads group g from ZooKeeper for the groups pages (nil when
// ZooKeeper has none, or could not be read: errText says so).
func (b *Broker) zkGroupOf(g string) (*httpapi.ZKGroup, string) {
	return readZK(b, func(c *zk.Conn, root string) (*httpapi.ZKGroup, error) { return readZKGroupView(c, root, g) })
}

// readZKGroupView reads group g; nil when ZooKeeper has no such group.
func readZKGroupView(c *zk.Conn, root, g string) (*httpapi.ZKGroup, error) {
	n, err := cluster.ReadGroupNodes(c, root, g)
	if err != nil {
		return nil, err
	}
	return httpapi.ZKGroupOf(g, n), nil
}

// readZKGroups reads at most max groups (truncated says some were left).
func readZKGroups(c *zk.Conn, root string, max int) (out []httpapi.ZKGroup, truncated bool, err error) {
	names, err := cluster.ReadGroupNames(c, root)
	if err != nil {
		return nil, false, err
	}
	for _, g := range names {
		if len(out) == max {
			return out, true, nil
		}
		x, err := readZKGroupView(c, root, g)
		if err != nil {
			return out, false, err
		}
		if x != nil {
			out = append(out, *x)
		}
	}
	return out, false, nil
}
