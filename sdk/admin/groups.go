package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Consumer groups. In direct mode (client.Brokers) a group is what the
// brokers coordinate (`stats groups`, `stats members`): it is listed while
// it has members. In ZooKeeper mode it is MetaQ's layout,
// R/consumers/<g>/ids/<consumerId> (data: the subscribed topics) and
// R/consumers/<g>/owners/<t>/<brokerId>-<p> (data: the owner), which
// keeps a group after its members are gone; the partitions are the
// brokers' topics-sub registrations. Committed offsets are read and
// written through the broker holding the partition (fetch and commit).

// scanGroup is the group sent with the requests that read the log (get,
// offset): a name no server-side filter is configured for.
const scanGroup = "metaq-cli-scan"

// maxLagScan bounds the bytes DescribeGroup reads to count a partition's
// lag in messages; beyond it the count is estimated.
const maxLagScan = 4 << 20

// GroupSummary is one group as ListGroups reports it.
type GroupSummary struct {
	Group  string   `json:"group"`
	Topics []string `json:"topics"`
	// Members is how many live members the group has.
	Members int `json:"members"`
}

// GroupMember is one live member of a group.
type GroupMember struct {
	ID     string   `json:"id"`
	Topics []string `json:"topics"`
	// Partitions is how many partitions it owns.
	Partitions int `json:"partitions"`
}

// GroupPartition is one (topic, broker, partition) of a group.
type GroupPartition struct {
	Topic     string `json:"topic"`
	BrokerID  int    `json:"broker_id"`
	Partition int32  `json:"partition"`
	// Committed is the next offset the group fetches; nil: none committed.
	Committed *int64 `json:"committed"`
	// LogStart and LogEnd are the partition's readable range; nil when
	// the broker could not be read.
	LogStart *int64 `json:"log_start"`
	LogEnd   *int64 `json:"log_end"`
	// Lag is LogEnd - Committed in bytes; nil when either is unknown.
	Lag *int64 `json:"lag"`
	// LagMessages is how many messages lie between Committed and LogEnd;
	// nil when Lag is. It is counted by reading the records when the lag
	// is at most 4 MiB, else estimated from the partition's mean record
	// size (LagMessagesEstimated).
	LagMessages          *int64 `json:"lag_messages"`
	LagMessagesEstimated bool   `json:"lag_messages_estimated,omitempty"`
	// Owner is the member that owns the partition ("" for none).
	Owner string `json:"owner"`
}

// GroupDescription is a group as DescribeGroup found it.
type GroupDescription struct {
	Group string `json:"group"`
	// Mode is "local" (the brokers' groups) or "cluster" (ZooKeeper).
	Mode string `json:"mode"`
	// Where says what was read, for messages: the brokers or ZooKeeper.
	Where string `json:"-"`
	// Members are the live members, sorted by id.
	Members []GroupMember `json:"members"`
	// Partitions are sorted by topic, broker id and partition.
	Partitions []GroupPartition `json:"partitions"`
}

// Found reports whether the group has members or committed offsets.
func (d *GroupDescription) Found() bool {
	if len(d.Members) > 0 {
		return true
	}
	for _, p := range d.Partitions {
		if p.Committed != nil || p.Owner != "" {
			return true
		}
	}
	return false
}

type tpKey struct {
	topic  string
	broker int
	part   int32
}

// groupSource is what a mode knows of a group before the brokers are asked.
type groupSource struct {
	mode, where string
	members     []GroupMember
	owners      map[tpKey]string
	// active are the topics the group has members, owners (or, in
	// cluster mode, offset znodes) for.
	active map[string]bool
	// brokers maps broker ids to their addresses ("" without a master).
	brokers map[int]string
	// parts is topic -> broker id -> partition count, for every topic the
	// group could have offsets in.
	parts map[string]map[int]int
	// topics are the brokers' topics already read, by broker id.
	topics map[int]map[string]Topic
}

