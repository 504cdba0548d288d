// Package broker is the metaq-go broker: it owns the topics' partition logs,
// accepts connections speaking MetaQ's text protocol, and answers put, get,
// offset, stats and the rest (sdk/protocol, docs/protocol.md).
//
// Lock order: Broker.mu before any store lock; conn.wmu before conn.omu.
package broker

import (
	"errors"
	"fmt"
	"hash/crc32"
	"log"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/registry"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/plugins/host"
)

// Version is the broker's version string, answered to `version` and in stats.
const Version = "metaq-go/0.1.0"

// Options are run-time settings that are not in server.toml.
type Options struct {
	// Logf receives the broker's log lines; nil logs to the standard logger.
	Logf func(format string, args ...any)
	// WriteTimeout bounds one write to a client; 0 means 30 s.
	WriteTimeout time.Duration
	// GroupSessionTimeout is how long a consumer group member (local mode)
	// may go without a heartbeat, or without acknowledging a revoked
	// partition, before it is removed; 0 means DefaultGroupSessionTimeout.
	GroupSessionTimeout time.Duration
}

// Broker is one metaq-go broker.
type Broker struct {
	cfg  *conf.Config
	opts Options
	logf func(format string, args ...any)
	ids  *idWorker

	mu     sync.RWMutex
	topics map[string]*topic
	names  []string // sorted topic names

	ln      net.Listener
	connsMu sync.Mutex
	conns   map[*conn]struct{}
	wg      sync.WaitGroup
	done    chan struct{}
	closed  atomic.Bool

	start time.Time
	stats counters

	// plugins supervises the plugin processes named in server.toml.
	plugins *host.Supervisor
	// filters and offsets are set up by initFilters and initOffsetStore.
	filters filterSet
	offsets offsetState
	// groups are the consumer groups coordinated here (groups.go).
	groups groupSet
	// reg is the ZooKeeper registration (cluster mode), set by Serve
	// under mu; nil in local mode.
	reg *registry.Registry
}

type topic struct {
	name  string
	cfg   conf.TopicConfig
	parts []*store.Log
	rt    topicRealtime
}

// New opens every configured topic's partitions (running crash recovery on
// each) and returns a broker ready to Start.
func New(cfg *conf.Config, opts Options) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 30 * time.Second
	}
	b := &Broker{
		cfg:    cfg,
		opts:   opts,
		logf:   opts.Logf,
		ids:    newIDWorker(cfg.BrokerID, nil),
		topics: make(map[string]*topic),
		conns:  make(map[*conn]struct{}),
		done:   make(chan struct{}),
		start:  time.Now(),
	}
	b.groups.timeout = opts.GroupSessionTimeout
	if b.logf == nil {
		b.logf = log.Printf
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	names := cfg.TopicNames()
	if cfg.AutoCreateTopics {
		// Reopen auto-created topics found on disk.
		names = append(names, b.topicsOnDisk(cfg.DataDir)...)
	}
	for _, name := range names {
		if _, err := b.openTopic(name); err != nil {
			b.closeStores()
			return nil, err
		}
	}
	b.plugins = host.NewSupervisor(host.Options{Logger: newHCLogger(b.logf, cfg.EffectivePluginLogLevel())})
	for _, step := range []func() error{b.initFilters, b.initOffsetStore} {
		if err := step(); err != nil {
			b.plugins.Close()
			b.closeStores()
			return nil, err
		}
	}
	return b, nil
}

// topicsOnDisk lists topic names from `<topic>-<partition>` directories.
func (b *Broker) topicsOnDisk(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		i := strings.LastIndexByte(e.Name(), '-')
		if i <= 0 {
			continue
		}
		if _, err := strconv.Atoi(e.Name()[i+1:]); err != nil {
			continue
		}
		out = append(out, e.Name()[:i])
	}
	return out
}

// openTopic opens (or returns) a topic's partition logs.
func (b *Broker) openTopic(name string) (*topic, error) {
	b.mu.RLock()
	t := b.topics[name]
	b.mu.RUnlock()
	if t != nil {
		return t, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.topics[name]; t != nil {
		return t, nil
	}
	tc, ok := b.cfg.TopicConfig(name)
	if !ok {
		return nil, errUnknownTopic
	}
	t = &topic{name: name, cfg: tc}
	dir := tc.DataDir
	if dir == "" {
		dir = b.cfg.DataDir
	}
	for p := 0; p < tc.NumPartitions; p++ {
		l, err := store.Open(filepath.Join(dir, name+"-"+strconv.Itoa(p)), store.Options{
			MaxSegmentSize:   b.cfg.MaxSegmentSize,
			UnflushThreshold: tc.UnflushThreshold,
			UnflushInterval:  tc.UnflushInterval,
			MaxMessageSize:   b.cfg.MaxMessageSize,
			IDs:              b.ids,
			Logf: func(format string, args ...any) {
				b.logf("store %s-%d: "+format, append([]any{name, p}, args...)...)
			},
		})
		if err != nil {
			for _, l := range t.parts {
				l.Close()
			}
			return nil, fmt.Errorf("open topic %s partition %d: %w", name, p, err)
		}
		b.ids.observe(l.LastID())
		t.parts = append(t.parts, l)
	}
	b.topics[name] = t
	if b.reg != nil {
		b.reg.AddTopic(registryTopic(tc))
	}
	b.names = append(b.names, name)
	sort.Strings(b.names)
	return t, nil
}

var errUnknownTopic = errors.New("unknown topic")

// lookup returns a topic by name, creating it if auto-creation is on.
func (b *Broker) lookup(name []byte, create bool) (*topic, error) {
	b.mu.RLock()
	t := b.topics[string(name)]
	b.mu.RUnlock()
	if t != nil {
		return t, nil
	}
	if !create || !b.cfg.AutoCreateTopics || !validTopicName(name) {
		return nil, errUnknownTopic
	}
	return b.openTopic(string(name))
}

func validTopicName(b []byte) bool {
	if len(b) == 0 || len(b) > 200 {
		return false
	}
	for _, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-', c == '.':
		default:
			return false
		}
	}
	return b[0] != '.'
}

