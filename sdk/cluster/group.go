package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/message"
)

// Member is one consumer's registration in a consumer group (reference
// §5): the ephemeral node R/consumers/<g>/ids/<consumerId> whose data is
// the topics it subscribes to, comma-separated, and the owner nodes
// R/consumers/<g>/owners/<t>/<brokerId>-<p> of the partitions it claims.
//
// A Member keeps its registration across ZooKeeper session expiries: it
// registers again on the new session by itself. Its claims do not survive
// an expiry (ZooKeeper deletes them with the session); Owned tells which
// claims are still held by the current session.
//
// Ownership is decided by ZooKeeper alone: a claim is an ephemeral node
// created by this session, so at no moment can two members hold one
// partition. A member must stop reading a partition before it releases it,
// and must not read it unless Owned says the claim is held.
type Member struct {
	c      *Cluster
	group  string
	id     string // consumerId: "<group>_<configured id>"
	topics string // the ids node's data

	mu         sync.Mutex
	registered int64 // the session the ids node belongs to, 0 if none
	members    map[string][]string
	ready      chan struct{} // closed after the first reading of ids
	readyOnce  sync.Once
	changes    chan struct{} // cap 1: membership or session changed
	wake       chan struct{} // cap 1: a watch or state change fired
	done       chan struct{}
	wg         sync.WaitGroup
	left       bool
	watching   bool            // a children watch on ids is set
	released   map[string]bool // owner nodes with a watch set by watchRelease
	states     <-chan struct{} // from StateChanges; dropped by Leave
}

// ConsumerID returns MetaQ's consumer id of the member: "<group>_<id>".
func ConsumerID(group, id string) string { return zkpath.ConsumerID(group, id) }

// JoinGroup registers consumer id (made into "<group>_<id>") in group as a
// subscriber of topics and starts following the group's membership. If a
// node for that consumer id already exists for another session (such as
// the same consumer's previous run, killed, whose session has not expired
// yet), it waits for it to go, until ctx is done.
func (c *Cluster) JoinGroup(ctx context.Context, group, id string, topics []string) (*Member, error) {
	for _, s := range append([]string{group, id}, topics...) {
		if s == "" || strings.ContainsAny(s, "/, \t\r\n") {
			return nil, fmt.Errorf("cluster: bad group, consumer id or topic %q", s)
		}
	}
	if len(topics) == 0 {
		return nil, errors.New("cluster: join group: no topics")
	}
	m := &Member{c: c, group: group, id: ConsumerID(group, id), topics: string(zkpath.MemberData(topics)),
		ready: make(chan struct{}), changes: make(chan struct{}, 1), wake: make(chan struct{}, 1),
		done: make(chan struct{})}
	for first := true; ; first = false {
		err := m.register()
		if err == nil {
			break
		}
		if !errors.Is(err, errIDTaken) {
			return nil, fmt.Errorf("cluster: join group %s: %w", group, err)
		}
		if first {
			c.opts.Logf("cluster: consumer id %s is registered by another session; waiting for it to go", m.id)
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("cluster: join group %s: consumer id %s is registered by another live session: %w",
				group, m.id, ctx.Err())
		case <-t.C:
		}
	}
	states := c.StateChanges()
	m.states = states
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.stopStateChanges(states)
		return nil, errors.New("cluster: closed")
	}
	c.wg.Add(1)
	c.mu.Unlock()
	m.wg.Add(1)
	go m.run(states)
	select {
	case <-m.ready:
	case <-ctx.Done():
		_ = m.Leave()
		return nil, fmt.Errorf("cluster: join group %s: %w", group, ctx.Err())
	}
	return m, nil
}

var errIDTaken = errors.New("consumer id registered by another session")

func (m *Member) idsPath() string { return zkpath.Members(m.c.root(), m.group) }

func (m *Member) ownerPath(topic string, p message.Partition) string {
	return zkpath.Owner(m.c.root(), m.group, topic, p.BrokerID, p.Partition)
}

// register creates the ids node for the current session (a no-op when it
// exists for this session already).
func (m *Member) register() error {
	conn := m.c.conn
	sess := conn.SessionID()
	if sess == 0 {
		return zk.ErrNoServer
	}
	path := zkpath.Member(m.c.root(), m.group, m.id)
	for attempt := 0; attempt < 3; attempt++ {
		_, err := conn.Create(path, []byte(m.topics), zk.FlagEphemeral, m.c.opts.Auth.PrivateACL())
		switch {
		case err == nil:
		case errors.Is(err, zk.ErrNoNode):
			if err := m.c.ensurePath(m.idsPath()); err != nil {
				return err
			}
			continue
		case errors.Is(err, zk.ErrNodeExists):
			_, st, gerr := conn.Get(path)
			if errors.Is(gerr, zk.ErrNoNode) {
				continue
			}
			if gerr != nil {
				return gerr
			}
			if st.EphemeralOwner != sess {
				return errIDTaken
			}
		case errors.Is(err, zk.ErrNoAuth):
			return fmt.Errorf("register %s: %w", path, m.c.opts.Auth.ForeignNode(conn, m.idsPath(), err))
		default:
			return err
		}
		m.mu.Lock()
		m.registered = sess
		m.mu.Unlock()
		return nil
	}
	return fmt.Errorf("registering %s kept racing", path)
}

