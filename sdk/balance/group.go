package balance

import (
	"cmp"
	"slices"
	"strings"

	"github.com/metaq-go/metaq/sdk/message"
)

// Group is the membership of one consumer group as its coordinator sees
// it: members come and go one at a time, and after each change every
// member's share is needed (a local broker's group). It keeps the
// consumer ids sorted and, for [Consistent], the hash ring, so that a
// change costs O(C) and [Group.AssignAll] O(C + P log C) for C members and
// P partitions, instead of sorting the ids and, for [Consistent],
// hashing and sorting 160·C ring points on every change. Other strategies
// are computed with [AssignAll] over the sorted ids. A Group is not safe
// for concurrent use.
type Group struct {
	s   Strategy
	ids []string
	// ring is set for [Consistent]: every member's points, ties kept,
	// sorted by hash and then consumer descending, so that the first
	// point at or after a hash is the one of the greatest consumer.
	ring       hashRing
	consistent bool
}

// NewGroup returns an empty group whose shares follow s.
func NewGroup(s Strategy) *Group {
	_, consistent := s.(consistentStrategy)
	return &Group{s: s, consistent: consistent}
}

// Add makes id a member; it reports false if it was one already.
func (g *Group) Add(id string) bool {
	i, found := slices.BinarySearch(g.ids, id)
	if found {
		return false
	}
	g.ids = slices.Insert(g.ids, i, id)
	if g.consistent {
		add, _ := appendPoints(nil, id, nil)
		slices.SortFunc(add, comparePoints)
		g.ring = g.ring.merge(add)
	}
	return true
}

// Remove removes member id; it reports false if it was not one.
func (g *Group) Remove(id string) bool {
	i, found := slices.BinarySearch(g.ids, id)
	if !found {
		return false
	}
	g.ids = slices.Delete(g.ids, i, i+1)
	if g.consistent {
		g.ring = slices.DeleteFunc(g.ring, func(p ringPoint) bool { return p.consumer == id })
	}
	return true
}

// Members returns the member ids, sorted. The slice belongs to g and
// changes with it.
func (g *Group) Members() []string { return g.ids }

// AssignAll returns every member's share: at index i, what
// Assign(Members()[i], Members(), partitions) returns under g's strategy.
func (g *Group) AssignAll(partitions []message.Partition) [][]message.Partition {
	if !g.consistent {
		return AssignAll(g.s, g.ids, partitions)
	}
	out := make([][]message.Partition, len(g.ids))
	if len(g.ids) == 0 {
		return out
	}
	var buf []byte
	for _, p := range sortedUnique(partitions, message.Partition.Compare) {
		buf = p.AppendString(buf[:0])
		i, _ := slices.BinarySearch(g.ids, g.ring.owner(ketamaHashBytes(buf)))
		out[i] = append(out[i], p)
	}
	return out
}

// comparePoints orders ring points by hash, then consumer descending.
func comparePoints(a, b ringPoint) int {
	if c := cmp.Compare(a.hash, b.hash); c != 0 {
		return c
	}
	return strings.Compare(b.consumer, a.consumer)
}

// merge merges the sorted points add into the sorted ring r, in place
// from the back (add is small, r may be large).
func (r hashRing) merge(add hashRing) hashRing {
	n := len(r)
	r = slices.Grow(r, len(add))[:n+len(add)]
	i, j := n-1, len(add)-1
	for k := len(r) - 1; j >= 0; k-- {
		if i >= 0 && comparePoints(r[i], add[j]) > 0 {
			r[k] = r[i]
			i--
		} else {
			r[k] = add[j]
			j--
		}
	}
	return r
}
