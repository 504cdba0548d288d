package broker

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/metaq-go/metaq/sdk/balance"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Consumer groups in local mode: without ZooKeeper the broker coordinates
// the members of a group over its own partitions of a topic (join,
// heartbeat, leave; docs/protocol.md). Membership is tied to the
// connection that joined.
//
// State per (group, topic):
//
//   - target(m): what member m should own, from the group's balance
//     strategy over the members' ids and the topic's local partitions;
//     recomputed, and the generation bumped, whenever a member comes or goes.
//   - held(m): the partitions m may be fetching right now: every partition
//     sent to m in a view, until m acknowledges a view without it.
//   - Invariant: a partition is in the held set of at most one member.
//
// A view sent to m (the reply to join and heartbeat) is
// target(m) ∩ (held(m) ∪ free), free being the partitions nobody holds:
// a partition moving from A to B is first left out of A's view (revoked);
// A stops fetching it, commits its offsets and acknowledges by heartbeating
// with the generation of that view, which sets held(A) to that view; only
// then is the partition free and granted to B, in B's next view. The
// generation is also bumped whenever a member is sent a view that differs
// from its previous one, so (member, generation) names one view and an old
// or lost reply is never mistaken for an acknowledgement.
//
// A member is removed (as if it had left) when its connection closes, when
// it has not heartbeated for the session timeout, or when a revocation has
// waited for its acknowledgement longer than that.
type groupSet struct {
	mu      sync.Mutex
	groups  map[groupKey]*cgroup
	timeout time.Duration
	now     func() time.Time
}

// DefaultGroupSessionTimeout is how long a group member may go without a
// heartbeat, or without acknowledging a revocation, before the broker
// removes it: three times the SDK's default heartbeat interval of 1 s.
const DefaultGroupSessionTimeout = 3 * time.Second

type groupKey struct{ group, topic string }

type cgroup struct {
	strategy string // lower case
	strat    balance.Strategy
	nparts   int
	brokerID int
	gen      int64
	members  map[string]*member
}

type member struct {
	c       *conn
	target  []int32
	held    map[int32]bool
	sent    []int32 // the last view sent
	sentGen int64   // its generation
	seen    time.Time
	// revoking is when held(m) last became larger than target(m); zero
	// when nothing waits for m's acknowledgement.
	revoking time.Time
}

func (gs *groupSet) clock() time.Time {
	if gs.now != nil {
		return gs.now()
	}
	return time.Now()
}

func (gs *groupSet) sessionTimeout() time.Duration {
	if gs.timeout > 0 {
		return gs.timeout
	}
	return DefaultGroupSessionTimeout
}

// groupError is a refused group request: its status code and reason.
type groupError struct {
	code int
	msg  string
}

func (gs *groupSet) join(c *conn, k groupKey, id, strategy string, nparts, brokerID int) (int64, []int32, *groupError) {
	strategy = strings.ToLower(strategy)
	strat, err := balance.ByName(strategy)
	if err != nil {
		return 0, nil, &groupError{protocol.StatusBadRequest, "join: " + err.Error()}
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	now := gs.clock()
	if g := gs.groups[k]; g != nil {
		gs.sweep(k, g, now) // may delete an emptied group
	}
	g := gs.groups[k]
	if g == nil {
		if gs.groups == nil {
			gs.groups = make(map[groupKey]*cgroup)
		}
		g = &cgroup{strategy: strategy, strat: strat, nparts: nparts, brokerID: brokerID, members: make(map[string]*member)}
		gs.groups[k] = g
	}
	if g.strategy != strategy && len(g.members) > 0 {
		return 0, nil, &groupError{protocol.StatusBadRequest, "join: group " + k.group + " uses strategy " +
			g.strategy + ", not " + strategy}
	}
	g.strategy, g.strat = strategy, strat
	m := g.members[id]
	switch {
	case m != nil && m.c != c:
		return 0, nil, &groupError{protocol.StatusConflict, "join: consumer id " + id +
			" is already a member of group " + k.group + " on another connection"}
	case m == nil:
		m = &member{c: c, held: make(map[int32]bool), seen: now, sentGen: -1}
		g.members[id] = m
		g.rebalance()
	}
	m.seen = now
	gen, view := g.view(m)
	return gen, view, nil
}

func (gs *groupSet) heartbeat(c *conn, k groupKey, id string, gen int64) (int64, []int32, *groupError) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	now := gs.clock()
	g := gs.groups[k]
	if g != nil {
		gs.sweep(k, g, now)
	}
	var m *member
	if g != nil {
		m = g.members[id]
	}
	if m == nil || m.c != c {
		return 0, nil, &groupError{protocol.StatusNotFound, "heartbeat: " + id + " is not a member of group " +
			k.group + " for topic " + k.topic + " on this connection: join again"}
	}
	m.seen = now
	if gen == m.sentGen {
		// Acknowledged: m runs exactly its last view now.
		clear(m.held)
		for _, p := range m.sent {
			m.held[p] = true
		}
	}
	g.updateRevoking(m, now)
	v, view := g.view(m)
	return v, view, nil
}

func (gs *groupSet) leave(c *conn, k groupKey, id string) int64 {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.groups[k]
	if g == nil {
		return 0
	}
	if m := g.members[id]; m != nil && m.c == c {
		gs.remove(k, g, id)
	}
	return g.gen
}

