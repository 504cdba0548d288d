package groups

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/balance"
	"github.com/metaq-go/metaq/sdk/message"
)

// Consumer groups in local mode: without ZooKeeper the broker coordinates
// the members of a group over its own partitions of a topic (join,
// heartbeat, leave; docs/protocol.md). Membership is tied to the
// connection that joined (its Session).
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
// Locking: Coordinator.mu guards only the map of groups and is never held
// while waiting for anything else; each group has its own mutex, so a
// busy group never delays another one. Lock order: a group's mu, then
// Coordinator.mu or a Session's mu. A connection lists its memberships
// (Session), so closing it touches only its own groups.
//
// Cost: a membership change inserts or removes one id in the sorted
// member ids (and, for consist, its points on the kept hash ring:
// balance.Group) and computes every member's target in one call, at most
// O((n + P) log(n + P)) for n members and P partitions; a view is O(P)
// through the owner index; the expiry sweep looks at the members only once
// the earliest deadline of a member has passed.
type Coordinator struct {
	mu      sync.Mutex
	groups  map[groupKey]*cgroup
	timeout time.Duration
	now     func() time.Time // nil: time.Now (tests set it)
	// maxMembers and maxPerConn are Config.MaxMembers and
	// Config.MaxPerConn; 0 means no limit. Reload changes them.
	maxMembers, maxPerConn atomic.Int64
}

// DefaultSessionTimeout is how long a group member may go without a
// heartbeat, or without acknowledging a revocation, before the broker
// removes it: three times the SDK's default heartbeat interval of 1 s.
const DefaultSessionTimeout = 3 * time.Second

// maxIDLen is the longest group, topic or consumer id in bytes.
const maxIDLen = 255

// Config is the coordinator's slice of the configuration.
type Config struct {
	// SessionTimeout is how long a member may go without a heartbeat, or
	// without acknowledging a revocation; 0 means DefaultSessionTimeout.
	// It is fixed at construction (Reload leaves it).
	SessionTimeout time.Duration
	// MaxMembers is server.toml's max_group_members, MaxPerConn its
	// max_memberships_per_connection; 0 means no limit.
	MaxMembers, MaxPerConn int
}

// FromConf returns the coordinator's configuration in cfg. The session
// timeout is not in server.toml: the broker sets it from its options.
func FromConf(cfg *conf.Config) Config {
	return Config{MaxMembers: cfg.MaxGroupMembers, MaxPerConn: cfg.MaxMembershipsPerConnection}
}

// NewCoordinator returns a coordinator with no groups.
func NewCoordinator(cfg Config) *Coordinator {
	c := &Coordinator{timeout: cfg.SessionTimeout}
	c.Reload(cfg)
	return c
}

// Reload applies cfg's limits to the joins from now on; the members
// already in are kept.
func (gs *Coordinator) Reload(cfg Config) {
	gs.maxMembers.Store(int64(cfg.MaxMembers))
	gs.maxPerConn.Store(int64(cfg.MaxPerConn))
}

type groupKey struct{ group, topic string }

type cgroup struct {
	key groupKey
	mu  sync.Mutex // guards everything below
	// dead is set when the group, emptied, left Coordinator.groups: a
	// caller that found it there before must look it up again.
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
	s       *Session
	target  []int32
	held    map[int32]bool
	sent    []int32 // the last view sent
	sentGen int64   // its generation
	seen    time.Time
	// revoking is when held(m) last became larger than target(m); zero
	// when nothing waits for m's acknowledgement.
	revoking time.Time
}

// Session is one connection's group memberships, so that closing it
// touches only its own groups, and so that their number can be limited.
// The zero value is ready; the connection owns it and passes it to every
// call it makes.
type Session struct {
	mu     sync.Mutex
	closed bool
	refs   map[memberRef]struct{}
}

// memberRef names one membership: member id in group k.
type memberRef struct {
	k  groupKey
	id string
}

// add records a new membership of the session, unless it is closed or
// already holds max of them (max 0: no limit).
func (s *Session) add(r memberRef, max int) *Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return &Error{Invalid, "join: connection closed"}
	case max > 0 && len(s.refs) >= max:
		return &Error{Limit, "join: this connection already holds " + strconv.Itoa(max) +
			" group memberships (max_memberships_per_connection)"}
	}
	if s.refs == nil {
		s.refs = make(map[memberRef]struct{})
	}
	s.refs[r] = struct{}{}
	return nil
}

func (s *Session) remove(r memberRef) {
	s.mu.Lock()
	delete(s.refs, r)
	s.mu.Unlock()
}

// close marks the session closed (add fails from now on) and returns its
// memberships by group.
func (s *Session) close() map[groupKey][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	out := make(map[groupKey][]string)
	for r := range s.refs {
		out[r.k] = append(out[r.k], r.id)
	}
	s.refs = nil
	return out
}

func (gs *Coordinator) clock() time.Time {
	if gs.now != nil {
		return gs.now()
	}
	return time.Now()
}

func (gs *Coordinator) sessionTimeout() time.Duration {
	if gs.timeout > 0 {
		return gs.timeout
	}
	return DefaultSessionTimeout
}

