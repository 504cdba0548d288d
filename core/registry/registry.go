// Package registry registers a broker in ZooKeeper with MetaQ's znode
// layout (reference §5), so MetaQ clients and metaq-go's sdk/cluster find
// it. The nodes, as internal/zkpath spells them (R is the root, default
// "/meta"): R/brokers/ids/<id> and its master, master_tls (when both
// listeners are on) and master_config_checksum, and the broker's <id>-m
// node under R/brokers/topics, topics-pub (if accept_publish) and
// topics-sub (if accept_subscribe) for each topic.
//
// Parents are created persistent, with empty data, on demand.
//
// With Options.Auth the session logs in with ZooKeeper's digest scheme
// before it writes anything (go-zookeeper sends the identity again on
// every reconnect and new session), and every node it creates gets
// cluster's PrivateACL (the user has all rights, world:anyone reads),
// except R and its ancestors, which get SharedACL. It also makes
// R/consumers exist with PrivateACL, so that a client without the
// identity cannot create a consumer group (nor, under it, member, owner
// or offset nodes). A node under R/brokers that it finds with ZooKeeper's
// open ACL (made before auth was on), or R/consumers and the group
// directories below it (<g>, its ids, owners, offsets and their topics)
// with the open ACL or the identity's SharedACL (an earlier version's),
// is restricted to PrivateACL; one with a foreign ACL (squatted) is
// logged as an error once. See docs/security.md.
//
// One goroutine owns the registration. It registers whenever the client
// holds a session that it has not registered under yet, so after a session
// expiry (the client then gets a new session) everything is re-registered
// with no restart. A node that fails is retried every RetryInterval; the
// registry never gives up and never exits the process:
//
//   - An ephemeral node that already exists and is owned by the current
//     session is kept (its data corrected); one owned by a session this
//     registry held before (an expired one whose nodes the server has not
//     removed yet), or a persistent node where an ephemeral one belongs, is
//     deleted (version-checked) and created again.
//   - One owned by another live session is not touched: for ids/<id>/master
//     that is a second broker with the same id, or this broker's previous
//     process whose session has not expired yet. It is logged as an error
//     (again every 10 s while it lasts) and retried, so the broker registers
//     once the other session ends, and never steals the node.
//   - A ZooKeeper that is down or unreachable is retried in the background
//     (the client reconnects by itself); Open does not fail because of it.
//
// Close deletes the ephemeral nodes this session owns, then deletes
// ids/<id>, or sets it to "" if slave nodes remain under it, and closes the
// session.
package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/zkdial"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/cluster"
)

// Defaults for the zero Options fields.
const (
	DefaultRoot           = zkpath.DefaultRoot
	DefaultSessionTimeout = 30 * time.Second
	DefaultRetryInterval  = time.Second
	// closeTimeout bounds the clean-up in Close.
	closeTimeout = 5 * time.Second
	// dupLogEvery is how often a node held by another session is logged again.
	dupLogEvery = 10 * time.Second
	// maxBadTopicsLogged bounds the invalid topic names remembered as
	// logged (validTopic); past it each is logged every time.
	maxBadTopicsLogged = 1000
)

// Topic is one topic as registered.
type Topic struct {
	Name            string
	NumPartitions   int
	AcceptPublish   bool
	AcceptSubscribe bool
}