func (t *topic) partition(p int32) *store.Log {
	if p == -1 {
		return t.parts[rand.IntN(len(t.parts))]
	}
	if p < 0 || int(p) >= len(t.parts) {
		return nil
	}
	return t.parts[p]
}

// Start listens on the configured host and port (port 0 picks a free one)
// and serves connections in the background.
func (b *Broker) Start() error {
	ln, err := net.Listen("tcp", net.JoinHostPort(b.cfg.Host, strconv.Itoa(b.cfg.Port)))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	return b.Serve(ln)
}

// Serve serves connections from ln in the background. In cluster mode
// ([zookeeper] connect set) it also registers the broker in ZooKeeper with
// ln's port, waiting at most zookeeper.connection_timeout for that (see
// startRegistry).
func (b *Broker) Serve(ln net.Listener) error {
	b.ln = ln
	if b.cfg.ZooKeeper.Enabled() {
		if err := b.openRegistry(); err != nil {
			return err
		}
	}
	b.wg.Add(2)
	go b.acceptLoop()
	go b.retentionLoop()
	b.logf("broker %d listening on %s (%s)", b.cfg.BrokerID, ln.Addr(), Version)
	b.waitRegistered()
	return nil
}

// Addr returns the listening address, or "" before Start.
func (b *Broker) Addr() string {
	if b.ln == nil {
		return ""
	}
	return b.ln.Addr().String()
}

func (b *Broker) acceptLoop() {
	defer b.wg.Done()
	var delay time.Duration
	for {
		nc, err := b.ln.Accept()
		if err != nil {
			if b.closed.Load() {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || isTemporary(err) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				b.logf("accept: %v; retrying in %v", err, delay)
				select {
				case <-time.After(delay):
				case <-b.done:
					return
				}
				continue
			}
			b.logf("accept: %v", err)
			return
		}
		delay = 0
		c := newConn(b, nc)
		b.connsMu.Lock()
		if b.closed.Load() {
			b.connsMu.Unlock()
			nc.Close()
			return
		}
		b.conns[c] = struct{}{}
		b.connsMu.Unlock()
		b.stats.connections.Add(1)
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			c.serve()
			b.connsMu.Lock()
			delete(b.conns, c)
			b.connsMu.Unlock()
			b.stats.connections.Add(-1)
		}()
	}
}

// isTemporary reports accept errors to back off from rather than stop
// accepting: out of file descriptors or memory, or an aborted connection.
func isTemporary(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.EAGAIN, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// retentionLoop applies each topic's delete policy to sealed segments.
func (b *Broker) retentionLoop() {
	defer b.wg.Done()
	every := time.Duration(b.cfg.DeleteCheckInterval) * time.Second
	if every <= 0 {
		every = 5 * time.Minute
	}
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-b.done:
			return
		case now := <-tk.C:
			b.applyRetention(now)
		}
	}
}

func (b *Broker) applyRetention(now time.Time) {
	for _, t := range b.topicList() {
		if t.cfg.RetainFor <= 0 {
			continue
		}
		for p, l := range t.parts {
			n, err := l.DeleteOlderThan(t.cfg.RetainFor, now)
			if err != nil {
				b.logf("retention %s-%d: %v", t.name, p, err)
			} else if n > 0 {
				b.logf("retention %s-%d: deleted %d segment(s), min offset now %d", t.name, p, n, l.MinOffset())
			}
		}
	}
}

// topicList returns the topics sorted by name.
func (b *Broker) topicList() []*topic {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]*topic, 0, len(b.names))
	for _, n := range b.names {
		out = append(out, b.topics[n])
	}
	return out
}

// Close stops accepting, closes every connection, waits for them, then
// flushes and closes every log. It is idempotent.
func (b *Broker) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	// Unregister first, so clients stop choosing this broker.
	b.mu.RLock()
	reg := b.reg
	b.mu.RUnlock()
	if reg != nil {
		if err := reg.Close(); err != nil {
			b.logf("%v", err)
		}
	}
	close(b.done)
	if b.ln != nil {
		b.ln.Close()
	}
	b.connsMu.Lock()
	for c := range b.conns {
		c.close()
	}
	b.connsMu.Unlock()
	b.wg.Wait()
	errs := []error{b.closeFilters(), b.closeOffsetStore(), b.plugins.Close()}
	return errors.Join(append(errs, b.closeStores())...)
}

func (b *Broker) closeStores() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for _, t := range b.topics {
		for _, l := range t.parts {
			if err := l.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (b *Broker) configChecksum() uint32 { return crc32.ChecksumIEEE(b.cfg.Raw()) }
