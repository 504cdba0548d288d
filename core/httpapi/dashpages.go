package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/core/security"
)

// The dashboard pages whose data the broker assembles from more than one
// source (ZooKeeper, the offset store, the groups it coordinates): the
// cluster page, the groups list and a group's page.

// ClusterPage is the cluster page's data.
type ClusterPage struct {
	Mode, Addr, TLSAddr, HTTPAddr, ZKRoot string
	Registered, Serving                   bool
	Replication                           string
	Slave                                 [][2]string // the slave's status
	Sync                                  [][2]string // a sync master's
	// ZK is the backend's read of ZooKeeper (cluster mode, else nil).
	ZK *ClusterRead
	// Console is the cluster console built from it here: the brokers,
	// topics and groups ZooKeeper holds, as the reader may see them.
	Console *Console
	// Ready and Throughput are filled in here.
	Ready      []ReadyCheck
	Throughput []ratePoint
}

// KVLines are the key/value pairs f emits (a status's StatsLines, core/repl
// stats.go), as the cluster page's Slave and Sync show them.
func KVLines(f func(kv func(k string, v any))) [][2]string {
	var out [][2]string
	f(func(k string, v any) { out = append(out, [2]string{k, fmt.Sprint(v)}) })
	return out
}

func (s *Server) uiCluster(w http.ResponseWriter, r *http.Request) {
	v := s.viewer(r)
	now := time.Now()
	p := s.be.ClusterPage(v)
	if p.ZK != nil {
		c := s.console.Build(v, s.config().BrokerID, p.ZK, now)
		p.Console = &c
	}
	p.Ready = s.be.Readiness()
	p.Throughput = s.rateTrendFor(v)
	s.Render(w, r, http.StatusOK, "cluster", "Cluster", "cluster", p, "")
}

// GroupRow is one group and topic of the groups page.
type GroupRow struct {
	*GroupEntry
	Lag    int64
	HasLag bool
	// ZooKeeper's members subscribing the topic and owners of its
	// partitions (cluster mode).
	ZKMembers, ZKOwners int
	AllMembers          int
	// RemoteParts are the partitions of the topic on other brokers
	// (cluster mode), RemoteKnown those whose lag is known, RemoteLag
	// their lag and RemoteWhy why the others' is not (AddRemoteLag).
	RemoteParts, RemoteKnown int
	RemoteLag                int64
	RemoteWhy                []string
}

// AllLag is the row's lag here plus its known lag on other brokers
// (cluster mode); ok is false when none is known.
func (r GroupRow) AllLag() (lag int64, ok bool) {
	if r.HasLag {
		lag, ok = r.Lag, true
	}
	if r.RemoteKnown > 0 {
		lag, ok = lag+r.RemoteLag, true
	}
	return lag, ok
}

// AllLagText is AllLag for the page: the bytes, or "unknown".
func (r GroupRow) AllLagText() string {
	if lag, ok := r.AllLag(); ok {
		return HumanBytes(lag)
	}
	return "unknown"
}

// RemoteUnknown is the number of partitions on other brokers whose lag
// is unknown (not in AllLag).
func (r GroupRow) RemoteUnknown() int { return r.RemoteParts - r.RemoteKnown }

// GroupsPage is the groups page's data.
type GroupsPage struct {
	Groups    []GroupRow
	Every     time.Duration // filled in here
	ZooKeeper bool
	// ZKEvery, Truncated, MaxGroups and MaxReads describe the reads of
	// ZooKeeper's consumer offsets; ZKErr, ZKTruncated and ZKMax the
	// page's read of ZooKeeper's groups.
	ZKEvery             time.Duration
	Truncated           bool
	MaxGroups, MaxReads int
	ZKErr               string
	ZKTruncated         bool
	ZKMax               int
	// Remote: the rows have their lag on other brokers (AddRemoteLag);
	// RemoteErr says why not.
	Remote    bool
	RemoteErr string
	zk        *groupsZK
}

func (s *Server) uiGroups(w http.ResponseWriter, r *http.Request) {
	p := s.be.GroupsPage(s.viewer(r))
	p.Every = dashSampleEvery
	s.Render(w, r, http.StatusOK, "groups", "Consumer groups", "groups", p, "")
}

// GroupPage is a group's page's data, as the backend gives it.
type GroupPage struct {
	Topics    []GroupTopic
	ZooKeeper bool
	// ZKMembers and Elsewhere are ZooKeeper's members of the group and
	// its owners of partitions on other brokers (cluster mode).
	ZKMembers []ZKMember
	Elsewhere []ZKOwner
	ZKErr     string
	// Remote are the partitions of the group's topics on other brokers
	// with their committed offsets and lag (remotelag.go).
	Remote []RemotePartition
}

// groupTopicView is a topic of a group's page with its lag trend.
type groupTopicView struct {
	GroupTopic
	Trend []lagPoint
}