// Options configure Open.
type Options struct {
	// Connect is the ZooKeeper connect string, "host:port[,host:port...]".
	Connect string
	// Root is MetaQ's zkRoot; "" means DefaultRoot.
	Root string
	// SessionTimeout is the requested session timeout; 0 means 30 s.
	SessionTimeout time.Duration
	// ConnectTimeout bounds one TCP connect to a server; 0 means 1 s.
	ConnectTimeout time.Duration
	// BrokerID is the broker's id, 0..1023.
	BrokerID int
	// URI is the plaintext listener's address for clients,
	// "meta://host:port"; "" for a TLS-only broker.
	URI string
	// TLSURI is the TLS listener's address for clients,
	// "metaqs://host:tls_port" (the broker passes its bound TLS port); ""
	// without TLS. With URI it is written to ids/<id>/master_tls; alone
	// (TLS-only) it is the master node's data. URI or TLSURI is required.
	TLSURI string
	// Auth, when set, is the ZooKeeper digest identity of the broker; its
	// nodes then get Auth's ACLs (see the package doc).
	Auth cluster.Auth
	// ConfigChecksum is the CRC32 of the broker's config file.
	ConfigChecksum uint32
	// Topics are the topics to register (more can be added with AddTopic).
	Topics []Topic
	// Logf receives log lines; nil means the standard logger.
	Logf func(format string, args ...any)
	// RetryInterval is the time between attempts after a failure; 0 means 1 s.
	RetryInterval time.Duration
	// Dialer, if set, replaces net.DialTimeout for the ZooKeeper connections.
	Dialer zk.Dialer
	// Slave registers the broker as slave SlaveID of master BrokerID
	// (MetaQ's metaslave): ids/<id>/slave<N> with URI as data, and its
	// topics as <id>-s<N>; it writes neither the master nodes nor the
	// data of ids/<id>. SlaveID is 0..1023.
	Slave   bool
	SlaveID int
	// Standby registers nothing until Promote (automatic failover: a
	// master registers only once it holds the epoch).
	Standby bool
	// FenceOnExpiry (automatic failover): when the session this registry
	// registered a master under has expired, register nothing more (as
	// Fence) and call OnExpired, rather than registering the master again
	// under the new session: the broker may have been replaced meanwhile.
	FenceOnExpiry bool
	OnExpired     func()
}

// Registry is a broker's registration. Its methods are safe for concurrent use.
type Registry struct {
	opts   Options
	logf   func(format string, args ...any)
	root   string // "" or "/x" (no trailing slash)
	idPath string // R/brokers/ids/<id>
	master string // R/brokers/ids/<id>/master
	// self is the node that says who this broker is, written first: the
	// master node, or a slave's ids/<id>/slave<N>.
	self    string
	conn    *zk.Conn
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	regSess atomic.Int64 // session everything is registered under, 0 = none
	regGen  atomic.Int64 // topics generation registered under regSess
	gen     atomic.Int64 // topics generation, bumped by AddTopic
	// role is the wanted role (roleAsOpened, roleMaster, roleNone), set by
	// Promote and Fence and applied by the loop.
	role atomic.Int32
	// demoteTo is the slave id of roleSlave (Demote).
	demoteTo atomic.Int32

	// consSess is the session R/consumers was made private under (the
	// loop's, like made); foreign holds the nodes logged as squatted.
	consSess int64
	foreign  map[string]bool

	mu        sync.Mutex
	topics    map[string]Topic
	badTopics map[string]bool // invalid names logged (validTopic)
	closed    bool

	// Owned by the loop goroutine (and by Close once the loop has exited).
	sess     int64                // session the nodes in made belong to
	loggedIn bool                 // Auth was added to the connection
	made     map[string]string    // nodes made (or adopted) in sess -> their data
	old      map[int64]bool       // sessions this registry held before
	parents  map[string]bool      // persistent paths known to exist
	lastLogs map[string]time.Time // node -> last "held by another session" log
}

