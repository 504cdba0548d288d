package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/internal/backoff"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/message"
)

// Snapshot is one consistent reading of a topic's publish partitions.
// It is immutable: do not modify it.
type Snapshot struct {
	// Partitions are the masters' partitions sorted by (BrokerID,
	// Partition), numerically.
	Partitions []message.Partition
	// Addrs maps a broker id to the "host:port" a client dials: its
	// master's plaintext address (meta:// URI), or with Options.UseTLS its
	// TLS address (metaqs://). A broker without that listener is not in
	// it; Brokers lists it.
	Addrs map[int]string
	// Brokers maps the id of every broker with partitions listed to its
	// addresses.
	Brokers map[int]Broker
}

// Addr returns the address a client dials for broker id (see Addrs), or "".
func (s *Snapshot) Addr(id int) string { return s.Addrs[id] }

// Broker is where one broker serves, from its registered URIs: a master's
// ids/<id>/master and ids/<id>/master_tls (or a slave's slave<N>).
type Broker struct {
	ID int
	// Addr is the plaintext listener's "host:port" (meta://), "" for a
	// TLS-only broker.
	Addr string
	// TLSAddr is the TLS listener's "host:port" (metaqs://), "" if the
	// broker has none.
	TLSAddr string
}

// ErrTLSOnly is returned by Broker.DialAddr for a client without TLS and
// a broker that serves TLS only.
var ErrTLSOnly = errors.New("cluster: broker is TLS-only")

// ErrNoTLS is returned by Broker.DialAddr for a client that uses TLS and
// a broker without a TLS listener (it is never silently read in plaintext).
var ErrNoTLS = errors.New("cluster: broker has no TLS listener")

// DialAddr returns the address a client dials: the TLS one when useTLS,
// else the plaintext one. The error, ErrTLSOnly or ErrNoTLS, names the
// broker ("broker 3 is TLS-only").
func (b Broker) DialAddr(useTLS bool) (string, error) {
	switch {
	case useTLS && b.TLSAddr == "":
		return "", fmt.Errorf("%w: broker %d serves plaintext only (meta://%s)", ErrNoTLS, b.ID, b.Addr)
	case useTLS:
		return b.TLSAddr, nil
	case b.Addr == "":
		return "", fmt.Errorf("%w: broker %d is TLS-only (metaqs://%s): configure TLS", ErrTLSOnly, b.ID, b.TLSAddr)
	}
	return b.Addr, nil
}

// Scheme prefixes of the registered broker URIs.
const (
	// SchemePlain is MetaQ's URI scheme, a plaintext listener.
	SchemePlain = "meta://"
	// SchemeTLS is metaq-go's URI scheme for a TLS listener.
	SchemeTLS = "metaqs://"
)

// TopicView follows the publish partitions of one topic. It is safe for
// concurrent use.
type TopicView struct {
	c     *Cluster
	topic string
	sub   bool // topics-sub (consumers), else topics-pub

	snap    atomic.Pointer[Snapshot]
	ready   chan struct{} // closed after the first complete reading
	readyMu sync.Once
	changes chan struct{} // cap 1: coalesced
	wake    chan struct{} // cap 1: a watch fired

	amu   sync.Mutex
	armed map[string]bool // "c:"+path (children) or "d:"+path (data/exists)
}

func newTopicView(c *Cluster, topic string, sub bool) *TopicView {
	v := &TopicView{c: c, topic: topic, sub: sub, ready: make(chan struct{}), changes: make(chan struct{}, 1),
		wake: make(chan struct{}, 1), armed: make(map[string]bool)}
	v.snap.Store(&Snapshot{Addrs: map[int]string{}, Brokers: map[int]Broker{}})
	return v
}

// Topic returns the topic of the view.
func (v *TopicView) Topic() string { return v.topic }

// Snapshot returns the current reading.
func (v *TopicView) Snapshot() *Snapshot { return v.snap.Load() }

// Partitions returns the topic's master partitions, sorted by (BrokerID,
// Partition). The caller may modify the returned slice.
func (v *TopicView) Partitions() []message.Partition {
	return slices.Clone(v.snap.Load().Partitions)
}

// Addr returns the address ("host:port") of broker id's master, or "" if
// the view does not list it.
func (v *TopicView) Addr(brokerID int) string { return v.snap.Load().Addrs[brokerID] }

// Changes receives a value after the partitions or the addresses changed.
// Notifications are coalesced: one value may stand for several changes,
// so read Snapshot (or Partitions) after receiving. Meant for one reader.
func (v *TopicView) Changes() <-chan struct{} { return v.changes }