// lockGroup returns group k with its mutex held, made by create if it does
// not exist and create is not nil; nil if it does not exist. Release it
// with release.
func (gs *Coordinator) lockGroup(k groupKey, create func() *cgroup) *cgroup {
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
func (gs *Coordinator) release(k groupKey, g *cgroup) {
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

// CheckIDs returns an *Error of kind Invalid, its reason prefixed with op,
// when group, topic or member cannot name a local group, its topic or a
// consumer: each must be 1 to 255 bytes of UTF-8 without control
// characters.
func CheckIDs(op string, group, topic, member []byte) error {
	for _, f := range []struct {
		what string
		s    []byte
	}{{"group", group}, {"topic", topic}, {"consumer id", member}} {
		if msg := checkID(f.what, f.s); msg != "" {
			return &Error{Invalid, op + ": " + msg}
		}
	}
	return nil
}

// checkID returns why s cannot be a group, topic or consumer id, or "".
func checkID(what string, s []byte) string {
	switch {
	case len(s) == 0:
		return what + " is empty"
	case len(s) > maxIDLen:
		return what + " is longer than " + strconv.Itoa(maxIDLen) + " bytes"
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

// Join makes consumer id, on session s, a member of group for topic (of
// nparts partitions on broker brokerID), balanced by strategy, and returns
// the generation and the partitions it may fetch now. A refusal is an
// *Error.
func (gs *Coordinator) Join(s *Session, group, topic, id, strategy string, nparts, brokerID int) (int64, []int32, error) {
	gen, view, err := gs.join(s, groupKey{group, topic}, id, strategy, nparts, brokerID)
	if err != nil {
		return 0, nil, err
	}
	return gen, view, nil
}

func (gs *Coordinator) join(s *Session, k groupKey, id, strategy string, nparts, brokerID int) (int64, []int32, *Error) {
	strategy = strings.ToLower(strategy)
	strat, err := balance.ByName(strategy)
	if err != nil {
		return 0, nil, &Error{Invalid, "join: " + err.Error()}
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
		return 0, nil, &Error{Invalid, "join: group " + k.group + " uses strategy " +
			g.strategy + ", not " + strategy}
	}
	m := g.members[id]
	switch {
	case m != nil && m.s != s:
		return 0, nil, &Error{Conflict, "join: consumer id " + id +
			" is already a member of group " + k.group + " on another connection"}
	case m == nil:
		if max := int(gs.maxMembers.Load()); max > 0 && len(g.members) >= max {
			return 0, nil, &Error{Limit, "join: group " + k.group + " already has " +
				strconv.Itoa(max) + " members (max_group_members)"}
		}
		if gerr := s.add(memberRef{k, id}, int(gs.maxPerConn.Load())); gerr != nil {
			return 0, nil, gerr
		}
		m = &member{id: id, s: s, held: make(map[int32]bool), seen: now, sentGen: -1}
		g.members[id] = m
		g.mem.Add(id)
		g.rebalance(now)
	}
	m.seen = now
	gen, view := g.view(m)
	return gen, view, nil
}

// Heartbeat keeps consumer id of group for topic alive and, when gen is
// the generation of the last view it was sent, takes it as acknowledged;
// it returns the member's current generation and view. A consumer that is
// not a member on s is an *Error of kind NotMember.
func (gs *Coordinator) Heartbeat(s *Session, group, topic, id string, gen int64) (int64, []int32, error) {
	v, view, err := gs.heartbeat(s, groupKey{group, topic}, id, gen)
	if err != nil {
		return 0, nil, err
	}
	return v, view, nil
}

func (gs *Coordinator) heartbeat(s *Session, k groupKey, id string, gen int64) (int64, []int32, *Error) {
	var m *member
	g := gs.lockGroup(k, nil)
	if g != nil {
		defer gs.release(k, g)
		now := gs.clock()
		gs.sweep(g, now)
		m = g.members[id]
		if m != nil && m.s == s {
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
	return 0, nil, &Error{NotMember, "heartbeat: " + id + " is not a member of group " +
		k.group + " for topic " + k.topic + " on this connection: join again"}
}

// Leave removes consumer id (on s) from group for topic, and returns the
// group's generation (0 when the group does not exist).
func (gs *Coordinator) Leave(s *Session, group, topic, id string) int64 {
	k := groupKey{group, topic}
	g := gs.lockGroup(k, nil)
	if g == nil {
		return 0
	}
	defer gs.release(k, g)
	if m := g.members[id]; m != nil && m.s == s {
		g.remove(m)
		g.rebalance(gs.clock())
	}
	return g.gen
}

// Close removes every membership of s, locking only s's groups, each
// once; s accepts no join from now on. The connection calls it as it
// closes.
func (gs *Coordinator) Close(s *Session) {
	for k, ids := range s.close() {
		g := gs.lockGroup(k, nil)
		if g == nil {
			continue
		}
		n := len(g.members)
		for _, id := range ids {
			if m := g.members[id]; m != nil && m.s == s {
				g.remove(m)
			}
		}
		if len(g.members) != n {
			g.rebalance(gs.clock())
		}
		gs.release(k, g)
	}
}

// remove drops m from g and from its session's list, freeing what it
// held. The caller rebalances.
func (g *cgroup) remove(m *member) {
	for p := range m.held {
		g.owner[p] = nil
	}
	delete(g.members, m.id)
	g.mem.Remove(m.id)
	m.s.remove(memberRef{g.key, m.id})
}

// sweep removes the members that missed the session timeout, in one
// rebalance. It looks at the members only once the earliest deadline
// (nextSweep) has passed.
func (gs *Coordinator) sweep(g *cgroup, now time.Time) {
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
func (gs *Coordinator) snapshot() ([]groupKey, []*cgroup) {
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

// Config returns the coordinator's configuration as last reloaded.
func (gs *Coordinator) Config() Config {
	return Config{SessionTimeout: gs.timeout, MaxMembers: int(gs.maxMembers.Load()), MaxPerConn: int(gs.maxPerConn.Load())}
}
