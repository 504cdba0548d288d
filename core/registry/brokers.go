package registry

import (
	"errors"
	"sort"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/internal/zkpath"
)

// BrokerNode is one broker id registered under R/brokers/ids: its
// master's URIs and its slaves' (the dashboard's cluster page).
type BrokerNode struct {
	ID        int
	Master    string // the master node's URI, "" when no master is registered
	MasterTLS string // master_tls, when the master listens in plain text too
	Slaves    []SlaveURI
}

// SlaveURI is one registered slave<N> node.
type SlaveURI struct {
	ID  int
	URI string
}

// maxListedBrokers bounds Brokers: a ZooKeeper holding more ids is listed
// in part.
const maxListedBrokers = 1024

// Brokers lists every broker id registered under R/brokers/ids with its
// master and slaves, lowest id first. It sets no watches (it is read on
// demand, by a page).
func (r *Registry) Brokers() ([]BrokerNode, error) {
	ids, _, err := r.conn.Children(zkpath.BrokerIDs(r.root))
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []BrokerNode
	for _, s := range ids {
		id, err := zkpath.ParseBrokerID(s)
		if err != nil {
			continue
		}
		if len(out) == maxListedBrokers {
			break
		}
		kids, _, err := r.conn.Children(zkpath.Broker(r.root, id))
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		n := BrokerNode{ID: id}
		for _, k := range kids {
			var path string
			switch {
			case k == zkpath.MasterNode, k == zkpath.MasterTLSNode:
				path = zkpath.Broker(r.root, id) + "/" + k
			case strings.HasPrefix(k, zkpath.SlavePrefix):
				path = zkpath.Broker(r.root, id) + "/" + k
			default:
				continue
			}
			data, _, err := r.conn.Get(path)
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return nil, err
			}
			switch {
			case k == zkpath.MasterNode:
				n.Master = string(data)
			case k == zkpath.MasterTLSNode:
				n.MasterTLS = string(data)
			default:
				bn, err := zkpath.ParseBrokerName("0-s" + strings.TrimPrefix(k, zkpath.SlavePrefix))
				if err != nil {
					continue
				}
				n.Slaves = append(n.Slaves, SlaveURI{ID: bn.Slave, URI: string(data)})
			}
		}
		sort.Slice(n.Slaves, func(i, j int) bool { return n.Slaves[i].ID < n.Slaves[j].ID })
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Read runs f with the registry's ZooKeeper connection and root ("" or
// "/x"), for readers of the whole tree (the dashboard's cluster view,
// through sdk/cluster.ReadLayout and ReadGroupNodes). f must only
// read, and set no watches.
func (r *Registry) Read(f func(c *zk.Conn, root string) error) error {
	return f(r.conn, r.root)
}
