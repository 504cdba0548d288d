package httpapi

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/sdk/cluster"
)

// The dashboard's reads of ZooKeeper (docs/dashboard.md): the cluster
// page's (the layout and the groups, which console.go merges with the
// brokers it saw before), the groups page's and a group's page's, re-read
// on each page view within ZKTimeout, and how the groups pages merge them
// with the groups known here.

// ZKTimeout bounds the pages' reads of ZooKeeper.
const ZKTimeout = 3 * time.Second

// ZKRead runs f on the broker's ZooKeeper connection with its root
// (registry.Registry.Read); nil while not connected.
type ZKRead func(f func(c *zk.Conn, root string) error) error

// ReadZK runs f through read and returns its result, bounded by
// ZKTimeout: errText says why there is none. f runs in a goroutine of
// its own; after a timeout its result is dropped (never shared with the
// caller).
func ReadZK[T any](read ZKRead, f func(c *zk.Conn, root string) (T, error)) (out T, errText string) {
	return readZKWithin(read, ZKTimeout, f)
}

// readZKWithin is ReadZK bounded by d.
func readZKWithin[T any](read ZKRead, d time.Duration, f func(c *zk.Conn, root string) (T, error)) (out T, errText string) {
	if read == nil {
		return out, "not connected to ZooKeeper yet"
	}
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() {
		var x res
		x.err = read(func(c *zk.Conn, root string) error {
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
	case <-time.After(d):
		return out, "ZooKeeper did not answer within " + d.String()
	}
}

// ReadCluster reads the cluster for the cluster page through read, with
// lags, the lag here of the groups it holds (by group and topic).
func ReadCluster(read ZKRead, lags func() map[[2]string]int64) *ClusterRead {
	x, errText := ReadZK(read, func(c *zk.Conn, root string) (ClusterRead, error) {
		var x ClusterRead
		var err error
		if x.Layout, err = readLayout(c, root); err != nil {
			return x, err
		}
		x.Groups, x.Truncated, err = readZKGroups(c, root, MaxZKGroups)
		return x, err
	})
	x.Err = errText
	if len(x.Groups) > 0 {
		x.Lags = lags()
	}
	return &x
}

// readLayout reads the layout under root, the registry's root ("" is
// ZooKeeper's own root, not cluster.ReadLayout's DefaultRoot).
func readLayout(c *zk.Conn, root string) (*cluster.Layout, error) {
	if root == "" {
		root = "/"
	}
	return cluster.ReadLayout(c, root)
}

// ReadZKGroup reads group g through read for the groups pages (nil when
// ZooKeeper has none, or could not be read: errText says so).
func ReadZKGroup(read ZKRead, g string) (*ZKGroup, string) {
	return ReadZK(read, func(c *zk.Conn, root string) (*ZKGroup, error) { return readZKGroup(c, root, g) })
}

// readZKGroup reads group g; nil when ZooKeeper has no such group.
func readZKGroup(c *zk.Conn, root, g string) (*ZKGroup, error) {
	n, err := cluster.ReadGroupNodes(c, root, g)
	if err != nil {
		return nil, err
	}
	return ZKGroupOf(g, n), nil
}

// readZKGroups reads at most max groups (truncated says some were left).
func readZKGroups(c *zk.Conn, root string, max int) (out []ZKGroup, truncated bool, err error) {
	names, err := cluster.ReadGroupNames(c, root)
	if err != nil {
		return nil, false, err
	}
	for _, g := range names {
		if len(out) == max {
			return out, true, nil
		}
		x, err := readZKGroup(c, root, g)
		if err != nil {
			return out, false, err
		}
		if x != nil {
			out = append(out, *x)
		}
	}
	return out, false, nil
}

// GroupsPageOf is the groups page's rows and ZooKeeper read: the groups
// known here that v may see (entries, with lags by group and topic),
// and in cluster mode (read non-nil, or zkOn) merged with the groups
// ZooKeeper holds on topics v may subscribe to. The caller fills the
// offset reads' fields.
func GroupsPageOf(v security.Viewer, entries []*GroupEntry, lags map[[2]string]int64, zkOn bool, read ZKRead) GroupsPage {
	var rows []GroupRow
	for _, g := range entries {
		x := GroupRow{GroupEntry: g}
		x.Lag, x.HasLag = lags[[2]string{g.Group, g.Topic}]
		x.AllMembers = g.Members
		rows = append(rows, x)
	}
	pg := GroupsPage{ZooKeeper: zkOn, ZKMax: MaxZKGroups}
	if !zkOn {
		pg.Groups = rows
		return pg
	}
	type zkRead struct {
		groups    []ZKGroup
		truncated bool
	}
	var x zkRead
	x, pg.ZKErr = ReadZK(read, func(c *zk.Conn, root string) (zkRead, error) {
		var x zkRead
		var err error
		x.groups, x.truncated, err = readZKGroups(c, root, MaxZKGroups)
		return x, err
	})
	if pg.ZKErr == "" {
		pg.zk = readGroupsOffsets(read, x.groups)
	}
	pg.ZKTruncated = x.truncated
	at := map[[2]string]int{}
	for i, x := range rows {
		at[[2]string{x.Group, x.Topic}] = i
	}
	for _, g := range x.groups {
		for _, t := range g.Topics {
			if !v.GroupTopic(g.Group, t) {
				continue
			}
			k := [2]string{g.Group, t}
			i, ok := at[k]
			if !ok {
				rows = append(rows, GroupRow{GroupEntry: &GroupEntry{Group: g.Group, Topic: t, Note: "in ZooKeeper; its partitions are on other brokers"}})
				i = len(rows) - 1
				at[k] = i
			}
			for _, m := range g.Members {
				if slices.Contains(m.Topics, t) {
					rows[i].ZKMembers++
				}
			}
			for _, o := range g.Owners {
				if o.Topic == t {
					rows[i].ZKOwners++
				}
			}
		}
	}
	for i := range rows {
		rows[i].AllMembers = rows[i].Members + rows[i].ZKMembers
	}
	slices.SortFunc(rows, func(a, c GroupRow) int {
		return cmp.Or(strings.Compare(a.Group, c.Group), strings.Compare(a.Topic, c.Topic))
	})
	pg.Groups = rows
	return pg
}

// ZKGroupTopics adds to topics the topics of zg open here (open) that v
// may subscribe to, sorted: a group's page in cluster mode without an
// explicit topic.
func ZKGroupTopics(v security.Viewer, zg *ZKGroup, topics []string, open func(string) bool) []string {
	for _, t := range zg.Topics {
		if !slices.Contains(topics, t) && open(t) && v.Authorize(security.Subscribe, t) == nil {
			topics = append(topics, t)
		}
	}
	slices.Sort(topics)
	return topics
}

// subscribable returns the topics of ts that v may subscribe to (nil if
// none).
func subscribable(v security.Viewer, ts []string) []string {
	var out []string
	for _, t := range ts {
		if v.Authorize(security.Subscribe, t) == nil {
			out = append(out, t)
		}
	}
	return out
}

// PlaceZKGroup is a group's page's ZooKeeper part: zg's members, with the
// topics v may subscribe to, and its owners of partitions of those
// topics; those of broker self's partitions go in views' partition
// tables (where no owner is known), the others are elsewhere.
func PlaceZKGroup(v security.Viewer, zg *ZKGroup, self int, views []GroupTopic) (members []ZKMember, elsewhere []ZKOwner) {
	for _, m := range zg.Members {
		m.Topics = subscribable(v, m.Topics)
		members = append(members, m)
	}
	for _, o := range zg.Owners {
		if v.Authorize(security.Subscribe, o.Topic) != nil {
			continue
		}
		placed := false
		if o.BrokerID == self {
			for i := range views {
				if views[i].Topic != o.Topic {
					continue
				}
				for j := range views[i].Partitions {
					if p := &views[i].Partitions[j]; p.Partition == int(o.Partition) && p.Owner == "" {
						p.Owner, placed = o.Owner, true
					}
				}
			}
		}
		if !placed {
			elsewhere = append(elsewhere, o)
		}
	}
	return members, elsewhere
}
