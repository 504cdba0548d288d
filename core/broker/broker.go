// Package broker is the metaq-go broker: it owns the topics' partition logs,
// accepts connections speaking MetaQ's text protocol, and answers put, get,
// offset, stats and the rest (sdk/protocol, docs/protocol.md).
//
// Lock order: Broker.mu before any store lock; conn.wmu before conn.omu.
// Topics are opened (store.Open) with no broker lock held.
package broker

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/budget"
	"github.com/metaq-go/metaq/core/diskwatch"
	"github.com/metaq-go/metaq/core/filterset"
	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/core/index"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/registry"
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/core/timer"
	"github.com/metaq-go/metaq/core/topicadmin"
	"github.com/metaq-go/metaq/core/tx"
	"github.com/metaq-go/metaq/internal/logx"
	"github.com/metaq-go/metaq/plugins/host"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Version is the broker's version string, answered to `version` and in stats.
const Version = "metaq-go/0.1.0"

// Options are run-time settings that are not in server.toml.
type Options struct {
	// LogHandler receives the broker's log records (at log_level) and its
	// plugins' (at plugin_log_level); it should pass every level (see
	// internal/logx.NewHandler). Nil means Logf, if set, else slog's
	// default logger.
	LogHandler slog.Handler
	// Logf, used when LogHandler is nil, receives each record as one
	// line without a time stamp (logx.PrintfHandler).
	Logf func(format string, args ...any)
	// WriteTimeout bounds one write to a client; 0 means 30 s.
	WriteTimeout time.Duration
	// GroupSessionTimeout is how long a consumer group member (local mode)
	// may go without a heartbeat, or without acknowledging a revoked
	// partition, before it is removed; 0 means groups.DefaultSessionTimeout.
	GroupSessionTimeout time.Duration

	// ReplicaInSync, if set, is a /readyz condition: a slave in sync
	// mode is ready only once it is in sync (the replication issue).
	ReplicaInSync ReplicaInSync
}

