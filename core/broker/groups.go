package broker

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/metaq-go/metaq/sdk/balance"
	"github.com/metaq-go/metaq/sdk/message"
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
//
// Locking: groupSet.mu guards only the map of groups and is never held
// while waiting for anything else; each group has its own mutex, so a
// busy group never delays another one. Lock order: a group's mu, then
// groupSet.mu or a connection's connGroups.mu. A connection lists its
// memberships (connGroups), so closing it touches only its own groups.
//
// Cost: a membership change inserts or removes one id in the sorted
// member ids (and, for consist, its points on the kept hash ring:
// balance.Group) and computes every member's target in one call, at most
// O((n + P) log(n + P)) for n members and P partitions; a view is O(P)
// through the owner index; the expiry sweep looks at the members only once
// the earliest deadline of a member has passed.
type groupSet struct {
	mu      sync.Mutex
	groups  map[groupKey]*cgroup
	timeout time.Duration
	now     func() time.Time
	// maxMembers and maxPerConn are Config.MaxGroupMembers and
	// Config.MaxMembershipsPerConnection; 0 means no limit.
	maxMembers, maxPerConn int
}

// DefaultGroupSessionTimeout is how long a group member may go without a
// heartbeat, or without acknowledging a revocation, before the broker
// removes it: three times the SDK's default heartbeat interval of 1 s.
const DefaultGroupSessionTimeout = 3 * time.Second

// maxGroupIDLen is the longest group, topic or consumer id in bytes.
const maxGroupIDLen = 255

type groupKey struct{ group, topic string }

type cgroup struct {
	key groupKey
	mu  sync.Mutex // guards everything below
	// dead is set when the group, emptied, left groupSet.groups: a caller
	// that found it there before must look it up again.
	dead     bool
	strategy string // lower case
	strat    balance.Strategy
	parts    []message.Partition // the topic's local partitions, in order
	gen      int64
	members  map[string]*member
	mem      *balance.Group // the members' ids, sorted, for the strategy
	owner    []*member      // owner[p] is the member whose held set has p, or nil
	// nextSweep is a time before which no member can expire (at most the
	// earliest deadline at the last sweep; deadlines only move later).
	nextSweep time.Time
}

