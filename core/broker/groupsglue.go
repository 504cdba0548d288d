package broker

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The protocol side of the consumer groups (core/groups): join, heartbeat
// and leave on the wire, the `stats groups` and `stats members` lines, and
// the status lines of the coordinator's refusals.

func init() { registerErrors(groupsStatus) }

// groupsStatus maps a refused group request to its status line.
func groupsStatus(err error) (int, string, bool) {
	var ge *groups.Error
	if !errors.As(err, &ge) {
		return 0, "", false
	}
	switch ge.Kind {
	case groups.Limit:
		return protocol.StatusBusy, ge.Msg, true
	case groups.Conflict:
		return protocol.StatusConflict, ge.Msg, true
	case groups.NotMember:
		return protocol.StatusNotFound, ge.Msg, true
	}
	return protocol.StatusBadRequest, ge.Msg, true
}

// handleGroup serves join, heartbeat and leave.
func (c *conn) handleGroup(r *protocol.Request) {
	if err := groups.CheckIDs(r.Op.String(), r.Group, r.Topic, r.Member); err != nil {
		c.replyErr(err, r.Opaque)
		return
	}
	group, topic, id := string(r.Group), string(r.Topic), string(r.Member)
	gs := c.b.groups
	var gen int64
	var view []int32
	var err error
	switch r.Op {
	case protocol.OpLeave:
		c.replyInt(protocol.StatusOK, gs.Leave(&c.groups, group, topic, id), r.Opaque)
		return
	case protocol.OpJoin:
		t, lerr := c.b.lookup(r.Topic, false)
		if lerr != nil {
			c.reply(protocol.StatusInternalError, "unknown topic "+showTopic(r.Topic), r.Opaque)
			return
		}
		gen, view, err = gs.Join(&c.groups, group, t.name, id, string(r.Strategy), len(t.parts), c.b.config().BrokerID)
	case protocol.OpHeartbeat:
		gen, view, err = gs.Heartbeat(&c.groups, group, topic, id, r.Generation)
	}
	if err != nil {
		c.replyErr(err, r.Opaque)
		return
	}
	c.replyBytes(protocol.StatusOK, protocol.AppendGroupView(nil, gen, view), r.Opaque)
}

// GroupOwners returns, for a consumer group of topic coordinated by this
// broker (local mode), which member may be fetching each partition: a
// partition moving between members is held by the old owner until it
// acknowledges the handover, and missing while free. For monitoring and
// tests.
func (b *Broker) GroupOwners(group, topic string) map[int32]string {
	return b.groups.Owners(group, topic)
}

// writeGroupStats writes the `stats groups` lines, of the groups and
// topics v may see.
func (b *Broker) writeGroupStats(sb *strings.Builder, v viewer) {
	sb.WriteString("STATS\r\n")
	live := make(map[groupTopic]bool)
	for _, g := range b.groups.Groups() {
		if !v.groupTopic(g.Group, g.Topic) {
			continue
		}
		fmt.Fprintf(sb, "%s %s members %d generation %d\r\n", g.Group, g.Topic, g.Members, g.Generation)
		live[groupTopic{g.Group, g.Topic}] = true
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

// writeMemberStats writes the `stats members` lines: one per member of each
// consumer group coordinated here (local mode),
//
//	<group> <topic> member <consumerId> partitions <p1,p2,...>
//
// with the partitions the member holds (may be fetching: GroupOwners), in
// numeric order, or `-` when it holds none. Sorted by group, topic, id.
// Only the groups and topics v may see are written.
func (b *Broker) writeMemberStats(sb *strings.Builder, v viewer) {
	sb.WriteString("STATS\r\n")
	var ps []byte
	for _, m := range b.groups.Members() {
		if !v.groupTopic(m.Group, m.Topic) {
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
		sb.WriteString(m.Group + " " + m.Topic + " member " + m.ID + " partitions " + string(ps) + "\r\n")
	}
	sb.WriteString("END\r\n")
}
