// Package cluster discovers brokers and partitions from ZooKeeper, for
// clients in cluster mode. It reads MetaQ's znode layout (reference §5)
// and never writes it:
//
//	R/brokers/ids/<id>/master        (E) meta://host:port (metaqs:// if TLS-only)
//	R/brokers/ids/<id>/master_tls    (E) metaqs://host:tls_port, beside meta://
//	R/brokers/topics-pub/<t>/<id>-m  (E) {"numParts":N,"broker":"<id>-m"}
//
// A Snapshot's Brokers carry both addresses (Broker.Addr, Broker.TLSAddr);
// Broker.DialAddr picks the one a client with or without TLS dials.
//
// where R is Options.Root (default /meta). A TopicView watches one topic's
// publish nodes the way MetaQ's producer does (§6): only the masters'
// `-m` nodes count (slaves, `-s<N>`, are never written to), and the
// partitions are listed sorted by (brokerId, partition), numerically.
//
// Watches are re-armed after every event; a ZooKeeper session expiry
// invalidates them all, after which every view re-reads its nodes on the
// new session by itself.
//
// Consumer groups (group.go) are the one place it writes: a member's
// registration and the owner nodes of the partitions it claims,
//
//	R/consumers/<g>/ids/<consumerId>            (E) subscribed topics
//	R/consumers/<g>/owners/<t>/<brokerId>-<p>   (E) the owning consumerId
//
// With Options.Auth these and their parents under R get PrivateACL (R and
// its ancestors SharedACL; see Auth): in a cluster with ZooKeeper digest
// auth, consumers need the cluster's identity to join a group, and one
// without it gets an error naming the node it may not create under.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/internal/zkdial"
	"github.com/metaq-go/metaq/internal/zkpath"
)

// Defaults.
const (
	// DefaultRoot is MetaQ's zkRoot.
	DefaultRoot = zkpath.DefaultRoot
	// DefaultSessionTimeout is MetaQ's zkSessionTimeoutMs (30 s).
	DefaultSessionTimeout = 30 * time.Second
)

// Options configures Open.
type Options struct {
	// Connect is ZooKeeper's connect string: comma-separated host:port.
	Connect string
	// Root is the chroot of the MetaQ nodes. Default DefaultRoot.
	Root string
	// SessionTimeout is the ZooKeeper session timeout. Default
	// DefaultSessionTimeout.
	SessionTimeout time.Duration
	// Dialer replaces the TCP dialer of the ZooKeeper client (tests).
	// Default net.DialTimeout.
	Dialer zk.Dialer
	// Logf receives diagnostics (unreadable nodes, retries). Default: none.
	Logf func(format string, args ...any)
	// Auth, when set, logs the session in with ZooKeeper's digest scheme
	// right after it is established (the client sends it again after every
	// reconnect and session expiry by itself). The consumer group's nodes
	// are then created with Auth's ACLs (see Auth and docs/security.md).
	// Reading needs no identity: brokers' nodes are world-readable.
	Auth Auth
	// UseTLS makes Snapshot.Addrs hold the brokers' TLS addresses
	// (metaqs://) instead of their plaintext ones; a broker without the
	// listener the client needs is left out of Addrs, and logged.
	UseTLS bool
	// ReadFromReplicas makes subscribe views (WatchSubscribe) give a
	// broker's first registered slave's address whenever a slave is
	// registered, and the master's only when none is. Publish views are
	// unaffected: slaves are never written to.
	ReadFromReplicas bool
}

// Cluster is a ZooKeeper session from which topic views are read. It is
// safe for concurrent use.
type Cluster struct {
	opts Options
	conn *zk.Conn

	mu     sync.Mutex
	views  map[string]*TopicView
	subs   map[string]*TopicView
	states []chan struct{} // notified of every session state change
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
}

type quietLogger struct{ logf func(string, ...any) }

func (l quietLogger) Printf(format string, args ...any) {
	if l.logf != nil {
		l.logf("zk: "+format, args...)
	}
}