// Broker is one metaq-go broker.
type Broker struct {
	// idem holds the idempotent-producer tables (idem.go): a
	// partition's keyed by its *store.Log, the delayed puts' to it by
	// delayIdemKey (delay.go).
	idem *partition.IdemTables
	// delay is the timer of delayed messages (delay.go).
	delay *timer.Service
	// timerKeep keeps the timer log's retention off pending delayed
	// messages (core/timer Keepers).
	timerKeep timer.Keepers
	// cfgp is the configuration; Reload swaps it (reload.go). Read it
	// with config(), once per operation where the values must agree.
	cfgp atomic.Pointer[conf.Config]
	// reloadMu serializes Reloads.
	reloadMu sync.Mutex
	opts     Options
	knobs    knobs                            // knobs.go: test-only settings
	logf     func(format string, args ...any) // b.log at Info
	// warnf and errorf are b.log at Warn and Error.
	warnf, errorf func(format string, args ...any)
	log           *slog.Logger
	// levels are log_level and plugin_log_level (internal/logx).
	levels    logx.Levels
	pluginLog *slog.Logger
	ids       *store.IDWorker

	// mu guards reg and the configuration's writers.
	mu sync.RWMutex
	// topics are the open topics (core/partition Topics).
	topics *partition.Topics[partition.Topic]

	ln      net.Listener // plaintext; nil when port = 0 with TLS on
	tlsLn   net.Listener // TLS (tls.go); nil without [tls]
	connsMu sync.Mutex
	conns   map[*conn]struct{}
	// unauth are the connections not authenticated yet, tlsFails the
	// failed TLS handshakes (core/security, connlimits.go).
	unauth   *security.Admission[*conn]
	tlsFails *security.TLSFailures
	audit    *security.Audit // the audit log (audit.go)
	wg       sync.WaitGroup
	done     chan struct{}
	closed   atomic.Bool
	// draining is set by Shutdown to the read deadline of every
	// connection (Unix ns; 0 = not draining): they read what the client
	// already sent until then, answer it, and close (lifecycle.go).
	// once they answered what they received (lifecycle.go).
	draining atomic.Int64
	// grownReads counts the connections whose decoder reads
	// pipelinedReadSize bytes at a time (conn.go, growRead).
	grownReads atomic.Int32
	// startCtx is cancelled by AbortStart and Shutdown: Start stops
	// waiting for the first ZooKeeper registration.
	startCtx    context.Context
	startCancel context.CancelFunc

	start time.Time
	stats counters

	// plugins supervises the plugin processes named in server.toml.
	plugins *host.Supervisor
	// filters and offsets are set up by initFilters and openOffsets.
	filters *filterset.Set
	offsets *groups.Offsets
	// groups are the consumer groups coordinated here (core/groups).
	groups *groups.Coordinator
	// tls is the TLS material (tls.go), nil without [tls]; users check
	// logins (core/security), nil with auth off.
	tls   *security.TLS
	users *security.Users
	// reg is the ZooKeeper registration (cluster mode), set by Serve
	// under mu; nil in local mode.
	reg *registry.Registry
	// budget bounds the memory held for clients (max_buffered_bytes).
	budget *budget.Budget
	// disks is the disk watermark (disk_max_used_ratio, core/diskwatch).
	disks *diskwatch.Watch
	// journals are the group-commit journals by data directory
	// (journal.go), opened by New before any partition.
	journals store.JournalSet
	// indexes is the key and id index of the partitions (core/index Set, msgindex.go).
	indexes index.Set
	// txm is the transactions and their journal (core/tx, txglue.go),
	// opened by New once the topics are.
	txm *tx.Manager
	// slave is the replication state of a slave (core/repl, replica.go);
	// nil for a master.
	slave *repl.Slave
	// sync is the sync replication state of a master with replication =
	// "sync" (syncrepl.go, core/repl); nil otherwise. The transactions
	// (txm) are registered on it as its repl.Extension (repl.go).
	sync *syncMaster
	// fo is the automatic failover state (core/repl, failover.go) with
	// failover = true; nil otherwise.
	fo *repl.Failover

	// metrics are the Prometheus histograms and registry (metrics.go);
	// committed the offsets groups committed here (core/groups).
	metrics   *metrics
	committed *groups.Committed
	// outs are the ranges gets sent, for messages out (msgsout.go).
	outs outLedger
	// web is the HTTP listener (http.go); recovered is set once New has
	// opened (and so recovered) every partition.
	web       webState
	recovered atomic.Bool
	// serving is set once ServeListeners has set ln, tlsLn and reg and
	// started accepting: the HTTP handlers, which may run before (Start
	// serves HTTP first), read those only after it.
	serving atomic.Bool
	// adminMu serialises topic changes made through the admin API
	// (topicadmin.go); topicBook (topics.toml and server.toml's [[topic]]
	// tables) is under adminMu after New.
	adminMu   sync.Mutex
	topicBook *topicadmin.Book
	// peers reads other brokers' offsets for the dashboard
	// (core/httpapi peeroffsets.go).
	peers httpapi.PeerReader
}

// New opens every configured topic's partitions (running crash recovery on
// each) and returns a broker ready to Start.
func New(cfg *conf.Config, opts Options) (*Broker, error) { return newBroker(cfg, opts, knobs{}) }

