package httpapi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/message"
)

// The lag of a group's partitions on other brokers (cluster mode,
// docs/dashboard.md): a group's page, the groups list and GET
// /api/v1/groups/{group} show, for every partition of the group's topics
// that another broker holds, the committed offset (from the offset store
// the broker uses, else the consumers' own offsets in ZooKeeper, where
// MetaQ's consumers commit, readable from any broker), that broker's max
// offset (asked of it: the backend's PeerOffsets) and the lag in bytes.
// A broker whose ZooKeeper session ended is unreachable: its partitions'
// lag is unknown, and says so.

// PeerOffsetsEvery is how long a broker's answer is reused (at most one
// read per broker in that time, whatever the page views), RemoteLagWait
// how long a page waits for the reads of its partitions on other brokers
// (the offset store's and the brokers'): a broker that has not answered
// by then has its lag unknown, and the page is not held up.
const (
	PeerOffsetsEvery = 3 * time.Second
	RemoteLagWait    = 2 * time.Second
)

// PeerBroker is another broker to ask for its offsets: its id and the
// address its master registered (TLS: a metaqs:// one).
type PeerBroker struct {
	ID   int
	Addr string
	TLS  bool
}

// PeerOffsets is a broker's answer: the max offset of each partition by
// topic, or Err saying why there is none.
type PeerOffsets struct {
	Max map[string]map[int32]int64
	Err string
}

// RemotePartition is a partition of a group's topic on another broker.
type RemotePartition struct {
	Topic     string `json:"topic"`
	BrokerID  int    `json:"broker_id"`
	Partition int32  `json:"partition"`
	// Committed is the group's committed offset (-1: none known); Source
	// where it comes from: "offset_store" or "zookeeper".
	Committed int64  `json:"committed_offset"`
	Source    string `json:"source,omitempty"`
	// MaxOffset is the broker's max offset (absent: unknown), LagBytes
	// MaxOffset minus Committed (absent: unknown, LagUnknown says why).
	MaxOffset  *int64 `json:"max_offset,omitempty"`
	LagBytes   *int64 `json:"lag_bytes,omitempty"`
	LagUnknown string `json:"lag_unknown,omitempty"`
	// Unreachable: the broker has no live master in ZooKeeper (its
	// session ended).
	Unreachable bool   `json:"unreachable,omitempty"`
	Owner       string `json:"owner,omitempty"`
}

// ZKGroupRead is a group's page's read of ZooKeeper: the group's nodes,
// the cluster's layout (the brokers and the partitions they hold) and
// the consumers' offsets of every broker's partitions of the group's
// topics.
type ZKGroupRead struct {
	Group   *ZKGroup // nil: no such group
	Layout  *cluster.Layout
	Offsets map[cluster.OwnerKey]int64
	// OffsetsErr says why some offsets were not read (a node's ACL, bad
	// data, maxGroupOffsetNodes).
	OffsetsErr string
}

// maxGroupOffsetNodes bounds the offset nodes one group's read takes.
const maxGroupOffsetNodes = 4096

// ReadZKGroupCluster reads group g, the layout and the group's offsets
// through read, bounded by ZKTimeout (errText says why there is none).
func ReadZKGroupCluster(read ZKRead, g string) (*ZKGroupRead, string) {
	return ReadZK(read, func(c *zk.Conn, root string) (*ZKGroupRead, error) {
		zg, err := readZKGroup(c, root, g)
		if err != nil || zg == nil {
			return &ZKGroupRead{}, err
		}
		x := &ZKGroupRead{Group: zg}
		if x.Layout, err = readLayout(c, root); err != nil {
			return nil, err
		}
		x.Offsets, x.OffsetsErr, err = readGroupOffsets(c, root, g, zg.Topics, maxGroupOffsetNodes)
		return x, err
	})
}

// maxListOffsetNodes bounds the offset nodes the groups list reads, over
// all its groups.
const maxListOffsetNodes = 20000

