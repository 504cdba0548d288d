package registry

import (
	"errors"
	"sort"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/internal/zkpath"
)

// GroupOffsets is one consumer group's committed offsets of one topic's
// partitions on one broker, as MetaQ's consumers keep them in ZooKeeper
// (R/consumers/<g>/offsets/<t>/<brokerId>-<p>, ZkOffsetStorage).
type GroupOffsets struct {
	Group, Topic string
	// Offsets by partition; Offset -1 where no node is readable.
	Offsets []NodeOffset
	// Owned: the group has owner nodes for the topic (it consumes it),
	// whether or not it keeps offsets in ZooKeeper.
	Owned bool
	// Err says why some offsets could not be read (a node's ACL, bad
	// data); "" when every node present was read.
	Err string
}

// NodeOffset is one offset node: the offset, and when it was last written
// (the node's mtime, milliseconds since the epoch).
type NodeOffset struct{ Offset, MTime int64 }

// OffsetLimits bound one ConsumerOffsets call.
type OffsetLimits struct {
	MaxGroups int // groups read, in name order
	MaxReads  int // ZooKeeper requests
}

// ConsumerOffsets reads, for every consumer group under R/consumers (at
// most lim.MaxGroups, in name order), the committed offsets of broker
// brokerID's partitions of topics (name -> partition count), and notes the
// groups that own partitions of a topic without keeping offsets in
// ZooKeeper (their consumers keep them elsewhere: MySQL, a file). A group
// that has neither is left out. It sets no watches. truncated says that a
// limit cut the reading short; the groups read so far are returned.
func (r *Registry) ConsumerOffsets(brokerID int, topics map[string]int, lim OffsetLimits) (out []GroupOffsets, truncated bool, err error) {
	reads := 0
	children := func(path string) ([]string, error) {
		reads++
		kids, _, err := r.conn.Children(path)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil
		}
		return kids, err
	}
	groups, err := children(zkpath.Consumers(r.root))
	if err != nil {
		return nil, false, err
	}
	sort.Strings(groups)
	if len(groups) > lim.MaxGroups {
		groups, truncated = groups[:lim.MaxGroups], true
	}
	for _, g := range groups {
		if reads >= lim.MaxReads {
			return out, true, nil
		}
		byTopic := map[string]*GroupOffsets{}
		entry := func(t string) *GroupOffsets {
			e := byTopic[t]
			if e == nil {
				e = &GroupOffsets{Group: g, Topic: t, Offsets: make([]NodeOffset, topics[t])}
				for i := range e.Offsets {
					e.Offsets[i].Offset = -1
				}
				byTopic[t] = e
			}
			return e
		}
		ts, err := children(zkpath.Offsets(r.root, g))
		if err != nil && !errors.Is(err, zk.ErrNoAuth) {
			return out, false, err
		}
		for _, t := range ts {
			n, ok := topics[t]
			if !ok {
				continue
			}
			parts, err := children(zkpath.OffsetsTopic(r.root, g, t))
			if errors.Is(err, zk.ErrNoAuth) {
				entry(t).Err = "offsets not readable (ZooKeeper ACL)"
				continue
			}
			if err != nil {
				return out, false, err
			}
			for _, name := range parts {
				id, p, err := zkpath.ParsePartitionName(name)
				if err != nil || id != brokerID || int(p) >= n {
					continue
				}
				if reads >= lim.MaxReads {
					truncated = true
					break
				}
				reads++
				data, st, err := r.conn.Get(zkpath.Offset(r.root, g, t, brokerID, p))
				switch {
				case errors.Is(err, zk.ErrNoNode):
					continue
				case errors.Is(err, zk.ErrNoAuth):
					entry(t).Err = "offsets not readable (ZooKeeper ACL)"
					continue
				case err != nil:
					return out, false, err
				}
				off, _, perr := zkpath.ParseOffsetData(data)
				if perr != nil {
					entry(t).Err = perr.Error()
					continue
				}
				entry(t).Offsets[p] = NodeOffset{Offset: off, MTime: st.Mtime}
			}
		}
		owned, err := children(zkpath.Owners(r.root, g))
		if err != nil && !errors.Is(err, zk.ErrNoAuth) {
			return out, false, err
		}
		for _, t := range owned {
			if _, ok := topics[t]; ok {
				entry(t).Owned = true
			}
		}
		names := make([]string, 0, len(byTopic))
		for t := range byTopic {
			names = append(names, t)
		}
		sort.Strings(names)
		for _, t := range names {
			out = append(out, *byTopic[t])
		}
	}
	return out, truncated, nil
}
