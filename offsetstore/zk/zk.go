// Package zk is the ZooKeeper offset store, MetaQ's default (reference §5
// and §7): each committed position is a persistent znode
//
//	<root>/consumers/<group>/offsets/<topic>/<brokerId>-<partition>
//
// holding "<msgId>-<offset>", so a MetaQ operator can read a group's
// offsets with zkCli.sh. Load also reads the bare "<offset>" that MetaQ
// wrote before 1.4 (its msgId is then -1). Parents are created persistent
// on demand.
//
// The store ships as the plugin binary cmd/metaq-offsetstore-zk. Config
// keys (strings, from [plugin.config] in server.toml):
//
//	connect             ZooKeeper servers, "host:port[,host:port...]" (required)
//	root                MetaQ's zkRoot (default "/meta")
//	session_timeout_ms  ZooKeeper session timeout (default 30000)
//	timeout_ms          bound on one Init, Commit or Load when the caller
//	                    gives no earlier deadline (default 10000)
//	auth_user           ZooKeeper digest user (optional; with auth_password)
//	auth_password       its password
//
// With auth_user the session logs in with ZooKeeper's digest scheme, and
// the nodes the store creates get ACLs (sdk/cluster's Auth): everything
// from <root>/consumers down (the groups, their offsets nodes and the
// offset nodes) PrivateACL (the user has all rights, world:anyone reads),
// so no other client can create a group, forge or delete an offset;
// <root> and its ancestors SharedACL (world:anyone may also create and
// delete children). A node on the way to an offset, or an offset node,
// found with ZooKeeper's open ACL (written before auth was on) or the
// identity's SharedACL (an earlier version's groups) is restricted to
// PrivateACL as the store writes there. One with a foreign ACL (someone
// else created it first: squatted) is never written through: a commit
// fails with an error naming the node and saying it is owned by another
// ZooKeeper identity (cluster.ErrForeignNode). Load does not trust an
// offset node with a foreign ACL: it is taken as absent (nothing stored),
// with a warning, so a fetch never serves an offset another identity
// wrote. See docs/security.md.
//
// Commit writes a batch with ZooKeeper multi-ops: all positions of a batch
// of up to MaxMultiOps distinct partitions succeed or fail together. A Commit that
// returns an error (connection loss, session expiry, timeout) may or may not
// have reached ZooKeeper, but a Commit that returns nil has: it never
// reports success for a write ZooKeeper did not acknowledge.
package zk

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/internal/zkdial"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/offsetstore"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
)

// Defaults for the config keys.
const (
	// DefaultRoot is MetaQ's default zkRoot.
	DefaultRoot = zkpath.DefaultRoot
	// DefaultSessionTimeout is MetaQ's default zkSessionTimeoutMs.
	DefaultSessionTimeout = 30 * time.Second
	// DefaultTimeout bounds one call whose context has no earlier deadline.
	DefaultTimeout = 10 * time.Second
	// MaxMultiOps is the most operations sent in one ZooKeeper multi-op; a
	// larger batch is written in several (each atomic on its own). 500
	// nodes keep a request well under ZooKeeper's 1 MiB jute.maxbuffer.
	MaxMultiOps = 500
	// loadParallelism is how many reads of one Load are in flight at once
	// (they are pipelined on the session's single connection).
	loadParallelism = 32
	// commitAttempts bounds the retries of a commit that raced with another
	// writer creating or deleting the same nodes.
	commitAttempts = 5
)

// Store is the ZooKeeper offset store. Use New, then Init.
type Store struct {
	mu      sync.Mutex
	conn    *zk.Conn
	root    string // "" or "/x/y" (never a trailing slash)
	servers string
	timeout time.Duration
	auth    cluster.Auth
	closed  bool

	// writing holds one token while a commit's ZooKeeper requests are in
	// flight, including a commit whose caller gave up on it (the client
	// cannot cancel a request). Commits are serialised by it, so a late
	// write can never land after, and overwrite, a newer one.
	writing chan struct{}

	// Logf receives warnings; nil means standard error (the plugin host
	// turns those lines into log lines). Set it before Init.
	Logf func(format string, args ...any)
	// warned holds the offset nodes Load warned about (once each).
	warned sync.Map // string -> struct{}

	// known caches paths that exist (offset nodes and their parents), so
	// a steady-state commit is one multi-op of setData. A node deleted
	// behind our back turns a set into NoNode, which drops the cache and
	// retries through the create path.
	known sync.Map // string -> struct{}
}