// ensurePath creates path and its parents as persistent nodes with the
// ACLs of Auth.ACL. A parent that exists though this session may not
// create under its own parent (ZooKeeper checks the parent's ACL first,
// and answers NoAuth) is taken as it is; one this session may not create
// under gives an error naming it (Auth.ForeignNode).
func (c *Cluster) ensurePath(path string) error {
	conn, root := c.conn, c.root()
	p := ""
	for part := range strings.SplitSeq(strings.Trim(path, "/"), "/") {
		parent := p
		p += "/" + part
		_, err := conn.Create(p, nil, 0, c.opts.Auth.ACL(root, p))
		if errors.Is(err, zk.ErrNoAuth) {
			if ok, _, xerr := conn.Exists(p); xerr == nil && ok {
				continue
			}
			if parent == "" {
				parent = "/"
			}
			return fmt.Errorf("create %s: %w", p, c.opts.Auth.ForeignNode(conn, parent, err))
		}
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", p, err)
		}
	}
	return nil
}

// run re-registers after session changes and re-reads the members on
// every change, until Leave or the cluster's Close.
func (m *Member) run(states <-chan struct{}) {
	defer m.c.wg.Done()
	defer m.wg.Done()
	fails := 0
	for {
		err := m.refresh()
		wait := time.Duration(0)
		if err != nil {
			fails++
			wait = zkRetry.Delay(fails)
			if fails == 1 || fails%20 == 0 {
				m.c.opts.Logf("cluster: group %s member %s (attempt %d): %v", m.group, m.id, fails, err)
			}
		} else {
			fails = 0
		}
		var timer <-chan time.Time
		var t *time.Timer
		if wait > 0 {
			t = time.NewTimer(wait)
			timer = t.C
		}
		select {
		case <-m.wake:
		case <-states:
			m.notify()
		case <-timer:
		case <-m.done:
		case <-m.c.done:
		}
		if t != nil {
			t.Stop()
		}
		select {
		case <-m.done:
			return
		case <-m.c.done:
			return
		default:
		}
	}
}

func (m *Member) notify() {
	select {
	case m.changes <- struct{}{}:
	default:
	}
}

// refresh registers again if the session changed and reads the members,
// leaving a watch on the ids children.
func (m *Member) refresh() error {
	conn := m.c.conn
	if conn.State() != zk.StateHasSession {
		return nil // the state callback wakes us when it is back
	}
	m.mu.Lock()
	stale := m.registered != conn.SessionID()
	m.mu.Unlock()
	if stale {
		if err := m.register(); err != nil {
			return err
		}
		m.notify()
	}
	var kids []string
	m.mu.Lock()
	watching := m.watching
	m.mu.Unlock()
	if watching {
		ks, _, err := conn.Children(m.idsPath())
		if err != nil {
			return err
		}
		kids = ks
	} else {
		ks, _, ev, err := conn.ChildrenW(m.idsPath())
		if err != nil {
			return err
		}
		kids = ks
		m.mu.Lock()
		m.watching = true
		m.mu.Unlock()
		go func() {
			<-ev // also fires (EventNotWatching) on expiry and close
			m.mu.Lock()
			m.watching = false
			m.mu.Unlock()
			select {
			case m.wake <- struct{}{}:
			default:
			}
		}()
	}
	members := make(map[string][]string, len(kids))
	for _, k := range kids {
		b, _, err := conn.Get(zkpath.Member(m.c.root(), m.group, k))
		if errors.Is(err, zk.ErrNoNode) {
			continue // gone already; its deletion fires the watch
		}
		if err != nil {
			return err
		}
		members[k] = zkpath.ParseMemberData(b)
	}
	m.mu.Lock()
	changed := !maps.EqualFunc(m.members, members, slices.Equal)
	m.members = members
	m.mu.Unlock()
	if changed {
		m.notify()
	}
	m.readyOnce.Do(func() { close(m.ready) })
	return nil
}

// ID returns the member's consumer id ("<group>_<id>").
func (m *Member) ID() string { return m.id }