// Open validates opts, connects to ZooKeeper and registers the broker in
// the background. It waits for the first registration until ctx is done
// (not at all if ctx is already done), then returns either way: an unreachable ZooKeeper is not an error (the
// registry keeps trying; see Registered and Wait). It fails only on bad
// options.
func Open(ctx context.Context, opts Options) (*Registry, error) {
	var servers []string
	for _, s := range strings.Split(opts.Connect, ",") {
		if s = strings.TrimSpace(s); s != "" {
			servers = append(servers, s)
		}
	}
	switch {
	case len(servers) == 0:
		return nil, errors.New("registry: no ZooKeeper servers in the connect string")
	case strings.Contains(opts.Connect, "/"):
		return nil, fmt.Errorf("registry: connect string %q has a chroot suffix; set Root instead", opts.Connect)
	case opts.BrokerID < 0 || opts.BrokerID > 1023:
		return nil, fmt.Errorf("registry: broker id %d is not in 0..1023", opts.BrokerID)
	case opts.Slave && (opts.SlaveID < 0 || opts.SlaveID > 1023):
		return nil, fmt.Errorf("registry: slave id %d is not in 0..1023", opts.SlaveID)
	case opts.URI == "" && opts.TLSURI == "":
		return nil, errors.New("registry: no broker URI (meta:// or metaqs://)")
	case opts.URI != "" && !strings.HasPrefix(opts.URI, cluster.SchemePlain):
		return nil, fmt.Errorf("registry: broker URI %q does not start with %s", opts.URI, cluster.SchemePlain)
	case opts.TLSURI != "" && !strings.HasPrefix(opts.TLSURI, cluster.SchemeTLS):
		return nil, fmt.Errorf("registry: broker TLS URI %q does not start with %s", opts.TLSURI, cluster.SchemeTLS)
	}
	if err := opts.Auth.Validate(); err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	if opts.Root == "" {
		opts.Root = DefaultRoot
	}
	if !strings.HasPrefix(opts.Root, "/") {
		return nil, fmt.Errorf("registry: root %q does not start with /", opts.Root)
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = DefaultSessionTimeout
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = DefaultRetryInterval
	}
	r := &Registry{
		opts:      opts,
		logf:      opts.Logf,
		root:      strings.TrimRight(opts.Root, "/"),
		kick:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		topics:    map[string]Topic{},
		badTopics: map[string]bool{},
		foreign:   map[string]bool{},
		made:      map[string]string{},
		old:       map[int64]bool{},
		parents:   map[string]bool{},
		lastLogs:  map[string]time.Time{},
	}
	if r.logf == nil {
		r.logf = log.Printf
	}
	for _, t := range opts.Topics {
		if r.validTopic(t.Name) {
			r.topics[t.Name] = t
		}
	}
	r.idPath = zkpath.Broker(r.root, opts.BrokerID)
	r.master = zkpath.Master(r.root, opts.BrokerID)
	r.self = r.master
	if opts.Slave {
		r.self = zkpath.Slave(r.root, opts.BrokerID, opts.SlaveID)
	}
	dial := opts.Dialer
	if dial == nil {
		dial = net.DialTimeout
	}
	if ct := opts.ConnectTimeout; ct > 0 {
		d := dial
		dial = func(network, addr string, _ time.Duration) (net.Conn, error) { return d(network, addr, ct) }
	}
	conn, _, err := zk.Connect(servers, opts.SessionTimeout,
		zk.WithLogger(zkLogger{r.logf}),
		zk.WithLogInfo(false),
		zk.WithEventCallback(func(zk.Event) { r.nudge() }),
		// A ZooKeeper that never answers the connect request holds the
		// client about the session timeout, not 10 times it.
		zk.WithDialer(zkdial.Bounded(dial, opts.SessionTimeout)))
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	r.conn = conn
	if testHookOpen != nil {
		testHookOpen(r)
	}
	go r.loop()
	if ctx.Err() != nil {
		return r, nil // the caller does not wait
	}
	if err := r.Wait(ctx); err != nil {
		r.logf("registry: broker %d not registered yet (%v); ZooKeeper %s: retrying in the background",
			opts.BrokerID, err, opts.Connect)
	}
	return r, nil
}

type zkLogger struct{ logf func(string, ...any) }

func (l zkLogger) Printf(format string, args ...any) { l.logf("registry: zk: "+format, args...) }

// SessionID is the client's current ZooKeeper session id (0 without one).
func (r *Registry) SessionID() int64 { return r.conn.SessionID() }

// Registered reports whether every node is registered under the client's
// current session.
func (r *Registry) Registered() bool {
	s := r.regSess.Load()
	return s != 0 && s == r.conn.SessionID() && r.regGen.Load() == r.gen.Load() &&
		r.conn.State() == zk.StateHasSession
}

// Wait blocks until Registered or ctx is done (then it returns ctx.Err()).
func (r *Registry) Wait(ctx context.Context) error {
	tk := time.NewTicker(10 * time.Millisecond)
	defer tk.Stop()
	for !r.Registered() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.done:
			return errors.New("registry: closed")
		case <-tk.C:
		}
	}
	return nil
}

// WaitStart waits at most timeout (zookeeper.connection_timeout) for the
// first registration, or until start is cancelled, as a starting broker
// does: a ZooKeeper that is down or slow does not stop it, it serves and
// keeps registering in the background, and logs which it was (logf,
// warnf).
func (r *Registry) WaitStart(start context.Context, timeout time.Duration, logf, warnf func(string, ...any)) {
	ctx, cancel := context.WithTimeout(start, timeout)
	defer cancel()
	if err := r.Wait(ctx); err != nil {
		if start.Err() != nil {
			logf("registry: start-up stopped before broker %d registered in ZooKeeper", r.opts.BrokerID)
			return
		}
		warnf("registry: broker %d is not registered in ZooKeeper %s after %v; serving anyway and registering in the background",
			r.opts.BrokerID, r.opts.Connect, timeout)
	}
}

