package registry

import (
	"errors"
	"sort"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/cluster"
)

// What replication reads through the registry's session: a slave its
// master's address and topics, a sync master its slaves.

// Master returns the address (host:port) registered in ids/<id>/master
// of this broker id, with a watch that fires when the node is created,
// changed or deleted; tls is true for a metaqs:// URI (a TLS-only
// master). ok is false when no master is registered (or its URI does not
// parse).
func (r *Registry) Master() (addr string, tls, ok bool, watch <-chan zk.Event, err error) {
	data, _, ch, err := r.conn.GetW(r.master)
	if errors.Is(err, zk.ErrNoNode) {
		var exists bool
		exists, _, ch, err = r.conn.ExistsW(r.master)
		if err != nil {
			return "", false, false, nil, err
		}
		if exists { // created meanwhile: read it
			return r.Master()
		}
		return "", false, false, ch, nil
	}
	if err != nil {
		return "", false, false, nil, err
	}
	addr, tls, good := cluster.ParseURI(string(data))
	if !good {
		r.logf("registry: %s holds %q: not a meta:// or metaqs:// URI to replicate from", r.master, data)
		return "", false, false, ch, nil
	}
	return addr, tls, true, ch, nil
}

// MasterTopics returns the topics this broker id's master registers under
// topics-sub (MetaQ's slave replicates exactly those), with their
// partition counts.
func (r *Registry) MasterTopics() (map[string]int, error) {
	dir := zkpath.TopicsSub.Dir(r.root)
	names, _, err := r.conn.Children(dir)
	if errors.Is(err, zk.ErrNoNode) {
		return map[string]int{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(names))
	m := zkpath.MasterName(r.opts.BrokerID)
	for _, t := range names {
		data, _, err := r.conn.Get(zkpath.TopicsSub.Node(r.root, t, m))
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		td, err := zkpath.ParseTopicData(data)
		if err != nil || td.NumParts <= 0 {
			r.logf("registry: ignoring master topic %s: %v", t, err)
			continue
		}
		out[t] = td.NumParts
	}
	return out, nil
}

// SlaveNode is one registered slave of this broker id.
type SlaveNode struct {
	ID   int
	Addr string // host:port
	TLS  bool   // registered as metaqs:// (a TLS-only slave)
}

// Slaves returns the slaves registered under ids/<id> (meta:// and
// metaqs:// ones),
// lowest id first, with a watch on the children of ids/<id>. A slave
// that registers, changes or goes fires it (a change of a slave's data
// alone does not: slaves keep their address for their session).
func (r *Registry) Slaves() ([]SlaveNode, <-chan zk.Event, error) {
	kids, _, ch, err := r.conn.ChildrenW(r.idPath)
	if errors.Is(err, zk.ErrNoNode) {
		var exists bool
		exists, _, ch, err = r.conn.ExistsW(r.idPath)
		if err != nil {
			return nil, nil, err
		}
		if exists {
			return r.Slaves()
		}
		return nil, ch, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var out []SlaveNode
	for _, k := range kids {
		n, ok := strings.CutPrefix(k, zkpath.SlavePrefix)
		if !ok {
			continue
		}
		bn, err := zkpath.ParseBrokerName("0-s" + n)
		if err != nil {
			continue
		}
		data, _, err := r.conn.Get(zkpath.Slave(r.root, r.opts.BrokerID, bn.Slave))
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		addr, tls, good := cluster.ParseURI(string(data))
		if !good {
			continue
		}
		out = append(out, SlaveNode{ID: bn.Slave, Addr: addr, TLS: tls})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, ch, nil
}
