package httpapi

import (
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/cluster"
)

// The dashboard's cluster console (docs/dashboard.md): in cluster mode
// every broker's pages show the whole cluster as ZooKeeper holds it,
// re-read on each page view by the backend: the brokers with their
// masters and slaves (sdk/cluster.ReadLayout, as `metaq cluster`), each
// topic's partitions and the brokers holding them, and the groups with
// their members and owners (sdk/cluster.ReadGroupNodes, as `metaq group
// describe --zk`). A broker whose session ended loses its ephemeral
// nodes: the console remembers the brokers and partitions it saw (since
// this broker started) and shows the missing ones as down, their
// partitions unreachable.

// ClusterRead is the backend's read of ZooKeeper for the cluster page.
type ClusterRead struct {
	Layout    *cluster.Layout // nil: none read
	Groups    []ZKGroup
	Truncated bool   // more groups than MaxZKGroups
	Err       string // why the read failed
	// Lags is each group's lag in bytes on a topic over this broker's
	// partitions, from the committed offsets known here (missing:
	// unknown), keyed by group and topic.
	Lags map[[2]string]int64
}

func (r *ClusterRead) lag(group, topic string) (int64, bool) {
	n, ok := r.Lags[[2]string{group, topic}]
	return n, ok
}

// MaxZKGroups bounds the groups one page view reads from ZooKeeper (the
// backend's read).
const MaxZKGroups = 200

// dashGoneFor is how long a broker that went is remembered.
const dashGoneFor = time.Hour

// ConsoleBroker is one broker id of the cluster.
type ConsoleBroker struct {
	ID        int
	Master    string // "" when no master is registered (a broker down: the one it had)
	MasterTLS string
	Slaves    [][2]string // "slave N", URI
	Self      bool        // the broker serving the page (its id)
	Down      bool        // seen before, or its id registered, with no master now
	DownSince time.Time
}

// ConsoleHolder is one broker's registration of a topic.
type ConsoleHolder struct {
	BrokerID            int
	Name                string // "0-m", "0-s1"
	NumParts            int
	Publish, Subscribe  bool
	Master, Unreachable bool
}

// ConsoleTopic is a topic with the brokers holding it.
type ConsoleTopic struct {
	Name    string
	Holders []ConsoleHolder
	Total   int // partitions of the masters that are up
	Down    int // partitions of masters that are down
}

// ConsoleOwner is a partition's owner in a group.
type ConsoleOwner struct {
	Topic       string
	BrokerID    int
	Partition   int32
	Owner       string
	Unreachable bool
}

// ConsoleGroup is a group as ZooKeeper holds it, with its lag here.
type ConsoleGroup struct {
	Group   string
	Topics  []string
	Members []ZKMember
	Owners  []ConsoleOwner
	Lags    []ConsoleLag
}

// ConsoleLag is a group's lag on a topic over this broker's partitions,
// from the committed offsets known here (the offset store's commits and
// ZooKeeper's consumer offsets).
type ConsoleLag struct {
	Topic string
	Bytes int64
}

// Console is what the cluster page shows of the cluster.
type Console struct {
	Brokers   []ConsoleBroker
	Topics    []ConsoleTopic
	Groups    []ConsoleGroup
	Truncated bool // more groups than MaxZKGroups
	Err       string
}

// ConsoleMemory is the cluster console's memory: the brokers seen, so
// that one gone is shown as down for dashGoneFor.
type ConsoleMemory struct {
	mu   sync.Mutex
	seen map[int]*seenBroker
}

// seenBroker is a broker the console saw registered.
type seenBroker struct {
	info   cluster.BrokerInfo
	topics map[string]cluster.TopicPartition // its master's registrations
	gone   time.Time                         // zero while registered
}