// AddTopic registers one more topic (an auto-created one), or updates it
// (a reload): a topics-pub or topics-sub node it no longer wants is
// deleted. It does not wait for ZooKeeper.
func (r *Registry) AddTopic(t Topic) {
	if !r.validTopic(t.Name) {
		return
	}
	r.mu.Lock()
	if cur, ok := r.topics[t.Name]; ok && cur == t {
		r.mu.Unlock()
		return
	}
	r.topics[t.Name] = t
	r.gen.Add(1)
	r.mu.Unlock()
	r.nudge()
}

// validTopic reports whether name can be registered
// (conf.ValidateTopicName: ZooKeeper refuses ".", ".." and some
// characters as node names). A name that cannot is never tried, so the
// registration cannot retry it forever: it is logged once as an error
// (per name) and left out; the broker's other topics register, and
// Registered (readiness) does not wait for it.
func (r *Registry) validTopic(name string) bool {
	err := conf.ValidateTopicName(name)
	if err == nil {
		return true
	}
	r.mu.Lock()
	logged := r.badTopics[name]
	if !logged && len(r.badTopics) < maxBadTopicsLogged {
		r.badTopics[name] = true
	}
	r.mu.Unlock()
	if !logged {
		r.logf("registry: ERROR: not registering topic: %v", err)
	}
	return false
}

// RemoveTopic unregisters a topic (deleted live): its nodes under this
// broker's session are deleted. It does not wait for ZooKeeper.
func (r *Registry) RemoveTopic(name string) {
	r.mu.Lock()
	if _, ok := r.topics[name]; !ok {
		r.mu.Unlock()
		return
	}
	delete(r.topics, name)
	r.gen.Add(1)
	r.mu.Unlock()
	r.nudge()
}

// dropUnwanted deletes the nodes made in sess that ns no longer lists (a
// removed topic's), if this session still owns them. It reports whether
// all went.
func (r *Registry) dropUnwanted(ns []node, sess int64) bool {
	want := make(map[string]bool, len(ns))
	for _, n := range ns {
		want[n.path] = true
	}
	ok := true
	for p := range r.made {
		if want[p] {
			continue
		}
		exists, st, err := r.conn.Exists(p)
		switch {
		case err != nil:
			r.logf("registry: %s: %v", p, err)
			ok = false
			continue
		case exists && st.EphemeralOwner == sess:
			if err := r.conn.Delete(p, st.Version); err != nil && !errors.Is(err, zk.ErrNoNode) {
				r.logf("registry: delete %s: %v", p, err)
				ok = false
				continue
			}
		}
		delete(r.made, p)
	}
	return ok
}

func (r *Registry) nudge() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// node is one znode the broker wants.
type node struct {
	path      string
	data      []byte
	ephemeral bool
}

// masterURI is the data of ids/<id>/master: the plaintext URI (MetaQ's
// clients read it) if there is one, else the TLS URI.
func (r *Registry) masterURI() string {
	if r.opts.URI != "" {
		return r.opts.URI
	}
	return r.opts.TLSURI
}

// aclFor is the ACL of a node this registry creates: SharedACL for the
// root and its ancestors (clients create R/consumers), PrivateACL for the
// rest.
func (r *Registry) aclFor(path string) []zk.ACL {
	if path == r.root || strings.HasPrefix(r.root, path+"/") {
		return r.opts.Auth.SharedACL()
	}
	return r.opts.Auth.PrivateACL()
}

// restrict gives the existing node path under R/brokers, or R/consumers
// and below, PrivateACL if it still has the open ACL (or, for
// R/consumers, the identity's SharedACL; see cluster.Auth.Restrict).
func (r *Registry) restrict(path string) error {
	cons := zkpath.Consumers(r.root)
	if !r.opts.Auth.Enabled() || !strings.HasPrefix(path, zkpath.Brokers(r.root)) && path != cons && !strings.HasPrefix(path, cons+"/") {
		return nil
	}
	acl, _, err := r.conn.GetACL(path)
	if err != nil {
		return err
	}
	changed, err := r.opts.Auth.Restrict(r.conn, path, acl, r.aclFor(path))
	if changed {
		r.logf("registry: %s had the open ACL; restricted it to %s (all) and world:anyone (read)", path, r.opts.Auth)
	}
	return err
}