// readGroupOffsets reads R/consumers/<g>/offsets/<t>/<brokerId>-<p> of
// topics, at most limit of them: the offsets by partition, and why some
// were not read.
func readGroupOffsets(c *zk.Conn, root, g string, topics []string, limit int) (map[cluster.OwnerKey]int64, string, error) {
	root = strings.TrimRight(root, "/")
	out := map[cluster.OwnerKey]int64{}
	var why string
	for _, t := range topics {
		kids, err := cluster.ReadChildren(c, zkpath.OffsetsTopic(root, g, t))
		if errors.Is(err, zk.ErrNoAuth) {
			why = "offsets not readable (ZooKeeper ACL)"
			continue
		}
		if err != nil {
			return out, why, err
		}
		for _, k := range kids {
			id, p, err := zkpath.ParsePartitionName(k)
			if err != nil {
				continue
			}
			if len(out) >= limit {
				return out, "too many offset nodes to read for one page: the others are not read", nil
			}
			v, ok, err := cluster.ReadData(c, zkpath.Offset(root, g, t, id, p))
			switch {
			case errors.Is(err, zk.ErrNoAuth):
				why = "offsets not readable (ZooKeeper ACL)"
				continue
			case err != nil:
				return out, why, err
			case !ok:
				continue
			}
			off, _, err := zkpath.ParseOffsetData([]byte(v))
			if err != nil {
				why = err.Error()
				continue
			}
			out[cluster.OwnerKey{Topic: t, BrokerID: id, Partition: p}] = off
		}
	}
	return out, why, nil
}

// RemotePartitions lists the partitions of x's group on brokers other
// than self, of its topics v may subscribe to (only: of those topics; nil
// all): those the brokers register now, those ZooKeeper has offsets or
// owners of (elsewhere: PlaceZKGroup's), with their committed offsets in
// ZooKeeper and owners; and the brokers to ask for their offsets. The
// partitions of a broker with no live master are unreachable.
func RemotePartitions(v security.Viewer, x *ZKGroupRead, self int, elsewhere []ZKOwner, only []string) ([]RemotePartition, []PeerBroker) {
	if x == nil || x.Group == nil {
		return nil, nil
	}
	want := func(t string) bool {
		return (only == nil || slices.Contains(only, t)) && v.Authorize(security.Subscribe, t) == nil
	}
	rows := map[cluster.OwnerKey]*RemotePartition{}
	add := func(k cluster.OwnerKey) *RemotePartition {
		r := rows[k]
		if r == nil {
			r = &RemotePartition{Topic: k.Topic, BrokerID: k.BrokerID, Partition: k.Partition, Committed: -1}
			rows[k] = r
		}
		return r
	}
	up := map[int]PeerBroker{}
	if x.Layout != nil {
		for _, bi := range x.Layout.Brokers {
			if b := bi.Broker(); b.Addr != "" {
				up[bi.ID] = PeerBroker{ID: bi.ID, Addr: b.Addr}
			} else if b.TLSAddr != "" {
				up[bi.ID] = PeerBroker{ID: bi.ID, Addr: b.TLSAddr, TLS: true}
			}
		}
		for _, t := range x.Layout.Topics {
			if !slices.Contains(x.Group.Topics, t.Name) || !want(t.Name) {
				continue
			}
			for _, tp := range t.Brokers {
				if bn, err := zkpath.ParseBrokerName(tp.Broker); err != nil || !bn.IsMaster() || tp.BrokerID == self {
					continue
				}
				for p := range tp.NumParts {
					add(cluster.OwnerKey{Topic: t.Name, BrokerID: tp.BrokerID, Partition: int32(p)})
				}
			}
		}
	}
	for k, off := range x.Offsets {
		if k.BrokerID != self && want(k.Topic) {
			r := add(k)
			r.Committed, r.Source = off, "zookeeper"
		}
	}
	for _, o := range elsewhere {
		if want(o.Topic) {
			add(cluster.OwnerKey{Topic: o.Topic, BrokerID: o.BrokerID, Partition: o.Partition}).Owner = o.Owner
		}
	}
	out := make([]RemotePartition, 0, len(rows))
	ask := map[int]bool{}
	var peers []PeerBroker
	for _, r := range rows {
		switch pb, ok := up[r.BrokerID]; {
		case r.BrokerID == self:
			r.LagUnknown = "the topic is not open on this broker"
		case !ok:
			r.Unreachable, r.LagUnknown = true, fmt.Sprintf("broker %d unreachable", r.BrokerID)
		case !ask[r.BrokerID]:
			ask[r.BrokerID] = true
			peers = append(peers, pb)
		}
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, c := out[i], out[j]
		if a.Topic != c.Topic {
			return a.Topic < c.Topic
		}
		if a.BrokerID != c.BrokerID {
			return a.BrokerID < c.BrokerID
		}
		return a.Partition < c.Partition
	})
	sort.Slice(peers, func(i, j int) bool { return peers[i].ID < peers[j].ID })
	return out, peers
}