// Open connects to ZooKeeper and waits until a session is established or
// ctx is done.
func Open(ctx context.Context, o Options) (*Cluster, error) {
	var servers []string
	for s := range strings.SplitSeq(o.Connect, ",") {
		if s = strings.TrimSpace(s); s != "" {
			servers = append(servers, s)
		}
	}
	if len(servers) == 0 {
		return nil, errors.New("cluster: empty ZooKeeper connect string")
	}
	if err := o.Auth.Validate(); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if o.Root == "" {
		o.Root = DefaultRoot
	}
	o.Root = "/" + strings.Trim(o.Root, "/")
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = DefaultSessionTimeout
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Dialer == nil {
		o.Dialer = net.DialTimeout // the ZooKeeper client's default
	}
	session := make(chan struct{})
	var once sync.Once
	c := &Cluster{opts: o, views: make(map[string]*TopicView), subs: make(map[string]*TopicView), done: make(chan struct{})}
	cbOpt := zk.WithEventCallback(func(ev zk.Event) {
		if ev.Type != zk.EventSession {
			return
		}
		if ev.State == zk.StateHasSession {
			once.Do(func() { close(session) })
		}
		c.mu.Lock()
		for _, ch := range c.states {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		c.mu.Unlock()
	})
	conn, _, err := zk.Connect(servers, o.SessionTimeout, zk.WithLogger(quietLogger{o.Logf}), cbOpt,
		// A ZooKeeper that never answers the connect request holds the
		// client about the session timeout, not 10 times it.
		zk.WithDialer(zkdial.Bounded(o.Dialer, o.SessionTimeout)))
	if err != nil {
		return nil, fmt.Errorf("cluster: connect %s: %w", o.Connect, err)
	}
	c.conn = conn
	select {
	case <-session:
	case <-ctx.Done():
		conn.Close()
		return nil, fmt.Errorf("cluster: no ZooKeeper session with %s: %w", o.Connect, ctx.Err())
	}
	if o.Auth.Enabled() {
		login := make(chan error, 1)
		go func() { login <- o.Auth.Login(conn) }()
		select {
		case err = <-login:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil {
			conn.Close() // also ends a Login still waiting
			return nil, fmt.Errorf("cluster: %s: %w", o.Connect, err)
		}
	}
	return c, nil
}

// Conn returns the ZooKeeper connection (for reading; the cluster owns it).
func (c *Cluster) Conn() *zk.Conn { return c.conn }

// SessionTimeout returns the session timeout asked for.
func (c *Cluster) SessionTimeout() time.Duration { return c.opts.SessionTimeout }

// Connected reports whether the client is connected with a live session
// right now.
func (c *Cluster) Connected() bool { return c.conn.State() == zk.StateHasSession }

// StateChanges returns a channel that receives a value (coalesced) after
// every change of the session's state: disconnected, connected, expired,
// a new session. Read Connected and SessionID after receiving.
func (c *Cluster) StateChanges() <-chan struct{} {
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	c.states = append(c.states, ch)
	c.mu.Unlock()
	return ch
}

// stopStateChanges stops notifying ch (from StateChanges).
func (c *Cluster) stopStateChanges(ch <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.states {
		if x == ch {
			c.states = append(c.states[:i], c.states[i+1:]...)
			return
		}
	}
}

// Logf logs through Options.Logf.
func (c *Cluster) Logf(format string, args ...any) { c.opts.Logf(format, args...) }

// Root returns the chroot in use.
func (c *Cluster) Root() string { return c.opts.Root }

// SessionID returns the current ZooKeeper session id (0 between an expiry
// and the next session).
func (c *Cluster) SessionID() int64 { return c.conn.SessionID() }

// WatchPublish returns the view of topic's publish partitions, starting to
// watch it on first use; later calls return the same view. After Close it
// returns a view that stays empty.
func (c *Cluster) WatchPublish(topic string) *TopicView { return c.watch(c.views, topic, false) }

// WatchSubscribe returns the view of topic's subscribe partitions
// (topics-sub, the ones consumers balance), like WatchPublish. As in
// MetaQ's consumer, masters' and slaves' nodes both count, deduplicated
// by (broker, partition); a partition is read from the master when one is
// registered, else from a slave.
func (c *Cluster) WatchSubscribe(topic string) *TopicView { return c.watch(c.subs, topic, true) }

// watch returns views[topic], creating and starting it on first use.
func (c *Cluster) watch(views map[string]*TopicView, topic string, sub bool) *TopicView {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := views[topic]; ok {
		return v
	}
	v := newTopicView(c, topic, sub)
	views[topic] = v
	if !c.closed {
		c.wg.Add(1)
		go v.run()
	}
	return v
}

// Close stops every view and closes the ZooKeeper session. It is
// idempotent.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	c.mu.Unlock()
	// Closing the connection invalidates every watch, which ends the
	// goroutines forwarding them.
	c.conn.Close()
	c.wg.Wait()
	return nil
}

// root is Options.Root in the form zkpath's builders take.
func (c *Cluster) root() string { return zkpath.Root(c.opts.Root) }
