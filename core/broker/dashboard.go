package broker

// The dashboard's pages (core/httpapi) whose data the broker assembles:
// the cluster page, the groups list, a group's page and the messages
// page; the httpBackend methods here give them as typed values.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/go-zookeeper/zk"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/core/store"
)

// dashZKTimeout bounds the pages' reads of ZooKeeper.
const dashZKTimeout = 3 * time.Second

// Role is the broker's role for the dashboard's header.
func (h httpBackend) Role() string { return h.b.role() }

func (b *Broker) role() string {
	switch {
	case b.replRole() == repl.RoleSlave:
		return "slave " + strconv.Itoa(b.slave.ID())
	case b.sync != nil:
		return "master (sync replication)"
	}
	return "master"
}

// Traffic is each open topic's traffic counters.
func (h httpBackend) Traffic() []httpapi.TopicTraffic {
	topics := h.b.topicList()
	out := make([]httpapi.TopicTraffic, 0, len(topics))
	for _, t := range topics {
		x := httpapi.TopicTraffic{Name: t.name}
		for p := range t.parts {
			x.MsgsIn += t.pc[p].msgsIn.Load()
			x.BytesIn += t.pc[p].bytesIn.Load()
			x.BytesOut += t.pc[p].bytesOut.Load()
		}
		out = append(out, x)
	}
	return out
}

// Lags is each group's lag in bytes on the open topics, from the offsets
// committed through this broker (committed.go).
func (h httpBackend) Lags() []httpapi.GroupLag {
	var out []httpapi.GroupLag
	for k, lag := range h.b.lagsNow() {
		out = append(out, httpapi.GroupLag{Group: k.Group, Topic: k.Topic, Lag: lag})
	}
	return out
}

// Config is the configuration page's text (redacted).
func (h httpBackend) Config() httpapi.ConfigText {
	cfg := h.b.config()
	return httpapi.ConfigText{Text: string(cfg.Redacted()), Path: cfg.Path(), Checksum: h.b.configChecksum()}
}

// Messages reads the messages page of partition p of topic
// (core/httpapi messages.go).
func (h httpBackend) Messages(topic string, p int, offset int64, n int, asHex bool) (httpapi.MessagePage, error) {
	l, err := partSource{h.b}.Log(topic, p)
	if err != nil {
		return httpapi.MessagePage{}, noTopic(topic)
	}
	return httpapi.ReadMessages(browseLog{l}, topic, p, offset, n, asHex, h.b.config().MaxMessageSize)
}

// browseLog is a partition as the messages page reads it: store's
// errors as httpapi.PartitionReader gives them.
type browseLog struct{ *store.Log }

func (l browseLog) Read(offset int64, max int) (httpapi.RecordView, error) {
	v, err := l.Log.Read(offset, max)
	return browseView{v}, browseErr(err)
}

type browseView struct{ store.View }

func (v browseView) ReadAll(dst []byte) ([]byte, error) {
	b, err := v.View.ReadAll(dst)
	return b, browseErr(err)
}

func browseErr(err error) error {
	var oor *store.OffsetOutOfRangeError
	switch {
	case errors.Is(err, store.ErrNoData):
		return httpapi.ErrNoMessages
	case errors.As(err, &oor):
		return &httpapi.RequestError{Status: http.StatusRequestedRangeNotSatisfiable, Msg: err.Error()}
	case errors.Is(err, store.ErrClosed):
		return &httpapi.GoneError{Err: err}
	}
	return err
}

// ---- cluster ----

func kvLines(f func(kv func(k string, v any))) [][2]string {
	var out [][2]string
	f(func(k string, v any) { out = append(out, [2]string{k, fmt.Sprint(v)}) })
	return out
}

// ClusterPage is the cluster page's data.
func (h httpBackend) ClusterPage(security.Viewer) httpapi.ClusterPage {
	b := h.b
	v := httpapi.ClusterPage{Mode: "local", HTTPAddr: b.HTTPAddr(), Serving: b.serving.Load(), Registered: b.Registered(),
		Replication: b.config().Replication}
	if b.serving.Load() {
		v.Addr, v.TLSAddr = b.Addr(), b.TLSAddr()
	}
	if b.replRole() == repl.RoleSlave {
		v.Slave = kvLines(func(kv func(k string, v any)) { slaveStatsLines(b.slave.Status(), kv) })
	}
	if b.sync != nil {
		v.Sync = kvLines(func(kv func(k string, v any)) { syncStatsLines(b.sync.Status(), kv) })
	}
	if b.config().ZooKeeper.Enabled() {
		v.Mode, v.ZKRoot = "cluster", b.config().ZooKeeper.Root
		v.ZK = b.clusterRead()
	}
	return v
}

// ---- groups ----

