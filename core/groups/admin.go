package groups

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The data behind the admin API's groups (docs/http.md): which groups are
// known here, their committed offsets and lag, and what a reset would
// change. core/httpapi renders it; core/broker hands it over.

// OffsetReader reads a group's committed offsets (Offsets does).
type OffsetReader interface {
	Committed(ctx context.Context, group, topic string, nparts int) ([]int64, error)
}

// Admin answers the admin API's questions about groups. Parts gives the
// partition logs; Coord, Offsets and Committed are the broker's.
type Admin struct {
	Parts     partition.Source
	Coord     *Coordinator
	Offsets   OffsetReader
	Committed *Committed
}

// Notes of an Entry.
const (
	NoteOffsetsElsewhere = "its consumers own partitions (ZooKeeper owner nodes) but keep their offsets neither in ZooKeeper nor through this broker " +
		"(a client-side MySQL or file offset store): lag unknown"
	NoteNoCommit = "no offsets committed through this broker yet: lag unknown"
)

// Entry is one group and topic known here.
type Entry struct {
	Group, Topic string
	// Committed: offsets committed through this broker (now or before a
	// restart); InZooKeeper: offsets read from ZooKeeper (cluster mode).
	Committed, InZooKeeper, Coordinated bool
	Members                             int
	// LagKnown: some committed offset is known; Note says why not.
	LagKnown bool
	Note     string
}

// open says whether topic is open here.
func (a Admin) open(topic string) bool {
	_, err := a.Parts.Partitions(topic)
	return err == nil
}

