package cluster

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/internal/zkpath"
)

// Layout is what the brokers registered under a root, as ReadLayout found
// it: a one-shot reading for tools (`metaq cluster`); clients that follow
// changes use a TopicView.
type Layout struct {
	Root    string         `json:"root"`
	Brokers []BrokerInfo   `json:"brokers"`
	Topics  []TopicBrokers `json:"topics"`
}

// BrokerInfo is one R/brokers/ids/<id>.
type BrokerInfo struct {
	ID int `json:"id"`
	// Master is ids/<id>/master ("" if the broker has no live master):
	// meta://host:port, or metaqs://host:tls_port for a TLS-only broker.
	Master string `json:"master"`
	// MasterTLS is ids/<id>/master_tls, metaqs://host:tls_port, written
	// beside a meta:// Master by a broker that serves TLS as well.
	MasterTLS string `json:"master_tls,omitempty"`
	// Slaves are the ids/<id>/slave<N> nodes by name.
	Slaves map[string]string `json:"slaves,omitempty"`
	// ConfigChecksum is ids/<id>/master_config_checksum.
	ConfigChecksum string `json:"config_checksum,omitempty"`
}

// Broker returns the master's addresses from Master and MasterTLS (both
// "" when there is no live master or its URI is bad).
func (b BrokerInfo) Broker() Broker {
	out := Broker{ID: b.ID}
	if addr, tls, ok := ParseURI(b.Master); ok && tls {
		out.TLSAddr = addr
		return out
	} else if ok {
		out.Addr = addr
	}
	if addr, tls, ok := ParseURI(b.MasterTLS); ok && tls {
		out.TLSAddr = addr
	}
	return out
}

// TopicBrokers is one topic: the brokers that registered it.
type TopicBrokers struct {
	Name    string           `json:"name"`
	Brokers []TopicPartition `json:"brokers"`
}

// TopicPartition is one broker's registration of a topic, from
// topics-pub/<t>/<broker> and topics-sub/<t>/<broker>.
type TopicPartition struct {
	// Broker is the node name, "<id>-m" or "<id>-s<N>".
	Broker   string `json:"broker"`
	BrokerID int    `json:"broker_id"`
	// NumParts is the partition count registered (pub's if both differ).
	NumParts  int  `json:"num_parts"`
	Publish   bool `json:"publish"`
	Subscribe bool `json:"subscribe"`
}

// ReadLayout reads the registered brokers and topics under root ("" means
// DefaultRoot) with a connected client. Missing subtrees read as empty.
func ReadLayout(c *zk.Conn, root string) (*Layout, error) {
	if root == "" {
		root = DefaultRoot
	}
	root = strings.TrimRight(root, "/")
	cl := &Layout{Root: root, Brokers: []BrokerInfo{}, Topics: []TopicBrokers{}}
	if cl.Root == "" {
		cl.Root = "/"
	}
	// The topics first, then the brokers: a broker's ephemeral nodes go
	// together when its session ends, so a broker listed here with a
	// master had its registrations read while it was still up. Read the
	// other way round, a session ending between the two reads gave a
	// master without its topics (the dashboard's cluster console then
	// forgot the partitions of a broker that went).
	topics := map[string]map[string]*TopicPartition{}
	for _, kind := range []zkpath.Kind{zkpath.TopicsPub, zkpath.TopicsSub} {
		names, err := ReadChildren(c, kind.Dir(root))
		if err != nil {
			return nil, err
		}
		for _, t := range names {
			brokers, err := ReadChildren(c, kind.Topic(root, t))
			if err != nil {
				return nil, err
			}
			for _, bn := range brokers {
				name, err := zkpath.ParseBrokerName(bn)
				if err != nil {
					continue // not a broker's node
				}
				node := kind.Node(root, t, name)
				v, _, err := ReadData(c, node)
				if err != nil {
					return nil, err
				}
				if v == "" {
					continue // vanished meanwhile
				}
				tb, err := zkpath.ParseTopicData([]byte(v))
				if err != nil {
					return nil, fmt.Errorf("%s: bad data: %v", node, err)
				}
				if topics[t] == nil {
					topics[t] = map[string]*TopicPartition{}
				}
				tp := topics[t][bn]
				if tp == nil {
					tp = &TopicPartition{Broker: bn, BrokerID: name.ID, NumParts: tb.NumParts}
					topics[t][bn] = tp
				}
				if kind == zkpath.TopicsPub {
					tp.Publish = true
				} else {
					tp.Subscribe = true
				}
			}
		}
	}
	for name, m := range topics {
		tb := TopicBrokers{Name: name}
		for _, tp := range m {
			tb.Brokers = append(tb.Brokers, *tp)
		}
		sort.Slice(tb.Brokers, func(i, j int) bool {
			a, b := tb.Brokers[i], tb.Brokers[j]
			if a.BrokerID != b.BrokerID {
				return a.BrokerID < b.BrokerID
			}
			return a.Broker < b.Broker
		})
		cl.Topics = append(cl.Topics, tb)
	}
	sort.Slice(cl.Topics, func(i, j int) bool { return cl.Topics[i].Name < cl.Topics[j].Name })

	ids, err := ReadChildren(c, zkpath.BrokerIDs(root))
	if err != nil {
		return nil, err
	}
	for _, s := range ids {
		id, err := zkpath.ParseBrokerID(s)
		if err != nil {
			continue
		}
		b := BrokerInfo{ID: id}
		base := zkpath.Broker(root, id)
		kids, err := ReadChildren(c, base)
		if err != nil {
			return nil, err
		}
		for _, k := range kids {
			v, _, err := ReadData(c, base+"/"+k)
			if err != nil {
				return nil, err
			}
			switch {
			case k == zkpath.MasterNode:
				b.Master = v
			case k == zkpath.MasterTLSNode:
				b.MasterTLS = v
			case k == zkpath.MasterChecksumNode:
				b.ConfigChecksum = v
			case strings.HasPrefix(k, zkpath.SlavePrefix) && !strings.Contains(k, "config_checksum"):
				if b.Slaves == nil {
					b.Slaves = map[string]string{}
				}
				b.Slaves[k] = v
			}
		}
		cl.Brokers = append(cl.Brokers, b)
	}
	sort.Slice(cl.Brokers, func(i, j int) bool { return cl.Brokers[i].ID < cl.Brokers[j].ID })
	return cl, nil
}

// ReadChildren returns the sorted children of node p (nil when p does not
// exist), for tools reading MetaQ's layout.
func ReadChildren(c *zk.Conn, p string) ([]string, error) {
	kids, _, err := c.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	sort.Strings(kids)
	return kids, nil
}

// ReadData returns node p's data; ok is false when p does not exist.
func ReadData(c *zk.Conn, p string) (data string, ok bool, err error) {
	v, _, err := c.Get(p)
	if errors.Is(err, zk.ErrNoNode) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("%s: %w", p, err)
	}
	return string(v), true, nil
}