// FinishRemote sets rows' committed offsets from the offset store
// (stored: by partition, -1 none; storeErr why it could not be read),
// where it has one, and their max offsets and lag from the brokers'
// answers.
func FinishRemote(rows []RemotePartition, stored map[cluster.OwnerKey]int64, storeErr string, peers map[int]PeerOffsets) {
	for i := range rows {
		r := &rows[i]
		if off, ok := stored[cluster.OwnerKey{Topic: r.Topic, BrokerID: r.BrokerID, Partition: r.Partition}]; ok && off >= 0 {
			r.Committed, r.Source = off, "offset_store"
		}
		if r.LagUnknown != "" { // unreachable, or not a partition to ask about
			continue
		}
		res, ok := peers[r.BrokerID]
		switch {
		case !ok:
			r.LagUnknown = fmt.Sprintf("broker %d not asked", r.BrokerID)
			continue
		case res.Err != "":
			r.LagUnknown = res.Err
			continue
		}
		hi, ok := res.Max[r.Topic][r.Partition]
		if !ok {
			r.LagUnknown = fmt.Sprintf("broker %d does not list partition %d of %s", r.BrokerID, r.Partition, r.Topic)
			continue
		}
		r.MaxOffset = &hi
		if r.Committed < 0 {
			r.LagUnknown = "no committed offset known"
			if storeErr != "" {
				r.LagUnknown += " (offset store: " + storeErr + ")"
			}
			continue
		}
		lag := max(hi-r.Committed, 0)
		r.LagBytes = &lag
	}
}

// RemoteLags sums rows' known lag by topic, and counts the partitions
// whose lag is unknown.
func RemoteLags(rows []RemotePartition) (lag map[string]int64, unknown map[string]int) {
	lag, unknown = map[string]int64{}, map[string]int{}
	for _, r := range rows {
		if r.LagBytes != nil {
			lag[r.Topic] += *r.LagBytes
		} else {
			unknown[r.Topic]++
		}
	}
	return lag, unknown
}

// groupsZK is the groups page's read of ZooKeeper for the lag on other
// brokers: the groups, the layout and the groups' offsets of every
// broker's partitions.
type groupsZK struct {
	groups  []ZKGroup
	layout  *cluster.Layout
	offsets map[string]map[cluster.OwnerKey]int64 // by group
	err     string                                // why they were not read
}

// readGroupsOffsets reads, for the groups page, the layout and the offsets
// of groups (at most maxListOffsetNodes in all), bounded by RemoteLagWait
// apart from the page's read of the groups: a read too slow leaves the
// lag on other brokers out, not the groups.
func readGroupsOffsets(read ZKRead, groups []ZKGroup) *groupsZK {
	x, errText := readZKWithin(read, RemoteLagWait, func(c *zk.Conn, root string) (*groupsZK, error) {
		x := &groupsZK{groups: groups, offsets: map[string]map[cluster.OwnerKey]int64{}}
		var err error
		if x.layout, err = readLayout(c, root); err != nil {
			return nil, err
		}
		left := maxListOffsetNodes
		for _, g := range groups {
			offs, _, err := readGroupOffsets(c, root, g.Group, g.Topics, min(left, maxGroupOffsetNodes))
			if err != nil {
				return nil, err
			}
			left -= len(offs)
			x.offsets[g.Group] = offs
		}
		return x, nil
	})
	if x == nil {
		x = &groupsZK{err: errText}
	}
	return x
}