// Changes receives a value (coalesced) when the group's members change or
// the ZooKeeper session changes state (disconnected, back, expired and
// registered again). Meant for one reader.
func (m *Member) Changes() <-chan struct{} { return m.changes }

// Active reports whether this member is registered on a live, connected
// session. While it is not, the member must not read any partition: its
// claims may be gone and taken by others.
func (m *Member) Active() bool {
	conn := m.c.conn
	if conn.State() != zk.StateHasSession {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.registered != 0 && m.registered == conn.SessionID()
}

// Session returns the ZooKeeper session the member is registered on (0
// when it is not registered). Claims belong to one session: after it
// changes, the old session's claims are gone.
func (m *Member) Session() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.registered
}

// Members returns the consumer ids of the group that subscribe to topic,
// sorted, as last read from ZooKeeper.
func (m *Member) Members(topic string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for id, ts := range m.members {
		if slices.Contains(ts, topic) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// ErrOwned is returned by Claim when another member owns the partition.
var ErrOwned = errors.New("cluster: partition owned by another member")

// Claim creates the owner node of topic's partition p for this member. It
// returns nil when the node is this session's (created now or before),
// ErrOwned when another session holds it, or the ZooKeeper error.
func (m *Member) Claim(topic string, p message.Partition) error {
	conn := m.c.conn
	path := m.ownerPath(topic, p)
	for attempt := 0; attempt < 3; attempt++ {
		sess := conn.SessionID()
		_, err := conn.Create(path, []byte(m.id), zk.FlagEphemeral, m.c.opts.Auth.PrivateACL())
		switch {
		case err == nil:
			return nil
		case errors.Is(err, zk.ErrNoNode):
			if err := m.c.ensurePath(path[:strings.LastIndexByte(path, '/')]); err != nil {
				return err
			}
		case errors.Is(err, zk.ErrNodeExists):
			_, st, gerr := conn.Get(path)
			if errors.Is(gerr, zk.ErrNoNode) {
				continue // released in between: try again
			}
			if gerr != nil {
				return gerr
			}
			if st.EphemeralOwner == sess && sess != 0 {
				return nil
			}
			// Wake the member (Changes) as soon as the owner lets go.
			if !m.watchRelease(path) {
				continue // gone already
			}
			return ErrOwned
		case errors.Is(err, zk.ErrNoAuth):
			return fmt.Errorf("claim %s: %w", path, m.c.opts.Auth.ForeignNode(conn, path[:strings.LastIndexByte(path, '/')], err))
		default:
			return err
		}
	}
	return fmt.Errorf("cluster: claim %s kept racing", path)
}

// watchRelease leaves a watch on an owner node that notifies Changes when
// it goes; false when it is gone already.
func (m *Member) watchRelease(path string) bool {
	m.mu.Lock()
	if m.released == nil {
		m.released = make(map[string]bool)
	}
	if m.released[path] {
		m.mu.Unlock()
		return true
	}
	m.mu.Unlock()
	ok, _, ev, err := m.c.conn.ExistsW(path)
	if err != nil {
		return true // the caller's backoff retries
	}
	m.mu.Lock()
	m.released[path] = true
	m.mu.Unlock()
	go func() {
		<-ev
		m.mu.Lock()
		delete(m.released, path)
		m.mu.Unlock()
		m.notify()
	}()
	return ok
}

// Release deletes the owner node of topic's partition p if this session
// holds it. The member must have stopped reading p first.
func (m *Member) Release(topic string, p message.Partition) error {
	conn := m.c.conn
	path := m.ownerPath(topic, p)
	_, st, err := conn.Get(path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.EphemeralOwner != conn.SessionID() {
		return nil // not ours (our session's node went with it)
	}
	err = conn.Delete(path, st.Version)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return err
}

// Leave deletes the member's registration and stops following the group.
// Owner nodes must be released first (Release); whatever remains goes
// with the session when the Cluster closes. It is idempotent.
func (m *Member) Leave() error {
	m.mu.Lock()
	if m.left {
		m.mu.Unlock()
		return nil
	}
	m.left = true
	sess := m.registered
	m.registered = 0
	close(m.done)
	m.mu.Unlock()
	m.wg.Wait()
	if m.states != nil {
		m.c.stopStateChanges(m.states)
	}
	conn := m.c.conn
	path := zkpath.Member(m.c.root(), m.group, m.id)
	_, st, err := conn.Get(path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster: leave group %s: %w", m.group, err)
	}
	if st.EphemeralOwner != sess || sess != conn.SessionID() {
		return nil
	}
	if err := conn.Delete(path, st.Version); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("cluster: leave group %s: %w", m.group, err)
	}
	return nil
}