// GroupsPage is the groups page's data.
func (h httpBackend) GroupsPage(v security.Viewer) httpapi.GroupsPage {
	b := h.b
	type row = httpapi.GroupRow
	var rows []row
	lags := b.lagsNow()
	for _, g := range b.groupEntries(v) { // the user's groups, on topics they may subscribe to
		x := row{GroupEntry: g}
		x.Lag, x.HasLag = lags[groupTopic{Group: g.Group, Topic: g.Topic}]
		x.AllMembers = g.Members
		rows = append(rows, x)
	}
	zkErr, zkTrunc := "", false
	var zkGroups []httpapi.ZKGroup
	if b.config().ZooKeeper.Enabled() {
		type read struct {
			groups    []httpapi.ZKGroup
			truncated bool
		}
		var x read
		x, zkErr = readZK(b, func(c *zk.Conn, root string) (read, error) {
			var x read
			var err error
			x.groups, x.truncated, err = readZKGroups(c, root, httpapi.MaxZKGroups)
			return x, err
		})
		zkGroups, zkTrunc = x.groups, x.truncated
		at := map[groupTopic]int{}
		for i, x := range rows {
			at[groupTopic{Group: x.Group, Topic: x.Topic}] = i
		}
		for _, g := range zkGroups {
			for _, t := range g.Topics {
				if !v.GroupTopic(g.Group, t) {
					continue
				}
				k := groupTopic{Group: g.Group, Topic: t}
				i, ok := at[k]
				if !ok {
					rows = append(rows, row{GroupEntry: &httpapi.GroupEntry{Group: g.Group, Topic: t, Note: "in ZooKeeper; its partitions are on other brokers"}})
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
		slices.SortFunc(rows, func(a, c row) int {
			return cmp.Or(strings.Compare(a.Group, c.Group), strings.Compare(a.Topic, c.Topic))
		})
	}
	return httpapi.GroupsPage{Groups: rows, ZooKeeper: b.config().ZooKeeper.Enabled(), ZKEvery: groups.ZKOffsetsEvery,
		Truncated: b.committed.ZKTruncated(), MaxGroups: groups.ZKOffsetsMaxGroups, MaxReads: groups.ZKOffsetsMaxReads,
		ZKErr: zkErr, ZKTruncated: zkTrunc, ZKMax: httpapi.MaxZKGroups}
}

// lagsNow is each group/topic's lag in bytes now, from the committed
// offsets known (committed.go), for the open topics.
func (b *Broker) lagsNow() map[groupTopic]int64 {
	out := map[groupTopic]int64{}
	for _, g := range b.committed.Snapshot() {
		b.mu.RLock()
		t := b.topics[g.Topic]
		b.mu.RUnlock()
		if t == nil {
			continue
		}
		var lag int64
		for p, off := range g.Offsets {
			if off >= 0 && p < len(t.parts) {
				lag += max(t.parts[p].MaxOffset()-off, 0)
			}
		}
		out[groupTopic{Group: g.Group, Topic: g.Topic}] = lag
	}
	return out
}

// GroupPage is a group's page's data: group described on topics (and,
// in cluster mode unless the topic was explicit, on the topics ZooKeeper
// has for it that v may subscribe to), with ZooKeeper's members and
// owners.
func (h httpBackend) GroupPage(ctx context.Context, v security.Viewer, group string, topics []string, explicit bool) (httpapi.GroupPage, error) {
	b := h.b
	// Cluster mode: the group as ZooKeeper holds it; its topics open here
	// are described too (as those it committed here are).
	var zg *httpapi.ZKGroup
	zkErr := ""
	if b.config().ZooKeeper.Enabled() {
		zg, zkErr = b.zkGroupOf(group)
		if zg != nil && !explicit {
			for _, t := range zg.Topics {
				if !slices.Contains(topics, t) && b.topicOpen(t) && v.Authorize(security.Subscribe, t) == nil {
					topics = append(topics, t)
				}
			}
			slices.Sort(topics)
		}
	}
	views, err := h.DescribeGroup(ctx, group, topics)
	if err != nil {
		return httpapi.GroupPage{}, err
	}
	// Cluster mode: the members and owners ZooKeeper holds (the owners of
	// this broker's partitions go in the partition tables, the others in
	// a table of their own).
	var zkMembers []httpapi.ZKMember
	var elsewhere []httpapi.ZKOwner
	if zg != nil {
		self := b.config().BrokerID
		for _, m := range zg.Members {
			var ts []string
			for _, t := range m.Topics {
				if v.Authorize(security.Subscribe, t) == nil {
					ts = append(ts, t)
				}
			}
			m.Topics = ts
			zkMembers = append(zkMembers, m)
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
	}
	return httpapi.GroupPage{Topics: views, ZooKeeper: b.config().ZooKeeper.Enabled(), ZKMembers: zkMembers, Elsewhere: elsewhere, ZKErr: zkErr}, nil
}