// nodes lists the wanted nodes: the master node first (nothing else is
// written unless it is ours: a duplicate broker id must not touch the
// other broker's nodes), then the persistent ids/<id>, the checksum and the topic nodes in name order; and the
// topics generation they reflect.
func (r *Registry) nodes() ([]node, int64) {
	id := r.opts.BrokerID
	uri := []byte(r.masterURI())
	if r.opts.Standby {
		return nil, r.gen.Load()
	}
	ns := []node{{r.self, uri, true}}
	name := zkpath.MasterName(id)
	if r.opts.Slave {
		name = zkpath.BrokerName{ID: id, Slave: r.opts.SlaveID}
	} else {
		if r.opts.URI != "" && r.opts.TLSURI != "" {
			ns = append(ns, node{zkpath.MasterTLS(r.root, id), []byte(r.opts.TLSURI), true})
		}
		ns = append(ns,
			node{r.idPath, uri, false},
			node{zkpath.MasterChecksum(r.root, id), []byte(strconv.FormatUint(uint64(r.opts.ConfigChecksum), 10)), true})
	}
	r.mu.Lock()
	gen := r.gen.Load()
	names := make([]string, 0, len(r.topics))
	for n := range r.topics {
		names = append(names, n)
	}
	sort.Strings(names)
	ts := make([]Topic, len(names))
	for i, n := range names {
		ts[i] = r.topics[n]
	}
	r.mu.Unlock()
	for _, t := range ts {
		tb := zkpath.TopicData{NumParts: t.NumPartitions, Broker: name.String()}.Bytes()
		ns = append(ns, node{zkpath.Topics.Node(r.root, t.Name, name), []byte(strconv.Itoa(t.NumPartitions)), true})
		if t.AcceptPublish {
			ns = append(ns, node{zkpath.TopicsPub.Node(r.root, t.Name, name), tb, true})
		}
		if t.AcceptSubscribe {
			ns = append(ns, node{zkpath.TopicsSub.Node(r.root, t.Name, name), tb, true})
		}
	}
	return ns, gen
}

func (r *Registry) loop() {
	defer close(r.done)
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-r.kick:
		case <-retry.C:
		}
		if !retry.Stop() {
			select {
			case <-retry.C:
			default:
			}
		}
		if !r.registerOnce() {
			retry.Reset(r.opts.RetryInterval)
		} else {
			// Check now and then even when all is well: session events can
			// be dropped by the client when its event channel is full.
			retry.Reset(5 * r.opts.RetryInterval)
		}
	}
}