// AddRemoteLag gives, in cluster mode, each row of the groups page of a
// group ZooKeeper holds its lag on all the brokers: the lag here plus the
// lag of the group's partitions on the other brokers (self is this
// broker), their committed offsets the consumers' in ZooKeeper and their
// max offsets asked of the brokers through peers (one read for all the
// groups).
func (pg *GroupsPage) AddRemoteLag(v security.Viewer, self int, peers func([]PeerBroker) map[int]PeerOffsets) {
	x := pg.zk
	if x == nil {
		return
	}
	if x.layout == nil {
		pg.RemoteErr = "lag on other brokers not read: " + x.err
		return
	}
	type groupRows struct {
		group string
		rows  []RemotePartition
	}
	var all []groupRows
	ask := map[int]PeerBroker{}
	for i := range x.groups {
		g := &x.groups[i]
		var elsewhere []ZKOwner
		for _, o := range g.Owners {
			if o.BrokerID != self {
				elsewhere = append(elsewhere, o)
			}
		}
		rows, ps := RemotePartitions(v, &ZKGroupRead{Group: g, Layout: x.layout, Offsets: x.offsets[g.Group]}, self, elsewhere, nil)
		for _, p := range ps {
			ask[p.ID] = p
		}
		all = append(all, groupRows{g.Group, rows})
	}
	list := make([]PeerBroker, 0, len(ask))
	for _, p := range ask {
		list = append(list, p)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	var got map[int]PeerOffsets
	if len(list) > 0 {
		got = peers(list)
	}
	at := map[[2]string]int{}
	for i, r := range pg.Groups {
		at[[2]string{r.Group, r.Topic}] = i
	}
	for _, g := range all {
		FinishRemote(g.rows, nil, "", got)
		for _, r := range g.rows {
			i, ok := at[[2]string{g.group, r.Topic}]
			if !ok {
				continue
			}
			row := &pg.Groups[i]
			row.RemoteParts++
			if r.LagBytes != nil {
				row.RemoteLag += *r.LagBytes
				row.RemoteKnown++
			} else if !slices.Contains(row.RemoteWhy, r.LagUnknown) && len(row.RemoteWhy) < 4 {
				row.RemoteWhy = append(row.RemoteWhy, r.LagUnknown)
			}
		}
	}
	pg.Remote = true
}

// RemoteLag fills rows, the partitions of a group on other brokers, with
// their committed offsets (the offset store's, which load reads, where it
// has them; the ZooKeeper ones already read otherwise), the max offsets
// peers answer (peerOffsets), and their lag, within RemoteLagWait: the two
// reads run at once.
func RemoteLag(ctx context.Context, rows []RemotePartition, peers []PeerBroker,
	load func(ctx context.Context, ps []message.Position) ([]message.Position, error),
	peerOffsets func(ctx context.Context, ps []PeerBroker) map[int]PeerOffsets) []RemotePartition {
	if len(rows) == 0 {
		return rows
	}
	ctx, cancel := context.WithTimeout(ctx, RemoteLagWait)
	defer cancel()
	type storeRead struct {
		m   map[cluster.OwnerKey]int64
		err string
	}
	ps := make([]message.Position, len(rows))
	for i, r := range rows {
		ps[i] = message.Position{Topic: r.Topic, Partition: message.Partition{BrokerID: r.BrokerID, Partition: r.Partition}}
	}
	ch := make(chan storeRead, 1)
	go func() {
		var x storeRead
		res, err := load(ctx, ps)
		if err != nil {
			x.err = groups.Reason(err)
		} else {
			x.m = make(map[cluster.OwnerKey]int64, len(res))
			for _, p := range res {
				x.m[cluster.OwnerKey{Topic: p.Topic, BrokerID: p.Partition.BrokerID, Partition: p.Partition.Partition}] = p.Offset
			}
		}
		ch <- x
	}()
	got := peerOffsets(ctx, peers)
	var st storeRead
	select {
	case st = <-ch:
	case <-ctx.Done():
		st.err = "offset store did not answer within " + RemoteLagWait.String()
	}
	FinishRemote(rows, st.m, st.err, got)
	return rows
}

// GroupPageSource is what a group's page reads: whether the broker runs
// in cluster mode (ZooKeeper) and the registry's read, this broker's id,
// whether a topic is open here, the group described on topics
// (Backend.DescribeGroup), and, for its partitions on other brokers, the
// offset store's committed offsets and the peers' max offsets (RemoteLag).
type GroupPageSource struct {
	ZooKeeper   bool
	ZK          ZKRead
	Self        int
	TopicOpen   func(topic string) bool
	Describe    func(ctx context.Context, group string, topics []string) ([]GroupTopic, error)
	Load        func(ctx context.Context, group string, ps []message.Position) ([]message.Position, error)
	PeerOffsets func(ctx context.Context, ps []PeerBroker) map[int]PeerOffsets
}

// BuildGroupPage is a group's page's data: group described on topics
// (and, in cluster mode unless the topic was explicit, on the topics
// ZooKeeper has for it that v may subscribe to), with ZooKeeper's members
// and owners (zkread.go) and the lag of its partitions on other brokers.
func BuildGroupPage(ctx context.Context, v security.Viewer, group string, topics []string, explicit bool, src GroupPageSource) (GroupPage, error) {
	var zr *ZKGroupRead
	var zg *ZKGroup
	pg := GroupPage{ZooKeeper: src.ZooKeeper}
	if pg.ZooKeeper {
		zr, pg.ZKErr = ReadZKGroupCluster(src.ZK, group)
		if zr != nil {
			zg = zr.Group
		}
		if zg != nil && !explicit {
			topics = ZKGroupTopics(v, zg, topics, src.TopicOpen)
		}
	}
	views, err := src.Describe(ctx, group, topics)
	if err != nil {
		return GroupPage{}, err
	}
	pg.Topics = views
	if zg != nil {
		pg.ZKMembers, pg.Elsewhere = PlaceZKGroup(v, zg, src.Self, views)
		var only []string
		if explicit {
			only = topics
		}
		rows, peers := RemotePartitions(v, zr, src.Self, pg.Elsewhere, only)
		pg.Remote = RemoteLag(ctx, rows, peers, func(ctx context.Context, ps []message.Position) ([]message.Position, error) {
			return src.Load(ctx, group, ps)
		}, src.PeerOffsets)
	}
	return pg, nil
}