var _ offsetstore.Store = (*Store)(nil)

// New returns an uninitialised store.
func New() *Store { return &Store{writing: make(chan struct{}, 1)} }

// config is the parsed Init configuration.
type config struct {
	servers        []string
	root           string
	sessionTimeout time.Duration
	timeout        time.Duration
	auth           cluster.Auth
}

func parseConfig(c map[string]string) (config, error) {
	cfg := config{root: DefaultRoot, sessionTimeout: DefaultSessionTimeout, timeout: DefaultTimeout}
	for k := range c {
		switch k {
		case "connect", "root", "session_timeout_ms", "timeout_ms", "auth_user", "auth_password":
		default:
			return cfg, fmt.Errorf("%w: zk: unknown config key %q (known: connect, root, session_timeout_ms, timeout_ms, auth_user, auth_password)", offsetstore.ErrBadConfig, k)
		}
	}
	cfg.auth = cluster.Auth{User: c["auth_user"], Password: c["auth_password"]}
	if err := cfg.auth.Validate(); err != nil {
		return cfg, fmt.Errorf("%w: zk: auth_user, auth_password: %v", offsetstore.ErrBadConfig, err)
	}
	connect := strings.TrimSpace(c["connect"])
	if connect == "" {
		return cfg, fmt.Errorf("%w: zk: config key \"connect\" (host:port[,host:port...]) is required", offsetstore.ErrBadConfig)
	}
	if strings.Contains(connect, "/") {
		return cfg, fmt.Errorf("%w: zk: connect %q has a chroot suffix; set \"root\" instead", offsetstore.ErrBadConfig, connect)
	}
	for _, s := range strings.Split(connect, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.servers = append(cfg.servers, s)
		}
	}
	if r, ok := c["root"]; ok {
		r = strings.TrimRight(strings.TrimSpace(r), "/")
		if r != "" && !strings.HasPrefix(r, "/") {
			return cfg, fmt.Errorf("%w: zk: root %q must start with /", offsetstore.ErrBadConfig, c["root"])
		}
		if r != "" {
			for _, part := range strings.Split(r[1:], "/") {
				if err := validName(part); err != nil {
					return cfg, fmt.Errorf("%w: zk: root %q: %v", offsetstore.ErrBadConfig, c["root"], err)
				}
			}
		}
		cfg.root = r
	}
	ms := func(key string, into *time.Duration) error {
		v, ok := c[key]
		if !ok {
			return nil
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n <= 0 {
			return fmt.Errorf("%w: zk: %s %q is not a positive number of milliseconds", offsetstore.ErrBadConfig, key, v)
		}
		*into = time.Duration(n) * time.Millisecond
		return nil
	}
	if err := ms("session_timeout_ms", &cfg.sessionTimeout); err != nil {
		return cfg, err
	}
	if err := ms("timeout_ms", &cfg.timeout); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// Init connects to ZooKeeper and waits (bounded by ctx and timeout_ms) for
// a session. Calling it again replaces the connection.
func (s *Store) Init(ctx context.Context, req *offsetstore.InitRequest) error {
	var conf map[string]string
	if req != nil {
		conf = req.Config
	}
	cfg, err := parseConfig(conf)
	if err != nil {
		return err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return offsets.ErrClosed
	}
	conn, events, err := zk.Connect(cfg.servers, cfg.sessionTimeout,
		zk.WithLogger(stderrLogger()), zk.WithLogInfo(false),
		// A ZooKeeper that never answers the connect request holds the
		// client about the session timeout, not 10 times it.
		zk.WithDialer(zkdial.Bounded(nil, cfg.sessionTimeout)))
	if err != nil {
		return fmt.Errorf("offsetstore/zk: connect %s: %w", strings.Join(cfg.servers, ","), err)
	}
	ctx, cancel := withTimeout(ctx, cfg.timeout)
	defer cancel()
	if err := waitSession(ctx, conn, events); err != nil {
		conn.Close()
		return fmt.Errorf("offsetstore/zk: connect %s: %w", strings.Join(cfg.servers, ","), err)
	}
	// The events channel must keep being drained or the client blocks.
	go func() {
		for range events {
		}
	}()
	if cfg.auth.Enabled() {
		// Once added, the client re-sends it on every reconnect.
		login := make(chan error, 1)
		go func() { login <- cfg.auth.Login(conn) }()
		select {
		case err = <-login:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil {
			conn.Close()
			return fmt.Errorf("offsetstore/zk: %s: %w", strings.Join(cfg.servers, ","), err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		conn.Close()
		return offsets.ErrClosed
	}
	if s.conn != nil {
		s.conn.Close()
	}
	s.conn, s.root, s.servers, s.timeout, s.auth = conn, cfg.root, strings.Join(cfg.servers, ","), cfg.timeout, cfg.auth
	s.known.Clear()
	return nil
}

// stderrLogger routes the client's log lines to stderr (a plugin must
// never write to stdout; the host turns stderr into log lines).
func stderrLogger() zk.Logger {
	return log.New(os.Stderr, "zk: ", 0)
}

// waitSession waits until conn has a session.
func waitSession(ctx context.Context, conn *zk.Conn, events <-chan zk.Event) error {
	for {
		if conn.State() == zk.StateHasSession {
			return nil
		}
		select {
		case ev, ok := <-events:
			if !ok {
				return zk.ErrClosing
			}
			if ev.State == zk.StateHasSession {
				return nil
			}
			if ev.State == zk.StateAuthFailed {
				return zk.ErrAuthFailed
			}
		case <-ctx.Done():
			return fmt.Errorf("no session (state %v): %w", conn.State(), ctx.Err())
		}
	}
}

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// sess is what one call uses: a snapshot of the store's connection.
type sess struct {
	conn    *zk.Conn
	root    string
	servers string
	timeout time.Duration
	auth    cluster.Auth
}

// session returns the connection for a call, or why there is none.
func (s *Store) session() (sess, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return sess{}, offsets.ErrClosed
	case s.conn == nil:
		return sess{}, offsetstore.ErrNotInitialized
	}
	return sess{s.conn, s.root, s.servers, s.timeout, s.auth}, nil
}

// run runs fn, bounded by ctx and the store's timeout. The client has no
// contexts: a request queued while the connection is down waits for the
// next connection. On timeout run returns an error at once and fn finishes
// (or fails) in the background; the caller must then assume nothing was
// stored, which is the Store contract for any error. A write (exclusive)
// first waits for the previous write to finish, however it ended.
func (s *Store) run(ctx context.Context, op string, exclusive bool, fn func(ss sess) error) error {
	ss, err := s.session()
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx, ss.timeout)
	defer cancel()
	if exclusive {
		select {
		case s.writing <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("offsetstore/zk: %s: an earlier commit to ZooKeeper %s is still unanswered (state %v): %w", op, ss.servers, ss.conn.State(), ctx.Err())
		}
	}
	done := make(chan error, 1)
	go func() {
		err := fn(ss)
		if exclusive {
			<-s.writing
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return s.describe(op, ss, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("offsetstore/zk: %s: no answer from ZooKeeper %s within the deadline (state %v): %w", op, ss.servers, ss.conn.State(), ctx.Err())
	}
}

// describe turns a client error into one that says what happened.
func (s *Store) describe(op string, ss sess, err error) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed && (errors.Is(err, zk.ErrClosing) || errors.Is(err, zk.ErrConnectionClosed)) {
		return fmt.Errorf("offsetstore/zk: %s: %w", op, offsets.ErrClosed)
	}
	switch {
	case errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrNoServer):
		return fmt.Errorf("offsetstore/zk: %s: connection to ZooKeeper %s lost (state %v): %w", op, ss.servers, ss.conn.State(), err)
	case errors.Is(err, zk.ErrSessionExpired):
		return fmt.Errorf("offsetstore/zk: %s: ZooKeeper session expired; retry: %w", op, err)
	}
	return fmt.Errorf("offsetstore/zk: %s: %w", op, err)
}

// nodePath is MetaQ's offset node of group's position p under root.
func nodePath(root, group string, p message.Position) string {
	return zkpath.Offset(root, group, p.Topic, p.Partition.BrokerID, p.Partition.Partition)
}

// nodeData is MetaQ's "<msgId>-<offset>".
func nodeData(e message.Position) []byte {
	b := strconv.AppendInt(nil, e.MsgID, 10)
	b = append(b, '-')
	return strconv.AppendInt(b, e.Offset, 10)
}

// parseData reads "<msgId>-<offset>", or the bare "<offset>" MetaQ wrote
// before 1.4 (msgId -1), the way MetaQ's ZkOffsetStorage does: split at the
// last '-' unless it is the first character.
func parseData(data []byte) (offset, msgID int64, err error) {
	s := strings.TrimSpace(string(data))
	msgID = -1
	if i := strings.LastIndexByte(s, '-'); i > 0 {
		if msgID, err = strconv.ParseInt(s[:i], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("msgId %q: %w", s[:i], err)
		}
		s = s[i+1:]
	}
	if offset, err = strconv.ParseInt(s, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("offset %q: %w", s, err)
	}
	return offset, msgID, nil
}

// validName reports whether s can be one znode path component.
// ZooKeeper's PathUtils rejects ".", "..", and these characters.
func validName(s string) error {
	switch s {
	case "":
		return errors.New("empty path component")
	case ".", "..":
		return fmt.Errorf("%q is not a valid znode name", s)
	}
	for _, r := range s {
		if r == '/' || r <= 0x1f || (r >= 0x7f && r <= 0x9f) ||
			(r >= 0xd800 && r <= 0xf8ff) || (r >= 0xfff0 && r <= 0xffff) {
			return fmt.Errorf("%q holds %q, which a znode name cannot", s, r)
		}
	}
	return nil
}

// validTopics checks the topics of ps for use in a node path. The group
// is checked by offsets.ValidateLoad (message.ValidateGroup refuses every
// character validName does, and more); the topics by validName.
func validTopics(ps []message.Position) error {
	for _, p := range ps {
		if err := validName(p.Topic); err != nil {
			return fmt.Errorf("%w: topic: %v", offsets.ErrInvalid, err)
		}
	}
	return nil
}

// Commit stores positions (see the package doc for atomicity).
func (s *Store) Commit(ctx context.Context, group string, ps []message.Position) error {
	if err := offsets.ValidateCommit(group, ps); err != nil {
		return err
	}
	if err := validTopics(ps); err != nil {
		return err
	}
	if _, err := s.session(); err != nil || len(ps) == 0 {
		return err
	}
	// The later position of a partition wins: keep each one's last, in
	// the order of first appearance (a multi-op cannot create a node
	// twice).
	type key struct {
		topic string
		part  message.Partition
	}
	idx := make(map[key]int, len(ps))
	batch := make([]message.Position, 0, len(ps))
	for _, p := range ps {
		k := key{p.Topic, p.Partition}
		if i, ok := idx[k]; ok {
			batch[i] = p
			continue
		}
		idx[k] = len(batch)
		batch = append(batch, p)
	}
	return s.run(ctx, "commit", true, func(ss sess) error {
		for len(batch) > 0 {
			n := min(len(batch), MaxMultiOps)
			if err := s.commitChunk(ss, group, batch[:n]); err != nil {
				return err
			}
			batch = batch[n:]
		}
		return nil
	})
}

// commitChunk writes up to MaxMultiOps distinct positions in one multi-op:
// setData for nodes known to exist, create for the others (after creating
// their parents). A race with another writer (NodeExists, NoNode) drops the
// cache for the chunk's paths and retries.
func (s *Store) commitChunk(ss sess, group string, chunk []message.Position) error {
	conn := ss.conn
	paths := make([]string, len(chunk))
	for i, p := range chunk {
		paths[i] = nodePath(ss.root, group, p)
	}
	var err error
	for attempt := 0; attempt < commitAttempts; attempt++ {
		var exists []bool
		if exists, err = s.prepare(ss, paths); err != nil {
			return err
		}
		ops := make([]any, len(chunk))
		for i, e := range chunk {
			if exists[i] {
				ops[i] = &zk.SetDataRequest{Path: paths[i], Data: nodeData(e), Version: -1}
			} else {
				ops[i] = &zk.CreateRequest{Path: paths[i], Data: nodeData(e), Acl: ss.auth.PrivateACL(), Flags: 0}
			}
		}
		var res []zk.MultiResponse
		res, err = conn.Multi(ops...)
		if err == nil {
			for _, p := range paths {
				s.known.Store(p, struct{}{})
			}
			return nil
		}
		if !raced(err, res) {
			if op := failedOp(res, err); op >= 0 {
				if errors.Is(err, zk.ErrNoAuth) {
					node := paths[op]
					if !exists[op] {
						node = parentOf(node) // a create needs the parent's rights
					}
					return ss.auth.ForeignNode(conn, node, err)
				}
				return fmt.Errorf("%s: %w", paths[op], err)
			}
			return err
		}
		// Someone created or deleted nodes under us: look again.
		for _, p := range paths {
			s.known.Delete(p)
			s.known.Delete(parentOf(p))
		}
	}
	return fmt.Errorf("nodes kept changing under concurrent writers after %d attempts: %w", commitAttempts, err)
}

// raced reports whether a multi-op failed because a node it sets was
// missing or a node it creates existed.
func raced(err error, res []zk.MultiResponse) bool {
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrNodeExists) {
		return true
	}
	for _, r := range res {
		if errors.Is(r.Error, zk.ErrNoNode) || errors.Is(r.Error, zk.ErrNodeExists) {
			return true
		}
	}
	return false
}

// failedOp is the index of the op whose error a failed multi-op
// returned, or -1.
func failedOp(res []zk.MultiResponse, err error) int {
	for i, r := range res {
		if r.Error != nil && errors.Is(r.Error, err) {
			return i
		}
	}
	return -1
}

// prepare says which of paths exist, creating the missing parents. Paths
// in the cache are taken as existing without a round trip. With auth, an
// existing node still on the open ACL is restricted first.
func (s *Store) prepare(ss sess, paths []string) ([]bool, error) {
	exists := make([]bool, len(paths))
	var unknown []int
	for i, p := range paths {
		if _, ok := s.known.Load(p); ok {
			exists[i] = true
		} else {
			unknown = append(unknown, i)
		}
	}
	if len(unknown) == 0 {
		return exists, nil
	}
	if ss.auth.Enabled() {
		// With auth the parents come first, existing or not: an open
		// offsets/<t> would let anyone delete and forge its nodes, so it
		// is restricted (or refused, if foreign) before any node under it
		// is looked at.
		parents := map[string]bool{}
		for _, i := range unknown {
			parents[parentOf(paths[i])] = true
		}
		for dir := range parents {
			if err := s.ensureDir(ss, dir); err != nil {
				return nil, err
			}
		}
	}
	errs := parallel(len(unknown), func(j int) error {
		ok, err := s.exists(ss, paths[unknown[j]], true)
		exists[unknown[j]] = ok
		return err
	})
	if err := firstErr(errs); err != nil {
		return nil, err
	}
	parents := map[string]bool{}
	for _, i := range unknown {
		if !exists[i] && !ss.auth.Enabled() {
			parents[parentOf(paths[i])] = true
		}
		if exists[i] {
			s.known.Store(paths[i], struct{}{})
		}
	}
	for dir := range parents {
		if err := s.ensureDir(ss, dir); err != nil {
			return nil, err
		}
	}
	return exists, nil
}

// ensureDir creates dir and its missing ancestors as persistent nodes with
// empty data, the way MetaQ's ZkUtils.makeSurePersistentPathExists does.
func (s *Store) ensureDir(ss sess, dir string) error {
	if _, ok := s.known.Load(dir); ok || dir == "" || dir == "/" {
		return nil
	}
	private := isPrivate(ss.root, dir)
	if ss.auth.Enabled() && isPrivate(ss.root, parentOf(dir)) {
		// Look at (and restrict) the private ancestors even when dir
		// exists.
		if err := s.ensureDir(ss, parentOf(dir)); err != nil {
			return err
		}
	}
	ok, err := s.exists(ss, dir, private)
	if err != nil {
		return err
	}
	if !ok {
		if err := s.ensureDir(ss, parentOf(dir)); err != nil {
			return err
		}
		acl := ss.auth.SharedACL()
		if private {
			acl = ss.auth.PrivateACL()
		}
		if _, err := ss.conn.Create(dir, nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			if errors.Is(err, zk.ErrNoAuth) {
				return fmt.Errorf("create %s: %w", dir, ss.auth.ForeignNode(ss.conn, parentOf(dir), err))
			}
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	s.known.Store(dir, struct{}{})
	return nil
}

// isPrivate reports whether the node p gets PrivateACL: <root>/consumers
// and everything under it. Its ancestors get SharedACL.
func isPrivate(root, p string) bool {
	cons := zkpath.Consumers(root)
	return p == cons || strings.HasPrefix(p, cons+"/")
}

// exists reports whether path exists. With auth and restrict, it reads the
// node's ACL instead (the same round trip) and restricts an open (or
// shared) one to PrivateACL; one with a foreign ACL is an error
// (cluster.ErrForeignNode): the store never writes through another
// identity's node.
func (s *Store) exists(ss sess, path string, restrict bool) (bool, error) {
	if !ss.auth.Enabled() || !restrict {
		ok, _, err := ss.conn.Exists(path)
		return ok, err
	}
	acl, _, err := ss.conn.GetACL(path)
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	if errors.Is(err, zk.ErrNoAuth) { // not even readable by this identity
		return false, ss.auth.ForeignNode(ss.conn, path, err)
	}
	if err != nil {
		return false, err
	}
	changed, err := ss.auth.Restrict(ss.conn, path, acl, ss.auth.PrivateACL())
	if err != nil {
		return false, err
	}
	if !changed && !ss.auth.Owns(acl) {
		return false, ss.auth.ForeignNode(ss.conn, path, nil)
	}
	return true, nil
}

// trusted reports whether Load may serve the offset node path: without
// auth always; with auth if its ACL is the identity's PrivateACL (the
// store wrote it), or ZooKeeper's open ACL (written before auth was on;
// the next commit restricts it). One with another ACL was created by
// another identity: it is not served (a warning is logged once per node).
func (s *Store) trusted(ss sess, path string) (bool, error) {
	if !ss.auth.Enabled() {
		return true, nil
	}
	acl, _, err := ss.conn.GetACL(path)
	if errors.Is(err, zk.ErrNoNode) {
		return true, nil // gone: Get said what it held
	}
	if err != nil && !errors.Is(err, zk.ErrNoAuth) {
		return false, err
	}
	if err == nil && (ss.auth.IsPrivate(acl) || cluster.IsOpenACL(acl)) {
		return true, nil
	}
	if _, dup := s.warned.LoadOrStore(path, struct{}{}); !dup {
		s.warnf("WARNING: not serving offset node %s: %v", path, ss.auth.ForeignNode(ss.conn, path, nil))
	}
	return false, nil
}

func (s *Store) warnf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
		return
	}
	log.New(os.Stderr, "", 0).Printf("offsetstore/zk: "+format, args...)
}

func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i > 0 {
		return p[:i]
	}
	return "/"
}

