// Package tx is the broker's transactions (reference §10,
// docs/protocol.md): local and XA transactions, their journal
// (<data_dir>/transactions) and its replay at startup, and their part in
// sync replication (shipping the journal's records to a slave, applying
// them on one).
//
// The broker (core/broker) decodes the transaction commands and calls the
// Manager; it implements Host, through which the transactions reach the
// partition logs, and Peer, one per connection, through which an
// operation that completes later is answered. The Manager returns values
// and *Error; only the broker turns them into replies.
package tx

import (
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/internal/logx"
)

// Config is the transactions' slice of the broker's configuration.
type Config struct {
	// Dir is the journal's directory (<data_dir>/transactions).
	Dir string
	// DefaultTimeout is the timeout of a transaction whose BEGIN gives
	// none (tx_default_timeout).
	DefaultTimeout time.Duration
	// MaxBytes and MaxBufferedBytes bound the message bytes one
	// transaction and all open ones hold (tx_max_bytes,
	// tx_max_buffered_bytes).
	MaxBytes, MaxBufferedBytes int64
	// FlushMode is flush_tx_log_at_commit; it is fixed when the journal
	// opens.
	FlushMode int
	// Auth is whether authentication is on: an XA transaction is then its
	// user's (or an admin's).
	Auth bool
	// MaxMessageSize is max_message_size: the most data a replicated put
	// record carries, and the read size of the replay's batch search.
	MaxMessageSize int
	// FrameLimit is the most body bytes a txsync frame carries (a single
	// record may exceed it).
	FrameLimit int
	// FileSize, if set (tests), replaces the journal's file size.
	FileSize int64
}

// FromConf is the transactions' configuration in c.
func FromConf(c *conf.Config) Config {
	return Config{
		Dir:              filepath.Join(c.DataDir, DirName),
		DefaultTimeout:   time.Duration(c.TxDefaultTimeout) * time.Second,
		MaxBytes:         c.TxMaxBytes,
		MaxBufferedBytes: c.TxMaxBufferedBytes,
		FlushMode:        c.FlushTxLogAtCommit,
		Auth:             c.Auth.Enabled,
		MaxMessageSize:   c.MaxMessageSize,
		FrameLimit:       max(c.MaxMessageSize, c.MaxTransferSize),
	}
}

// Host is what the transactions need of the broker: the partition logs
// (partition.Source) and what a commit does around its appends.
type Host interface {
	partition.Source
	// OpenTopic returns topic, opening it: it is created if
	// auto_create_topics allows (the replay and a slave's replicated
	// branches name topics that may be gone).
	OpenTopic(topic string) (Topic, error)
	// NextID is a new message id; ObserveID makes sure no later one is
	// at or below id.
	NextID() int64
	ObserveID(id int64)
	// AppendFailed is told of an append that failed (a full disk).
	AppendFailed(err error)
	// Fence is why an answer may not be given now (failover: this broker
	// may no longer be the master), or nil.
	Fence() error
	// Master is the sync master's replication state when this broker
	// takes puts as a sync master now, else nil.
	Master() *repl.SyncMaster
	// Slave is the slave side of replication when this broker is a
	// slave, else nil.
	Slave() SlaveLogs
	// TimerLog is where a committed delayed message for partition p of
	// topic goes (delayed.go): the timer topic, the log of its timer
	// partition and that partition's number.
	TimerLog(topic string, p int32) (Topic, *store.Log, int32, error)
}

// Topic is a topic a transactional message goes to, as the broker gives
// it with the message (Manager.Put) or Host.OpenTopic: the commit needs
// it without looking it up again (it may run while the broker closes).
type Topic interface {
	Name() string
	// ThresholdFlush reports whether the topic's partitions are flushed
	// by unflush_threshold: a commit flushes them before it is answered.
	ThresholdFlush() bool
	// CountIn adds a stored batch of partition p to its traffic
	// counters, as an accepted put is counted.
	CountIn(p int32, msgs int, bytes int64)
}

// Peer is one connection's side of its transactions: who it is and how
// an operation that completes later is answered.
type Peer interface {
	// TxUser is the connection's authenticated user ("" with auth off)
	// and whether it is an admin.
	TxUser() (name string, admin bool)
	// TxPending counts a reply that will come later (1) or came (-1).
	TxPending(n int)
	// TxDone answers the request opaque: body if err is nil.
	TxDone(opaque int32, body string, err error)
	// TxHeuristic audits a heuristic completion (details: slog
	// key/value pairs).
	TxHeuristic(details ...any)
	// FailSyncs refuses the later syncs on the connection (repl.SyncGate):
	// a txsync commit on it was not stored (commitFailed).
	FailSyncs()
}

