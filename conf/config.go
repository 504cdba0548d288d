// Package conf loads and validates the broker configuration.
//
// The file is TOML. Top-level keys are the snake_case forms of MetaQ's
// server.ini [system] keys, and each [[topic]] table corresponds to a
// [topic=<name>] section. There is no [system] table; MetaQ's [zookeeper]
// section is the [zookeeper] table (see [ZooKeeper]), whose empty connect
// string (the default) means local mode.
//
// A topic table may override num_partitions, unflush_threshold,
// unflush_interval, data_dir, delete_policy, accept_publish,
// accept_subscribe and stat; anything left unset inherits the top-level
// value. Use [Config.TopicConfig] to get a topic's effective settings.
//
// Topic names match [A-Za-z0-9_.-]{1,200} and are not "." or ".."
// ([ValidateTopicName]). MetaQ's "*" wildcard topic is not
// supported: set auto_create_topics = true instead, and the top-level
// settings then apply to every topic that is not configured explicitly.
//
// Plugins (out-of-process selectors, filters and offset stores) are declared
// in [[plugin]] tables; a topic's [[topic.filter]] tables name a builtin
// filter or a filter plugin per consumer group, and offset_store names the
// builtin "file" store or an offsetstore plugin. See docs/plugins.md.
//
// Parse and Validate collect every problem they find and return them together
// as an [*Error].
package conf

