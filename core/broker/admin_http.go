package broker

import (
	"context"
	"fmt"
	"github.com/metaq-go/metaq/core/httpapi"
	"net/http"
	"slices"
	"sort"
	"strconv"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/sdk/message"
)

// The JSON admin API (docs/http.md), under /api/v1/.

func (b *Broker) topicSource(name string) string {
	b.adminMu.Lock()
	defer b.adminMu.Unlock()
	if slices.ContainsFunc(b.topicsFile.Topics, func(t conf.Topic) bool { return t.Name == name }) {
		return conf.TopicsFileName
	}
	if slices.ContainsFunc(b.serverTopics, func(t conf.Topic) bool { return t.Name == name }) {
		return "server.toml"
	}
	return "auto-created"
}

func (b *Broker) topicJSON(t *topic, parts bool) httpapi.TopicInfo {
	j := httpapi.TopicInfo{Name: t.name, Partitions: len(t.parts), AcceptPublish: t.conf().AcceptPublish,
		AcceptSubscribe: t.conf().AcceptSubscribe, UnflushThreshold: t.conf().UnflushThreshold,
		DeletePolicy: t.conf().DeletePolicy, Source: b.topicSource(t.name)}
	for p, l := range t.parts {
		j.Messages += l.MessageCount()
		j.SizeBytes += l.SizeBytes()
		if parts {
			pc := &t.pc[p]
			j.PartitionList = append(j.PartitionList, httpapi.PartitionInfo{Partition: p, MinOffset: l.MinOffset(), MaxOffset: l.MaxOffset(),
				Messages: l.MessageCount(), MessagesIn: pc.msgsIn.Load(), BytesIn: pc.bytesIn.Load(),
				MessagesOut: pc.msgsOut.Load(), BytesOut: pc.bytesOut.Load(), GetRequests: pc.gets.Load()})
		}
	}
	return j
}

// Notes of groupEntry.
const (
	noteOffsetsElsewhere = "its consumers own partitions (ZooKeeper owner nodes) but keep their offsets neither in ZooKeeper nor through this broker " +
		"(a client-side MySQL or file offset store): lag unknown"
	noteNoCommit = "no offsets committed through this broker yet: lag unknown"
)

// groupList returns the groups known here: those that committed offsets
// through this broker (now or before a restart), those whose offsets or
// owners are in ZooKeeper, and those it coordinates, sorted by group and
// topic.
func (b *Broker) groupList() []*httpapi.GroupEntry { return b.groupListFor(viewer{}) }

// groupListFor is groupList with the groups and topics v may see: the
// group's right and subscribe on the topic (authz.go).
func (b *Broker) groupListFor(v viewer) []*httpapi.GroupEntry {
	m := map[groupTopic]*httpapi.GroupEntry{}
	for k, src := range b.committed.Sources() {
		if !b.topicOpen(k.Topic) || !v.groupTopic(k.Group, k.Topic) { // restored for a topic deleted since; not the viewer's
			continue
		}
		e := &httpapi.GroupEntry{Group: k.Group, Topic: k.Topic, Committed: src.Here, InZooKeeper: src.ZooKeeper, LagKnown: src.Here || src.ZooKeeper}
		switch {
		case e.LagKnown:
		case src.Err != "":
			e.Note = src.Err + ": lag unknown"
		default:
			e.Note = noteOffsetsElsewhere
		}
		m[k] = e
	}
	for _, g := range b.groups.Groups() {
		if !v.groupTopic(g.Group, g.Topic) {
			continue
		}
		e := m[groupTopic{Group: g.Group, Topic: g.Topic}]
		if e == nil {
			e = &httpapi.GroupEntry{Group: g.Group, Topic: g.Topic, Note: noteNoCommit}
			m[groupTopic{Group: g.Group, Topic: g.Topic}] = e
		}
		e.Coordinated, e.Members = true, g.Members
	}
	out := []*httpapi.GroupEntry{}
	for _, e := range m {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Group != out[j].Group {
			return out[i].Group < out[j].Group
		}
		return out[i].Topic < out[j].Topic
	})
	return out
}

