package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

// Dead letters: a group's <group>.dlq topic (client.RetryTopics,
// docs/retry.md) as operators see it, and its replay and purge.
//
// The log is append-only: neither replay nor purge removes a dead letter.
// Both move a position, the offsets committed on the dead-letter topic by
// the group DLQPositionGroupOf(group), through the brokers that hold it
// (in both discovery modes), so that a replay resumes where the last one
// stopped and never replays a dead letter twice, and a purge hides what
// lies before it. Retention deletes the records.

// DLQPositionGroupOf names the consumer group whose committed offsets on
// group's dead-letter topic are the replay and purge position.
func DLQPositionGroupOf(group string) string { return group + ".dlq-replay" }

// ErrUnknownGroup: the group has no members, no committed offsets and no
// dead-letter topic.
var ErrUnknownGroup = errors.New("unknown group")

// ErrNoDeadLetterTopic: the group is known but its dead-letter topic does
// not exist (nothing was dead-lettered, or its members do not use
// RetryTopics).
var ErrNoDeadLetterTopic = errors.New("no dead-letter topic")

// DeadLetterPartition is one partition of a dead-letter topic.
type DeadLetterPartition struct {
	BrokerID  int   `json:"broker_id"`
	Partition int32 `json:"partition"`
	// Start and End are the readable range [Start, End).
	Start int64 `json:"start"`
	End   int64 `json:"end"`
	// Position is where the next replay starts: the offset committed by
	// the position group, else Start.
	Position int64 `json:"position"`
	// Pending is how many dead letters lie in [Position, End); -1 when
	// the broker could not count them.
	Pending int64 `json:"pending"`

	addr      string
	committed int64 // the position group's committed offset; -1: none
}

// DeadLetters is a group's dead-letter topic and its replay position.
type DeadLetters struct {
	Group         string                `json:"group"`
	Topic         string                `json:"topic"`
	PositionGroup string                `json:"position_group"`
	Partitions    []DeadLetterPartition `json:"partitions"`
	// Pending is the sum of the partitions' Pending (-1: one is unknown).
	Pending int64 `json:"pending"`
}

// DeadLetters reads group's dead-letter topic and how many dead letters
// lie past the replay and purge position.
func (a *Admin) DeadLetters(ctx context.Context, group string) (*DeadLetters, error) {
	if err := checkName("group", group); err != nil {
		return nil, err
	}
	topic := client.DeadLetterTopicOf(group)
	ts, err := a.Topics(ctx)
	if err != nil {
		return nil, err
	}
	ti := slices.IndexFunc(ts, func(t Topic) bool { return t.Name == topic })
	if ti < 0 {
		d, _, gerr := a.loadGroup(ctx, group, nil, false)
		if gerr == nil && !d.Found() {
			return nil, fmt.Errorf("%w %q: it has no members, no committed offsets and no dead-letter topic %s", ErrUnknownGroup, group, topic)
		}
		return nil, fmt.Errorf("%w %s: group %q has dead-lettered nothing yet (its members create it when they "+
			"start with the RetryTopics reject policy, docs/retry.md)", ErrNoDeadLetterTopic, topic, group)
	}
	dl := &DeadLetters{Group: group, Topic: topic, PositionGroup: DLQPositionGroupOf(group), Partitions: []DeadLetterPartition{}}
	d, addrs, err := a.loadGroup(ctx, dl.PositionGroup, []string{topic}, true)
	if err != nil {
		return nil, err
	}
	for _, r := range d.Partitions {
		if r.LogStart == nil || r.LogEnd == nil {
			return nil, fmt.Errorf("%s: the log bounds are unknown (broker %d not readable)", partName(r), r.BrokerID)
		}
		p := DeadLetterPartition{BrokerID: r.BrokerID, Partition: r.Partition, Start: *r.LogStart, End: *r.LogEnd,
			Position: *r.LogStart, Pending: -1, addr: addrs[r.BrokerID], committed: -1}
		if r.Committed != nil {
			p.committed = *r.Committed
		}
		switch {
		case r.Committed != nil && *r.Committed > p.Start:
			p.Position = min(*r.Committed, p.End)
			if r.LagMessages != nil && !r.LagMessagesEstimated {
				p.Pending = *r.LagMessages
			} else if n, err := a.countRecords(ctx, p.addr, topic, p.Partition, p.Position, p.End); err == nil {
				p.Pending = n
			}
		default:
			// The whole partition: the broker's count (stats partitions),
			// else counted here.
			i := slices.IndexFunc(ts[ti].Offsets, func(o PartitionOffsets) bool {
				return o.BrokerID == r.BrokerID && o.Partition == r.Partition
			})
			if i >= 0 && ts[ti].Offsets[i].Messages >= 0 && ts[ti].Offsets[i].Min == p.Start && ts[ti].Offsets[i].Max == p.End {
				p.Pending = ts[ti].Offsets[i].Messages
			} else if n, err := a.countRecords(ctx, p.addr, topic, p.Partition, p.Start, p.End); err == nil {
				p.Pending = n
			}
		}
		dl.Partitions = append(dl.Partitions, p)
	}
	for _, p := range dl.Partitions {
		if p.Pending < 0 || dl.Pending < 0 {
			dl.Pending = -1
			continue
		}
		dl.Pending += p.Pending
	}
	return dl, nil
}