// ListGroups lists the consumer groups, sorted by name, with their topics
// and live member counts.
func (a *Admin) ListGroups(ctx context.Context) ([]GroupSummary, error) {
	if a.zk != nil {
		return a.zkListGroups(ctx)
	}
	type agg struct {
		topics []string
		ids    map[string]bool
		most   int
	}
	byGroup := map[string]*agg{}
	sawMembers := false
	for _, addr := range a.direct {
		groups, members, err := a.localGroupStats(ctx, addr)
		if err != nil {
			return nil, err
		}
		for _, l := range groups {
			g := byGroup[l.group]
			if g == nil {
				g = &agg{ids: map[string]bool{}}
				byGroup[l.group] = g
			}
			if !slices.Contains(g.topics, l.topic) {
				g.topics = append(g.topics, l.topic)
			}
			g.most = max(g.most, l.members)
		}
		for _, l := range members {
			if g := byGroup[l.group]; g != nil {
				g.ids[l.id] = true
				sawMembers = true
			}
		}
	}
	out := []GroupSummary{}
	for _, name := range sortedKeys(byGroup) {
		g := byGroup[name]
		sort.Strings(g.topics)
		n := len(g.ids)
		if !sawMembers {
			n = g.most
		}
		out = append(out, GroupSummary{Group: name, Topics: g.topics, Members: n})
	}
	return out, nil
}

// DescribeGroup describes group g: per partition its committed offset,
// log bounds, lag in bytes and messages and owner, then its members. The
// topics are those given, else those the group has members, owners or
// committed offsets in. The partitions of a broker that could not be read
// have nil bounds; the error then names the broker, and comes with the
// description of the rest.
func (a *Admin) DescribeGroup(ctx context.Context, g string, topics ...string) (*GroupDescription, error) {
	if err := checkName("group", g); err != nil {
		return nil, err
	}
	for _, t := range topics {
		if err := checkName("topic", t); err != nil {
			return nil, err
		}
	}
	d, _, err := a.loadGroup(ctx, g, topics, true)
	return d, err
}

func checkName(what, s string) error {
	if s == "" || strings.ContainsAny(s, " \t\r\n/,") || len(s) > 255 {
		return fmt.Errorf("admin: bad %s name %q", what, s)
	}
	return nil
}