// newBroker is New with the test-only knobs (knobs.go).
func newBroker(cfg *conf.Config, opts Options, k knobs) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.CheckReplication(); err != nil {
		return nil, err
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 30 * time.Second
	}
	b := &Broker{
		opts:   opts,
		knobs:  k,
		ids:    store.NewIDWorker(cfg.BrokerID, nil),
		topics: partition.NewTopics[partition.Topic](),
		conns:  make(map[*conn]struct{}),
		done:   make(chan struct{}),
		start:  time.Now(),
		budget: budget.New(cfg.MaxBufferedBytes),
	}
	b.cfgp.Store(cfg)
	b.idem = b.newIdemTables() // idem.go
	b.peers.Dialer = func() repl.Dialer { return repl.DialerFromConf(b.config(), b.knobs.replAddr) }
	b.startCtx, b.startCancel = context.WithCancel(context.Background())
	b.initLogging(cfg)
	b.delay = timer.New(timerHost{b}, timer.Options{Partitions: cfg.TimerPartitions, NoMarks: k.noTimerMarks,
		Logf:     func(f string, a ...any) { b.logf(f, a...) },
		Warnf:    func(f string, a ...any) { b.warnf(f, a...) },
		Errorf:   func(f string, a ...any) { b.errorf(f, a...) },
		MaxDelay: func() time.Duration { return time.Duration(b.config().MaxDelay) * time.Millisecond }})
	b.unauth, b.tlsFails = security.NewAdmission[*conn](b.log), security.NewTLSFailures(b.log)
	b.audit = security.NewAudit(b.log, shownName)
	if cfg.IsSlave() {
		b.slave = repl.NewSlave(repl.FromConf(cfg), cfg.SlaveID, replHost{partSource{b}}, b.log)
	} else if cfg.Replication == conf.ReplicationSync {
		b.sync = newSyncMaster(b)
	}
	if cfg.Failover && !cfg.IsSlave() {
		// It rejoins as slave failover_slave_id if another member takes
		// the epoch (rejoin.go).
		b.slave = repl.NewSlave(repl.FromConf(cfg), cfg.FailoverSlaveID, replHost{partSource{b}}, b.log)
	}
	if cfg.Failover {
		if cfg.IsSlave() {
			// Run once promoted: a promoted slave ships to the slaves that
			// join it, acknowledging alone while none is in sync.
			b.sync = newSyncMaster(b)
			b.sync.SetDegrade(true)
		}
		b.fo = repl.NewFailover(repl.FromConf(cfg), replHost{partSource{b}}, b.sync.master(), b.slave, b.log)
	}
	gcfg := groups.FromConf(cfg)
	gcfg.SessionTimeout = opts.GroupSessionTimeout
	b.groups = groups.NewCoordinator(gcfg)
	b.committed = groups.NewCommitted(groups.CommittedFromConf(cfg), groups.ZKSourceFromConf(cfg, b.registry, partSource{b}), b.log)
	b.disks = diskwatch.New(cfg.DiskMaxUsedRatio, b.logf)
	b.metrics = newMetrics(b)
	b.web.srv = b.newHTTPServer(cfg) // httpbackend.go
	if err := b.initAuth(); err != nil {
		return nil, err
	}
	if cfg.TLS.Enabled() {
		s, err := security.NewTLS(cfg.TLS)
		if err != nil {
			return nil, err
		}
		b.tls = s
	}
	if err := store.MkdirAllDurable(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	// Topics created, altered and deleted live (topicadmin.go) replace
	// cfg.Topics with server.toml's plus those changes.
	tb, err := topicadmin.Load(b.config(), b.logf)
	if err != nil {
		return nil, err
	}
	b.topicBook = tb
	b.disks.Disk(cfg.DataDir)
	if err := b.openJournals(); err != nil {
		return nil, err
	}
	names := cfg.TopicNames()
	if cfg.AutoCreateTopics {
		// Reopen auto-created topics found on disk.
		names = append(names, b.logs().TopicsOnDisk()...)
	}
	if b.hasTimerLog() { // delay.go: delayed messages held
		names = append(names, conf.TimerTopic)
	}
	for _, name := range names {
		if _, err := b.openTopic(name); err != nil {
			b.closeStores()
			return nil, err
		}
	}
	txm, err := tx.Open(b.txConfig(b.config()), txHost{partSource{b}}, b.log) // txglue.go
	if err != nil {
		b.closeStores()
		return nil, err
	}
	b.txm = txm
	b.wireRepl() // repl.go
	b.plugins = host.NewSupervisor(host.Options{Logger: b.pluginHCLogger()})
	openOffsets := func() (err error) {
		b.offsets, err = groups.OpenOffsetsFromConf(b.config(), b.plugins, b.committed)
		return err
	}
	for _, step := range []func() error{b.initFilters, openOffsets} {
		if err := step(); err != nil {
			b.plugins.Close()
			b.closeStores()
			return nil, err
		}
	}
	b.recovered.Store(true)
	return b, nil
}

