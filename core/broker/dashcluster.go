package broker

import (
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/cluster"
)

// The dashboard's cluster console (docs/dashboard.md): in cluster mode
// every broker's pages show the whole cluster as ZooKeeper holds it,
// re-read on each page view within dashZKTimeout: the brokers with their
// masters and slaves (sdk/cluster.ReadLayout, as `metaq cluster`), each
// topic's partitions and the brokers holding them, and the groups with
// their members and owners (sdk/cluster.ReadGroupNodes, as `metaq group
// describe --zk`). A broker whose session ended loses its ephemeral
// nodes: the console remembers the brokers and partitions it saw (since
// this broker started) and shows the missing ones as down, their
// partitions unreachable.

// dashMaxZKGroups bounds the groups one page view reads from ZooKeeper.
const dashMaxZKGroups = 200

// dashGoneFor is how long a broker that went is remembered.
const dashGoneFor = time.Hour

// consoleBroker is one broker id of the cluster.
type consoleBroker struct {
	ID        int
	Master    string // "" when no master is registered (a broker down: the one it had)
	MasterTLS string
	Slaves    [][2]string // "slave N", URI
	Self      bool        // the broker serving the page (its id)
	Down      bool        // seen before, or its id registered, with no master now
	DownSince time.Time
}

// consoleHolder is one broker's registration of a topic.
type consoleHolder struct {
	BrokerID            int
	Name                string // "0-m", "0-s1"
	NumParts            int
	Publish, Subscribe  bool
	Master, Unreachable bool
}

type consoleTopic struct {
	Name    string
	Holders []consoleHolder
	Total   int // partitions of the masters that are up
	Down    int // partitions of masters that are down
}

type consoleOwner struct {
	Topic       string
	BrokerID    int
	Partition   int32
	Owner       string
	Unreachable bool
}

type consoleGroup struct {
	Group   string
	Topics  []string
	Members []zkMember
	Owners  []consoleOwner
	Lags    []consoleLag
}

// consoleLag is a group's lag on a topic over this broker's partitions,
// from the committed offsets known here (the offset store's commits and
// ZooKeeper's consumer offsets).
type consoleLag struct {
	Topic string
	Bytes int64
}

// clusterConsole is what the cluster page shows of the cluster.
type clusterConsole struct {
	Brokers   []consoleBroker
	Topics    []consoleTopic
	Groups    []consoleGroup
	Truncated bool // more groups than dashMaxZKGroups
	Err       string
}

// consoleState is the cluster console's memory: the brokers seen, so
// that one gone is shown as down for dashGoneFor.
type consoleState struct {
	mu   sync.Mutex
	seen map[int]*seenBroker
}

// seenBroker is a broker the console saw registered.
type seenBroker struct {
	info   cluster.BrokerInfo
	topics map[string]cluster.TopicPartition // its master's registrations
	gone   time.Time                         // zero while registered
}

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

// zkRead is what the cluster page reads from ZooKeeper.
type zkRead struct {
	layout    *cluster.Layout
	groups    []zkGroupView
	truncated bool
}

// clusterConsole reads the cluster from ZooKeeper for viewer v: topics
// it may describe, groups it may use with a topic it may subscribe to.
func (b *Broker) clusterConsole(v viewer, now time.Time) clusterConsole {
	x, errText := readZK(b, func(c *zk.Conn, root string) (zkRead, error) {
		var x zkRead
		r := root
		if r == "" {
			r = "/"
		}
		var err error
		if x.layout, err = cluster.ReadLayout(c, r); err != nil {
			return x, err
		}
		x.groups, x.truncated, err = readZKGroups(c, root, dashMaxZKGroups)
		return x, err
	})
	if x.layout == nil {
		x.layout = &cluster.Layout{}
	}
	return b.buildConsole(v, x.layout, x.groups, x.truncated, errText, now)
}