// loadGroup reads the group; brokers are the ones used, by id.
func (a *Admin) loadGroup(ctx context.Context, g string, topics []string, countLag bool) (*GroupDescription, map[int]string, error) {
	var src *groupSource
	var err error
	if a.zk != nil {
		src, err = a.zkGroupSource(ctx, g)
	} else {
		src, err = a.localGroupSource(ctx, g)
	}
	if err != nil {
		return nil, nil, err
	}
	d := &GroupDescription{Group: g, Mode: src.mode, Where: src.where, Members: src.members}
	if d.Members == nil {
		d.Members = []GroupMember{}
	}
	brokerErr := map[int]error{}
	explicit := len(topics) > 0
	if explicit {
		for _, t := range topics {
			if src.parts[t] == nil {
				return nil, nil, fmt.Errorf("unknown topic %q (%s)", t, src.where)
			}
		}
	} else {
		topics = sortedKeys(src.parts)
	}
	topics = slices.Clone(topics)
	sort.Strings(topics)
	for _, t := range topics {
		var rows []GroupPartition
		committed := false
		for _, id := range sortedKeys(src.parts[t]) {
			addr := src.brokers[id]
			bt, ok := src.topics[id]
			if !ok && brokerErr[id] == nil {
				ts, err := a.brokerTopics(ctx, Broker{ID: id, Addr: addr})
				if err != nil {
					brokerErr[id] = err
				} else {
					bt = map[string]Topic{}
					for _, ti := range ts {
						bt[ti.Name] = ti
					}
					src.topics[id] = bt
				}
			}
			n := src.parts[t][id]
			if ti, ok := bt[t]; ok {
				n = max(n, len(ti.Offsets))
			}
			var stored []protocol.OffsetEntry
			if brokerErr[id] == nil && n > 0 {
				stored, err = a.fetchOffsets(ctx, addr, g, t, n)
				if err != nil {
					brokerErr[id] = err
				}
			}
			for p := range n {
				r := GroupPartition{Topic: t, BrokerID: id, Partition: int32(p), Owner: src.owners[tpKey{t, id, int32(p)}]}
				if p < len(stored) && stored[p].Offset >= 0 {
					r.Committed = ptr(stored[p].Offset)
					committed = true
				}
				var po PartitionOffsets
				known := false
				if brokerErr[id] == nil {
					for _, o := range bt[t].Offsets {
						if o.Partition == int32(p) {
							po, known = o, true
							r.LogStart, r.LogEnd = ptr(o.Min), ptr(o.Max)
						}
					}
				}
				if r.Committed != nil && r.LogEnd != nil {
					r.Lag = ptr(max(*r.LogEnd-*r.Committed, 0))
					if countLag && known {
						a.lagMessages(ctx, addr, &r, po)
					}
				}
				rows = append(rows, r)
			}
		}
		// Owner nodes of partitions no broker registers now.
		for _, k := range sortedOwnerKeys(src.owners) {
			if k.topic == t && !slices.ContainsFunc(rows, func(r GroupPartition) bool { return r.BrokerID == k.broker && r.Partition == k.part }) {
				rows = append(rows, GroupPartition{Topic: t, BrokerID: k.broker, Partition: k.part, Owner: src.owners[k]})
			}
		}
		if explicit || src.active[t] || committed {
			d.Partitions = append(d.Partitions, rows...)
		}
	}
	sort.SliceStable(d.Partitions, func(i, j int) bool {
		a, b := d.Partitions[i], d.Partitions[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.BrokerID != b.BrokerID {
			return a.BrokerID < b.BrokerID
		}
		return a.Partition < b.Partition
	})
	if d.Partitions == nil {
		d.Partitions = []GroupPartition{}
	}
	// Only the brokers of the rows shown count for errors.
	used := map[int]string{}
	for _, r := range d.Partitions {
		used[r.BrokerID] = src.brokers[r.BrokerID]
	}
	var errs []error
	for _, id := range sortedKeys(brokerErr) {
		if _, ok := used[id]; ok {
			errs = append(errs, fmt.Errorf("broker %d (%s): %w", id, orDash(src.brokers[id]), brokerErr[id]))
		}
	}
	return d, used, errors.Join(errs...)
}

func sortedOwnerKeys(m map[tpKey]string) []tpKey {
	out := make([]tpKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].broker != out[j].broker {
			return out[i].broker < out[j].broker
		}
		return out[i].part < out[j].part
	})
	return out
}

func ptr(v int64) *int64 { return &v }

// fetchOffsets reads the committed offsets of partitions 0..n-1.
func (a *Admin) fetchOffsets(ctx context.Context, addr, g, t string, n int) ([]protocol.OffsetEntry, error) {
	req := make([]protocol.OffsetEntry, n)
	for i := range req {
		req[i] = protocol.OffsetEntry{Topic: t, Partition: int32(i)}
	}
	body, err := a.roundTrip(ctx, addr, func(dst []byte, op int32) []byte { return protocol.AppendFetch(dst, g, req, op) })
	if err != nil {
		return nil, fmt.Errorf("fetch offsets of %s/%s: %w", g, t, err)
	}
	lines, err := protocol.ParseOffsetLines(body, true)
	if err != nil {
		return nil, fmt.Errorf("fetch offsets of %s/%s: bad reply: %w", g, t, err)
	}
	if len(lines) != n {
		return nil, fmt.Errorf("fetch offsets of %s/%s: %d lines for %d partitions", g, t, len(lines), n)
	}
	for i, l := range lines {
		if l.Topic != t || l.Partition != int32(i) {
			return nil, fmt.Errorf("fetch offsets of %s/%s: reply line %d is for %s-%d", g, t, i, l.Topic, l.Partition)
		}
	}
	return lines, nil
}

