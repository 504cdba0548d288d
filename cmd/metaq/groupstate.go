package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/sdk/balance"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/cluster"
)

// Loading a consumer group: its members and owners (local mode: the
// broker's stats; cluster mode: ZooKeeper), then per partition the
// committed offset and the log bounds from the partition's broker.

// ---- the state of a group ----

// partRow is one (topic, broker, partition) of a group.
type partRow struct {
	Topic     string `json:"topic"`
	BrokerID  int    `json:"broker_id"`
	Partition int32  `json:"partition"`
	// Committed is the next offset the group fetches; nil: none committed.
	Committed *int64 `json:"committed"`
	// LogStart and LogEnd are the partition's readable range; nil when the
	// broker could not be read.
	LogStart *int64 `json:"log_start"`
	LogEnd   *int64 `json:"log_end"`
	// Lag is LogEnd - Committed; nil when either is unknown.
	Lag *int64 `json:"lag"`
	// Owner is the member that owns the partition ("" for none).
	Owner string `json:"owner"`
}

type memberInfo struct {
	ID     string   `json:"id"`
	Topics []string `json:"topics"`
	// Partitions is how many partitions it owns.
	Partitions int `json:"partitions"`
}

type tpKey struct {
	topic  string
	broker int
	part   int32
}

// groupState is a group as loaded by loadGroup.
type groupState struct {
	mode    string // "local" or "cluster"
	where   string // for messages: the broker or ZooKeeper read
	members []memberInfo
	rows    []partRow
	brokers map[int]*brokerSession
	timeout time.Duration
}

func (gs *groupState) close() {
	for _, b := range gs.brokers {
		b.close()
	}
}

// brokerErrors reports the brokers that could not be read.
func (gs *groupState) brokerErrors() error {
	var errs []error
	for _, id := range sortedGroupKeys(gs.brokers) {
		if b := gs.brokers[id]; b.err != nil {
			errs = append(errs, fmt.Errorf("broker %d (%s): %w", id, orDash(b.addr), b.err))
		}
	}
	return errors.Join(errs...)
}

// groupSource is what a mode knows of a group before the brokers are asked.
type groupSource struct {
	mode, where string
	members     []memberInfo
	owners      map[tpKey]string
	// active are the topics the group has members, owners (or, in
	// cluster mode, offset znodes) for.
	active map[string]bool
	// brokers maps broker ids to host:port ("" when it has no master now).
	brokers map[int]string
	// parts is topic -> broker id -> partition count, for every topic the
	// group could have offsets in.
	parts map[string]map[int]int
	// sessions already opened (local mode: the one broker).
	sessions map[int]*brokerSession
}