// registerOnce registers every node not yet registered under the current
// session. It reports whether everything is registered.
func (r *Registry) registerOnce() bool {
	sess := r.conn.SessionID()
	if sess == 0 || r.conn.State() != zk.StateHasSession {
		return false
	}
	if r.opts.Auth.Enabled() && !r.loggedIn {
		// Once added, the client re-sends it on every reconnect.
		if err := r.opts.Auth.Login(r.conn); err != nil {
			r.logf("registry: %v", err)
			return false
		}
		r.loggedIn = true
	}
	r.applyRole()
	if sess != r.sess {
		if r.sess != 0 && r.opts.FenceOnExpiry && !r.opts.Slave && !r.opts.Standby {
			r.role.Store(roleNone)
			r.opts.Standby = true
			r.logf("registry: ZooKeeper session %#x of master %d expired: not registering it again (failover: another member may hold the epoch now)",
				r.sess, r.opts.BrokerID)
			if r.opts.OnExpired != nil {
				go r.opts.OnExpired()
			}
		}
		if r.sess != 0 {
			r.old[r.sess] = true
			r.logf("registry: ZooKeeper session changed from %#x to %#x (the old one expired); re-registering broker %d",
				r.sess, sess, r.opts.BrokerID)
		}
		r.sess = sess
		r.made = map[string]string{}
	}
	if r.regSess.Load() == sess && r.regGen.Load() == r.gen.Load() {
		r.sweepConsumers(sess)
		return true
	}
	ok := true
	ns, gen := r.nodes()
	// Nodes registered before that are no longer wanted (a topic whose
	// accept_publish or accept_subscribe was turned off by a reload) go.
	want := make(map[string]bool, len(ns))
	for _, n := range ns {
		want[n.path] = true
	}
	for p := range r.made {
		if want[p] {
			continue
		}
		if err := r.conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			ok = false
			r.logf("registry: remove %s: %v", p, err)
			continue
		}
		delete(r.made, p)
	}
	for _, n := range ns {
		select {
		case <-r.stop:
			return false
		default:
		}
		if d, ok := r.made[n.path]; ok && d == string(n.data) {
			continue
		}
		if err := r.ensure(n, sess); err != nil {
			ok = false
			if !errors.Is(err, errHeld) {
				r.logf("registry: %s: %v", n.path, err)
			}
			if isConnErr(err) || n.path == r.self {
				break
			}
			continue
		}
		r.made[n.path] = string(n.data)
	}
	if ok {
		ok = r.dropUnwanted(ns, sess)
	}
	if ok && r.conn.SessionID() == sess {
		r.regGen.Store(gen)
		r.regSess.Store(sess)
		if r.opts.Standby {
			return true // nothing registered (failover standby or fenced)
		}
		uris := r.masterURI()
		if r.opts.URI != "" && r.opts.TLSURI != "" {
			uris += " and " + r.opts.TLSURI
		}
		role := ""
		if r.opts.Slave {
			role = fmt.Sprintf(" slave %d", r.opts.SlaveID)
		}
		r.logf("registry: broker %d%s registered as %s in ZooKeeper %s%s (session %#x, auth %s)",
			r.opts.BrokerID, role, uris, r.opts.Connect, r.root, sess, r.opts.Auth)
		r.sweepConsumers(sess)
		return true
	}
	return false
}

var errHeld = errors.New("held by another session")

// testHookOpen, if set, runs in Open before the loop starts (tests).
var testHookOpen func(*Registry)

func isConnErr(err error) bool {
	return errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrConnectionClosed) ||
		errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrClosing) || errors.Is(err, zk.ErrSessionMoved)
}

// ensure makes node n exist with its data, owned by session sess if it is
// ephemeral.
func (r *Registry) ensure(n node, sess int64) error {
	if err := r.ensureParents(n.path); err != nil {
		return err
	}
	flags := int32(0)
	if n.ephemeral {
		flags = zk.FlagEphemeral
	}
	for attempt := 0; attempt < 3; attempt++ {
		_, err := r.conn.Create(n.path, n.data, flags, r.aclFor(n.path))
		switch {
		case err == nil:
			return nil
		case errors.Is(err, zk.ErrNoNode):
			delete(r.parents, parentOf(n.path)) // deleted behind our back
			if err := r.ensureParents(n.path); err != nil {
				return err
			}
			continue
		case !errors.Is(err, zk.ErrNodeExists):
			return err
		}
		data, st, err := r.conn.Get(n.path)
		if errors.Is(err, zk.ErrNoNode) {
			continue // vanished meanwhile: create again
		} else if err != nil {
			return err
		}
		owner := st.EphemeralOwner
		switch {
		case !n.ephemeral || owner == sess || owner == r.conn.SessionID():
			if !n.ephemeral {
				if err := r.restrict(n.path); err != nil {
					return err
				}
			}
			if !bytes.Equal(data, n.data) {
				if _, err := r.conn.Set(n.path, n.data, st.Version); err != nil {
					return err
				}
			}
			return nil
		case owner == 0 || r.old[owner]:
			what := "a persistent node"
			if owner != 0 {
				what = fmt.Sprintf("left by this broker's expired session %#x", owner)
			}
			r.logf("registry: %s exists, %s: deleting and creating it again", n.path, what)
			if err := r.conn.Delete(n.path, st.Version); err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) {
				return err
			}
			continue
		default:
			r.logHeld(n.path, owner, data)
			return errHeld
		}
	}
	return fmt.Errorf("create: gave up after 3 attempts (the node keeps changing)")
}