// Counts are the transactions' counters since start.
type Counts struct {
	Begins, XABegins, Commits, Rollbacks int64
}

// Manager is the broker's transactions: every open one, the prepared XA
// branches, the heuristic outcomes, the journal and the timeouts.
type Manager struct {
	host   Host
	cfg    atomic.Pointer[Config]
	logf   func(string, ...any)
	errorf func(string, ...any)
	j      *txLog
	// wg counts the goroutines that finish commits (Wait).
	wg sync.WaitGroup

	mu       sync.Mutex
	open     map[*tx]struct{}
	xa       map[string]*tx        // XA transactions by canonical key
	heur     map[string]*heurEntry // heuristically completed XA transactions (xa.go)
	buffered int64                 // message bytes held by open transactions
	// held is, on a slave, the prepared branches it holds by the id of
	// each batch's first message (replslave.go): a batch the puller copies
	// ends its branch here.
	held  map[int64]*tx
	nheld atomic.Int64

	begins, xaBegins, commits, rollbacks atomic.Int64

	// On a sync master (repl.go): rmu orders the prepares, rollbacks,
	// commits and state shipped on the link, so that a branch's records
	// are shipped in the order of its operations. It is taken after the
	// partitions' sync locks and before mu. gen is the link whose slave
	// has the master's prepared branches (0: none). It is set, under rmu,
	// only if no branch was prepared, and no XA commit stored, on the
	// master alone (alone) while the state was shipped; such a one clears
	// it, so that the state is shipped again before failover may name the
	// slave in sync.
	rmu   sync.Mutex
	gen   atomic.Int64
	alone atomic.Int64
}

// Open replays the journal in cfg.Dir (recover.go) and opens it for this
// run. The broker calls it once its topics are open, before any
// connection.
func Open(cfg Config, host Host, log *slog.Logger) (*Manager, error) {
	m := &Manager{
		host:   host,
		logf:   logx.Printf(log, slog.LevelInfo),
		errorf: logx.Printf(log, slog.LevelError),
		open:   map[*tx]struct{}{},
		xa:     map[string]*tx{},
		heur:   map[string]*heurEntry{},
	}
	m.cfg.Store(&cfg)
	if err := m.openJournal(); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Manager) config() *Config { return m.cfg.Load() }

// Reload applies cfg (the journal's directory and flush mode stay as they
// were opened).
func (m *Manager) Reload(cfg Config) { m.cfg.Store(&cfg) }

// Counts returns the counters.
func (m *Manager) Counts() Counts {
	return Counts{Begins: m.begins.Load(), XABegins: m.xaBegins.Load(), Commits: m.commits.Load(), Rollbacks: m.rollbacks.Load()}
}

// Wait returns once the goroutines finishing commits have handed their
// batches to the logs: the broker calls it before it closes them.
func (m *Manager) Wait() { m.wg.Wait() }

// Close stops the timeouts and closes the journal: what is open stays in
// it (local and unprepared XA transactions are rolled back by the next
// start, prepared ones rebuilt).
func (m *Manager) Close() error {
	m.mu.Lock()
	for t := range m.open {
		if t.timer != nil {
			t.timer.Stop()
		}
	}
	m.mu.Unlock()
	return m.j.close()
}

// Kind is what an Error is, which says how it is answered.
type Kind uint8

const (
	// Plain is a failure answered with its message (a local
	// transaction's error, a slave's txsync failure).
	Plain Kind = iota + 1
	// XA is an XA error: XAException:code=<Code>,msg=<Msg>.
	XA
	// Malformed is a request the transactions cannot take as it is (a
	// txsync frame that does not decode or match).
	Malformed
)

// Error is a refused or failed transaction operation.
type Error struct {
	Kind Kind
	// Code is the XA error code (Kind XA).
	Code int
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func plainErr(msg string) error { return &Error{Kind: Plain, Msg: msg} }

func xaErr(code int, msg string) error { return &Error{Kind: XA, Code: code, Msg: msg} }

func malformed(msg string) error { return &Error{Kind: Malformed, Msg: msg} }

// errNoPartition is why a topic named in the journal has no such
// partition.
var errNoPartition = errors.New("no partition")

// openLog returns topic and its partition p, opening the topic if need
// be.
func (m *Manager) openLog(topic string, p int32) (Topic, *store.Log, error) {
	t, err := m.host.OpenTopic(topic)
	if err != nil {
		return nil, nil, err
	}
	if p < 0 {
		return nil, nil, errNoPartition
	}
	l, err := m.host.Log(topic, int(p))
	if err != nil {
		if errors.Is(err, partition.ErrNoPartition) {
			return nil, nil, errNoPartition
		}
		return nil, nil, err
	}
	return t, l, nil
}