import (
	"fmt"
	"math"
	"net"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Config is the broker configuration loaded from TOML.
type Config struct {
	// BrokerID identifies the broker in the cluster and in message ids (0..1023).
	BrokerID int `toml:"broker_id"`
	// Host is the listen address.
	Host string `toml:"host"`
	// Port is the listen port (1..65535).
	Port int `toml:"port"`
	// DataDir is the root of the message stores, <data_dir>/<topic>-<partition>/.
	DataDir string `toml:"data_dir"`
	// NumPartitions is the default number of partitions per topic (1..1024).
	NumPartitions int `toml:"num_partitions"`
	// UnflushThreshold selects the flush mode: 0 is group commit (a put is
	// acknowledged after fsync); N > 0 fsyncs once more than N messages are
	// unflushed, and acknowledges after write().
	UnflushThreshold int `toml:"unflush_threshold"`
	// UnflushInterval is the longest time, in milliseconds, that data may stay
	// unflushed in threshold mode.
	UnflushInterval int `toml:"unflush_interval"`
	// MaxSegmentSize is the size in bytes at which a segment file rolls.
	MaxSegmentSize int64 `toml:"max_segment_size"`
	// Recovery is what start-up does with a damaged record in a partition's
	// last segment that has valid records after it: RecoveryQuarantine
	// (copy the damage aside and refuse to start) or RecoveryTruncate (cut
	// the segment at the damage, deleting what follows). It applies to
	// damaged journal records whose data is not in its segment either too
	// (refuse, or cut the partition there).
	Recovery string `toml:"recovery"`
	// JournalFileSize is the size in bytes of each pre-written file of a
	// data directory's group-commit journal, <data_dir>/journal/
	// (1 MiB..1 GiB). Default 67108864 (64 MiB).
	JournalFileSize int64 `toml:"journal_file_size"`
	// JournalCheckpointBytes starts a journal checkpoint (segments fsynced,
	// journal files behind it freed) after this many journal bytes
	// (>= 1 MiB). Default 67108864 (64 MiB). Puts wait while the journal
	// is more than twice this past the last completed checkpoint.
	JournalCheckpointBytes int64 `toml:"journal_checkpoint_bytes"`
	// JournalCheckpointInterval starts a checkpoint this many milliseconds
	// after the last one when anything was written (10..3600000). Default
	// 1000. It and JournalCheckpointBytes bound the journal replayed after
	// a crash, and so the restart time.
	JournalCheckpointInterval int `toml:"journal_checkpoint_interval"`
	// JournalCheckpointSync is how a checkpoint makes the segments it
	// wrote durable: CheckpointSyncAuto ("auto", the default: one
	// syncfs(2) of the file system for a checkpoint of 32 segments or more
	// on a local ext4, xfs or btrfs data directory, an fdatasync per
	// segment otherwise) or CheckpointSyncFsync ("fsync": always one per
	// segment, for a file system shared with heavy writers).
	JournalCheckpointSync string `toml:"journal_checkpoint_sync"`
	// JournalFdatasync is how the journal's group-commit rounds call
	// fdatasync: JournalFdatasyncAuto ("auto", the default: holding the
	// syncer's P on a local ext4, xfs, btrfs or tmpfs with GOMAXPROCS of 2
	// or more, until one call takes over a second) or
	// JournalFdatasyncBlocking ("blocking": Go's ordinary blocking call).
	JournalFdatasync string `toml:"journal_fdatasync"`
	// MaxTransferSize is the largest get reply body in bytes.
	MaxTransferSize int `toml:"max_transfer_size"`
	// MaxMessageSize is the largest put body in bytes; a record (20-byte
	// header + body) must fit in MaxTransferSize.
	MaxMessageSize int `toml:"max_message_size"`
	// MaxLineLength is the longest protocol header line in bytes (64..65536).
	MaxLineLength int `toml:"max_line_length"`
	// IdempotentProducers is how many idempotent producers a partition
	// remembers (1..1000000, the least recently used forgotten first).
	// Default 1024. docs/protocol.md, "Idempotent producer".
	IdempotentProducers int `toml:"idempotent_producers"`
	// IdempotentIdleExpiry forgets an idempotent producer that has not put
	// to a partition for this many seconds (60..2592000). Default 86400.
	IdempotentIdleExpiry int `toml:"idempotent_idle_expiry"`
	// IdempotentRebuildBytes is how far back from a partition's end the
	// broker reads its records to rebuild the producers' state after a
	// start or a failover (1048576..1073741824). Default 8388608.
	IdempotentRebuildBytes int64 `toml:"idempotent_rebuild_bytes"`
	// IdempotentMemory bounds the idempotent producer tables of all
	// partitions together, in bytes (65536..1099511627776): past it the
	// least recently used producer of the broker is forgotten. Default
	// 67108864 (64 MiB).
	IdempotentMemory int64 `toml:"idempotent_memory"`
	// DeletePolicy is the retention policy, "delete,N[s|m|h]" (no unit = hours).
	DeletePolicy string `toml:"delete_policy"`
	// DeleteCheckInterval is the time between retention runs, in seconds.
	DeleteCheckInterval int `toml:"delete_check_interval"`
	// AutoCreateTopics lets a put create an unconfigured topic; when false,
	// a put to an unknown topic gets 500.
	AutoCreateTopics bool `toml:"auto_create_topics"`
	// AcceptPublish and AcceptSubscribe are the topic defaults for
	// accepting puts and gets.
	AcceptPublish   bool `toml:"accept_publish"`
	AcceptSubscribe bool `toml:"accept_subscribe"`
	// Stat enables realtime statistics per topic.
	Stat bool `toml:"stat"`
	// IndexKeys keeps the key and message id index of every partition
	// (core/index, docs/storage.md "Key and id index"); off, lookups by
	// key or id scan the log.
	IndexKeys bool `toml:"index_keys"`
	// LogLevel is one of debug, info, warn, error.
	LogLevel string `toml:"log_level"`
	// PluginDir is where plugin binaries are looked up (see PluginPath).
	// Default "bin/plugins", where `make` builds them.
	PluginDir string `toml:"plugin_dir"`
	// PluginLogLevel is the level of plugin log lines (debug, info, warn,
	// error); "" (the default) means LogLevel. Use EffectivePluginLogLevel.
	PluginLogLevel string `toml:"plugin_log_level"`
	// OffsetStore is where consumer offsets are stored: "file" (the builtin,
	// default) or the name of an offsetstore [[plugin]].
	OffsetStore string `toml:"offset_store"`
	// OffsetStorePath is the builtin file store's path; "" (the default)
	// means <data_dir>/consumer_offsets.json. Use OffsetStoreFilePath.
	OffsetStorePath string `toml:"offset_store_path"`
	// Plugins are the [[plugin]] tables, in file order.
	Plugins []Plugin `toml:"plugin"`
	// Topics are the [[topic]] tables, in file order.
	Topics []Topic `toml:"topic"`
	// ZooKeeper is the [zookeeper] table: cluster mode when Connect is set.
	ZooKeeper ZooKeeper `toml:"zookeeper"`

	// MaxConnections is the most client connections at once (>= 1); one
	// over the limit gets a 503 reply and is closed. Default 10000.
	MaxConnections int `toml:"max_connections"`
	// IdleTimeout closes a connection that sends no complete request for
	// this many milliseconds (0 = never). Default 600000 (10 min); MetaQ
	// clients heartbeat with version.
	IdleTimeout int `toml:"idle_timeout"`
	// RequestTimeout is how long, in milliseconds, a client has to finish a
	// request (header line and body) once it started sending it (>= 100).
	// Default 30000.
	RequestTimeout int `toml:"request_timeout"`
	// MaxBufferedBytes bounds the memory held for clients across all
	// connections: partly received bodies and queued replies (>= 1 MiB).
	// Beyond it the broker stops reading from the connections that hold
	// the most. Default 268435456 (256 MiB).
	MaxBufferedBytes int64 `toml:"max_buffered_bytes"`
	// MaxGroupMembers is the most members of one consumer group coordinated
	// by this broker (local mode). Default 1000.
	MaxGroupMembers int `toml:"max_group_members"`
	// MaxMembershipsPerConnection is the most group memberships one
	// connection may hold (local mode). Default 64.
	MaxMembershipsPerConnection int `toml:"max_memberships_per_connection"`
	// AuthTimeout closes, with [auth] on, a connection that has not
	// authenticated this many milliseconds after it was accepted, and,
	// with TLS, one whose handshake has not completed by then (0 = never;
	// a handshake then has idle_timeout). Default 5000 (conf/connlimits.go).
	AuthTimeout int `toml:"auth_timeout"`
	// MaxUnauthenticatedConnections is the most connections at once that
	// have not authenticated yet (or are in their TLS handshake); a new one
	// over it closes the oldest. 0 = auto: max(1, max_connections/10).
	MaxUnauthenticatedConnections int `toml:"max_unauthenticated_connections"`
	// MaxUnauthenticatedPerAddress is the same per source IP address.
	// 0 = auto: max(1, the global cap/10).
	MaxUnauthenticatedPerAddress int `toml:"max_unauthenticated_per_address"`
	// TLSPort is the TLS listener's port (needs [tls]); 0 = no TLS
	// listener. With TLS on, port = 0 turns the plaintext listener off.
	TLSPort int `toml:"tls_port"`
	// TLS is the [tls] table.
	TLS TLS `toml:"tls"`
	// Auth is the [auth] table: users, passwords and ACLs.
	Auth Auth `toml:"auth"`

	// HTTPPort is the HTTP listener's port (metrics, health, the admin
	// API; docs/http.md), bound on Host: 0 turns it off; unset
	// (HTTPPortDefault) is Port − 3 (DefaultHTTPPort for the default
	// port), or a free port when Port is 0 (see HTTPPortDefault).
	// Use HTTPAddr.
	HTTPPort int `toml:"http_port"`
	// MetricsPartitionLabels adds per-partition series to /metrics (a
	// partition label); off by default, the series are per topic.
	MetricsPartitionLabels bool `toml:"metrics_partition_labels"`
	// HTTPAllowedHosts are the host names, besides host, localhost and
	// IP addresses, that the HTTP listener answers when [auth] is off
	// (the Host header's name, its port not checked); other names get
	// 421, which defeats DNS rebinding. "*" allows every name. Default
	// none.
	HTTPAllowedHosts []string `toml:"http_allowed_hosts"`
	// HTTPMaxConnections bounds the HTTP connections open at once
	// (16..65536). At the cap a new connection closes the idle or not yet
	// speaking one that waited longest (from the address holding the
	// most); only when every connection has a request in progress is it
	// refused with 503. Default 512. See conf/http.go.
	HTTPMaxConnections int `toml:"http_max_connections"`
	// HTTPReadHeaderTimeout is how long, in milliseconds, a request's
	// header (and a TLS handshake) may take (100..60000). Default 5000.
	HTTPReadHeaderTimeout int `toml:"http_read_header_timeout"`
	// HTTPIdleTimeout is how long, in milliseconds, a keep-alive HTTP
	// connection may wait for its next request (100..300000). Default 30000.
	HTTPIdleTimeout int `toml:"http_idle_timeout"`
	// HTTPWriteTimeout is how long, in milliseconds, a reply may take
	// from the end of its request, and an event stream each of its
	// writes (100..600000). Default 60000.
	HTTPWriteTimeout int `toml:"http_write_timeout"`
	// HTTPEventKeepAlive is the wait, in milliseconds, between the comments
	// an idle event stream sends to keep proxies from closing it
	// (100..300000). Default 15000.
	HTTPEventKeepAlive int `toml:"http_event_keepalive"`
	// HTTPConsumerTimeout is how long, in milliseconds, an HTTP consumer
	// instance (docs/http.md) lives without a request before it is
	// deleted and leaves its group (1000..86400000). Default 300000.
	HTTPConsumerTimeout int `toml:"http_consumer_timeout"`
	// HTTPMaxConsumers bounds the HTTP consumer instances open at once
	// (1..100000); a create beyond gets 503. Default 1000.
	HTTPMaxConsumers int `toml:"http_max_consumers"`

	// MaxDelay is the longest delay, in milliseconds, a delayed message may
	// ask (docs/delayed.md; 1000..31536000000, a year). Default 40 days.
	MaxDelay int64 `toml:"max_delay"`
	// TimerPartitions is the number of partitions of the internal timer
	// topic that holds delayed messages (1..64). Default 4.
	TimerPartitions int `toml:"timer_partitions"`

	// DiskMaxUsedRatio is the disk watermark (RocketMQ's
	// diskMaxUsedSpaceRatio), a fraction in (0, 1]: once the file system
	// of a data directory (data_dir or a topic's data_dir) is more used
	// than this, by space or by inodes, puts to the topics stored there
	// are refused until space is freed; 1 turns the refusal off. Used is
	// measured as df measures it. Default 0.90.
	DiskMaxUsedRatio float64 `toml:"disk_max_used_ratio"`

	// TxDefaultTimeout is how many seconds a transaction whose BEGIN gives
	// no timeout may stay unprepared before the broker rolls it back
	// (1..86400), so that an abandoned transaction cannot hold memory or
	// journal space forever. A BEGIN's own timeout is capped at 60 s, as in
	// MetaQ. Default 60.
	TxDefaultTimeout int `toml:"tx_default_timeout"`
	// TxMaxBytes is the most message bytes one transaction may buffer
	// before its commit (>= 1024); a put beyond it is refused and the
	// transaction stays usable. Default 16777216 (16 MiB).
	TxMaxBytes int64 `toml:"tx_max_bytes"`
	// TxMaxBufferedBytes is the most message bytes all open transactions
	// together may buffer (>= tx_max_bytes). Default 268435456 (256 MiB).
	TxMaxBufferedBytes int64 `toml:"tx_max_buffered_bytes"`
	// FlushTxLogAtCommit is when the transaction journal
	// (<data_dir>/transactions) is fsynced, MetaQ's flushTxLogAtCommit:
	// 1 (default) before a prepare, commit or rollback is acted on and
	// answered, 2 once a second, 0 never (the OS writes it back). With
	// every value the record is written (survives kill -9) before the
	// answer; docs/storage.md says what a power loss may lose.
	FlushTxLogAtCommit int `toml:"flush_tx_log_at_commit"`

	// Replication (conf/replication.go, docs/replication.md).
	//
	// SlaveID, when >= 0, runs the broker as slave SlaveID of master
	// BrokerID (MetaQ's metaslave): it registers ids/<id>/slave<N>, pulls
	// every partition of its master and refuses puts. -1 (the default) is
	// a master. Needs [zookeeper].
	SlaveID int `toml:"slave_id"`
	// SlaveMaxDelay is the longest time, in milliseconds, a slave waits
	// between fetches of a partition that had no new data (MetaQ's
	// slaveMaxDelayInMills, 1..60000). Default 500.
	SlaveMaxDelay int `toml:"slave_max_delay"`
	// SlaveGroup is the consumer group a slave names in its get and offset
	// requests; "" means "meta-slave-group_<broker_id>".
	SlaveGroup string `toml:"slave_group"`
	// Replication is a master's mode: "async" (default; slaves pull) or
	// "sync" (every put is shipped to the slave with sync and acknowledged
	// only once the slave has it too). A slave ignores it, so master and
	// slave can share one file.
	Replication string `toml:"replication"`
	// SyncDegrade, in sync mode, falls back to async while no slave is
	// connected instead of failing puts with "Slave is disconnected".
	SyncDegrade bool `toml:"sync_degrade"`
	// SyncTimeout bounds, in milliseconds, a sync to the slave (MetaQ's
	// sendToSlaveTimeoutInMills, 1..600000). Default 2000.
	SyncTimeout int `toml:"sync_timeout"`
	// ReplicationUser, when set, logs every replication connection in with
	// SASL PLAIN as this [[auth.user]] of the peer, with
	// ReplicationPassword: a slave's pulls from its master and a sync
	// master's links to its slave (docs/replication.md, "Authentication
	// and TLS"). The peer's user needs admin (sync) or subscribe on every
	// replicated topic (pulls). Default "" (no auth request).
	ReplicationUser     string `toml:"replication_user"`
	ReplicationPassword string `toml:"replication_password" secret:"true"`
	// ReplicationTLSCAFile is a PEM bundle of the CAs that verify a
	// TLS-only peer's certificate (one registered as metaqs://); ""
	// means the system's roots.
	ReplicationTLSCAFile string `toml:"replication_tls_ca_file"`
	// LogFormat is the format of metaq-server's log on standard error:
	// "text" (default; one line per record: time, level, message,
	// key=value attributes) or "json" (one JSON object per line). It
	// needs a restart; log_level and plugin_log_level reload with SIGHUP.
	LogFormat string `toml:"log_format"`
	// Failover turns on automatic, fenced promotion (docs/replication.md,
	// Failover): with replication = "sync" on the master, an in-sync slave
	// promotes itself when the master's ZooKeeper session ends, and a
	// master acknowledges only while it holds the current epoch. Set it on
	// the master and on its slaves. Default false.
	Failover bool `toml:"failover"`
	// UncleanElection lets a slave that is not in sync promote itself
	// (acknowledged messages it lacks are lost), as Kafka's
	// unclean.leader.election.enable. Default false.
	UncleanElection bool `toml:"unclean_election"`
	// FailoverSlaveID is the slave id the master (slave_id = -1) registers
	// as when it rejoins as a slave after another member took the epoch
	// (docs/replication.md, Failover): give it one no slave of the broker
	// id uses. 0..1023, default 0.
	FailoverSlaveID int `toml:"failover_slave_id"`

	path  string
	raw   []byte
	lines map[string]int // key ("port", "topic[1].name") -> line in raw
	orig  *Config        // top-level values as parsed, to tell flag overrides apart
}

// Topic is one [[topic]] table. Nil pointer fields are unset and inherit the
// top-level value.
type Topic struct {
	Name             string  `toml:"name"`
	NumPartitions    *int    `toml:"num_partitions"`
	UnflushThreshold *int    `toml:"unflush_threshold"`
	UnflushInterval  *int    `toml:"unflush_interval"`
	DataDir          *string `toml:"data_dir"`
	DeletePolicy     *string `toml:"delete_policy"`
	AcceptPublish    *bool   `toml:"accept_publish"`
	AcceptSubscribe  *bool   `toml:"accept_subscribe"`
	Stat             *bool   `toml:"stat"`
	// Filters are the topic's [[topic.filter]] tables: the server-side
	// filter per consumer group (MetaQ's group.<g>=<class>).
	Filters []TopicFilter `toml:"filter"`
}

// ZooKeeper is the [zookeeper] table (MetaQ's [zookeeper] section, §4 of
// the reference). An empty Connect (the default) is local mode: the broker
// does not register anywhere.
type ZooKeeper struct {
	// Connect is the ZooKeeper connect string, "host:port[,host:port...]"
	// (MetaQ's zk.zkConnect), without a chroot suffix: set Root instead.
	Connect string `toml:"connect" secret:"true"`
	// Root is the root of MetaQ's znodes (zk.zkRoot). Default "/meta".
	Root string `toml:"root"`
	// SessionTimeout is the session timeout in milliseconds
	// (zk.zkSessionTimeoutMs), >= 1000. Default 30000.
	SessionTimeout int `toml:"session_timeout"`
	// ConnectionTimeout bounds one connection attempt, in milliseconds
	// (zk.zkConnectionTimeoutMs), >= 1000. Default 30000.
	ConnectionTimeout int `toml:"connection_timeout"`
	// AuthUser and AuthPassword, when set, log the broker (and the stores
	// it runs) in with ZooKeeper's digest scheme, and every node they
	// create gets the ACL "creator has all rights, everyone reads".
	AuthUser     string `toml:"auth_user"`
	AuthPassword string `toml:"auth_password" secret:"true"`
}

// Enabled reports whether ZooKeeper is configured (cluster mode).
func (z ZooKeeper) Enabled() bool { return z.Connect != "" }

// Servers returns the connect string's host:port entries.
func (z ZooKeeper) Servers() []string {
	var out []string
	for _, s := range strings.Split(z.Connect, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// TopicConfig is a topic's effective settings, with inheritance resolved and
// the delete policy parsed.
type TopicConfig struct {
	Name             string
	NumPartitions    int
	UnflushThreshold int
	UnflushInterval  time.Duration
	DataDir          string
	DeletePolicy     string
	RetainFor        time.Duration
	AcceptPublish    bool
	AcceptSubscribe  bool
	Stat             bool
	// Filters is a copy of the topic's [[topic.filter]] tables (nil if none).
	Filters []TopicFilter
}

// DefaultDiskMaxUsedRatio is disk_max_used_ratio's default.
const DefaultDiskMaxUsedRatio = 0.90

// Values of Config.JournalCheckpointSync.
const (
	CheckpointSyncAuto  = "auto"
	CheckpointSyncFsync = "fsync"
)

// Values of Config.JournalFdatasync.
const (
	JournalFdatasyncAuto     = "auto"
	JournalFdatasyncBlocking = "blocking"
)

// Values of Config.Recovery.
const (
	// RecoveryQuarantine refuses to start on damage followed by valid
	// records, after copying the damage to <partition>/quarantine/.
	RecoveryQuarantine = "quarantine"
	// RecoveryTruncate cuts the last segment at its first damaged record.
	RecoveryTruncate = "truncate"
)

// Default returns the built-in defaults. It has no topics, so it passes
// Validate only once AutoCreateTopics is set or a topic is added.
func Default() *Config {
	c := &Config{
		BrokerID:               0,
		Host:                   "127.0.0.1",
		Port:                   8123,
		DataDir:                "data",
		NumPartitions:          1,
		UnflushThreshold:       0,
		UnflushInterval:        10000,
		MaxSegmentSize:         1 << 30,
		Recovery:               RecoveryQuarantine,
		JournalCheckpointSync:  CheckpointSyncAuto,
		JournalFdatasync:       JournalFdatasyncAuto,
		MaxTransferSize:        2 << 20,
		MaxMessageSize:         1 << 20,
		MaxLineLength:          1024,
		IdempotentProducers:    1024,
		IdempotentIdleExpiry:   86400,
		IdempotentRebuildBytes: 8 << 20,
		IdempotentMemory:       64 << 20,
		DeletePolicy:           "delete,168",
		DeleteCheckInterval:    300,
		AutoCreateTopics:       false,
		AcceptPublish:          true,
		AcceptSubscribe:        true,
		Stat:                   true,
		IndexKeys:              true,
		LogLevel:               "info",
		PluginDir:              DefaultPluginDir,
		OffsetStore:            OffsetStoreBuiltin,
		ZooKeeper: ZooKeeper{
			Root:              "/meta",
			SessionTimeout:    30000,
			ConnectionTimeout: 30000,
		},
		MaxConnections:              DefaultMaxConnections,
		IdleTimeout:                 DefaultIdleTimeout,
		RequestTimeout:              DefaultRequestTimeout,
		MaxBufferedBytes:            DefaultMaxBufferedBytes,
		MaxGroupMembers:             DefaultMaxGroupMembers,
		MaxMembershipsPerConnection: DefaultMaxMembershipsPerCon,
		AuthTimeout:                 DefaultAuthTimeout,
		TLS:                         TLS{MinVersion: "1.2"},
		Auth:                        Auth{FailureDelay: DefaultAuthFailureDelay, MaxFailures: DefaultAuthMaxFailures, Lockout: DefaultAuthLockout, MaxLockout: DefaultAuthMaxLockout, FailureWindow: DefaultAuthFailureWindow},
		DiskMaxUsedRatio:            DefaultDiskMaxUsedRatio,
		HTTPPort:                    HTTPPortDefault,
	}
	// The group-commit journal (conf/journal.go).
	c.JournalFileSize = DefaultJournalFileSize
	c.JournalCheckpointBytes = DefaultJournalCheckpointBytes
	c.JournalCheckpointInterval = DefaultJournalCheckpointInterval
	// Transactions (conf/transactions.go).
	c.TxDefaultTimeout = DefaultTxDefaultTimeout
	c.TxMaxBytes = DefaultTxMaxBytes
	c.TxMaxBufferedBytes = DefaultTxMaxBufferedBytes
	c.FlushTxLogAtCommit = 1
	// Replication (conf/replication.go).
	c.SlaveID = -1
	c.SlaveMaxDelay = DefaultSlaveMaxDelay
	c.Replication = ReplicationAsync
	c.SyncTimeout = DefaultSyncTimeout
	c.LogFormat = "text"
	// The HTTP listener's limits (conf/http.go).
	c.HTTPMaxConnections = DefaultHTTPMaxConnections
	c.HTTPReadHeaderTimeout = DefaultHTTPReadHeaderTimeout
	c.HTTPIdleTimeout = DefaultHTTPIdleTimeout
	c.HTTPWriteTimeout = DefaultHTTPWriteTimeout
	c.HTTPEventKeepAlive = DefaultHTTPEventKeepAlive
	c.HTTPConsumerTimeout = DefaultHTTPConsumerTimeout
	c.HTTPMaxConsumers = DefaultHTTPMaxConsumers
	c.MaxDelay = DefaultMaxDelay
	c.TimerPartitions = DefaultTimerPartitions
	return c
}

// Load reads the file at path and parses it with Parse.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, path)
}

// Parse decodes and validates a TOML configuration. name is the file name
// used in error messages and returned by Path. Any problem, including
// syntax errors, wrong types and unknown keys, is reported in an *Error.
func Parse(data []byte, name string) (*Config, error) {
	c := Default()
	c.path = name
	c.raw = append([]byte(nil), data...)

	var root map[string]any
	if _, err := toml.Decode(string(data), &root); err != nil {
		return nil, &Error{File: name, Problems: []Problem{syntaxProblem(err)}}
	}
	c.lines = keyLines(data)

	d := decoder{lines: c.lines, bad: map[string]bool{}}
	d.decodeTop(c, root)
	orig := *c
	orig.Topics, orig.Plugins, orig.orig, orig.lines, orig.raw = nil, nil, nil, nil, nil
	c.orig = &orig

	probs := d.probs
	for _, p := range c.check() {
		if !d.bad[p.Key] {
			probs = append(probs, p)
		}
	}
	if len(probs) > 0 {
		return nil, newError(name, probs)
	}
	return c, nil
}

// Validate checks every setting and reports all problems in an *Error. Parse
// calls it; call it again after changing fields, e.g. from command-line flags.
func (c *Config) Validate() error {
	if probs := c.check(); len(probs) > 0 {
		return newError(c.path, probs)
	}
	return nil
}

// TopicConfig returns the effective settings of a topic. A configured topic,
// or any valid topic name when AutoCreateTopics is set (with the top-level
// settings), gives ok = true; otherwise ok is false. It assumes the config
// passed Validate and scans the topic list, so cache the result on hot paths.
func (c *Config) TopicConfig(name string) (TopicConfig, bool) {
	if name == TimerTopic {
		return c.TimerTopicConfig(), true
	}
	for i := range c.Topics {
		if c.Topics[i].Name == name {
			return c.resolve(&c.Topics[i]), true
		}
	}
	if c.AutoCreateTopics && ValidTopicName(name) {
		return c.resolve(&Topic{Name: name}), true
	}
	return TopicConfig{}, false
}

func (c *Config) resolve(t *Topic) TopicConfig {
	tc := TopicConfig{
		Name:             t.Name,
		NumPartitions:    pick(t.NumPartitions, c.NumPartitions),
		UnflushThreshold: pick(t.UnflushThreshold, c.UnflushThreshold),
		UnflushInterval:  time.Duration(pick(t.UnflushInterval, c.UnflushInterval)) * time.Millisecond,
		DataDir:          pick(t.DataDir, c.DataDir),
		DeletePolicy:     pick(t.DeletePolicy, c.DeletePolicy),
		AcceptPublish:    pick(t.AcceptPublish, c.AcceptPublish),
		AcceptSubscribe:  pick(t.AcceptSubscribe, c.AcceptSubscribe),
		Stat:             pick(t.Stat, c.Stat),
		Filters:          copyFilters(t.Filters),
	}
	tc.RetainFor, _ = ParseDeletePolicy(tc.DeletePolicy)
	return tc
}

func pick[T any](p *T, def T) T {
	if p != nil {
		return *p
	}
	return def
}

// TopicNames returns the configured topic names in file order.
func (c *Config) TopicNames() []string {
	names := make([]string, len(c.Topics))
	for i := range c.Topics {
		names[i] = c.Topics[i].Name
	}
	return names
}

// Raw returns the bytes the config was parsed from (for `stats config`).
func (c *Config) Raw() []byte { return c.raw }

// Path returns the file path or name given to Load or Parse.
func (c *Config) Path() string { return c.path }

// Addr returns Host and Port joined as a listen address.
func (c *Config) Addr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

// line returns the file line of key (for a key missing from a [[table]],
// the table's header line), or 0 when unknown or when a top-level
// value was changed after parsing (so a flag override is not blamed on the file).
func (c *Config) line(key string) int {
	l := c.lines[key]
	if l == 0 {
		// A key missing from an array table ("plugin[0].name"): point at
		// the table's header.
		if i := strings.LastIndexByte(key, '.'); i > 0 && key[i-1] == ']' {
			return c.lines[key[:i]]
		}
	}
	if l == 0 || c.orig == nil {
		return l
	}
	if i, ok := topFields[key]; ok {
		cur := reflect.ValueOf(c).Elem().Field(i).Interface()
		if !reflect.DeepEqual(cur, reflect.ValueOf(c.orig).Elem().Field(i).Interface()) { // DeepEqual: list keys (http_allowed_hosts)
			return 0
		}
	}
	return l
}

// Field tables: toml key -> struct field index. Arrays of tables
// ([[topic]], [[plugin]], [[topic.filter]]) and tables ([zookeeper]) are
// decoded separately and are not in them.
var (
	topFields    = tagIndex(reflect.TypeOf(Config{}))
	topicFields  = tagIndex(reflect.TypeOf(Topic{}))
	pluginFields = tagIndex(reflect.TypeOf(Plugin{}))
	filterFields = tagIndex(reflect.TypeOf(TopicFilter{}))
	zkFields     = tagIndex(reflect.TypeOf(ZooKeeper{}))
)

func tagIndex(t reflect.Type) map[string]int {
	m := map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Type.Kind() == reflect.Struct || f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct {
			continue
		}
		if tag := f.Tag.Get("toml"); tag != "" {
			m[tag] = i
		}
	}
	return m
}

// decoder copies a generic TOML tree into a Config, recording type errors
// and unknown keys instead of stopping at the first one.
type decoder struct {
	lines map[string]int
	probs []Problem
	bad   map[string]bool // keys with a decode problem; validation skips them
}

func (d *decoder) add(key, format string, args ...any) {
	d.bad[key] = true
	d.probs = append(d.probs, Problem{Key: key, Line: d.lines[key], Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) decodeTop(c *Config, root map[string]any) {
	rv := reflect.ValueOf(c).Elem()
	for _, k := range d.sortedKeys("", root) {
		v := root[k]
		switch k {
		case "topic":
			d.decodeTopics(c, v)
			continue
		case "plugin":
			c.Plugins = decodeTables[Plugin](d, "plugin", "plugin", v, pluginFields)
			continue
		case "zookeeper":
			d.decodeSub(k, v, reflect.ValueOf(&c.ZooKeeper).Elem(), zkFields)
			continue
		case "tls":
			d.decodeSub(k, v, reflect.ValueOf(&c.TLS).Elem(), tlsFields)
			continue
		case "auth":
			d.decodeAuth(c, v)
			continue
		}
		i, ok := topFields[k]
		if !ok {
			d.unknown(k, k, "")
			continue
		}
		d.set(k, rv.Field(i), v)
	}
}

// decodeSub decodes the table [k] into rv.
func (d *decoder) decodeSub(k string, v any, rv reflect.Value, known map[string]int) {
	if m, ok := v.(map[string]any); ok {
		d.decodeTable(k, m, rv, known, k)
	} else {
		d.add(k, "must be a table ([%s]), got %s", k, tomlType(v))
	}
}

// tables returns v as an array of tables, or reports that it is not one.
// key is the problem key ("topic", "topic[0].filter"), header the table
// header shown in the message ("topic", "topic.filter").
func (d *decoder) tables(key, header string, v any) ([]map[string]any, bool) {
	var tables []map[string]any
	switch tv := v.(type) {
	case []map[string]any:
		tables = tv
	case []any:
		for _, e := range tv {
			m, ok := e.(map[string]any)
			if !ok {
				d.add(key, "must be an array of tables ([[%s]]), got an array of %s", header, tomlType(e))
				return nil, false
			}
			tables = append(tables, m)
		}
	default:
		d.add(key, "must be an array of tables ([[%s]]), got %s", header, tomlType(v))
		return nil, false
	}
	return tables, true
}

// decodeTable copies the keys of m into the struct rv (whose fields are
// known), reporting unknown keys as part of table kind tbl.
func (d *decoder) decodeTable(prefix string, m map[string]any, rv reflect.Value, known map[string]int, tbl string) {
	for _, k := range d.sortedKeys(prefix+".", m) {
		key := prefix + "." + k
		if fi, ok := known[k]; ok {
			d.set(key, rv.Field(fi), m[k])
		} else {
			d.unknown(key, k, tbl)
		}
	}
}

func (d *decoder) decodeTopics(c *Config, v any) {
	tables, ok := d.tables("topic", "topic", v)
	if !ok {
		return
	}
	for i, m := range tables {
		var t Topic
		prefix := fmt.Sprintf("topic[%d]", i)
		if fv, ok := m["filter"]; ok {
			m = without(m, "filter")
			t.Filters = decodeTables[TopicFilter](d, prefix+".filter", "topic.filter", fv, filterFields)
		}
		d.decodeTable(prefix, m, reflect.ValueOf(&t).Elem(), topicFields, "topic")
		c.Topics = append(c.Topics, t)
	}
}

// without returns a copy of m without key k.
func without(m map[string]any, k string) map[string]any {
	out := make(map[string]any, len(m))
	for kk, v := range m {
		if kk != k {
			out[kk] = v
		}
	}
	return out
}

// sortedKeys orders the keys of m by their line in the file, then by name.
func (d *decoder) sortedKeys(prefix string, m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		li, lj := d.lines[prefix+keys[i]], d.lines[prefix+keys[j]]
		if li != lj {
			return li < lj
		}
		return keys[i] < keys[j]
	})
	return keys
}

// set stores the TOML value v in the field f, checking its type.
func (d *decoder) set(key string, f reflect.Value, v any) {
	if f.Kind() == reflect.Pointer {
		p := reflect.New(f.Type().Elem())
		if d.set(key, p.Elem(), v); !d.bad[key] {
			f.Set(p)
		}
		return
	}
	switch f.Kind() {
	case reflect.Int, reflect.Int64:
		n, ok := v.(int64)
		if !ok {
			d.add(key, "must be an integer, got %s", describe(v))
			return
		}
		if f.OverflowInt(n) {
			d.add(key, "integer %d is out of range", n)
			return
		}
		f.SetInt(n)
	case reflect.Float64:
		switch n := v.(type) {
		case float64:
			if math.IsNaN(n) || math.IsInf(n, 0) {
				d.add(key, "must be a finite number, got %v", n)
				return
			}
			f.SetFloat(n)
		case int64: // "disk_max_used_ratio = 1"
			f.SetFloat(float64(n))
		default:
			d.add(key, "must be a number, got %s", describe(v))
		}
	case reflect.String:
		s, ok := v.(string)
		if !ok {
			d.add(key, "must be a string, got %s", describe(v))
			return
		}
		f.SetString(s)
	case reflect.Bool:
		b, ok := v.(bool)
		if !ok {
			d.add(key, "must be a boolean (true or false), got %s", describe(v))
			return
		}
		f.SetBool(b)
	case reflect.Slice: // []string
		arr, ok := v.([]any)
		if !ok {
			d.add(key, "must be an array of strings, got %s", describe(v))
			return
		}
		out := make([]string, 0, len(arr))
		for i, e := range arr {
			s, ok := e.(string)
			if !ok {
				d.add(key, "must be an array of strings, got %s at index %d", describe(e), i)
				return
			}
			out = append(out, s)
		}
		f.Set(reflect.ValueOf(out))
	case reflect.Map: // map[string]string
		m, ok := v.(map[string]any)
		if !ok {
			d.add(key, "must be a table of strings, got %s", describe(v))
			return
		}
		out := make(map[string]string, len(m))
		for _, k := range d.sortedKeys(key+".", m) {
			s, ok := m[k].(string)
			if !ok {
				d.add(key+"."+k, "must be a string, got %s", describe(m[k]))
				continue
			}
			out[k] = s
		}
		f.Set(reflect.ValueOf(out))
	default:
		panic("conf: unsupported field kind " + f.Kind().String())
	}
}

// metaqNames maps snake_cased MetaQ keys that were renamed to their new name.
var metaqNames = map[string]string{
	"server_port": "port",
	"host_name":   "host",
	"data_path":   "data_dir",
	// [zookeeper] keys (zk.zkConnect and so on).
	"zk_connect":               "connect",
	"zk_root":                  "root",
	"zk_session_timeout_ms":    "session_timeout",
	"zk_connection_timeout_ms": "connection_timeout",
}

// knownKeys are the keys of each kind of table ("" is the top level).
var knownKeys = map[string]map[string]int{
	"": topFields, "topic": topicFields, "plugin": pluginFields, "topic.filter": filterFields,
	"zookeeper": zkFields, "tls": tlsFields, "auth": authFields, "auth.user": userFields,
}

// unknown reports an unknown key of table tbl ("", "topic", "plugin",
// "topic.filter"), with a hint when it looks like a known one.
func (d *decoder) unknown(full, k string, tbl string) {
	known := knownKeys[tbl]
	inTopic := tbl == "topic"
	msg := fmt.Sprintf("unknown key %q", full)
	snake := snakeCase(k)
	alias, isAlias := metaqNames[snake]
	switch {
	case tbl == "" && k == "system":
		msg += fmt.Sprintf(" (there is no [%s] table; set broker keys at the top level)", k)
	case isAlias:
		msg += fmt.Sprintf(" (MetaQ's %s is %q here)", k, alias)
	case snake != k && hasKey(known, snake):
		msg += fmt.Sprintf(" (did you mean %q?)", snake)
	case inTopic && hasKey(topFields, k):
		msg += " (cannot be set per topic)"
	default:
		if s := closest(k, known); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		} else if s := closest(snake, known); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
	}
	d.add(full, "%s", msg)
}

