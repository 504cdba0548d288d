package groups

import (
	"fmt"
	"strconv"
)

// The lines of the broker's `stats groups` and `stats members`
// (docs/protocol.md); the broker frames them into the reply.

// StatsLines are the `stats groups` lines, of the groups and topics
// visible allows (Listed):
//
//	<group> <topic> members <n> generation <g>
func (gs *Coordinator) StatsLines(committed *Committed, visible func(group, topic string) bool, line func(string)) {
	for _, g := range gs.Listed(committed, visible) {
		line(fmt.Sprintf("%s %s members %d generation %d", g.Group, g.Topic, g.Members, g.Generation))
	}
}

// MemberLines are the `stats members` lines: one per member of each
// consumer group coordinated here (local mode),
//
//	<group> <topic> member <consumerId> partitions <p1,p2,...>
//
// with the partitions the member holds (may be fetching: Owners), in
// numeric order, or `-` when it holds none. Sorted by group, topic, id.
// Only the groups and topics visible allows are written.
func (gs *Coordinator) MemberLines(visible func(group, topic string) bool, line func(string)) {
	var ps []byte
	for _, m := range gs.Members() {
		if !visible(m.Group, m.Topic) {
			continue
		}
		ps = ps[:0]
		for i, p := range m.Held {
			if i > 0 {
				ps = append(ps, ',')
			}
			ps = strconv.AppendInt(ps, int64(p), 10)
		}
		if len(ps) == 0 {
			ps = append(ps, '-')
		}
		line(m.Group + " " + m.Topic + " member " + m.ID + " partitions " + string(ps))
	}
}