type member struct {
	id      string
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

// connGroups is one connection's group memberships, so that closing it
// touches only its own groups, and so that their number can be limited.
type connGroups struct {
	mu     sync.Mutex
	closed bool
	refs   map[memberRef]struct{}
}

// memberRef names one membership: member id in group k.
type memberRef struct {
	k  groupKey
	id string
}

// add records a new membership of the connection, unless it is closed or
// already holds max of them (max 0: no limit).
func (cg *connGroups) add(r memberRef, max int) *groupError {
	cg.mu.Lock()
	defer cg.mu.Unlock()
	switch {
	case cg.closed:
		return &groupError{protocol.StatusBadRequest, "join: connection closed"}
	case max > 0 && len(cg.refs) >= max:
		return &groupError{protocol.StatusBusy, "join: this connection already holds " + strconv.Itoa(max) +
			" group memberships (max_memberships_per_connection)"}
	}
	if cg.refs == nil {
		cg.refs = make(map[memberRef]struct{})
	}
	cg.refs[r] = struct{}{}
	return nil
}

func (cg *connGroups) remove(r memberRef) {
	cg.mu.Lock()
	delete(cg.refs, r)
	cg.mu.Unlock()
}

// close marks the connection closed (add fails from now on) and returns
// its memberships by group.
func (cg *connGroups) close() map[groupKey][]string {
	cg.mu.Lock()
	defer cg.mu.Unlock()
	cg.closed = true
	out := make(map[groupKey][]string)
	for r := range cg.refs {
		out[r.k] = append(out[r.k], r.id)
	}
	cg.refs = nil
	return out
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

// lockGroup returns group k with its mutex held, made by create if it does
// not exist and create is not nil; nil if it does not exist. Release it
// with release.
func (gs *groupSet) lockGroup(k groupKey, create func() *cgroup) *cgroup {
	for {
		gs.mu.Lock()
		g := gs.groups[k]
		if g == nil && create != nil {
			if gs.groups == nil {
				gs.groups = make(map[groupKey]*cgroup)
			}
			g = create()
			gs.groups[k] = g
		}
		gs.mu.Unlock()
		if g == nil {
			return nil
		}
		g.mu.Lock()
		if !g.dead {
			return g
		}
		// Emptied and removed meanwhile: the map no longer has it.
		g.mu.Unlock()
	}
}

// release unlocks g, first removing it from the set if it has no members.
func (gs *groupSet) release(k groupKey, g *cgroup) {
	if len(g.members) == 0 {
		g.dead = true
		gs.mu.Lock()
		if gs.groups[k] == g {
			delete(gs.groups, k)
		}
		gs.mu.Unlock()
	}
	g.mu.Unlock()
}

// partitionsOf returns the nparts local partitions of broker brokerID.
func partitionsOf(nparts, brokerID int) []message.Partition {
	parts := make([]message.Partition, nparts)
	for i := range parts {
		parts[i] = message.Partition{BrokerID: brokerID, Partition: int32(i)}
	}
	return parts
}

func (gs *groupSet) join(c *conn, k groupKey, id, strategy string, nparts, brokerID int) (int64, []int32, *groupError) {
	strategy = strings.ToLower(strategy)
	strat, err := balance.ByName(strategy)
	if err != nil {
		return 0, nil, &groupError{protocol.StatusBadRequest, "join: " + err.Error()}
	}
	g := gs.lockGroup(k, func() *cgroup { return &cgroup{key: k, members: make(map[string]*member)} })
	defer gs.release(k, g)
	now := gs.clock()
	gs.sweep(g, now)
	if len(g.members) == 0 {
		// A new group, or one whose members all left: it takes this
		// join's strategy and the topic's current partitions.
		g.strategy, g.strat, g.mem = strategy, strat, balance.NewGroup(strat)
		g.parts, g.owner = partitionsOf(nparts, brokerID), make([]*member, nparts)
	}
	if g.strategy != strategy {
		return 0, nil, &groupError{protocol.StatusBadRequest, "join: group " + k.group + " uses strategy " +
			g.strategy + ", not " + strategy}
	}
	m := g.members[id]
	switch {
	case m != nil && m.c != c:
		return 0, nil, &groupError{protocol.StatusConflict, "join: consumer id " + id +
			" is already a member of group " + k.group + " on another connection"}
	case m == nil:
		if gs.maxMembers > 0 && len(g.members) >= gs.maxMembers {
			return 0, nil, &groupError{protocol.StatusBusy, "join: group " + k.group + " already has " +
				strconv.Itoa(gs.maxMembers) + " members (max_group_members)"}
		}
		if gerr := c.groups.add(memberRef{k, id}, gs.maxPerConn); gerr != nil {
			return 0, nil, gerr
		}
		m = &member{id: id, c: c, held: make(map[int32]bool), seen: now, sentGen: -1}
		g.members[id] = m
		g.mem.Add(id)
		g.rebalance(now)
	}
	m.seen = now
	gen, view := g.view(m)
	return gen, view, nil
}

func (gs *groupSet) heartbeat(c *conn, k groupKey, id string, gen int64) (int64, []int32, *groupError) {
	var m *member
	g := gs.lockGroup(k, nil)
	if g != nil {
		defer gs.release(k, g)
		now := gs.clock()
		gs.sweep(g, now)
		m = g.members[id]
		if m != nil && m.c == c {
			m.seen = now
			if gen == m.sentGen {
				// Acknowledged: m runs exactly its last view now (which
				// is a subset of what it held).
				for p := range m.held {
					if _, ok := slices.BinarySearch(m.sent, p); !ok {
						delete(m.held, p)
						g.owner[p] = nil
					}
				}
			}
			g.updateRevoking(m, now)
			v, view := g.view(m)
			return v, view, nil
		}
	}
	return 0, nil, &groupError{protocol.StatusNotFound, "heartbeat: " + id + " is not a member of group " +
		k.group + " for topic " + k.topic + " on this connection: join again"}
}

func (gs *groupSet) leave(c *conn, k groupKey, id string) int64 {
	g := gs.lockGroup(k, nil)
	if g == nil {
		return 0
	}
	defer gs.release(k, g)
	if m := g.members[id]; m != nil && m.c == c {
		g.remove(m)
		g.rebalance(gs.clock())
	}
	return g.gen
}

// connClosed removes every membership of c, locking only c's groups, each
// once.
func (gs *groupSet) connClosed(c *conn) {
	for k, ids := range c.groups.close() {
		g := gs.lockGroup(k, nil)
		if g == nil {
			continue
		}
		n := len(g.members)
		for _, id := range ids {
			if m := g.members[id]; m != nil && m.c == c {
				g.remove(m)
			}
		}
		if len(g.members) != n {
			g.rebalance(gs.clock())
		}
		gs.release(k, g)
	}
}

// remove drops m from g and from its connection's list, freeing what it
// held. The caller rebalances.
func (g *cgroup) remove(m *member) {
	for p := range m.held {
		g.owner[p] = nil
	}
	delete(g.members, m.id)
	g.mem.Remove(m.id)
	m.c.groups.remove(memberRef{g.key, m.id})
}

// sweep removes the members that missed the session timeout, in one
// rebalance. It looks at the members only once the earliest deadline
// (nextSweep) has passed.
func (gs *groupSet) sweep(g *cgroup, now time.Time) {
	if !now.After(g.nextSweep) {
		return
	}
	limit := gs.sessionTimeout()
	var expired []*member
	var next time.Time
	for _, m := range g.members {
		d := m.seen.Add(limit)
		if !m.revoking.IsZero() && m.revoking.Add(limit).Before(d) {
			d = m.revoking.Add(limit)
		}
		if now.After(d) {
			expired = append(expired, m)
			continue
		}
		if next.IsZero() || d.Before(next) {
			next = d
		}
	}
	g.nextSweep = next
	for _, m := range expired {
		g.remove(m)
	}
	if len(expired) > 0 {
		g.rebalance(now)
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

// rebalance recomputes every member's target in one balance.Group.AssignAll
// call, notes who must now give partitions up, and bumps the generation.
func (g *cgroup) rebalance(now time.Time) {
	if len(g.members) == 0 {
		return // the group goes (release)
	}
	g.gen++
	shares := g.mem.AssignAll(g.parts)
	for i, id := range g.mem.Members() {
		m := g.members[id]
		m.target = m.target[:0]
		for _, p := range shares[i] {
			m.target = append(m.target, p.Partition)
		}
		g.updateRevoking(m, now)
	}
}

// view returns m's view (see the type comment) and records it as sent.
func (g *cgroup) view(m *member) (int64, []int32) {
	var v []int32
	for _, p := range m.target {
		if o := g.owner[p]; o == nil || o == m {
			v = append(v, p)
		}
	}
	if !slices.Equal(v, m.sent) || m.sentGen < 0 {
		g.gen++
	}
	for _, p := range v {
		m.held[p] = true
		g.owner[p] = m
	}
	m.sent, m.sentGen = v, g.gen
	return g.gen, slices.Clone(v)
}

// snapshot returns the groups coordinated here, sorted by group and topic.
// Each must be locked (and checked for dead) before it is read.
func (gs *groupSet) snapshot() ([]groupKey, []*cgroup) {
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
	gr := make([]*cgroup, len(keys))
	for i, k := range keys {
		gr[i] = gs.groups[k]
	}
	gs.mu.Unlock()
	return keys, gr
}

// GroupOwners returns, for a consumer group of topic coordinated by this
// broker (local mode), which member may be fetching each partition: a
// partition moving between members is held by the old owner until it
// acknowledges the handover, and missing while free. For monitoring and
// tests.
func (b *Broker) GroupOwners(group, topic string) map[int32]string {
	gs := &b.groups
	out := make(map[int32]string)
	k := groupKey{group, topic}
	g := gs.lockGroup(k, nil)
	if g == nil {
		return out
	}
	defer gs.release(k, g)
	// From the held sets rather than the owner index, so that a broken
	// invariant shows.
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

// writeGroupStats writes the `stats groups` lines, of the groups and
// topics v may see.
func (b *Broker) writeGroupStats(sb *strings.Builder, v viewer) {
	keys, gr := b.groups.snapshot()
	sb.WriteString("STATS\r\n")
	live := make(map[groupTopic]bool, len(keys))
	for i, k := range keys {
		if !v.groupTopic(k.group, k.topic) {
			continue
		}
		g := gr[i]
		g.mu.Lock()
		if !g.dead {
			fmt.Fprintf(sb, "%s %s members %d generation %d\r\n", k.group, k.topic, len(g.members), g.gen)
			live[groupTopic{k.group, k.topic}] = true
		}
		g.mu.Unlock()
	}
	// Groups with committed offsets and no live member here (issue 23:
	// `metaq groups` omitted them, /ui/groups listed them): members 0.
	for _, c := range b.committed.snapshot() {
		if !live[groupTopic{c.group, c.topic}] && v.groupTopic(c.group, c.topic) {
			fmt.Fprintf(sb, "%s %s members 0 generation 0\r\n", c.group, c.topic)
		}
	}
	sb.WriteString("END\r\n")
}

// checkGroupID returns why s cannot be a group, topic or consumer id of a
// local group, or "": it must be 1 to 255 bytes of UTF-8 without control
// characters.
func checkGroupID(what string, s []byte) string {
	switch {
	case len(s) == 0:
		return what + " is empty"
	case len(s) > maxGroupIDLen:
		return what + " is longer than " + strconv.Itoa(maxGroupIDLen) + " bytes"
	case !utf8.Valid(s):
		return what + " is not valid UTF-8"
	}
	for _, r := range string(s) {
		if unicode.IsControl(r) {
			return what + " holds a control character"
		}
	}
	return ""
}

// handleGroup serves join, heartbeat and leave.
func (c *conn) handleGroup(r *protocol.Request) {
	for _, f := range []struct {
		what string
		s    []byte
	}{{"group", r.Group}, {"topic", r.Topic}, {"consumer id", r.Member}} {
		if msg := checkGroupID(f.what, f.s); msg != "" {
			c.reply(protocol.StatusBadRequest, r.Op.String()+": "+msg, r.Opaque)
			return
		}
	}
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
			c.reply(protocol.StatusInternalError, "unknown topic "+showTopic(r.Topic), r.Opaque)
			return
		}
		k.topic = t.name
		gen, view, gerr = gs.join(c, k, id, string(r.Strategy), len(t.parts), c.b.config().BrokerID)
	case protocol.OpHeartbeat:
		gen, view, gerr = gs.heartbeat(c, k, id, r.Generation)
	}
	if gerr != nil {
		c.reply(gerr.code, gerr.msg, r.Opaque)
		return
	}
	c.replyBytes(protocol.StatusOK, protocol.AppendGroupView(nil, gen, view), r.Opaque)
}