func (r *Registry) logHeld(path string, owner int64, data []byte) {
	now := time.Now()
	if last, ok := r.lastLogs[path]; ok && now.Sub(last) < dupLogEvery {
		return
	}
	r.lastLogs[path] = now
	if path == r.self && r.opts.Slave {
		r.logf("registry: ERROR: duplicate slave id %d of broker %d? %s is held by ZooKeeper session %#x (%q), not ours (%#x): "+
			"another slave with this id is running, or this slave's previous process has not expired yet. "+
			"Not registering until it goes; retrying every %v",
			r.opts.SlaveID, r.opts.BrokerID, path, owner, data, r.conn.SessionID(), r.opts.RetryInterval)
		return
	}
	if path == r.master {
		r.logf("registry: ERROR: duplicate broker id %d? %s is held by ZooKeeper session %#x (%q), not ours (%#x): "+
			"another broker with this id is running, or this broker's previous process has not expired yet. "+
			"Not registering until it goes; retrying every %v",
			r.opts.BrokerID, path, owner, data, r.conn.SessionID(), r.opts.RetryInterval)
		return
	}
	r.logf("registry: ERROR: %s is held by another ZooKeeper session %#x (%q); retrying every %v",
		path, owner, data, r.opts.RetryInterval)
}

// ensureParents creates the persistent ancestors of path.
func (r *Registry) ensureParents(path string) error {
	p := parentOf(path)
	if p == "" || r.parents[p] {
		return nil
	}
	if err := r.ensureParents(p); err != nil {
		return err
	}
	_, err := r.conn.Create(p, nil, 0, r.aclFor(p))
	switch {
	case errors.Is(err, zk.ErrNoNode):
		// An ancestor was deleted behind our back: forget them all.
		r.parents = map[string]bool{}
		return err
	case errors.Is(err, zk.ErrNoAuth):
		// ZooKeeper checks the parent's ACL before whether p exists: a p
		// that exists is fine.
		if ok, _, xerr := r.conn.Exists(p); xerr != nil || !ok {
			return fmt.Errorf("create %s: %w", p, err)
		}
		fallthrough
	case errors.Is(err, zk.ErrNodeExists):
		if err := r.restrict(p); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	r.parents[p] = true
	return nil
}

// sweepConsumers runs closeConsumers once per session (with auth, once
// the broker's own nodes are registered). It is not a condition of
// Registered: a failure (logged) is tried again on the next round.
func (r *Registry) sweepConsumers(sess int64) {
	if !r.opts.Auth.Enabled() || r.consSess == sess || r.opts.Standby {
		return
	}
	if r.closeConsumers() {
		r.consSess = sess
	}
}

// maxConsumerSweep bounds the nodes closeConsumers looks at per session.
const maxConsumerSweep = 20000

// closeConsumers (with auth) makes R/consumers exist with PrivateACL, so
// that clients without the identity cannot create groups under it, and
// restricts what an earlier version or a client without credentials left
// open below it: each group node, its ids, owners and offsets, and their
// topic nodes, if they have the open ACL or the identity's SharedACL. The
// leaves (members, owners, offsets) are left to their writers: members and
// owners are ephemeral, and the offset store checks its nodes itself. A
// node with a foreign ACL (someone else's identity: squatted) is logged as
// an error once; nothing here can fix it. It reports whether it got
// through (false on a ZooKeeper error, which is logged).
func (r *Registry) closeConsumers() bool {
	cons := zkpath.Consumers(r.root)
	if err := r.ensureParents(cons + "/-"); err != nil {
		r.logf("registry: %s: %v", cons, err)
		return false
	}
	restricted, seen := 0, 0
	check := func(p string, list bool) ([]string, bool) {
		seen++
		acl, _, err := r.conn.GetACL(p)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, true
		}
		if err == nil {
			var changed bool
			changed, err = r.opts.Auth.Restrict(r.conn, p, acl, r.opts.Auth.PrivateACL())
			if changed {
				restricted++
			} else if err == nil && !r.opts.Auth.Owns(acl) && !r.foreign[p] {
				r.foreign[p] = true
				r.logf("registry: ERROR: %v", r.opts.Auth.ForeignNode(r.conn, p, nil))
			}
		}
		if err != nil && !errors.Is(err, zk.ErrNoAuth) {
			r.logf("registry: %s: %v", p, err)
			return nil, false
		}
		if !list {
			return nil, true
		}
		kids, _, err := r.conn.Children(p)
		if err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrNoAuth) {
			r.logf("registry: %s: %v", p, err)
			return nil, false
		}
		sort.Strings(kids)
		return kids, true
	}
	groups, ok := check(cons, true)
	for _, g := range groups {
		select {
		case <-r.stop:
			return false
		default:
		}
		gp := cons + "/" + g
		kids, gok := check(gp, true)
		ok = ok && gok
		for _, k := range kids {
			if k != "ids" && k != "owners" && k != "offsets" {
				continue
			}
			topics, kok := check(gp+"/"+k, k != "ids")
			ok = ok && kok
			if k == "ids" {
				continue
			}
			for _, t := range topics {
				if seen >= maxConsumerSweep {
					break
				}
				_, tok := check(gp+"/"+k+"/"+t, false)
				ok = ok && tok
			}
		}
		if seen >= maxConsumerSweep {
			r.logf("registry: looked at the ACLs of %d nodes under %s and stopped (the rest are checked by the offset store as it writes)", seen, cons)
			break
		}
	}
	if restricted > 0 {
		r.logf("registry: restricted %d node(s) under %s that had the open or shared ACL to %s (all) and world:anyone (read)", restricted, cons, r.opts.Auth)
	}
	return ok
}

