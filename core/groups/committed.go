package groups

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
)

// Committed is the source of the committed offsets behind the lag
// metrics, the dashboard's lag trend and the admin API's group list
// (docs/http.md, "Where lag comes from"). It merges:
//
//   - the offsets committed through this broker (the wire's commit and the
//     admin resets), kept across restarts in <data_dir>/committed-offsets.json
//     (lagsource.go);
//   - in cluster mode, the offsets MetaQ consumers keep in ZooKeeper
//     (R/consumers/<g>/offsets/<t>/<brokerId>-<p>), read every
//     zkOffsetsEvery for every group there.
//
// Per partition the newest commit wins: a commit here is dated when the
// broker saw it, a ZooKeeper node by its mtime. The offset store stays the
// truth for a group's describe (Offsets.Committed). Commits are not on
// the message path, so a mutex is enough.
type Committed struct {
	mu    sync.Mutex
	m     map[GroupTopic][]commitAt // committed through this broker
	zkm   map[GroupTopic]zkEntry    // read from ZooKeeper at the last refresh
	dirty bool                      // m changed since it was last saved

	saveMu      sync.Mutex  // one save at a time (lagsource.go)
	zkTruncated atomic.Bool // the last ZooKeeper read hit a limit

	path     string   // <data_dir>/committed-offsets.json
	brokerID int      // this broker's id, in the file
	zk       ZKSource // nil without ZooKeeper
	logf     func(format string, args ...any)
	warnf    func(format string, args ...any)
}

// GroupTopic names a consumer group's offsets of one topic.
type GroupTopic struct{ Group, Topic string }

// commitAt is one partition's committed offset (-1: none) and when it was
// committed (Unix milliseconds).
type commitAt struct{ off, at int64 }

// zkEntry is a group and topic as ZooKeeper has it: offsets (-1 where no
// node is readable), and whether the group owns partitions of the topic.
type zkEntry struct {
	offs  []commitAt
	owned bool
	err   string
}

// CommittedGroup is one entry of a Snapshot: a group's committed offsets
// of a topic by partition, -1 where none is known.
type CommittedGroup struct {
	Group, Topic string
	Offsets      []int64
}

// maxCommittedEntries bounds each source: a client committing for ever
// new group names cannot grow it without limit.
const maxCommittedEntries = 100000

// maxCommittedPartitions bounds a partition index kept.
const maxCommittedPartitions = 1 << 16

// Record notes a successful commit of positions (all of this broker).
func (s *Committed) Record(group string, ps []message.Position) {
	now := time.Now().UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range ps {
		s.setLocked(GroupTopic{group, p.Topic}, int(p.Partition.Partition), commitAt{p.Offset, now})
	}
}

// setLocked sets one partition's commit in m.
func (s *Committed) setLocked(k GroupTopic, i int, c commitAt) {
	if s.m == nil {
		s.m = make(map[GroupTopic][]commitAt)
	}
	offs, ok := s.m[k]
	if !ok && len(s.m) >= maxCommittedEntries {
		return
	}
	if i < 0 || i >= maxCommittedPartitions {
		return
	}
	for len(offs) <= i {
		offs = append(offs, commitAt{-1, 0})
	}
	offs[i] = c
	s.m[k] = offs
	s.dirty = true
}

// setZK replaces what was read from ZooKeeper.
func (s *Committed) setZK(zk map[GroupTopic]zkEntry) {
	s.mu.Lock()
	s.zkm = zk
	s.mu.Unlock()
}

// Forget drops a topic (deleted) from every group.
func (s *Committed) Forget(topic string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.m {
		if k.Topic == topic {
			delete(s.m, k)
			s.dirty = true
		}
	}
	for k := range s.zkm {
		if k.Topic == topic {
			delete(s.zkm, k)
		}
	}
}

// merged is k's offsets, the newest of both sources per partition.
func merged(here []commitAt, zk []commitAt) []int64 {
	out := make([]int64, max(len(here), len(zk)))
	for i := range out {
		c := commitAt{-1, 0}
		if i < len(here) {
			c = here[i]
		}
		if i < len(zk) && zk[i].off >= 0 && (c.off < 0 || zk[i].at > c.at) {
			c = zk[i]
		}
		out[i] = c.off
	}
	return out
}

// Snapshot returns the group/topic pairs with at least one committed
// offset known, merged, sorted by group and topic.
func (s *Committed) Snapshot() []CommittedGroup {
	s.mu.Lock()
	out := make([]CommittedGroup, 0, len(s.m)+len(s.zkm))
	for k, offs := range s.m {
		out = append(out, CommittedGroup{k.Group, k.Topic, merged(offs, s.zkm[k].offs)})
	}
	for k, e := range s.zkm {
		if _, ok := s.m[k]; ok {
			continue
		}
		offs := merged(nil, e.offs)
		for _, o := range offs {
			if o >= 0 {
				out = append(out, CommittedGroup{k.Group, k.Topic, offs})
				break
			}
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Group != out[j].Group {
			return out[i].Group < out[j].Group
		}
		return out[i].Topic < out[j].Topic
	})
	return out
}

// Source says where a group/topic's offsets are known from.
type Source struct {
	Here      bool   // committed through this broker (now or before a restart)
	ZooKeeper bool   // offsets read from ZooKeeper
	Owned     bool   // ZooKeeper has owner nodes for it (consumed, maybe with offsets kept elsewhere)
	Err       string // why ZooKeeper's offsets could not be read
}

// Sources returns, for every group/topic either source knows (with or
// without offsets), where it is known from.
func (s *Committed) Sources() map[GroupTopic]Source {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[GroupTopic]Source, len(s.m)+len(s.zkm))
	for k := range s.m {
		out[k] = Source{Here: true}
	}
	for k, e := range s.zkm {
		src := out[k]
		for _, c := range e.offs {
			if c.off >= 0 {
				src.ZooKeeper = true
				break
			}
		}
		src.Owned, src.Err = e.owned, e.err
		out[k] = src
	}
	return out
}

// ZKOffsets returns group's offsets of topic as ZooKeeper had them at the
// last refresh (-1: none), nil if it had none.
func (s *Committed) ZKOffsets(group, topic string) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.zkm[GroupTopic{group, topic}]
	if !ok {
		return nil
	}
	return merged(nil, e.offs)
}
