package cluster

import (
	"fmt"
	"sort"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/internal/zkpath"
)

// GroupNodes is a consumer group as ZooKeeper holds it, R/consumers/<g>:
// what `metaq group describe --zk` (sdk/admin) and a broker's dashboard
// read of its members and owners.
type GroupNodes struct {
	// Exists says R/consumers/<g> exists.
	Exists bool
	// Members maps each live member (ids/<consumerId>) to the topics it
	// subscribes to, sorted.
	Members map[string][]string
	// Owners maps each owned partition (owners/<t>/<brokerId>-<p>) to its
	// owner.
	Owners map[OwnerKey]string
	// Topics are the topics named by members, owners and offsets.
	Topics map[string]bool
}

// OwnerKey names a partition of a group's topic.
type OwnerKey struct {
	Topic     string
	BrokerID  int
	Partition int32
}

// SortedOwners returns the keys of Owners by topic, broker and partition.
func (g *GroupNodes) SortedOwners() []OwnerKey {
	out := make([]OwnerKey, 0, len(g.Owners))
	for k := range g.Owners {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.BrokerID != b.BrokerID {
			return a.BrokerID < b.BrokerID
		}
		return a.Partition < b.Partition
	})
	return out
}

// ReadGroupNodes reads group g under root ("" or "/x") with a connected
// client. A group that does not exist reads as Exists false.
func ReadGroupNodes(c *zk.Conn, root, g string) (*GroupNodes, error) {
	root = strings.TrimRight(root, "/")
	base := zkpath.Group(root, g)
	zg := &GroupNodes{Members: map[string][]string{}, Owners: map[OwnerKey]string{}, Topics: map[string]bool{}}
	if ok, _, err := c.Exists(base); err != nil {
		return nil, fmt.Errorf("%s: %w", base, err)
	} else if !ok {
		return zg, nil
	}
	zg.Exists = true
	ids, err := ReadChildren(c, zkpath.Members(root, g))
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		v, ok, err := ReadData(c, zkpath.Member(root, g, id))
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // gone meanwhile
		}
		topics := zkpath.ParseMemberData([]byte(v))
		for _, t := range topics {
			zg.Topics[t] = true
		}
		sort.Strings(topics)
		zg.Members[id] = topics
	}
	topics, err := ReadChildren(c, zkpath.Owners(root, g))
	if err != nil {
		return nil, err
	}
	for _, t := range topics {
		nodes, err := ReadChildren(c, zkpath.OwnersTopic(root, g, t))
		if err != nil {
			return nil, err
		}
		for _, n := range nodes {
			id, part, err := zkpath.ParsePartitionName(n)
			if err != nil {
				continue
			}
			v, ok, err := ReadData(c, zkpath.Owner(root, g, t, id, part))
			if err != nil {
				return nil, err
			}
			if ok {
				zg.Owners[OwnerKey{t, id, part}] = v
				zg.Topics[t] = true
			}
		}
	}
	topics, err = ReadChildren(c, zkpath.Offsets(root, g))
	if err != nil {
		return nil, err
	}
	for _, t := range topics {
		zg.Topics[t] = true
	}
	return zg, nil
}

// ReadGroupNames returns the groups under root ("" or "/x"), sorted.
func ReadGroupNames(c *zk.Conn, root string) ([]string, error) {
	return ReadChildren(c, zkpath.Consumers(strings.TrimRight(root, "/")))
}