// buildConsole merges a read of ZooKeeper with the brokers seen before.
func (b *Broker) buildConsole(v viewer, layout *cluster.Layout, groups []zkGroupView, truncated bool, errText string, now time.Time) clusterConsole {
	out := clusterConsole{Truncated: truncated, Err: errText}
	d := &b.web.console
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

	self := b.config().BrokerID
	down := map[int]bool{}
	listed := map[int]bool{}
	for _, bi := range layout.Brokers {
		cb := consoleBroker{ID: bi.ID, Master: bi.Master, MasterTLS: bi.MasterTLS, Self: bi.ID == self, Down: bi.Master == ""}
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
				out.Brokers = append(out.Brokers, consoleBroker{ID: id, Master: s.info.Master, Self: id == self, Down: true, DownSince: s.gone})
			}
			if !s.gone.IsZero() {
				down[id] = true
			}
		}
	}
	sort.Slice(out.Brokers, func(i, j int) bool { return out.Brokers[i].ID < out.Brokers[j].ID })

	// Topics: the registrations now, and the partitions of the masters
	// that went, unreachable.
	topics := map[string]*consoleTopic{}
	topic := func(name string) *consoleTopic {
		t := topics[name]
		if t == nil {
			t = &consoleTopic{Name: name}
			topics[name] = t
		}
		return t
	}
	for _, t := range layout.Topics {
		if !v.topic(t.Name) {
			continue
		}
		ct := topic(t.Name)
		for _, tp := range t.Brokers {
			bn, err := zkpath.ParseBrokerName(tp.Broker)
			h := consoleHolder{BrokerID: tp.BrokerID, Name: tp.Broker, NumParts: tp.NumParts, Publish: tp.Publish, Subscribe: tp.Subscribe,
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
				if !v.topic(name) {
					continue
				}
				ct := topic(name)
				ct.Holders = append(ct.Holders, consoleHolder{BrokerID: id, Name: tp.Broker, NumParts: tp.NumParts,
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

	var lags map[groupTopic]int64
	if len(groups) > 0 {
		lags = b.lagsNow()
	}
	for _, g := range groups {
		if v.authorize(security.UseGroup, g.Group) != nil {
			continue
		}
		cg := consoleGroup{Group: g.Group}
		for _, t := range g.Topics {
			if v.authorize(security.Subscribe, t) == nil {
				cg.Topics = append(cg.Topics, t)
			}
		}
		if len(cg.Topics) == 0 && len(g.Topics) > 0 {
			continue
		}
		for _, m := range g.Members {
			var ts []string
			for _, t := range m.Topics {
				if v.authorize(security.Subscribe, t) == nil {
					ts = append(ts, t)
				}
			}
			m.Topics = ts
			cg.Members = append(cg.Members, m)
		}
		for _, o := range g.Owners {
			if v.authorize(security.Subscribe, o.Topic) != nil {
				continue
			}
			cg.Owners = append(cg.Owners, consoleOwner{Topic: o.Topic, BrokerID: o.BrokerID, Partition: o.Partition, Owner: o.Owner,
				Unreachable: down[o.BrokerID]})
		}
		for _, t := range cg.Topics {
			if lag, ok := lags[groupTopic{Group: g.Group, Topic: t}]; ok {
				cg.Lags = append(cg.Lags, consoleLag{t, lag})
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

// zkGroupOf reads group g from ZooKeeper for the groups pages (nil when
// ZooKeeper has none, or could not be read: errText says so).
func (b *Broker) zkGroupOf(g string) (*zkGroupView, string) {
	return readZK(b, func(c *zk.Conn, root string) (*zkGroupView, error) { return readZKGroupView(c, root, g) })
}

// zkGroupView is a consumer group read from ZooKeeper
// (sdk/cluster.ReadGroupNodes, as `metaq group describe --zk` reads it),
// sorted for the pages.
type zkGroupView struct {
	Group   string
	Topics  []string
	Members []zkMember // by id
	Owners  []zkOwner  // by topic, broker and partition
}

type zkMember struct {
	ID         string
	Topics     []string
	Partitions int // owned
}

type zkOwner struct {
	Topic     string
	BrokerID  int
	Partition int32
	Owner     string
}

// readZKGroupView reads group g; nil when ZooKeeper has no such group.
func readZKGroupView(c *zk.Conn, root, g string) (*zkGroupView, error) {
	n, err := cluster.ReadGroupNodes(c, root, g)
	if err != nil || !n.Exists {
		return nil, err
	}
	x := &zkGroupView{Group: g, Topics: sortedKeys(n.Topics)}
	owned := map[string]int{}
	for _, k := range n.SortedOwners() {
		x.Owners = append(x.Owners, zkOwner{k.Topic, k.BrokerID, k.Partition, n.Owners[k]})
		owned[n.Owners[k]]++
	}
	for _, id := range sortedKeys(n.Members) {
		x.Members = append(x.Members, zkMember{id, n.Members[id], owned[id]})
	}
	return x, nil
}

// readZKGroups reads at most max groups (truncated says some were left).
func readZKGroups(c *zk.Conn, root string, max int) (out []zkGroupView, truncated bool, err error) {
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