func (s *Server) uiGroup(w http.ResponseWriter, r *http.Request) {
	group, ok := s.GroupName(w, r)
	if !ok {
		return
	}
	topics, err := s.groupTopics(r, group) // ?topic= needs subscribe on it; the others are filtered
	if err != nil {
		s.UIError(w, r, http.StatusForbidden, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), OffsetCallTimeout)
	defer cancel()
	p, err := s.be.GroupPage(ctx, s.viewer(r), group, topics, r.URL.Query().Get("topic") != "")
	if err != nil {
		code, msg := statusOf(err)
		s.UIError(w, r, code, msg)
		return
	}
	var views []groupTopicView
	for _, d := range p.Topics {
		views = append(views, groupTopicView{d, s.lagTrend(group, d.Topic)})
	}
	flash := ""
	q := r.URL.Query()
	if t := q.Get("reset"); t != "" {
		flash = "Offsets of topic " + t + " reset. " + ResetNote + "."
	} else if sk := q.Get("skipped"); sk != "" {
		flash = "Skipped " + sk + " to its end. " + ResetNote + "."
	}
	s.Render(w, r, http.StatusOK, "group", "Group "+group, "groups", map[string]any{"Group": group, "Topics": views, "Every": dashSampleEvery,
		"ZooKeeper": p.ZooKeeper, "ZKMembers": p.ZKMembers, "ZKErr": p.ZKErr,
		"Remote": p.Remote, "RemoteLags": remoteLagsOf(p.Remote), "PeerEvery": PeerOffsetsEvery, "PeerWait": RemoteLagWait}, flash)
}

// ClusterPageOf is the cluster page's header from c; the caller fills
// the rest.
func ClusterPageOf(c ClusterInfo) ClusterPage {
	v := ClusterPage{Mode: c.Mode, HTTPAddr: c.HTTPAddr, Serving: c.Serving, Registered: c.Registered}
	if c.Addr != nil {
		v.Addr, v.TLSAddr = *c.Addr, *c.TLSAddr
	}
	if c.ZooKeeperRoot != nil {
		v.ZKRoot = *c.ZooKeeperRoot
	}
	return v
}

// ClusterPageSource is what the cluster page reads: the broker's place in
// its cluster (Backend.Cluster), its replication setting, the slave's and
// the sync master's status lines when it is one (nil when not), and, in
// cluster mode, the registry's read and the lag here of the groups it
// holds.
type ClusterPageSource struct {
	Cluster     ClusterInfo
	Replication string
	Slave, Sync func(kv func(k string, v any))
	ZK          func() ZKRead
	Lags        func() map[[2]string]int64
}

// BuildClusterPage is the cluster page's data.
func BuildClusterPage(src ClusterPageSource) ClusterPage {
	v := ClusterPageOf(src.Cluster)
	v.Replication = src.Replication
	if src.Slave != nil {
		v.Slave = KVLines(src.Slave)
	}
	if src.Sync != nil {
		v.Sync = KVLines(src.Sync)
	}
	if v.Mode == "cluster" {
		v.ZK = ReadCluster(src.ZK(), src.Lags) // with the lag here of the groups it holds
	}
	return v
}

// GroupsPageSource is what the groups page reads: the groups v may see
// (Backend.Groups), the lag of each on the open topics here, whether the
// broker runs in cluster mode and the registry's read, this broker's id,
// the peers' max offsets (for the lag on other brokers) and whether the
// offset store's reads of ZooKeeper's groups were cut short.
type GroupsPageSource struct {
	Groups      []*GroupEntry
	Lags        map[[2]string]int64
	ZooKeeper   bool
	ZK          ZKRead
	Self        int
	PeerOffsets func(ctx context.Context, ps []PeerBroker) map[int]PeerOffsets
	ZKTruncated func() bool
}

// BuildGroupsPage is the groups page's data for v (zkread.go, with the
// lag on other brokers: remotelag.go).
func BuildGroupsPage(v security.Viewer, src GroupsPageSource) GroupsPage {
	pg := GroupsPageOf(v, src.Groups, src.Lags, src.ZooKeeper, src.ZK)
	if pg.ZooKeeper && pg.ZKErr == "" {
		pg.AddRemoteLag(v, src.Self, func(ps []PeerBroker) map[int]PeerOffsets {
			ctx, cancel := context.WithTimeout(context.Background(), RemoteLagWait)
			defer cancel()
			return src.PeerOffsets(ctx, ps)
		})
	}
	pg.ZKEvery, pg.Truncated = groups.ZKOffsetsEvery, src.ZKTruncated()
	pg.MaxGroups, pg.MaxReads = groups.ZKOffsetsMaxGroups, groups.ZKOffsetsMaxReads
	return pg
}

// remoteLag is a topic's lag on other brokers, for a group's page.
type remoteLag struct {
	Topic   string
	Bytes   int64
	Unknown int // partitions whose lag is unknown
}

// remoteLagsOf sums rows by topic.
func remoteLagsOf(rows []RemotePartition) []remoteLag {
	lag, unknown := RemoteLags(rows)
	var out []remoteLag
	for _, r := range rows {
		if len(out) == 0 || out[len(out)-1].Topic != r.Topic {
			out = append(out, remoteLag{r.Topic, lag[r.Topic], unknown[r.Topic]})
		}
	}
	return out
}