// List returns the groups known here that see allows (nil: all): those
// that committed offsets through this broker (now or before a restart),
// those whose offsets or owners are in ZooKeeper, and those coordinated
// here, sorted by group and topic.
func (a Admin) List(see func(group, topic string) bool) []*Entry {
	m := map[GroupTopic]*Entry{}
	for k, src := range a.Committed.Sources() {
		if !a.open(k.Topic) || (see != nil && !see(k.Group, k.Topic)) { // restored for a topic deleted since; not the viewer's
			continue
		}
		e := &Entry{Group: k.Group, Topic: k.Topic, Committed: src.Here, InZooKeeper: src.ZooKeeper, LagKnown: src.Here || src.ZooKeeper}
		switch {
		case e.LagKnown:
		case src.Err != "":
			e.Note = src.Err + ": lag unknown"
		default:
			e.Note = NoteOffsetsElsewhere
		}
		m[k] = e
	}
	for _, g := range a.Coord.Groups() {
		if see != nil && !see(g.Group, g.Topic) {
			continue
		}
		k := GroupTopic{Group: g.Group, Topic: g.Topic}
		e := m[k]
		if e == nil {
			e = &Entry{Group: g.Group, Topic: g.Topic, Note: NoteNoCommit}
			m[k] = e
		}
		e.Coordinated, e.Members = true, g.Members
	}
	out := make([]*Entry, 0, len(m))
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

// Topics are the topics group committed here or is coordinated here for,
// sorted.
func (a Admin) Topics(group string) []string {
	seen := map[string]bool{}
	for k := range a.Committed.Sources() {
		if k.Group == group && a.open(k.Topic) {
			seen[k.Topic] = true
		}
	}
	for _, g := range a.Coord.Groups() {
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

// PartitionLag is one partition of a group's topic: its committed offset
// (-1 none), offsets, lag (nil while nothing is committed) and owner.
type PartitionLag struct {
	Partition            int
	Committed            int64
	MinOffset, MaxOffset int64
	LagBytes             *int64
	LagMessages          *int64
	LagMessagesEstimated bool
	Owner                string
	// Source is "offset_store", "zookeeper" or "" (unknown).
	Source string
}

// TopicLag is one topic of a group describe.
type TopicLag struct {
	Topic                string
	LagBytes             int64
	LagMessages          int64
	LagMessagesEstimated bool
	Partitions           []PartitionLag
}

// Describe reads group's committed offsets of topics from the offset
// store (the consumers' ZooKeeper offsets where it has none), with each
// partition's offsets, lag and owner. An unknown topic is
// partition.ErrNoTopic (wrapped with its name); an offset store failure
// is returned as it is.
func (a Admin) Describe(ctx context.Context, group string, topics []string) ([]TopicLag, error) {
	owners := a.Coord.GroupOwners(group)
	out := []TopicLag{}
	for _, name := range topics {
		logs, err := a.logs(name)
		if err != nil {
			return nil, err
		}
		committed, err := a.Offsets.Committed(ctx, group, name, len(logs))
		if err != nil {
			return nil, err
		}
		zk := a.Committed.ZKOffsets(group, name)
		gt := TopicLag{Topic: name, Partitions: []PartitionLag{}}
		for p, l := range logs {
			gp := PartitionLag{Partition: p, Committed: committed[p], MinOffset: l.MinOffset(), MaxOffset: l.MaxOffset(),
				Owner: owners[TopicPartition{Topic: name, Partition: p}]}
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
				n, exact := LagMessages(l, PartSize{Min: gp.MinOffset, Max: gp.MaxOffset, Msgs: l.MessageCount()}, committed[p])
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

// logs returns topic's partition logs, or partition.ErrNoTopic wrapped
// with its name.
func (a Admin) logs(topic string) ([]*store.Log, error) {
	n, err := a.Parts.Partitions(topic)
	var logs []*store.Log
	for p := 0; err == nil && p < n; p++ {
		var l *store.Log
		l, err = a.Parts.Log(topic, p)
		logs = append(logs, l)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s", partition.ErrNoTopic, protocol.Printable([]byte(topic)))
	}
	return logs, nil
}

// ResetChange is one partition's committed offset moved (From -1:
// nothing committed).
type ResetChange struct {
	Partition int
	From, To  int64
}

// PlanReset checks a reset of group's offsets of topic (partition nil:
// every partition) to "earliest", "latest" or "offset" (offset) and
// returns the changes it makes; it writes nothing. A malformed request is
// an *Error of kind Invalid, an unknown topic partition.ErrNoTopic
// (wrapped with its name), an offset store failure as it is.
func (a Admin) PlanReset(ctx context.Context, group, topic string, partition *int, to string, offset *int64) ([]ResetChange, error) {
	bad := func(msg string) error { return &Error{Kind: Invalid, Msg: msg} }
	if topic == "" {
		return nil, bad("topic is required")
	}
	logs, err := a.logs(topic)
	if err != nil {
		return nil, err
	}
	parts := make([]int, 0, len(logs))
	if partition != nil {
		if p := *partition; p < 0 || p >= len(logs) {
			return nil, bad("partition " + strconv.Itoa(p) + " out of range for topic " + topic + " (0.." + strconv.Itoa(len(logs)-1) + ")")
		}
		parts = append(parts, *partition)
	} else {
		for p := range logs {
			parts = append(parts, p)
		}
	}
	switch to {
	case "earliest", "latest":
		if offset != nil {
			return nil, bad("offset is only for to = \"offset\"")
		}
	case "offset":
		if offset == nil {
			return nil, bad("to = \"offset\" needs offset")
		}
	default:
		return nil, bad(`to must be "earliest", "latest" or "offset", got ` + protocol.Printable([]byte(to)))
	}
	committed, err := a.Offsets.Committed(ctx, group, topic, len(logs))
	if err != nil {
		return nil, err
	}
	var out []ResetChange
	for _, p := range parts {
		l := logs[p]
		var o int64
		switch to {
		case "earliest":
			o = l.MinOffset()
		case "latest":
			o = l.MaxOffset()
		case "offset":
			o = *offset
			if o < l.MinOffset() || o > l.MaxOffset() {
				return nil, bad("offset " + strconv.FormatInt(o, 10) + " is outside partition " + strconv.Itoa(p) +
					"'s offsets " + strconv.FormatInt(l.MinOffset(), 10) + ".." + strconv.FormatInt(l.MaxOffset(), 10))
			}
		}
		out = append(out, ResetChange{Partition: p, From: committed[p], To: o})
	}
	return out, nil
}

// LagMessages is the number of messages of l from committed to s.Max (s
// is l's offsets and count, read once): counted with the record-count
// index, or, while that does not cover the range yet (after a restart,
// until the background scrub has indexed the old segments), estimated
// (exact false).
func LagMessages(l *store.Log, s PartSize, committed int64) (n int64, exact bool) {
	if committed >= s.Max {
		return 0, true
	}
	if n, exact, err := l.CountRecords(committed, s.Max); err == nil && exact {
		return n, true
	}
	return s.lagMessages(committed), false
}

// PartSize is a partition's offsets and message count, read once.
type PartSize struct{ Min, Max, Msgs int64 }

// lagMessages is the number of messages from committed to the end: 0 at
// the end, every message from the start, else the byte lag over the mean
// record size (0 while the count is not known yet).
func (s PartSize) lagMessages(committed int64) int64 {
	lag := s.Max - committed
	switch {
	case lag <= 0:
		return 0
	case s.Msgs < 0:
		return 0
	case committed <= s.Min:
		return s.Msgs
	case s.Max > s.Min:
		return (lag*s.Msgs + (s.Max-s.Min)/2) / (s.Max - s.Min)
	}
	return 0
}