// Ready is closed once the view has read ZooKeeper completely at least
// once (the topic may still have no partitions).
func (v *TopicView) Ready() <-chan struct{} { return v.ready }

// Wait waits until the view is ready, or ctx is done.
func (v *TopicView) Wait(ctx context.Context) error {
	select {
	case <-v.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run reads the nodes whenever a watch fires, retrying failed readings
// with backoff, until the cluster is closed.
func (v *TopicView) run() {
	defer v.c.wg.Done()
	fails := 0
	for {
		err := v.refresh()
		var wait <-chan struct{} = v.wake
		if err != nil {
			fails++
			d := zkRetry.Delay(fails)
			if fails == 1 || fails%20 == 0 {
				v.c.opts.Logf("cluster: reading topic %s from ZooKeeper (attempt %d): %v", v.topic, fails, err)
			}
			t := time.NewTimer(d)
			select {
			case <-t.C:
				continue
			case <-v.c.done:
				t.Stop()
				return
			}
		}
		fails = 0
		select {
		case <-wait:
		case <-v.c.done:
			return
		}
	}
}

// arm records that a watch is set on key and forwards its event to wake.
// A watch that fires (including zk's EventNotWatching on session expiry or
// close) is disarmed first, so that the next refresh sets it again.
func (v *TopicView) arm(key string, ch <-chan zk.Event) {
	v.amu.Lock()
	v.armed[key] = true
	v.amu.Unlock()
	go func() {
		<-ch
		v.amu.Lock()
		delete(v.armed, key)
		v.amu.Unlock()
		select {
		case v.wake <- struct{}{}:
		default:
		}
	}()
}

func (v *TopicView) isArmed(key string) bool {
	v.amu.Lock()
	defer v.amu.Unlock()
	return v.armed[key]
}

// children returns path's children (nil if path does not exist), keeping a
// watch on them, or on path's creation.
func (v *TopicView) children(path string) ([]string, error) {
	conn := v.c.conn
	for {
		if v.isArmed("c:" + path) {
			ch, _, err := conn.Children(path)
			if errors.Is(err, zk.ErrNoNode) {
				return nil, nil // the children watch fires on deletion
			}
			return ch, err
		}
		kids, _, ev, err := conn.ChildrenW(path)
		if err == nil {
			v.arm("c:"+path, ev)
			return kids, nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return nil, err
		}
		ok, err := v.exists(path)
		if err != nil || !ok {
			return nil, err
		}
		// Created in between: watch its children now.
	}
}

// exists reports whether path exists, keeping a watch on it.
func (v *TopicView) exists(path string) (bool, error) {
	if v.isArmed("d:" + path) {
		ok, _, err := v.c.conn.Exists(path)
		return ok, err
	}
	ok, _, ev, err := v.c.conn.ExistsW(path)
	if err != nil {
		return false, err
	}
	v.arm("d:"+path, ev)
	return ok, nil
}

// data returns path's data (ok false if it does not exist), keeping a
// watch on its changes, deletion or creation.
func (v *TopicView) data(path string) (b []byte, ok bool, err error) {
	conn := v.c.conn
	for {
		if v.isArmed("d:" + path) {
			b, _, err = conn.Get(path)
			if errors.Is(err, zk.ErrNoNode) {
				return nil, false, nil
			}
			return b, err == nil, err
		}
		b, _, ev, err := conn.GetW(path)
		if err == nil {
			v.arm("d:"+path, ev)
			return b, true, nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return nil, false, err
		}
		ok, err := v.exists(path)
		if err != nil || !ok {
			return nil, false, err
		}
	}
}

// refresh reads the topic's nodes and their brokers' URIs and publishes
// the result if it changed.
func (v *TopicView) refresh() error {
	kind := zkpath.TopicsPub
	if v.sub {
		kind = zkpath.TopicsSub
	}
	dir := kind.Topic(v.c.root(), v.topic)
	kids, err := v.children(dir)
	if err != nil {
		return err
	}
	slices.Sort(kids) // "<id>-m" before "<id>-s<N>": a master wins
	snap := &Snapshot{Addrs: make(map[int]string), Brokers: make(map[int]Broker)}
	replicas := v.sub && v.c.opts.ReadFromReplicas
	fromSlave := map[int]bool{} // the address chosen is a slave's
	for _, name := range kids {
		bn, err := zkpath.ParseBrokerName(name)
		if err != nil {
			v.c.opts.Logf("cluster: ignoring %s/%s: not <brokerId>-m or <brokerId>-s<N>", dir, name)
			continue
		}
		id := bn.ID
		if !bn.IsMaster() && !v.sub {
			continue // a slave: never written to
		}
		b, ok, err := v.data(dir + "/" + name)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		tb, err := zkpath.ParseTopicData(b)
		if err != nil || tb.NumParts == 0 {
			v.c.opts.Logf("cluster: ignoring %s/%s: bad data %q", dir, name, b)
			continue
		}
		// A broker's address is its master's or, when that is not
		// registered, its first registered slave's; a later slave only
		// adds partitions. With ReadFromReplicas the first slave wins
		// over the master.
		_, done := snap.Brokers[id]
		take := !done || bn.IsMaster()
		if replicas {
			take = !done || (!bn.IsMaster() && !fromSlave[id])
		}
		if take {
			b, ok, err := v.broker(bn)
			if err != nil {
				return err
			}
			if !ok {
				continue // not registered (yet), or unreadable: not reachable
			}
			snap.Brokers[id] = b
			fromSlave[id] = !bn.IsMaster()
			delete(snap.Addrs, id)
			if a, err := b.DialAddr(v.c.opts.UseTLS); err == nil {
				snap.Addrs[id] = a
			} else {
				v.c.opts.Logf("cluster: %v", err)
			}
		}
		for p := range tb.NumParts {
			snap.Partitions = append(snap.Partitions, message.Partition{BrokerID: id, Partition: int32(p)})
		}
	}
	slices.SortFunc(snap.Partitions, message.Partition.Compare)
	// A partition listed by both a master and a slave (or two slaves) is
	// counted once.
	snap.Partitions = slices.Compact(snap.Partitions)
	old := v.snap.Load()
	if !slices.Equal(old.Partitions, snap.Partitions) || !maps.Equal(old.Brokers, snap.Brokers) {
		v.snap.Store(snap)
		select {
		case v.changes <- struct{}{}:
		default:
		}
	}
	v.readyMu.Do(func() { close(v.ready) })
	return nil
}

// zkRetry is the wait before retrying a ZooKeeper reading that failed
// n times in a row: 100 ms doubling up to 1 s.
var zkRetry = backoff.Policy{Min: 100 * time.Millisecond, Max: time.Second}

// broker reads the addresses of broker bn (a master or a slave),
// keeping watches on the nodes read: a master's ids/<id>/master, and when
// that is meta://, ids/<id>/master_tls; a slave's ids/<id>/slave<N>. ok is
// false when the broker is not registered or its URI is bad (logged).
func (v *TopicView) broker(bn zkpath.BrokerName) (b Broker, ok bool, err error) {
	b.ID = bn.ID
	leaf := zkpath.Master(v.c.root(), bn.ID)
	if !bn.IsMaster() {
		leaf = zkpath.Slave(v.c.root(), bn.ID, bn.Slave)
	}
	uri, ok, err := v.data(leaf)
	if err != nil || !ok {
		return b, false, err
	}
	addr, tls, ok := ParseURI(string(uri))
	if !ok {
		v.c.opts.Logf("cluster: ignoring broker %d: bad URI %q at %s", bn.ID, uri, leaf)
		return b, false, nil
	}
	if tls {
		b.TLSAddr = addr
		return b, true, nil
	}
	b.Addr = addr
	if !bn.IsMaster() {
		return b, true, nil
	}
	tlsLeaf := zkpath.MasterTLS(v.c.root(), bn.ID)
	uri, ok, err = v.data(tlsLeaf)
	if err != nil {
		return b, false, err
	}
	if ok {
		if addr, tls, good := ParseURI(string(uri)); good && tls {
			b.TLSAddr = addr
		} else {
			v.c.opts.Logf("cluster: broker %d: ignoring bad URI %q at %s", bn.ID, uri, tlsLeaf)
		}
	}
	return b, true, nil
}

// ParseURI turns a registered broker URI, "meta://host:port" or
// "metaqs://host:port", into "host:port"; tls is true for metaqs://.
func ParseURI(uri string) (addr string, tls, ok bool) {
	uri = strings.TrimSpace(uri)
	addr, ok = strings.CutPrefix(uri, SchemePlain)
	if !ok {
		if addr, ok = strings.CutPrefix(uri, SchemeTLS); !ok {
			return "", false, false
		}
		tls = true
	}
	addr = strings.TrimSuffix(addr, "/")
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" {
		return "", false, false
	}
	return addr, tls, true
}