func hasKey(m map[string]int, k string) bool {
	_, ok := m[k]
	return ok
}

// snakeCase turns MetaQ's camelCase ("unflushThreshold") into snake_case.
func snakeCase(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// closest returns the known key within edit distance 2 of k, preferring the
// nearest and then the alphabetically first; "" if none.
func closest(k string, known map[string]int) string {
	best, bestD := "", 3
	for cand := range known {
		if dd := editDistance(k, cand); dd < bestD || (dd == bestD && cand < best) {
			best, bestD = cand, dd
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, giving up early
// (returning 3) for long or very different strings.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 || len(a)-len(b) > 2 || len(b)-len(a) > 2 {
		return 3
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// tomlType names the TOML type of a decoded value.
func tomlType(v any) string {
	switch v.(type) {
	case int64:
		return "integer"
	case float64:
		return "float"
	case string:
		return "string"
	case bool:
		return "boolean"
	case []any, []map[string]any:
		return "array"
	case map[string]any:
		return "table"
	default:
		return "datetime"
	}
}

// describe names the type of v, with the value when it is a short scalar.
func describe(v any) string {
	switch tv := v.(type) {
	case string:
		if len(tv) <= 40 {
			return fmt.Sprintf("string %q", tv)
		}
	case int64, float64, bool:
		return fmt.Sprintf("%s %v", tomlType(v), tv)
	}
	return tomlType(v)
}

func syntaxProblem(err error) Problem {
	if pe, ok := err.(toml.ParseError); ok {
		return Problem{
			Line: pe.Position.Line,
			Msg:  fmt.Sprintf("syntax error at column %d: %s", pe.Position.Col, pe.Message),
		}
	}
	return Problem{Msg: "syntax error: " + err.Error()}
}
