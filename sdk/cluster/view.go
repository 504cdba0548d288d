package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/sdk/balance"
)

// Snapshot is one consistent reading of a topic's publish partitions.
// It is immutable: do not modify it.
type Snapshot struct {
	// Partitions are the masters' partitions sorted by (BrokerID,
	// Partition), numerically.
	Partitions []balance.Partition
	// Addrs maps a broker id to its master's "host:port".
	Addrs map[int]string
}

// Addr returns the address of broker id, or "".
func (s *Snapshot) Addr(id int) string { return s.Addrs[id] }

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
	v.snap.Store(&Snapshot{Addrs: map[int]string{}})
	return v
}

// Topic returns the topic of the view.
func (v *TopicView) Topic() string { return v.topic }

// Snapshot returns the current reading.
func (v *TopicView) Snapshot() *Snapshot { return v.snap.Load() }

// Partitions returns the topic's master partitions, sorted by (BrokerID,
// Partition). The caller may modify the returned slice.
func (v *TopicView) Partitions() []balance.Partition {
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
			d := retryDelay(fails)
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

// topicBroker is the JSON of a topics-pub or topics-sub node (MetaQ's
// TopicBroker).
type topicBroker struct {
	NumParts int    `json:"numParts"`
	Broker   string `json:"broker"`
}

// refresh reads the topic's nodes and their brokers' URIs and publishes
// the result if it changed.
func (v *TopicView) refresh() error {
	dir := v.c.topicPubPath(v.topic)
	if v.sub {
		dir = v.c.topicSubPath(v.topic)
	}
	kids, err := v.children(dir)
	if err != nil {
		return err
	}
	slices.Sort(kids) // "<id>-m" before "<id>-s<N>": a master wins
	snap := &Snapshot{Addrs: make(map[int]string)}
	for _, name := range kids {
		idText, role, ok := strings.Cut(name, "-")
		id, err := strconv.Atoi(idText)
		if !ok || err != nil || id < 0 || (role != "m" && !isSlaveRole(role)) {
			v.c.opts.Logf("cluster: ignoring %s/%s: not <brokerId>-m or <brokerId>-s<N>", dir, name)
			continue
		}
		if role != "m" && !v.sub {
			continue // a slave: never written to
		}
		b, ok, err := v.data(dir + "/" + name)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		var tb topicBroker
		if err := json.Unmarshal(b, &tb); err != nil || tb.NumParts <= 0 {
			v.c.opts.Logf("cluster: ignoring %s/%s: bad data %q", dir, name, b)
			continue
		}
		// A broker's address is its master's or, when that is not
		// registered, its first registered slave's; a later slave only
		// adds partitions.
		if _, done := snap.Addrs[id]; !done || role == "m" {
			leaf := v.c.brokerMasterPath(id)
			if role != "m" {
				leaf = fmt.Sprintf("%s/brokers/ids/%d/slave%s", v.c.opts.Root, id, role[1:])
			}
			uri, ok, err := v.data(leaf)
			if err != nil {
				return err
			}
			if !ok {
				continue // not registered (yet): not reachable
			}
			addr, ok := parseURI(string(uri))
			if !ok {
				v.c.opts.Logf("cluster: ignoring broker %d: bad URI %q at %s", id, uri, leaf)
				continue
			}
			snap.Addrs[id] = addr
		}
		for p := range tb.NumParts {
			snap.Partitions = append(snap.Partitions, balance.Partition{BrokerID: id, Partition: int32(p)})
		}
	}
	slices.SortFunc(snap.Partitions, balance.Partition.Compare)
	// A partition listed by both a master and a slave (or two slaves) is
	// counted once.
	snap.Partitions = slices.Compact(snap.Partitions)
	old := v.snap.Load()
	if !slices.Equal(old.Partitions, snap.Partitions) || !maps.Equal(old.Addrs, snap.Addrs) {
		v.snap.Store(snap)
		select {
		case v.changes <- struct{}{}:
		default:
		}
	}
	v.readyMu.Do(func() { close(v.ready) })
	return nil
}

// retryDelay is the wait before retrying a ZooKeeper reading that failed
// fails times in a row: 100 ms doubling up to 1 s.
func retryDelay(fails int) time.Duration {
	return min(50*time.Millisecond<<min(fails, 5), time.Second)
}

// isSlaveRole reports whether role is "s<N>".
func isSlaveRole(role string) bool {
	n, ok := strings.CutPrefix(role, "s")
	if !ok || n == "" {
		return false
	}
	_, err := strconv.Atoi(n)
	return err == nil
}

// parseURI turns "meta://host:port" into "host:port".
func parseURI(uri string) (string, bool) {
	addr, ok := strings.CutPrefix(strings.TrimSpace(uri), "meta://")
	if !ok {
		return "", false
	}
	addr = strings.TrimSuffix(addr, "/")
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" {
		return "", false
	}
	return addr, true
}