// knownGroupTopics are the topics group committed here or is coordinated
// here for, sorted.
func (b *Broker) knownGroupTopics(group string) []string {
	seen := map[string]bool{}
	for k := range b.committed.Sources() {
		if k.Group == group && b.topicOpen(k.Topic) {
			seen[k.Topic] = true
		}
	}
	for _, g := range b.groups.Groups() {
		if g.Group == group {
			seen[g.Topic] = true
		}
	}
	out := make([]string, 0, len(seen))
	for t := range seen {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// topicOpen says whether topic is open here.
func (b *Broker) topicOpen(topic string) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.topics[topic] != nil
}

// describeGroup reads group's committed offsets of topics from the offset
// store, with each partition's offsets, lag and owner. An unknown topic is
// partition.ErrNoTopic (wrapped with its name); an offset store failure is returned
// as it is.
func (b *Broker) describeGroup(ctx context.Context, group string, topics []string) ([]httpapi.GroupTopic, error) {
	owners := b.groups.GroupOwners(group)
	out := []httpapi.GroupTopic{}
	for _, name := range topics {
		b.mu.RLock()
		t := b.topics[name]
		b.mu.RUnlock()
		if t == nil {
			return nil, fmt.Errorf("%w: %s", partition.ErrNoTopic, quoteName(name))
		}
		committed, err := b.offsets.Committed(ctx, group, t.name, len(t.parts))
		if err != nil {
			return nil, err
		}
		zk := b.committed.ZKOffsets(group, name)
		gt := httpapi.GroupTopic{Topic: name, Partitions: []httpapi.GroupPartition{}}
		for p, l := range t.parts {
			gp := httpapi.GroupPartition{Partition: p, Committed: committed[p], MinOffset: l.MinOffset(), MaxOffset: l.MaxOffset(),
				Owner: owners[groups.TopicPartition{Topic: name, Partition: p}]}
			switch {
			case committed[p] >= 0:
				gp.Source = "offset_store"
			case p < len(zk) && zk[p] >= 0: // the consumers commit to ZooKeeper themselves
				committed[p], gp.Committed, gp.Source = zk[p], zk[p], "zookeeper"
			}
			if committed[p] >= 0 {
				lag := max(gp.MaxOffset-committed[p], 0)
				gp.LagBytes = &lag
				gt.LagBytes += lag
				n, exact := lagMessages(l, partSize{min: gp.MinOffset, max: gp.MaxOffset, msgs: l.MessageCount()}, committed[p])
				gp.LagMessages, gp.LagMessagesEstimated = &n, !exact
				gt.LagMessages += n
				gt.LagMessagesEstimated = gt.LagMessagesEstimated || !exact
			}
			gt.Partitions = append(gt.Partitions, gp)
		}
		out = append(out, gt)
	}
	return out, nil
}

// planReset checks req against topic and offsets and returns the changes
// it makes; it writes nothing. Errors are *httpapi.RequestError.
func (b *Broker) planReset(ctx context.Context, group string, req httpapi.ResetRequest) (*httpapi.ResetPlan, error) {
	bad := func(msg string) error { return &httpapi.RequestError{Status: http.StatusBadRequest, Msg: msg} }
	if req.Topic == "" {
		return nil, bad("topic is required")
	}
	b.mu.RLock()
	t := b.topics[req.Topic]
	b.mu.RUnlock()
	if t == nil {
		return nil, &httpapi.RequestError{Status: http.StatusNotFound, Msg: "no such topic: " + quoteName(req.Topic)}
	}
	parts := make([]int, 0, len(t.parts))
	if req.Partition != nil {
		if p := *req.Partition; p < 0 || p >= len(t.parts) {
			return nil, bad("partition " + strconv.Itoa(p) + " out of range for topic " + t.name + " (0.." + strconv.Itoa(len(t.parts)-1) + ")")
		}
		parts = append(parts, *req.Partition)
	} else {
		for p := range t.parts {
			parts = append(parts, p)
		}
	}
	switch req.To {
	case "earliest", "latest":
		if req.Offset != nil {
			return nil, bad("offset is only for to = \"offset\"")
		}
	case "offset":
		if req.Offset == nil {
			return nil, bad("to = \"offset\" needs offset")
		}
	default:
		return nil, bad(`to must be "earliest", "latest" or "offset", got ` + quoteName(req.To))
	}
	committed, err := b.offsets.Committed(ctx, group, t.name, len(t.parts))
	if err != nil {
		return nil, b.offsetStoreError(err)
	}
	plan := &httpapi.ResetPlan{Topic: t.name}
	for _, p := range parts {
		l := t.parts[p]
		var to int64
		switch req.To {
		case "earliest":
			to = l.MinOffset()
		case "latest":
			to = l.MaxOffset()
		case "offset":
			to = *req.Offset
			if to < l.MinOffset() || to > l.MaxOffset() {
				return nil, bad("offset " + strconv.FormatInt(to, 10) + " is outside partition " + strconv.Itoa(p) +
					"'s offsets " + strconv.FormatInt(l.MinOffset(), 10) + ".." + strconv.FormatInt(l.MaxOffset(), 10))
			}
		}
		plan.Changes = append(plan.Changes, httpapi.ResetChange{Partition: p, From: committed[p], To: to})
	}
	return plan, nil
}

// applyReset writes plan through the offset store, for a (audited as a
// reset, or a skip when to is httpapi.SkipTo).
func (b *Broker) applyReset(ctx context.Context, a httpapi.Actor, group, to string, plan *httpapi.ResetPlan) error {
	ps := make([]message.Position, len(plan.Changes))
	for i, c := range plan.Changes {
		ps[i] = message.Position{Topic: plan.Topic, Partition: message.Partition{BrokerID: b.config().BrokerID, Partition: int32(c.Partition)}, Offset: c.To, MsgID: -1}
	}
	if err := b.offsets.Commit(ctx, group, ps); err != nil {
		return b.offsetStoreError(err)
	}
	action := auditOffsetReset
	if to == httpapi.SkipTo {
		action = auditOffsetSkip
	}
	b.auditAs(a, action, "group", group, "topic", plan.Topic, "to", to, "partitions", len(ps), "offsets", auditChanges(plan.Changes))
	return nil
}

// offsetStoreError is the HTTP refusal of an offset store failure.
func (b *Broker) offsetStoreError(err error) error {
	return &httpapi.RequestError{Status: http.StatusBadGateway, Msg: "offset store " + b.offsets.Name() + ": " + groups.Reason(err)}
}

// auditCreate audits a topic created for a.
func (b *Broker) auditCreate(a httpapi.Actor, name string) {
	tc, _ := b.topicConfig(name)
	b.auditAs(a, auditTopicCreate, "topic", name, "partitions", tc.NumPartitions)
}

// auditAlter audits a topic's partitions changed for a (nothing when the
// count stayed).
func (b *Broker) auditAlter(a httpapi.Actor, name string, old, n int) {
	if n != old {
		b.auditAs(a, auditTopicAlter, "topic", name, "partitions_before", old, "partitions", n)
	}
}