// openTopic returns a topic, opening its partition logs (crash recovery,
// file I/O) first if it is not open yet (partition.Topics.Open: other
// topics go on meanwhile, concurrent opens share one). A topic opened
// here is registered in ZooKeeper (cluster mode).
func (b *Broker) openTopic(name string) (*partition.Topic, error) {
	var tc conf.TopicConfig
	t, opened, err := b.topics.Open(name, func() error {
		var ok bool
		if tc, ok = b.config().TopicConfig(name); !ok {
			return partition.ErrNoTopic
		}
		return nil
	}, func() (*partition.Topic, error) { return b.openPartitions(name, tc) }, func(t *partition.Topic) { t.Close() })
	if errors.Is(err, partition.ErrTopicsClosed) {
		return nil, errBrokerClosed
	}
	if opened && name != conf.TimerTopic { // internal: not for clients
		// After the publish: openRegistry, under b.mu, lists the topics
		// before it sets b.reg, so the topic is in its list or seen here.
		b.mu.RLock()
		if b.reg != nil {
			b.reg.AddTopic(registry.TopicOf(tc))
		}
		b.mu.RUnlock()
	}
	return t, err
}

// openPartitions opens the partition logs of topic name. It takes no
// broker lock.
func (b *Broker) openPartitions(name string, tc conf.TopicConfig) (*partition.Topic, error) {
	if b.knobs.openHook != nil {
		b.knobs.openHook(name)
	}
	lm := b.logs()
	parts, err := lm.Open(name, &tc, 0, tc.NumPartitions)
	if err != nil {
		return nil, err
	}
	b.indexLogs(lm.Dir(&tc), parts)
	return partition.NewTopic(name, &tc, parts, b.disks.Disk(lm.Dir(&tc)), &b.indexes), nil
}

// logs returns the partition-log settings of the current configuration
// (core/partition: open, list on disk, retain, close).
func (b *Broker) logs() *partition.Logs {
	lm := partition.LogsFromConf(b.config())
	lm.IDs, lm.Journal, lm.Observer = b.ids, b.journalFor, b.metrics.SegmentObserver()
	lm.Logf, lm.Errorf = b.logf, b.errorf
	return &lm
}

var errBrokerClosed = errors.New("broker closed")

// lookup returns a topic by name, creating it if auto-creation is on.
func (b *Broker) lookup(name []byte, create bool) (*partition.Topic, error) {
	if t := b.topics.GetBytes(name); t != nil {
		return t, nil
	}
	if string(name) == conf.TimerTopic { // delay.go: opened on first use, a sync slave's too (clients are refused by its accept_*)
		return b.openTopic(conf.TimerTopic)
	}
	if !create || !b.config().AutoCreateTopics {
		return nil, partition.ErrNoTopic
	}
	if err := conf.ValidateTopicName(string(name)); err != nil {
		return nil, fmt.Errorf("%w: %w", partition.ErrNoTopic, err)
	}
	return b.openTopic(string(name))
}

// openParts is the partitions of topic name when it is open, else nil.
func (b *Broker) openParts(name string) []*store.Log {
	if t := b.topics.Get(name); t != nil {
		return t.Parts
	}
	return nil
}

// validTopicName is conf.ValidateTopicName for a name from a client.
func validTopicName(b []byte) bool { return conf.ValidateTopicName(string(b)) == nil }

// showTopic renders a topic name from a client for a reply or a log line:
// as is when it is a valid name (MetaQ's replies name the topic bare),
// escaped and quoted otherwise.
func showTopic(b []byte) string {
	if validTopicName(b) {
		return string(b)
	}
	return protocol.Printable(b)
}

