package broker

import (
	"context"
	"errors"
	"strconv"

	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The protocol side of the consumer groups (core/groups): join, heartbeat
// and leave on the wire, the `stats groups` and `stats members` lines, and
// the status lines of the coordinator's refusals.

func init() { registerErrors(groupsStatus) }

// groupsStatus maps a refused group request, and a failed offset store
// call, to its status line.
func groupsStatus(err error) (int, string, bool) {
	var se *groups.StoreError
	if errors.As(err, &se) {
		return protocol.StatusInternalError, se.Error(), true
	}
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
		gen, view, err = gs.Join(&c.groups, group, t.Name(), id, string(r.Strategy), len(t.Parts), c.b.config().BrokerID)
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

// GroupMembers returns the ids, sorted, of the members of a consumer
// group of topic coordinated by this broker (local mode): a member it
// removed (its session timed out, or it did not acknowledge a revocation
// in time) is not among them, even before the member learns it. For
// monitoring and tests.
func (b *Broker) GroupMembers(group, topic string) []string {
	var ids []string
	for _, m := range b.groups.Members() {
		if m.Group == group && m.Topic == topic {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// offsetPositions is groups.Positions of a commit or fetch; it replies
// 400 itself and returns ok=false on a bad group or body.
func (c *conn) offsetPositions(r *protocol.Request, full bool) (string, []message.Position, bool) {
	group, ps, err := groups.Positions(r.Op.String(), r.Group, r.Body, full, c.b.config().BrokerID, c.b.offsetPartition)
	if err != nil {
		c.replyErr(err, r.Opaque)
		return "", nil, false
	}
	return group, ps, true
}

// offsetPartition is a commit's or fetch's groups.PartitionCheck.
func (b *Broker) offsetPartition(topic string, p int32) string {
	t, err := b.lookup([]byte(topic), false)
	if err != nil {
		return "unknown topic " + topic
	}
	if p >= int32(len(t.Parts)) {
		return outOfRange(t, p)
	}
	return ""
}

// goOffsetCall runs a store call off the read loop (groups.Offsets.Go),
// so a slow store does not hold up the connection's gets; its reply is
// queued like a put's.
func (c *conn) goOffsetCall(fn func(ctx context.Context)) {
	b := c.b
	b.offsets.Go(b.done, func(run func()) {
		c.addPending(1)
		b.goTracked(run) // the read loop's own count keeps wg above zero here
	}, func(ctx context.Context) {
		defer c.addPending(-1)
		fn(ctx)
	})
}

// handleCommit stores a group's offsets: 200 once the store has them, 500
// with the store's error otherwise (the client retries); never dropped.
func (c *conn) handleCommit(r *protocol.Request) {
	b := c.b
	b.offsets.CountCommit()
	group, ps, ok := c.offsetPositions(r, true)
	if !ok {
		return
	}
	opaque := r.Opaque
	c.goOffsetCall(func(ctx context.Context) {
		if err := b.offsets.CommitRequest(ctx, group, ps, b.errorf); err != nil {
			c.replyErr(err, opaque)
			return
		}
		c.reply(protocol.StatusOK, strconv.Itoa(len(ps)), opaque)
	})
}

// handleFetch answers a group's stored offsets: one full line per
// requested partition, offset and msgId -1 when nothing is stored.
func (c *conn) handleFetch(r *protocol.Request) {
	b := c.b
	b.offsets.CountFetch()
	group, ps, ok := c.offsetPositions(r, false)
	if !ok {
		return
	}
	opaque := r.Opaque
	c.goOffsetCall(func(ctx context.Context) {
		lines, err := b.offsets.FetchRequest(ctx, group, ps, b.errorf)
		if err != nil {
			c.replyErr(err, opaque)
			return
		}
		c.replyBytes(protocol.StatusOK, protocol.AppendOffsetLines(nil, lines, true), opaque)
	})
}