// Build merges r, a read of ZooKeeper, with the brokers seen before, for
// viewer v of broker self: topics v may describe, groups v may use with
// a topic v may subscribe to.
func (d *ConsoleMemory) Build(v security.Viewer, self int, r *ClusterRead, now time.Time) Console {
	layout, groups, errText := r.Layout, r.Groups, r.Err
	if layout == nil {
		layout = &cluster.Layout{}
	}
	out := Console{Truncated: r.Truncated, Err: errText}
	d.mu.Lock()
	if d.seen == nil {
		d.seen = map[int]*seenBroker{}
	}
	up := map[int]bool{}
	if errText == "" { // a failed read says nothing about who went
		byBroker := map[int]map[string]cluster.TopicPartition{}
		for _, t := range layout.Topics {
			for _, tp := range t.Brokers {
				if bn, err := zkpath.ParseBrokerName(tp.Broker); err == nil && bn.IsMaster() {
					if byBroker[tp.BrokerID] == nil {
						byBroker[tp.BrokerID] = map[string]cluster.TopicPartition{}
					}
					byBroker[tp.BrokerID][t.Name] = tp
				}
			}
		}
		for _, bi := range layout.Brokers {
			if bi.Master == "" {
				continue
			}
			up[bi.ID] = true
			s := d.seen[bi.ID]
			if s == nil {
				if len(d.seen) >= maxSeenBrokers {
					continue
				}
				s = &seenBroker{}
				d.seen[bi.ID] = s
			}
			s.info, s.gone = bi, time.Time{}
			s.topics = byBroker[bi.ID]
		}
		for id, s := range d.seen {
			switch {
			case up[id]:
			case s.gone.IsZero():
				s.gone = now
			case now.Sub(s.gone) > dashGoneFor:
				delete(d.seen, id)
			}
		}
	}
	seen := make(map[int]seenBroker, len(d.seen))
	for id, s := range d.seen {
		seen[id] = *s
	}
	d.mu.Unlock()

	down := map[int]bool{}
	listed := map[int]bool{}
	for _, bi := range layout.Brokers {
		cb := ConsoleBroker{ID: bi.ID, Master: bi.Master, MasterTLS: bi.MasterTLS, Self: bi.ID == self, Down: bi.Master == ""}
		for _, k := range sortedKeys(bi.Slaves) {
			cb.Slaves = append(cb.Slaves, [2]string{"slave " + strings.TrimPrefix(k, zkpath.SlavePrefix), bi.Slaves[k]})
		}
		if cb.Down {
			down[bi.ID] = true
			if s, ok := seen[bi.ID]; ok && !s.gone.IsZero() {
				cb.DownSince, cb.Master, cb.MasterTLS = s.gone, s.info.Master, s.info.MasterTLS // the address it had
			}
		}
		listed[bi.ID] = true
		out.Brokers = append(out.Brokers, cb)
	}
	if errText == "" {
		for id, s := range seen {
			if !listed[id] && !s.gone.IsZero() {
				down[id] = true
				out.Brokers = append(out.Brokers, ConsoleBroker{ID: id, Master: s.info.Master, Self: id == self, Down: true, DownSince: s.gone})
			}
			if !s.gone.IsZero() {
				down[id] = true
			}
		}
	}
	sort.Slice(out.Brokers, func(i, j int) bool { return out.Brokers[i].ID < out.Brokers[j].ID })

	// Topics: the registrations now, and the partitions of the masters
	// that went, unreachable.
	topics := map[string]*ConsoleTopic{}
	topic := func(name string) *ConsoleTopic {
		t := topics[name]
		if t == nil {
			t = &ConsoleTopic{Name: name}
			topics[name] = t
		}
		return t
	}
	for _, t := range layout.Topics {
		if !v.Topic(t.Name) {
			continue
		}
		ct := topic(t.Name)
		for _, tp := range t.Brokers {
			bn, err := zkpath.ParseBrokerName(tp.Broker)
			h := ConsoleHolder{BrokerID: tp.BrokerID, Name: tp.Broker, NumParts: tp.NumParts, Publish: tp.Publish, Subscribe: tp.Subscribe,
				Master: err == nil && bn.IsMaster()}
			if h.Master {
				ct.Total += tp.NumParts
			}
			ct.Holders = append(ct.Holders, h)
		}
	}
	if errText == "" {
		for id, s := range seen {
			if !down[id] {
				continue
			}
			for name, tp := range s.topics {
				if !v.Topic(name) {
					continue
				}
				ct := topic(name)
				ct.Holders = append(ct.Holders, ConsoleHolder{BrokerID: id, Name: tp.Broker, NumParts: tp.NumParts,
					Publish: tp.Publish, Subscribe: tp.Subscribe, Master: true, Unreachable: true})
				ct.Down += tp.NumParts
			}
		}
	}
	for _, name := range sortedKeys(topics) {
		t := topics[name]
		sort.Slice(t.Holders, func(i, j int) bool {
			a, c := t.Holders[i], t.Holders[j]
			if a.BrokerID != c.BrokerID {
				return a.BrokerID < c.BrokerID
			}
			return a.Name < c.Name
		})
		out.Topics = append(out.Topics, *t)
	}

	for _, g := range groups {
		if v.Authorize(security.UseGroup, g.Group) != nil {
			continue
		}
		cg := ConsoleGroup{Group: g.Group, Topics: subscribable(v, g.Topics)}
		if len(cg.Topics) == 0 && len(g.Topics) > 0 {
			continue
		}
		for _, m := range g.Members {
			m.Topics = subscribable(v, m.Topics)
			cg.Members = append(cg.Members, m)
		}
		for _, o := range g.Owners {
			if v.Authorize(security.Subscribe, o.Topic) != nil {
				continue
			}
			cg.Owners = append(cg.Owners, ConsoleOwner{Topic: o.Topic, BrokerID: o.BrokerID, Partition: o.Partition, Owner: o.Owner,
				Unreachable: down[o.BrokerID]})
		}
		for _, t := range cg.Topics {
			if lag, ok := r.lag(g.Group, t); ok {
				cg.Lags = append(cg.Lags, ConsoleLag{t, lag})
			}
		}
		out.Groups = append(out.Groups, cg)
	}
	return out
}

// maxSeenBrokers bounds the brokers the console remembers.
const maxSeenBrokers = 1024

// sortedKeys returns m's keys in order.
func sortedKeys[K int | string, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// ZKGroup is a consumer group read from ZooKeeper
// (sdk/cluster.ReadGroupNodes, as `metaq group describe --zk` reads it),
// sorted for the pages.
type ZKGroup struct {
	Group   string
	Topics  []string
	Members []ZKMember // by id
	Owners  []ZKOwner  // by topic, broker and partition
}

type ZKMember struct {
	ID         string
	Topics     []string
	Partitions int // owned
}

type ZKOwner struct {
	Topic     string
	BrokerID  int
	Partition int32
	Owner     string
}

// ZKGroupOf is group g as n holds it, sorted for the pages; nil when
// ZooKeeper has no such group.
func ZKGroupOf(g string, n *cluster.GroupNodes) *ZKGroup {
	if !n.Exists {
		return nil
	}
	x := &ZKGroup{Group: g, Topics: sortedKeys(n.Topics)}
	owned := map[string]int{}
	for _, k := range n.SortedOwners() {
		x.Owners = append(x.Owners, ZKOwner{k.Topic, k.BrokerID, k.Partition, n.Owners[k]})
		owned[n.Owners[k]]++
	}
	for _, id := range sortedKeys(n.Members) {
		x.Members = append(x.Members, ZKMember{id, n.Members[id], owned[id]})
	}
	return x
}