// connClosed removes every membership of c.
func (gs *groupSet) connClosed(c *conn) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	for k, g := range gs.groups {
		for id, m := range g.members {
			if m.c == c {
				gs.remove(k, g, id)
			}
		}
	}
}

func (gs *groupSet) remove(k groupKey, g *cgroup, id string) {
	delete(g.members, id)
	if len(g.members) == 0 {
		delete(gs.groups, k)
		return
	}
	g.rebalance()
}

// sweep removes the members that missed the session timeout.
func (gs *groupSet) sweep(k groupKey, g *cgroup, now time.Time) {
	limit := gs.sessionTimeout()
	for id, m := range g.members {
		g.updateRevoking(m, now)
		if now.Sub(m.seen) > limit || (!m.revoking.IsZero() && now.Sub(m.revoking) > limit) {
			gs.remove(k, g, id)
		}
	}
}

// updateRevoking notes when m started to hold more than its target.
func (g *cgroup) updateRevoking(m *member, now time.Time) {
	extra := false
	for p := range m.held {
		if _, ok := slices.BinarySearch(m.target, p); !ok {
			extra = true
			break
		}
	}
	switch {
	case !extra:
		m.revoking = time.Time{}
	case m.revoking.IsZero():
		m.revoking = now
	}
}

// rebalance recomputes every member's target and bumps the generation.
func (g *cgroup) rebalance() {
	g.gen++
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	parts := make([]balance.Partition, g.nparts)
	for i := range parts {
		parts[i] = balance.Partition{BrokerID: g.brokerID, Partition: int32(i)}
	}
	for id, m := range g.members {
		m.target = m.target[:0]
		for _, p := range g.strat.Assign(id, ids, parts) {
			m.target = append(m.target, p.Partition)
		}
	}
}

// view returns m's view (see the type comment) and records it as sent.
func (g *cgroup) view(m *member) (int64, []int32) {
	var v []int32
	for _, p := range m.target {
		if m.held[p] || !g.heldByOther(m, p) {
			v = append(v, p)
		}
	}
	if !slices.Equal(v, m.sent) || m.sentGen < 0 {
		g.gen++
	}
	for _, p := range v {
		m.held[p] = true
	}
	m.sent, m.sentGen = v, g.gen
	return g.gen, slices.Clone(v)
}

func (g *cgroup) heldByOther(m *member, p int32) bool {
	for _, o := range g.members {
		if o != m && o.held[p] {
			return true
		}
	}
	return false
}

// GroupOwners returns, for a consumer group of topic coordinated by this
// broker (local mode), which member may be fetching each partition: a
// partition moving between members is held by the old owner until it
// acknowledges the handover, and missing while free. For monitoring and
// tests.
func (b *Broker) GroupOwners(group, topic string) map[int32]string {
	gs := &b.groups
	gs.mu.Lock()
	defer gs.mu.Unlock()
	out := make(map[int32]string)
	g := gs.groups[groupKey{group, topic}]
	if g == nil {
		return out
	}
	for id, m := range g.members {
		for p := range m.held {
			if o, dup := out[p]; dup {
				// Cannot happen (the invariant); make it visible to tests.
				out[p] = o + "+" + id
				continue
			}
			out[p] = id
		}
	}
	return out
}

// writeGroupStats writes the `stats groups` lines.
func (b *Broker) writeGroupStats(sb *strings.Builder) {
	gs := &b.groups
	gs.mu.Lock()
	keys := make([]groupKey, 0, len(gs.groups))
	for k := range gs.groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].group != keys[j].group {
			return keys[i].group < keys[j].group
		}
		return keys[i].topic < keys[j].topic
	})
	sb.WriteString("STATS\r\n")
	for _, k := range keys {
		g := gs.groups[k]
		fmt.Fprintf(sb, "%s %s members %d generation %d\r\n", k.group, k.topic, len(g.members), g.gen)
	}
	gs.mu.Unlock()
	sb.WriteString("END\r\n")
}

// handleGroup serves join, heartbeat and leave.
func (c *conn) handleGroup(r *protocol.Request) {
	k := groupKey{group: string(r.Group), topic: string(r.Topic)}
	id := string(r.Member)
	gs := &c.b.groups
	var gen int64
	var view []int32
	var gerr *groupError
	switch r.Op {
	case protocol.OpLeave:
		c.replyInt(protocol.StatusOK, gs.leave(c, k, id), r.Opaque)
		return
	case protocol.OpJoin:
		t, err := c.b.lookup(r.Topic, false)
		if err != nil {
			c.reply(protocol.StatusInternalError, "unknown topic "+k.topic, r.Opaque)
			return
		}
		k.topic = t.name
		gen, view, gerr = gs.join(c, k, id, string(r.Strategy), len(t.parts), c.b.cfg.BrokerID)
	case protocol.OpHeartbeat:
		gen, view, gerr = gs.heartbeat(c, k, id, r.Generation)
	}
	if gerr != nil {
		c.reply(gerr.code, gerr.msg, r.Opaque)
		return
	}
	c.replyBytes(protocol.StatusOK, protocol.AppendGroupView(nil, gen, view), r.Opaque)
}