func loadGroup(e *env, o groupOpts, g string) (*groupState, error) {
	var src *groupSource
	var err error
	if o.zk != "" {
		src, err = zkGroupSource(e, o, g)
	} else {
		src, err = localGroupSource(e, g)
	}
	if err != nil {
		return nil, err
	}
	gs := &groupState{mode: src.mode, where: src.where, members: src.members, brokers: src.sessions, timeout: e.timeout}
	if gs.brokers == nil {
		gs.brokers = map[int]*brokerSession{}
	}
	topics := o.topics
	if len(topics) > 0 {
		for _, t := range topics {
			if src.parts[t] == nil {
				gs.close()
				return nil, fmt.Errorf("unknown topic %q (%s)", t, src.where)
			}
		}
	} else {
		topics = sortedGroupKeys(src.parts)
	}
	sort.Strings(topics)
	for _, t := range topics {
		var rows []partRow
		committed := false
		for _, id := range sortedGroupKeys(src.parts[t]) {
			bs := gs.brokers[id]
			if bs == nil {
				bs = openBrokerSession(e, id, src.brokers[id])
				gs.brokers[id] = bs
			}
			n := src.parts[t][id]
			if ti, ok := bs.topics[t]; ok {
				n = max(n, len(ti.Offsets))
			}
			var stored []client.StoredOffset
			if bs.err == nil && n > 0 {
				ids := make([]int32, n)
				for i := range ids {
					ids[i] = int32(i)
				}
				ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
				stored, err = bs.store.FetchOffsets(ctx, g, t, ids)
				cancel()
				if err != nil {
					bs.err = err
					stored = nil
				}
			}
			for p := range n {
				r := partRow{Topic: t, BrokerID: id, Partition: int32(p), Owner: src.owners[tpKey{t, id, int32(p)}]}
				if p < len(stored) && stored[p].Offset >= 0 {
					r.Committed = int64Ptr(stored[p].Offset)
					committed = true
				}
				if bs.err == nil {
					if po, ok := bs.offsets(t, int32(p)); ok {
						r.LogStart, r.LogEnd = int64Ptr(po.Min), int64Ptr(po.Max)
					}
				}
				if r.Committed != nil && r.LogEnd != nil {
					r.Lag = int64Ptr(*r.LogEnd - *r.Committed)
				}
				rows = append(rows, r)
			}
		}
		// Owner nodes of partitions no broker registers now.
		for k, owner := range src.owners {
			if k.topic == t && !slices.ContainsFunc(rows, func(r partRow) bool { return r.BrokerID == k.broker && r.Partition == k.part }) {
				rows = append(rows, partRow{Topic: t, BrokerID: k.broker, Partition: k.part, Owner: owner})
			}
		}
		if len(o.topics) > 0 || src.active[t] || committed {
			gs.rows = append(gs.rows, rows...)
		}
	}
	sort.SliceStable(gs.rows, func(i, j int) bool {
		a, b := gs.rows[i], gs.rows[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.BrokerID != b.BrokerID {
			return a.BrokerID < b.BrokerID
		}
		return a.Partition < b.Partition
	})
	// Only the brokers of the rows shown count for errors.
	used := map[int]bool{}
	for _, r := range gs.rows {
		used[r.BrokerID] = true
	}
	for id, b := range gs.brokers {
		if !used[id] {
			b.close()
			delete(gs.brokers, id)
		}
	}
	return gs, nil
}

// ---- local mode ----

func localGroupSource(e *env, g string) (*groupSource, error) {
	bs := openBrokerSession(e, -1, e.addr)
	if bs.err != nil {
		bs.close()
		return nil, bs.err
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	summary, err := bs.adm.Stats(ctx, "")
	if err == nil {
		bs.id, err = statsInt(summary, "broker_id")
	}
	var groups []groupLine
	var members []memberLine
	if err == nil {
		groups, members, err = localGroupStats(ctx, bs.adm)
	}
	if err != nil {
		bs.close()
		return nil, err
	}
	src := &groupSource{
		mode:     "local",
		where:    "local mode, broker " + e.addr,
		owners:   map[tpKey]string{},
		active:   map[string]bool{},
		brokers:  map[int]string{bs.id: e.addr},
		parts:    map[string]map[int]int{},
		sessions: map[int]*brokerSession{bs.id: bs},
	}
	for _, l := range groups {
		if l.group == g {
			src.active[l.topic] = true
		}
	}
	byID := map[string]*memberInfo{}
	for _, l := range members {
		if l.group != g {
			continue
		}
		m := byID[l.id]
		if m == nil {
			m = &memberInfo{ID: l.id}
			byID[l.id] = m
		}
		m.Topics = append(m.Topics, l.topic)
		m.Partitions += len(l.parts)
		for _, p := range l.parts {
			src.owners[tpKey{l.topic, bs.id, p}] = l.id
		}
	}
	src.members = sortedMembers(byID)
	if len(src.members) == 0 {
		// A broker without `stats members`: count from `stats groups`.
		for _, l := range groups {
			if l.group == g && l.members > 0 {
				for i := range l.members {
					src.members = append(src.members, memberInfo{ID: "?" + strconv.Itoa(i+1), Topics: []string{l.topic}})
				}
			}
		}
	}
	for name, ti := range bs.topics {
		src.parts[name] = map[int]int{bs.id: max(ti.Partitions, len(ti.Offsets))}
	}
	return src, nil
}

func localListGroups(e *env) ([]jsonGroupSummary, error) {
	adm, err := newAdmin(e)
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	groups, members, err := localGroupStats(ctx, adm)
	if err != nil {
		return nil, err
	}
	type agg struct {
		topics []string
		ids    map[string]bool
		most   int
	}
	byGroup := map[string]*agg{}
	for _, l := range groups {
		a := byGroup[l.group]
		if a == nil {
			a = &agg{ids: map[string]bool{}}
			byGroup[l.group] = a
		}
		if !slices.Contains(a.topics, l.topic) {
			a.topics = append(a.topics, l.topic)
		}
		a.most = max(a.most, l.members)
	}
	sawMembers := false
	for _, l := range members {
		if a := byGroup[l.group]; a != nil {
			a.ids[l.id] = true
			sawMembers = true
		}
	}
	var out []jsonGroupSummary
	for _, g := range sortedGroupKeys(byGroup) {
		a := byGroup[g]
		sort.Strings(a.topics)
		n := len(a.ids)
		if !sawMembers {
			n = a.most
		}
		out = append(out, jsonGroupSummary{Group: g, Topics: a.topics, Members: n})
	}
	return out, nil
}

// localGroupStats reads the broker's `stats groups` and `stats members`.
func localGroupStats(ctx context.Context, adm *client.Admin) ([]groupLine, []memberLine, error) {
	groups, err := adm.Stats(ctx, "groups")
	if err != nil {
		return nil, nil, err
	}
	members, err := adm.Stats(ctx, "members")
	if err != nil {
		return nil, nil, err
	}
	return parseGroupLines(groups), parseMemberLines(members), nil
}

type groupLine struct {
	group, topic string
	members      int
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

type memberLine struct {
	group, topic, id string
	parts            []int32
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

func statsBodyLines(body string) []string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		l = strings.TrimRight(l, "\r")
		if l != "" && l != "STATS" && l != "END" {
			out = append(out, l)
		}
	}
	return out
}

// statsInt returns the value of key in a `stats` body.
func statsInt(body, key string) (int, error) {
	for _, l := range statsBodyLines(body) {
		if k, v, ok := strings.Cut(l, " "); ok && k == key {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("the broker's stats have no %s", key)
}

// ---- cluster mode ----

// zkGroup is R/consumers/<g> as read from ZooKeeper.
type zkGroup struct {
	exists  bool
	members map[string][]string // consumerId -> subscribed topics
	owners  map[tpKey]string
	topics  map[string]bool // from ids, owners and offsets
}

func readZKGroup(c *zk.Conn, root, g string) (*zkGroup, error) {
	base := root + "/consumers/" + g
	zg := &zkGroup{members: map[string][]string{}, owners: map[tpKey]string{}, topics: map[string]bool{}}
	if ok, _, err := c.Exists(base); err != nil {
		return nil, fmt.Errorf("%s: %w", base, err)
	} else if !ok {
		return zg, nil
	}
	zg.exists = true
	ids, err := cluster.ReadChildren(c, base+"/ids")
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		v, ok, err := cluster.ReadData(c, base+"/ids/"+id)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // gone meanwhile
		}
		var topics []string
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" && !slices.Contains(topics, t) {
				topics = append(topics, t)
				zg.topics[t] = true
			}
		}
		sort.Strings(topics)
		zg.members[id] = topics
	}
	topics, err := cluster.ReadChildren(c, base+"/owners")
	if err != nil {
		return nil, err
	}
	for _, t := range topics {
		nodes, err := cluster.ReadChildren(c, base+"/owners/"+t)
		if err != nil {
			return nil, err
		}
		for _, n := range nodes {
			p, err := balance.ParsePartition(n)
			if err != nil {
				continue
			}
			v, ok, err := cluster.ReadData(c, base+"/owners/"+t+"/"+n)
			if err != nil {
				return nil, err
			}
			if ok {
				zg.owners[tpKey{t, p.BrokerID, p.Partition}] = v
				zg.topics[t] = true
			}
		}
	}
	topics, err = cluster.ReadChildren(c, base+"/offsets")
	if err != nil {
		return nil, err
	}
	for _, t := range topics {
		zg.topics[t] = true
	}
	return zg, nil
}