// Replay targets.
const (
	// ReplayToRetry sends each dead letter to the group's retry topic,
	// its delivery count reset: only the group's members deliver it
	// again. It is the default.
	ReplayToRetry = "retry"
	// ReplayToOrigin sends each dead letter back to its original topic,
	// where every group consuming that topic handles it again.
	ReplayToOrigin = "origin"
)

// ReplayOptions says what ReplayDeadLetters does.
type ReplayOptions struct {
	// To is ReplayToRetry ("" too) or ReplayToOrigin.
	To string
	// Limit is the most dead letters replayed (0: all pending).
	Limit int
	// Execute sends and commits; without it the replay is a dry run that
	// reads the dead letters it would send.
	Execute bool
	// Sample is how many replayed messages the result lists (0: 5).
	Sample int
}

// ReplayedMessage is one dead letter a replay sent (or would send).
type ReplayedMessage struct {
	BrokerID  int    `json:"broker_id"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	MsgID     string `json:"msgId"`
	// Origin is the topic the dead letter came from, To where it goes.
	Origin string `json:"origin"`
	To     string `json:"to"`
	// LastError is the handler's last error the dead letter carries.
	LastError string `json:"last_error"`
}

// ReplayResult is what ReplayDeadLetters did or, as a dry run, would do.
type ReplayResult struct {
	Group    string `json:"group"`
	Topic    string `json:"topic"`
	To       string `json:"to"`
	Executed bool   `json:"executed"`
	// Pending is how many dead letters lay past the position before.
	Pending int64 `json:"pending"`
	// Count is how many were (or would be) replayed.
	Count int `json:"count"`
	// Messages are the first Sample of them.
	Messages []ReplayedMessage `json:"messages"`
	// OtherGroups, for a replay to the origin topics, are the other
	// consumer groups of those topics (of the messages read: a dry run's
	// sample), which handle the replayed messages again too.
	OtherGroups []string `json:"other_groups,omitempty"`
}

// ReplayDeadLetters sends group's dead letters past the position, from
// the earliest, partition by partition, to their original topic (with a
// fresh msgId; key, tags, attribute, create time and user headers kept,
// the metaq-origin-*, metaq-delivery-count and metaq-last-error headers
// removed) or to the group's retry topic (the origin headers kept, so
// that the group's handler sees the message as it first was, the
// delivery count reset), through the Admin's Client (its producer's
// idempotence). After each get's worth of messages sent it commits the
// position past them: a replay stopped midway resumes, and a dead letter
// is sent twice only when the replay fails between a send and the commit
// that follows it. One replay or purge of a group runs at a time: a
// replay that executes holds a lease on the position group (dlqlease.go)
// and fails with ErrReplayRunning while another holds it; before each
// send it checks that the committed position is still the one it read,
// and stops (ErrReplayRunning) when not.
func (a *Admin) ReplayDeadLetters(ctx context.Context, group string, o ReplayOptions) (*ReplayResult, error) {
	to := o.To
	if to == "" {
		to = ReplayToRetry
	}
	if to != ReplayToOrigin && to != ReplayToRetry {
		return nil, fmt.Errorf("admin: replay to %q: want %s or %s", o.To, ReplayToRetry, ReplayToOrigin)
	}
	if o.Limit < 0 {
		return nil, fmt.Errorf("admin: replay limit %d < 0", o.Limit)
	}
	sample := o.Sample
	if sample <= 0 {
		sample = 5
	}
	dl, err := a.DeadLetters(ctx, group)
	if err != nil {
		return nil, err
	}
	var lease *replayLease
	if o.Execute {
		if lease, err = a.leaseReplay(ctx, dl); err != nil {
			return nil, err
		}
		defer lease.release()
		// The position as it is now that no other replay moves it.
		if dl, err = a.DeadLetters(ctx, group); err != nil {
			return nil, err
		}
	}
	res := &ReplayResult{Group: group, Topic: dl.Topic, To: to, Pending: dl.Pending, Messages: []ReplayedMessage{}}
	retryTopic := client.RetryTopicOf(group)
	origins := map[string]bool{}
	if to == ReplayToOrigin {
		defer func() { res.OtherGroups = a.otherGroups(ctx, group, origins) }()
	}
parts:
	for _, p := range dl.Partitions {
		off := p.Position
		committed := p.committed // what the position group holds
		size := 256 << 10
		for off < p.End && (o.Limit == 0 || res.Count < o.Limit) {
			if !o.Execute && len(res.Messages) >= sample && dl.Pending >= 0 {
				// A dry run reads its sample; the count is the broker's.
				res.Count = int(dl.Pending)
				if o.Limit > 0 {
					res.Count = min(res.Count, o.Limit)
				}
				break parts
			}
			body, err := a.getRecords(ctx, p.addr, dl.Topic, p.Partition, off, size)
			if err != nil {
				return res, fmt.Errorf("%s partition %d of broker %d: %w", dl.Topic, p.Partition, p.BrokerID, err)
			}
			it := message.NewIterator(body, off, 0)
			var batch []*message.Message
			next := off
			for (o.Limit == 0 || res.Count < o.Limit) && it.Next() {
				rec := it.Record()
				if rec.Offset >= p.End {
					break
				}
				m, err := rec.Message(dl.Topic, p.Partition)
				if err != nil {
					return res, fmt.Errorf("%s partition %d offset %d: %w", dl.Topic, p.Partition, rec.Offset, err)
				}
				out, origin, err := replayed(&m, to, retryTopic)
				if err != nil {
					return res, fmt.Errorf("%s partition %d offset %d: %w", dl.Topic, p.Partition, rec.Offset, err)
				}
				origins[origin] = true
				if len(res.Messages) < sample {
					lastErr, _ := m.Headers.String(client.HeaderLastError)
					res.Messages = append(res.Messages, ReplayedMessage{BrokerID: p.BrokerID, Partition: p.Partition,
						Offset: rec.Offset, MsgID: strconv.FormatInt(rec.ID, 10), Origin: origin, To: out.Topic, LastError: lastErr})
				}
				batch = append(batch, out)
				res.Count++
				next = rec.Offset + int64(rec.Size())
			}
			if err := it.Err(); err != nil {
				return res, fmt.Errorf("%s partition %d: %w", dl.Topic, p.Partition, err)
			}
			if next == off {
				if it.Consumed() > 0 {
					break // the records read lie past End
				}
				if size = grownSize(body, size); size == 0 {
					return res, fmt.Errorf("%s partition %d: record at %d: bad length", dl.Topic, p.Partition, off)
				}
				continue
			}
			if o.Execute {
				if err := lease.err(); err != nil {
					return res, err
				}
				if err := a.checkPosition(ctx, dl, p, committed); err != nil {
					res.Count -= len(batch)
					return res, err
				}
				if len(batch) > 0 {
					if _, err := a.cl.ProduceSync(ctx, batch...); err != nil {
						return res, fmt.Errorf("replaying %s partition %d from offset %d: %w (the position stays at %d)",
							dl.Topic, p.Partition, off, err, off)
					}
				}
				if err := a.commitPosition(ctx, dl, p, next); err != nil {
					return res, err
				}
				committed = next
			}
			off = next
		}
	}
	res.Executed = o.Execute
	return res, nil
}

// otherGroups lists the consumer groups other than group that consume
// one of topics (none when they cannot be listed).
func (a *Admin) otherGroups(ctx context.Context, group string, topics map[string]bool) []string {
	if len(topics) == 0 {
		return nil
	}
	gs, err := a.ListGroups(ctx)
	if err != nil {
		return nil
	}
	var out []string
	for _, g := range gs {
		if g.Group != group && slices.ContainsFunc(g.Topics, func(t string) bool { return topics[t] }) {
			out = append(out, g.Group)
		}
	}
	return out
}

// PurgeResult is what PurgeDeadLetters did or, as a dry run, would do.
type PurgeResult struct {
	Group    string `json:"group"`
	Topic    string `json:"topic"`
	Executed bool   `json:"executed"`
	// Pending is how many dead letters the purge hides (or would).
	Pending int64 `json:"pending"`
}

// PurgeDeadLetters moves group's replay position to the end of each
// partition of its dead-letter topic (with execute; else a dry run): what
// lies before is never replayed nor counted as pending. Nothing is
// deleted: retention deletes the records. It holds the replay lease as a
// replay does: ErrReplayRunning while a replay runs.
func (a *Admin) PurgeDeadLetters(ctx context.Context, group string, execute bool) (*PurgeResult, error) {
	dl, err := a.DeadLetters(ctx, group)
	if err != nil {
		return nil, err
	}
	if execute {
		lease, err := a.leaseReplay(ctx, dl)
		if err != nil {
			return nil, err
		}
		defer lease.release()
		if dl, err = a.DeadLetters(ctx, group); err != nil {
			return nil, err
		}
	}
	res := &PurgeResult{Group: group, Topic: dl.Topic, Pending: dl.Pending}
	if !execute {
		return res, nil
	}
	for _, p := range dl.Partitions {
		if p.Position == p.End {
			continue
		}
		if err := a.commitPosition(ctx, dl, p, p.End); err != nil {
			return res, err
		}
	}
	res.Executed = true
	return res, nil
}

// commitPosition commits off as the position of dl's partition p.
func (a *Admin) commitPosition(ctx context.Context, dl *DeadLetters, p DeadLetterPartition, off int64) error {
	plan := []ResetPartition{{Topic: dl.Topic, BrokerID: p.BrokerID, Partition: p.Partition, New: off}}
	if err := a.commit(ctx, dl.PositionGroup, map[int]string{p.BrokerID: p.addr}, plan, nil); err != nil {
		return fmt.Errorf("committing the replay position %d of %s partition %d of broker %d: %w",
			off, dl.Topic, p.Partition, p.BrokerID, err)
	}
	return nil
}

// replayed is the message a dead letter m becomes when replayed to (to)
// the origin topic or retryTopic, and its origin topic.
func replayed(m *message.Message, to, retryTopic string) (*message.Message, string, error) {
	origin, ok := m.Headers.String(client.HeaderOriginTopic)
	if !ok || origin == "" {
		return nil, "", fmt.Errorf("msgId %d has no %s header: not a dead letter of RetryTopics", m.ID, client.HeaderOriginTopic)
	}
	out := &message.Message{Topic: origin, Body: m.Body, Attribute: m.Attribute, HasAttribute: m.HasAttribute,
		Key: m.Key, Tags: m.Tags, Timestamp: m.Timestamp}
	for _, h := range m.Headers {
		switch h.Key {
		case client.HeaderDeliveryCount, client.HeaderLastError, message.HeaderDeliverAt, message.HeaderDelay:
			continue
		case client.HeaderOriginTopic, client.HeaderOriginPartition, client.HeaderOriginOffset, client.HeaderOriginID:
			if to == ReplayToOrigin {
				continue
			}
		}
		out.Headers = append(out.Headers, h)
	}
	if to == ReplayToRetry {
		out.Topic = retryTopic
	}
	return out, origin, nil
}
