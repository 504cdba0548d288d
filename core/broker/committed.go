package broker

import (
	"sort"
	"sync"

	"github.com/metaq-go/metaq/sdk/message"
)

// committedSet remembers the last offset each consumer group committed
// through this broker, per topic and partition, for the lag metrics and
// the admin API's group list. The offset store stays the truth (the admin
// API's group describe reads it); this is what the broker has seen since
// it started. Commits are not on the message path, so a mutex is enough.
type committedSet struct {
	mu sync.Mutex
	m  map[groupTopic][]int64 // offsets by partition, -1 = none committed
}

type groupTopic struct{ group, topic string }

// committedGroup is one entry of a snapshot.
type committedGroup struct {
	group, topic string
	offsets      []int64
}

// maxCommittedEntries bounds the set: a client committing for ever new
// group names cannot grow it without limit.
const maxCommittedEntries = 100000

// record notes a successful commit of positions (all of this broker).
func (s *committedSet) record(group string, ps []message.Position) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[groupTopic][]int64)
	}
	for _, p := range ps {
		k := groupTopic{group, p.Topic}
		offs, ok := s.m[k]
		if !ok && len(s.m) >= maxCommittedEntries {
			continue
		}
		i := int(p.Partition.Partition)
		if i < 0 || i >= 1<<16 {
			continue
		}
		for len(offs) <= i {
			offs = append(offs, -1)
		}
		offs[i] = p.Offset
		s.m[k] = offs
	}
}

// forget drops a topic (deleted) from every group.
func (s *committedSet) forget(topic string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.m {
		if k.topic == topic {
			delete(s.m, k)
		}
	}
}

// snapshot returns copies, sorted by group and topic.
func (s *committedSet) snapshot() []committedGroup {
	s.mu.Lock()
	out := make([]committedGroup, 0, len(s.m))
	for k, offs := range s.m {
		out = append(out, committedGroup{k.group, k.topic, append([]int64(nil), offs...)})
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].group != out[j].group {
			return out[i].group < out[j].group
		}
		return out[i].topic < out[j].topic
	})
	return out
}
