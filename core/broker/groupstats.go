package broker

import (
	"slices"
	"sort"
	"strconv"
	"strings"
)

// writeMemberStats writes the `stats members` lines: one per member of each
// consumer group coordinated here (local mode),
//
//	<group> <topic> member <consumerId> partitions <p1,p2,...>
//
// with the partitions the member holds (may be fetching: GroupOwners), in
// numeric order, or `-` when it holds none. Sorted by group, topic, id.
// Each group is locked in turn, never all at once. Only the groups and
// topics v may see are written.
func (b *Broker) writeMemberStats(sb *strings.Builder, v viewer) {
	keys, gr := b.groups.snapshot()
	type line struct{ group, topic, id, parts string }
	var lines []line
	for i, k := range keys {
		if !v.groupTopic(k.group, k.topic) {
			continue
		}
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
			var ps []byte
			for i, p := range held {
				if i > 0 {
					ps = append(ps, ',')
				}
				ps = strconv.AppendInt(ps, int64(p), 10)
			}
			if len(ps) == 0 {
				ps = append(ps, '-')
			}
			lines = append(lines, line{k.group, k.topic, id, string(ps)})
		}
		g.mu.Unlock()
	}
	sort.Slice(lines, func(i, j int) bool {
		a, c := lines[i], lines[j]
		if a.group != c.group {
			return a.group < c.group
		}
		if a.topic != c.topic {
			return a.topic < c.topic
		}
		return a.id < c.id
	})
	sb.WriteString("STATS\r\n")
	for _, l := range lines {
		sb.WriteString(l.group + " " + l.topic + " member " + l.id + " partitions " + l.parts + "\r\n")
	}
	sb.WriteString("END\r\n")
}