// lagMessages sets r.LagMessages: 0 at the end, the partition's count
// from its start, the broker's exact count (`stats count:`, from its
// record-count index), else, from a broker without one or while its index
// is being built after a restart, the records counted here when the lag
// is small, else an estimate from the mean record size.
func (a *Admin) lagMessages(ctx context.Context, addr string, r *GroupPartition, po PartitionOffsets) {
	lag := *r.Lag
	switch {
	case lag == 0:
		r.LagMessages = ptr(0)
		return
	case *r.Committed <= po.Min && po.Messages >= 0:
		r.LagMessages = ptr(po.Messages)
		return
	}
	if n, ok := a.brokerCount(ctx, addr, r.Topic, r.Partition, *r.Committed); ok {
		r.LagMessages = ptr(n)
		return
	}
	switch {
	case lag <= maxLagScan:
		if n, err := a.countRecords(ctx, addr, r.Topic, r.Partition, *r.Committed, po.Max); err == nil {
			r.LagMessages = ptr(n)
			return
		}
	}
	if po.Messages > 0 && po.Bytes() > 0 {
		r.LagMessages = ptr((lag*po.Messages + po.Bytes()/2) / po.Bytes())
		r.LagMessagesEstimated = true
	}
}

// brokerCount asks the broker for the exact number of messages of a
// partition from offset from to its end (`stats count:`); ok is false
// when it has no such item (an older broker answers it as a topic name)
// or its count is not exact yet.
func (a *Admin) brokerCount(ctx context.Context, addr, topic string, part int32, from int64) (int64, bool) {
	st, err := a.Stats(ctx, addr, fmt.Sprintf("count:%s:%d:%d", topic, part, from))
	if err != nil {
		return 0, false
	}
	return parseCountReply(st.Raw, topic)
}