func parentOf(path string) string {
	i := strings.LastIndexByte(path, '/')
	if i <= 0 {
		return ""
	}
	return path[:i]
}

// CloseAsync closes r (nil: local mode, nothing to do) on a goroutine of
// its own, as a broker that shuts down does while its connections drain:
// with ZooKeeper down, Close may take up to its timeout. It logs the
// outcome (logf, warn) and returns a channel closed once done.
func (r *Registry) CloseAsync(logf, warn func(string, ...any)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if r == nil {
			return
		}
		if err := r.Close(); err != nil {
			warn(err.Error())
		} else {
			logf("registry: broker %d unregistered from ZooKeeper", r.opts.BrokerID)
		}
	}()
	return done
}

// Close stops registering, deletes this session's ephemeral nodes and
// ids/<id> (or empties it if slaves remain), and closes the session. It is
// bounded: if ZooKeeper does not answer within 5 s it just closes the
// session (the server then removes the ephemeral nodes itself when it
// sees the close, or when the session times out).
func (r *Registry) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	close(r.stop)
	timer := time.NewTimer(closeTimeout)
	defer timer.Stop()
	select {
	case <-r.done:
	case <-timer.C:
		r.conn.Close() // unblocks the loop's pending request
		<-r.done
		return errors.New("registry: close: ZooKeeper did not answer; session closed without clean-up")
	}
	cleaned := make(chan error, 1)
	go func() { cleaned <- r.unregister() }()
	var err error
	select {
	case err = <-cleaned:
	case <-timer.C:
		err = errors.New("registry: close: ZooKeeper did not answer in time")
	}
	r.conn.Close()
	return err
}

// unregister deletes what Close deletes. Only nodes owned by the current
// session are deleted, and ids/<id> only if this session registered the
// master node.
func (r *Registry) unregister() error {
	sess := r.conn.SessionID()
	if sess == 0 || sess != r.sess || r.conn.State() != zk.StateHasSession {
		return nil
	}
	var errs []error
	var paths []string
	for p := range r.made {
		paths = append(paths, p)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(paths)))
	master := false
	for _, p := range paths {
		ok, st, err := r.conn.Exists(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok || st.EphemeralOwner != sess {
			continue
		}
		if p == r.master {
			master = true
		}
		if err := r.conn.Delete(p, st.Version); err != nil && !errors.Is(err, zk.ErrNoNode) {
			errs = append(errs, err)
		}
	}
	if master {
		kids, _, err := r.conn.Children(r.idPath)
		switch {
		case errors.Is(err, zk.ErrNoNode):
		case err != nil:
			errs = append(errs, err)
		case hasSlave(kids):
			if _, err := r.conn.Set(r.idPath, []byte{}, -1); err != nil {
				errs = append(errs, err)
			}
		default:
			if err := r.conn.Delete(r.idPath, -1); err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrNotEmpty) {
				errs = append(errs, err)
			}
		}
	}
	r.regSess.Store(0)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("registry: close: %w", err)
	}
	return nil
}

func hasSlave(kids []string) bool {
	for _, k := range kids {
		if strings.HasPrefix(k, "slave") {
			return true
		}
	}
	return false
}