// Load reads the positions' nodes; a missing node is nothing stored
// (Offset -1). A node holding something other than "<msgId>-<offset>" or
// "<offset>" is an error (a store never silently resets a group's
// position).
func (s *Store) Load(ctx context.Context, group string, ps []message.Position) ([]message.Position, error) {
	if err := offsets.ValidateLoad(group, ps); err != nil {
		return nil, err
	}
	if err := validTopics(ps); err != nil {
		return nil, err
	}
	if _, err := s.session(); err != nil {
		return nil, err
	}
	out := make([]message.Position, len(ps))
	if len(ps) == 0 {
		return out, nil
	}
	err := s.run(ctx, "load", false, func(ss sess) error {
		conn, root := ss.conn, ss.root
		res := make([]message.Position, len(ps))
		errs := parallel(len(ps), func(i int) error {
			res[i] = offsets.NotStored(ps[i])
			p := nodePath(root, group, ps[i])
			data, _, err := conn.Get(p)
			if errors.Is(err, zk.ErrNoNode) {
				return nil
			}
			if err != nil {
				return err
			}
			if ok, err := s.trusted(ss, p); err != nil || !ok {
				return err // untrusted: nothing stored
			}
			off, id, err := parseData(data)
			if err != nil {
				return fmt.Errorf("node %s holds %q, not <msgId>-<offset>: %v", p, data, err)
			}
			res[i].Offset, res[i].MsgID = off, id
			return nil
		})
		if err := firstErr(errs); err != nil {
			return err
		}
		copy(out, res)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Close closes the session. Idempotent; later calls fail with offsets.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.conn != nil {
		s.conn.Close()
	}
	return nil
}

// parallel runs fn(0..n-1) on up to loadParallelism goroutines (the
// client pipelines their requests on one connection) and returns each
// call's error.
func parallel(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	if n == 1 {
		errs[0] = fn(0)
		return errs
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < min(n, loadParallelism); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errs[i] = fn(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return errs
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