// parseCountReply reads the exact count of a `stats count:` reply,
// `<topic> part <p> from <from> to <max> messages <n> exact <bool>`.
func parseCountReply(body, topic string) (int64, bool) {
	for _, l := range statsBodyLines(body) {
		f := strings.Fields(l)
		if len(f) != 11 || f[0] != topic || f[1] != "part" || f[7] != "messages" || f[9] != "exact" {
			continue
		}
		n, err := strconv.ParseInt(f[8], 10, 64)
		if err != nil || n < 0 || f[10] != "true" {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// countRecords counts the records in [from, to) of a partition.
func (a *Admin) countRecords(ctx context.Context, addr, topic string, part int32, from, to int64) (int64, error) {
	var n int64
	size := 256 << 10
	for off := from; off < to; {
		body, err := a.get(ctx, addr, topic, part, off, size)
		if err != nil {
			return 0, err
		}
		if len(body) == 0 {
			return 0, fmt.Errorf("get at %d: empty reply", off)
		}
		it := message.NewIterator(body, off, 0)
		for it.Next() {
			if it.Record().Offset >= to {
				return n, nil
			}
			n++
		}
		if err := it.Err(); err != nil {
			return 0, err
		}
		if it.Consumed() == 0 {
			if size = grownSize(body, size); size == 0 {
				return 0, fmt.Errorf("record at %d: bad length", off)
			}
			continue
		}
		off = it.NextOffset()
	}
	return n, nil
}

// ---- local mode ----

type groupLine struct {
	group, topic string
	members      int
}

type memberLine struct {
	group, topic, id string
	parts            []int32
}

// localGroupStats reads a broker's `stats groups` and `stats members`.
func (a *Admin) localGroupStats(ctx context.Context, addr string) ([]groupLine, []memberLine, error) {
	groups, err := a.Stats(ctx, addr, "groups")
	if err != nil {
		return nil, nil, err
	}
	members, err := a.Stats(ctx, addr, "members")
	if err != nil {
		return nil, nil, err
	}
	return parseGroupLines(groups.Raw), parseMemberLines(members.Raw), nil
}

// parseGroupLines parses `stats groups`: `<group> <topic> members <n>
// generation <g>`.
func parseGroupLines(body string) []groupLine {
	var out []groupLine
	for _, l := range statsBodyLines(body) {
		f := strings.Fields(l)
		if len(f) != 6 || f[2] != "members" || f[4] != "generation" {
			continue
		}
		n, err := strconv.Atoi(f[3])
		if err != nil {
			continue
		}
		out = append(out, groupLine{f[0], f[1], n})
	}
	return out
}

// parseMemberLines parses `stats members`: `<group> <topic> member <id>
// partitions <p1,p2,...|->`. Other lines (a broker that does not know the
// item answers it as a topic name) are skipped.
func parseMemberLines(body string) []memberLine {
	var out []memberLine
	for _, l := range statsBodyLines(body) {
		f := strings.Fields(l)
		if len(f) != 6 || f[2] != "member" || f[4] != "partitions" {
			continue
		}
		ml := memberLine{group: f[0], topic: f[1], id: f[3]}
		if f[5] != "-" {
			for _, s := range strings.Split(f[5], ",") {
				if p, err := strconv.ParseInt(s, 10, 32); err == nil {
					ml.parts = append(ml.parts, int32(p))
				}
			}
		}
		out = append(out, ml)
	}
	return out
}

func (a *Admin) localGroupSource(ctx context.Context, g string) (*groupSource, error) {
	src := &groupSource{
		mode:    "local",
		where:   "local mode, broker " + strings.Join(a.direct, ", "),
		owners:  map[tpKey]string{},
		active:  map[string]bool{},
		brokers: map[int]string{},
		parts:   map[string]map[int]int{},
		topics:  map[int]map[string]Topic{},
	}
	byID := map[string]*GroupMember{}
	var counted []GroupMember
	for _, addr := range a.direct {
		id64, err := a.brokerID(ctx, addr)
		if err != nil {
			return nil, err
		}
		id := int(id64)
		src.brokers[id] = addr
		groups, members, err := a.localGroupStats(ctx, addr)
		if err != nil {
			return nil, err
		}
		ts, err := a.brokerTopics(ctx, Broker{ID: id, Addr: addr})
		if err != nil {
			return nil, err
		}
		src.topics[id] = map[string]Topic{}
		for _, t := range ts {
			src.topics[id][t.Name] = t
			if src.parts[t.Name] == nil {
				src.parts[t.Name] = map[int]int{}
			}
			src.parts[t.Name][id] = t.Partitions
		}
		for _, l := range groups {
			if l.group == g {
				src.active[l.topic] = true
			}
		}
		seen := false
		for _, l := range members {
			if l.group != g {
				continue
			}
			seen = true
			m := byID[l.id]
			if m == nil {
				m = &GroupMember{ID: l.id}
				byID[l.id] = m
			}
			if !slices.Contains(m.Topics, l.topic) {
				m.Topics = append(m.Topics, l.topic)
			}
			m.Partitions += len(l.parts)
			for _, p := range l.parts {
				src.owners[tpKey{l.topic, id, p}] = l.id
			}
		}
		if !seen {
			// A broker without `stats members`: count from `stats groups`.
			for _, l := range groups {
				if l.group != g {
					continue
				}
				for range l.members {
					counted = append(counted, GroupMember{ID: "?" + strconv.Itoa(len(counted)+1), Topics: []string{l.topic}})
				}
			}
		}
	}
	src.members = sortedMembers(byID)
	if len(src.members) == 0 {
		src.members = counted
	}
	return src, nil
}

func sortedMembers(byID map[string]*GroupMember) []GroupMember {
	var out []GroupMember
	for _, id := range sortedKeys(byID) {
		m := byID[id]
		sort.Strings(m.Topics)
		if m.Topics == nil {
			m.Topics = []string{}
		}
		out = append(out, *m)
	}
	return out
}

// ---- cluster mode ----

// zkGroup is R/consumers/<g> as read from ZooKeeper.
type zkGroup struct {
	exists  bool
	members map[string][]string // consumerId -> subscribed topics
	owners  map[tpKey]string
	topics  map[string]bool // from ids, owners and offsets
}

// readZKGroup reads R/consumers/<g> (sdk/cluster's reader, shared with
// the broker's dashboard).
func readZKGroup(c *zk.Conn, root, g string) (*zkGroup, error) {
	n, err := cluster.ReadGroupNodes(c, root, g)
	if err != nil {
		return nil, err
	}
	zg := &zkGroup{exists: n.Exists, members: n.Members, owners: make(map[tpKey]string, len(n.Owners)), topics: n.Topics}
	for k, v := range n.Owners {
		zg.owners[tpKey{k.Topic, k.BrokerID, k.Partition}] = v
	}
	return zg, nil
}

func (a *Admin) zkRoot() string { return strings.TrimRight(a.zk.Root(), "/") }

func (a *Admin) zkGroupSource(ctx context.Context, g string) (*groupSource, error) {
	var layout *cluster.Layout
	var zg *zkGroup
	err := a.withZK(ctx, func(c *zk.Conn) error {
		var err error
		if layout, err = cluster.ReadLayout(c, a.zk.Root()); err != nil {
			return err
		}
		zg, err = readZKGroup(c, a.zkRoot(), g)
		return err
	})
	if err != nil {
		return nil, err
	}
	src := &groupSource{
		mode:    "cluster",
		where:   "cluster mode, ZooKeeper root " + layout.Root,
		owners:  zg.owners,
		active:  zg.topics,
		brokers: map[int]string{},
		parts:   map[string]map[int]int{},
		topics:  map[int]map[string]Topic{},
	}
	for _, b := range a.layoutBrokers(layout) {
		src.brokers[b.ID] = b.Addr
	}
	for _, t := range layout.Topics {
		for _, tp := range t.Brokers {
			if bn, err := zkpath.ParseBrokerName(tp.Broker); !tp.Subscribe || err != nil || !bn.IsMaster() {
				continue
			}
			if src.parts[t.Name] == nil {
				src.parts[t.Name] = map[int]int{}
			}
			src.parts[t.Name][tp.BrokerID] = tp.NumParts
		}
	}
	// Topics the group knows but no broker registers for subscription now.
	for t := range zg.topics {
		if src.parts[t] == nil {
			src.parts[t] = map[int]int{}
		}
	}
	byID := map[string]*GroupMember{}
	for id, topics := range zg.members {
		byID[id] = &GroupMember{ID: id, Topics: topics}
	}
	for _, owner := range zg.owners {
		if m := byID[owner]; m != nil {
			m.Partitions++
		}
	}
	src.members = sortedMembers(byID)
	return src, nil
}

func (a *Admin) zkListGroups(ctx context.Context) ([]GroupSummary, error) {
	out := []GroupSummary{}
	err := a.withZK(ctx, func(c *zk.Conn) error {
		groups, err := cluster.ReadChildren(c, zkpath.Consumers(a.zkRoot()))
		if err != nil {
			return err
		}
		sort.Strings(groups)
		for _, g := range groups {
			zg, err := readZKGroup(c, a.zkRoot(), g)
			if err != nil {
				return err
			}
			if !zg.exists {
				continue
			}
			out = append(out, GroupSummary{Group: g, Topics: sortedKeys(zg.topics), Members: len(zg.members)})
		}
		return nil
	})
	return out, err
}
