package groups

import (
	"slices"
	"sort"
)

// The read side of the coordinator, for stats, the admin API and the
// dashboard. Each group is locked in turn, never all at once.

// Info is one group of a topic coordinated here.
type Info struct {
	Group, Topic string
	Members      int
	Generation   int64
}

// Groups returns the groups coordinated here, sorted by group and topic.
func (gs *Coordinator) Groups() []Info {
	keys, gr := gs.snapshot()
	out := make([]Info, 0, len(keys))
	for i, k := range keys {
		g := gr[i]
		g.mu.Lock()
		if !g.dead {
			out = append(out, Info{Group: k.group, Topic: k.topic, Members: len(g.members), Generation: g.gen})
		}
		g.mu.Unlock()
	}
	return out
}

// MemberInfo is one member of a group coordinated here.
type MemberInfo struct {
	Group, Topic, ID string
	// Held are the partitions the member may be fetching (Owners), in
	// numeric order.
	Held []int32
}

// Members returns the members of every group coordinated here, sorted by
// group, topic and id.
func (gs *Coordinator) Members() []MemberInfo {
	keys, gr := gs.snapshot()
	var out []MemberInfo
	for i, k := range keys {
		g := gr[i]
		g.mu.Lock()
		if g.dead {
			g.mu.Unlock()
			continue
		}
		for id, m := range g.members {
			held := make([]int32, 0, len(m.held))
			for p := range m.held {
				held = append(held, p)
			}
			slices.Sort(held)
			out = append(out, MemberInfo{Group: k.group, Topic: k.topic, ID: id, Held: held})
		}
		g.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool {
		a, c := out[i], out[j]
		if a.Group != c.Group {
			return a.Group < c.Group
		}
		if a.Topic != c.Topic {
			return a.Topic < c.Topic
		}
		return a.ID < c.ID
	})
	return out
}

// Owners returns, for group of topic, which member may be fetching each
// partition: a partition moving between members is held by the old owner
// until it acknowledges the handover, and missing while free.
func (gs *Coordinator) Owners(group, topic string) map[int32]string {
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

// TopicPartition names one partition of a topic here.
type TopicPartition struct {
	Topic     string
	Partition int
}

// GroupOwners is Owners for every topic group is coordinated here for.
func (gs *Coordinator) GroupOwners(group string) map[TopicPartition]string {
	out := map[TopicPartition]string{}
	keys, gr := gs.snapshot()
	for i, k := range keys {
		if k.group != group {
			continue
		}
		g := gr[i]
		g.mu.Lock()
		for id, m := range g.members {
			for p := range m.held {
				out[TopicPartition{k.topic, int(p)}] = id
			}
		}
		g.mu.Unlock()
	}
	return out
}

// Listed is `stats groups`' rows: Groups, then members 0 and generation 0
// for each group and topic with committed offsets and no live member here
// (issue 23: `metaq groups` omitted them, /ui/groups listed them); only
// those visible(group, topic) allows.
func (gs *Coordinator) Listed(committed *Committed, visible func(group, topic string) bool) []Info {
	var out []Info
	live := make(map[GroupTopic]bool)
	for _, g := range gs.Groups() {
		if visible(g.Group, g.Topic) {
			out = append(out, g)
			live[GroupTopic{Group: g.Group, Topic: g.Topic}] = true
		}
	}
	for _, c := range committed.Snapshot() {
		if !live[GroupTopic{Group: c.Group, Topic: c.Topic}] && visible(c.Group, c.Topic) {
			out = append(out, Info{Group: c.Group, Topic: c.Topic})
		}
	}
	return out
}