// Start listens on the configured host and port (port 0 picks a free one),
// with [tls] on tls_port for TLS, and on http_port for HTTP (docs/http.md),
// then serves connections in the background. With [tls], port = 0 means
// TLS only: no plaintext listener.
func (b *Broker) Start() error {
	ln, tln, err := security.Listen(b.config(), b.tls != nil)
	if err != nil {
		return err
	}
	var hln net.Listener
	closeAll := func() {
		for _, l := range []net.Listener{ln, tln, hln} {
			if l != nil {
				l.Close()
			}
		}
	}
	if hln, err = httpapi.Listen(b.config()); err != nil {
		closeAll()
		return err
	}
	if hln != nil {
		// Served first: /healthz answers and /readyz says why not ready
		// while ServeListeners waits for ZooKeeper.
		if err := b.ServeHTTP(hln); err != nil {
			closeAll()
			return err
		}
	}
	if err := b.ServeListeners(ln, tln); err != nil {
		closeAll()
		return err
	}
	return nil
}

// Serve serves plaintext connections from ln in the background (no TLS
// listener; see ServeListeners). In cluster mode ([zookeeper] connect set)
// it also registers the broker in ZooKeeper with ln's port, waiting at most
// zookeeper.connection_timeout for that (see startRegistry).
func (b *Broker) Serve(ln net.Listener) error { return b.ServeListeners(ln, nil) }

// ServeListeners is Serve with a plaintext listener ln and a TLS one tln,
// either of which may be nil (not both). tln accepts raw TCP: the broker
// runs the TLS handshake with the [tls] material, so it needs [tls].
func (b *Broker) ServeListeners(ln, tln net.Listener) error {
	switch {
	case ln == nil && tln == nil:
		return errors.New("serve: no listener")
	case tln != nil && b.tls == nil:
		return security.ErrNoTLS
	}
	b.ln = ln
	if tln != nil {
		b.tlsLn = b.tls.Listener(tln)
	}
	if b.fo != nil {
		if err := b.fo.LoadBook(); err != nil { // core/repl
			return err
		}
	}
	if b.config().ZooKeeper.Enabled() {
		if err := b.openRegistry(); err != nil {
			return err
		}
	}
	switch {
	case b.fo != nil && b.config().IsSlave():
		b.fo.StartSlave() // core/repl: the slave's loop
	case b.slave != nil && b.fo == nil:
		b.wg.Add(1)
		go b.runSlave() // core/repl
	case b.sync != nil && b.fo == nil:
		b.wg.Add(1)
		go b.sync.run() // syncrepl.go; with failover it runs while holding the epoch (become)
	}
	if b.fo != nil && !b.config().IsSlave() && b.reg != nil {
		b.fo.Start() // core/repl: the claim loop
	}
	b.committed.Start(b.done, b.goTracked) // core/groups: saved commits, lag
	b.wg.Add(1)
	go b.retentionLoop()
	b.wg.Add(1)
	go b.outCountLoop() // msgsout.go
	b.wg.Add(1)
	go func() { defer b.wg.Done(); b.idem.Run(b.done) }() // core/partition: the idempotent tables' clock
	b.delay.Start(b.done, &b.wg)                          // core/timer, through timerHost (delay.go)
	b.wg.Add(1)
	go func() { defer b.wg.Done(); b.disks.Run(b.done) }()
	for _, l := range []net.Listener{b.ln, b.tlsLn} {
		if l == nil {
			continue
		}
		b.wg.Add(1)
		go b.acceptLoop(l)
	}
	if b.config().Auth.Enabled || b.tlsLn != nil {
		b.wg.Add(1)
		go b.authSweep() // connlimits.go: auth_timeout
	}
	b.serving.Store(true)
	if ln != nil {
		b.logf("broker %d listening on %s (%s)", b.config().BrokerID, ln.Addr(), Version)
	}
	if b.tlsLn != nil {
		b.logf("broker %d listening for TLS on %s (%s)", b.config().BrokerID, b.tlsLn.Addr(), Version)
	}
	b.waitRegistered()
	return nil
}

// Addr returns the plaintext listening address, or "" before Start or
// without a plaintext listener.
func (b *Broker) Addr() string {
	if b.ln == nil {
		return ""
	}
	return b.ln.Addr().String()
}