func zkGroupSource(e *env, o groupOpts, g string) (*groupSource, error) {
	root := strings.TrimRight(o.root, "/")
	var layout *cluster.Layout
	var zg *zkGroup
	err := withZK(e, o.zk, func(c *zk.Conn) error {
		var err error
		if layout, err = cluster.ReadLayout(c, o.root); err != nil {
			return err
		}
		zg, err = readZKGroup(c, root, g)
		return err
	})
	if err != nil {
		return nil, err
	}
	src := &groupSource{
		mode:    "cluster",
		where:   "cluster mode, ZooKeeper " + o.zk + " root " + layout.Root,
		owners:  zg.owners,
		active:  zg.topics,
		brokers: map[int]string{},
		parts:   map[string]map[int]int{},
	}
	for _, b := range layout.Brokers {
		addr, _ := strings.CutPrefix(b.Master, "meta://")
		src.brokers[b.ID] = addr
	}
	for _, t := range layout.Topics {
		for _, tp := range t.Brokers {
			if !tp.Subscribe || !strings.HasSuffix(tp.Broker, "-m") {
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
	byID := map[string]*memberInfo{}
	for id, topics := range zg.members {
		byID[id] = &memberInfo{ID: id, Topics: topics}
	}
	for _, owner := range zg.owners {
		if m := byID[owner]; m != nil {
			m.Partitions++
		}
	}
	src.members = sortedMembers(byID)
	return src, nil
}

func zkListGroups(e *env, o groupOpts) ([]jsonGroupSummary, error) {
	root := strings.TrimRight(o.root, "/")
	var out []jsonGroupSummary
	err := withZK(e, o.zk, func(c *zk.Conn) error {
		groups, err := cluster.ReadChildren(c, root+"/consumers")
		if err != nil {
			return err
		}
		for _, g := range groups {
			zg, err := readZKGroup(c, root, g)
			if err != nil {
				return err
			}
			if !zg.exists {
				continue
			}
			out = append(out, jsonGroupSummary{Group: g, Topics: sortedGroupKeys(zg.topics), Members: len(zg.members)})
		}
		return nil
	})
	return out, err
}

// ---- brokers ----

// brokerSession is one broker's connections for the group commands.
type brokerSession struct {
	id      int
	addr    string
	timeout time.Duration
	adm     *client.Admin
	store   *client.BrokerOffsetStore
	topics  map[string]client.TopicInfo
	rc      *rawConn // for gets, dialled on demand
	err     error    // the broker could not be read
}

// openBrokerSession connects to the broker at addr and reads its topics;
// failures are kept in err.
func openBrokerSession(e *env, id int, addr string) *brokerSession {
	bs := &brokerSession{id: id, addr: addr, timeout: e.timeout}
	if addr == "" {
		bs.err = errors.New("no master registered in ZooKeeper")
		return bs
	}
	if bs.err = checkBrokerAt(e, addr); bs.err != nil {
		return bs
	}
	opts := adminOpts(e)
	var err error
	if bs.adm, err = client.NewAdmin(addr, opts...); err == nil {
		bs.store, err = client.NewBrokerOffsetStore(addr, opts...)
	}
	if err != nil {
		bs.err = err
		return bs
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	infos, err := bs.adm.Topics(ctx)
	if err != nil {
		bs.err = err
		return bs
	}
	bs.topics = make(map[string]client.TopicInfo, len(infos))
	for _, t := range infos {
		bs.topics[t.Name] = t
	}
	return bs
}

func (bs *brokerSession) close() {
	if bs.adm != nil {
		bs.adm.Close()
	}
	if bs.store != nil {
		bs.store.Close()
	}
	if bs.rc != nil {
		bs.rc.Close()
	}
}

func (bs *brokerSession) offsets(topic string, p int32) (client.PartitionOffsets, bool) {
	for _, o := range bs.topics[topic].Offsets {
		if o.Partition == p {
			return o, true
		}
	}
	return client.PartitionOffsets{}, false
}