// TLSAddr returns the TLS listening address, or "" before Start or
// without TLS.
func (b *Broker) TLSAddr() string {
	if b.tlsLn == nil {
		return ""
	}
	return b.tlsLn.Addr().String()
}

// acceptLoop serves the connections of one listener (plaintext or TLS);
// security.Acceptor backs off from accept errors that pass.
func (b *Broker) acceptLoop(ln net.Listener) {
	defer b.wg.Done()
	acc := security.Acceptor{Listener: ln, Done: b.done, Closed: b.closed.Load, Warnf: b.warnf}
	for {
		nc, err := acc.Accept()
		if nc == nil {
			if err != nil {
				b.errorf("accept: %v", err)
			}
			return
		}
		c := newConn(b, nc)
		if !b.admit(c) { // connlimits.go: unauthenticated connections make room
			if b.closed.Load() {
				nc.Close()
				return
			}
			b.stats.refusedConns.Add(1)
			b.wg.Add(1)
			go func() { defer b.wg.Done(); b.refuse(nc) }()
			continue
		}
		b.stats.connections.Add(1)
		b.log.Debug("connection opened", "remote", nc.RemoteAddr().String())
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			c.serve()
			b.connsMu.Lock()
			delete(b.conns, c)
			b.connsMu.Unlock()
			c.markAuthenticated() // connlimits.go: out of the unauthenticated set
			b.stats.connections.Add(-1)
			b.log.Debug("connection closed", "remote", nc.RemoteAddr().String())
		}()
	}
}

// idleTimeout and requestTimeout are idle_timeout and request_timeout.
func (b *Broker) idleTimeout() time.Duration {
	return time.Duration(b.config().IdleTimeout) * time.Millisecond
}

func (b *Broker) requestTimeout() time.Duration {
	return time.Duration(b.config().RequestTimeout) * time.Millisecond
}

// refuse answers a connection over max_connections with a 503 and closes it.
func (b *Broker) refuse(nc net.Conn) {
	defer nc.Close()
	// Read too: on the TLS listener the write runs the handshake first.
	nc.SetDeadline(time.Now().Add(time.Second))
	msg := "too many connections (max_connections " + strconv.Itoa(b.config().MaxConnections) + ")"
	nc.Write(protocol.AppendResult(nil, protocol.StatusBusy, msg, 0))
}

// retentionLoop applies each topic's delete policy to sealed segments.
func (b *Broker) retentionLoop() {
	defer b.wg.Done()
	partition.RetentionLoop(b.done, b.config().DeleteCheckInterval, b.applyRetention)
}

func (b *Broker) applyRetention(now time.Time) {
	b.countOut() // count the ranges sent before their segments go (msgsout.go)
	lm := b.logs()
	for _, t := range b.topicList() {
		if t.Name() == conf.TimerTopic {
			if b.timerKeep.Retain(t.Name(), t.Parts, t.Conf().RetainFor, now, lm.RetainBelow, b.logf) { // core/timer
				b.disks.Wake()
			}
			continue
		}
		if lm.Retain(t.Name(), t.Parts, t.Conf().RetainFor, now) {
			b.disks.Wake() // puts refused for a full disk may resume
		}
	}
}

// topicList returns the topics sorted by name.
func (b *Broker) topicList() []*partition.Topic { return b.topics.List() }

func (b *Broker) closeStores() error {
	if b.txm != nil {
		b.txm.Wait() // its commits have handed their batches to the logs
	}
	b.indexes.Close() // its goroutines read the logs
	var errs []error
	for _, t := range b.topics.Close() {
		errs = append(errs, t.Close())
	}
	if b.txm != nil {
		errs = append(errs, b.txm.Close())
	}
	errs = append(errs, b.journals.Close())
	return errors.Join(errs...)
}

// registry is the ZooKeeper registration, nil before Serve and in local
// mode.
func (b *Broker) registry() *registry.Registry {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.reg
}

// config returns the current configuration.
func (b *Broker) config() *conf.Config { return b.cfgp.Load() }

func (b *Broker) configChecksum() uint32 { return crc32.ChecksumIEEE(b.config().Raw()) }
