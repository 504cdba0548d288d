package broker

import (
	"cmp"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/stats"
	"github.com/metaq-go/metaq/plugins/host"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// counters are the broker-wide statistics of reference §12.
type counters struct {
	connections    atomic.Int64
	cmdPut         atomic.Int64
	cmdGet         atomic.Int64
	cmdOffset      atomic.Int64
	getMiss        atomic.Int64
	putFailed      atomic.Int64
	idemDuplicates atomic.Int64 // idempotent puts' messages answered as stored already (idem.go)
	idemOutOfOrder atomic.Int64 // idempotent puts refused with a sequence gap
	idemUnknown    atomic.Int64 // idempotent puts refused as of an unknown producer
	protocolErrors atomic.Int64
	refusedConns   atomic.Int64 // connections refused over max_connections
	timedOutConns  atomic.Int64 // connections closed by idle_timeout or request_timeout
	authFailures   atomic.Int64 // failed auth requests
	authThrottled  atomic.Int64 // logins the login limiter refused unchecked
	resetAt        atomic.Int64 // unix nanos of the last `stats reset`
}

func (c *conn) handleStats(r *protocol.Request) {
	b := c.b
	var sb strings.Builder
	item := string(r.Item)
	if e, ok := strings.CutPrefix(item, syncEpochItem); ok {
		c.bindSyncEpoch(e, r.Opaque) // failover.go
		return
	}
	if e, ok := strings.CutPrefix(item, epochStartItem); ok {
		c.epochStart(e, r.Opaque) // rejoin.go
		return
	}
	if item == switchoverItem {
		c.switchover(r.Opaque) // rejoin.go
		return
	}
	if arg, ok := strings.CutPrefix(item, groups.CountItem); ok {
		c.countStats(arg, r.Opaque)
		return
	}
	v := c.viewer() // the lists show the topics and groups the user may see (authz.go)
	switch item {
	case "":
		b.writeSummaryFor(&sb, v)
	case "topics":
		stats.Topics(&sb, statsTopics(b.visibleTopics(v)))
	case "offsets", "partitions":
		stats.Offsets(&sb, statsTopics(b.visibleTopics(v)), item == "partitions")
	case "realtime":
		stats.Realtime(&sb, statsTopics(b.visibleTopics(v)), b.sinceReset())
	case "config":
		sb.Write(b.config().Redacted())
	case "plugins":
		var infos []host.Info
		if b.plugins != nil {
			infos = b.plugins.List()
		}
		stats.Lines(&sb, func(line func(string)) { host.StatsLines(infos, line) })
	case "groups": // core/groups, of the groups and topics v may see
		stats.Lines(&sb, func(line func(string)) { b.groups.StatsLines(b.committed, v.GroupTopic, line) })
	case "members":
		stats.Lines(&sb, func(line func(string)) { b.groups.MemberLines(v.GroupTopic, line) })
	case "disks":
		b.disks.WriteStats(&sb)
	case "delayed": // core/timer
		stats.Lines(&sb, b.delay.StatsLines)
	case "transactions":
		stats.Lines(&sb, func(line func(string)) { b.txm.Status().StatsLines(time.Now(), line) }) // core/tx
	case "reset":
		for _, t := range b.topicList() {
			t.RT.Reset()
		}
		b.stats.resetAt.Store(time.Now().UnixNano())
		c.connAudit("stats.reset") // audit.go
		sb.WriteString("reset ok")
	case "help":
		c.reply(protocol.StatusOK, stats.Help, r.Opaque) // no garbage per request
		return
	default:
		b.writeTopicStats(&sb, item)
	}
	c.reply(protocol.StatusOK, sb.String(), r.Opaque)
}

func (b *Broker) sinceReset() time.Duration {
	at := b.stats.resetAt.Load()
	if at == 0 {
		return time.Since(b.start)
	}
	return time.Since(time.Unix(0, at))
}

// writeSummaryFor answers `stats`; topics and total_messages count the
// topics v may see.
func (b *Broker) writeSummaryFor(sb *strings.Builder, v viewer) {
	var total int64
	topics := b.visibleTopics(v)
	for _, t := range topics {
		for _, l := range t.Parts {
			total += l.MessageCount()
		}
	}
	stats.KV(sb, func(kv func(k string, v any)) { b.summary(kv, total, len(topics)) })
}

// summary emits `stats`' pairs.
func (b *Broker) summary(kv func(k string, v any), total int64, topics int) {
	kv("pid", os.Getpid())
	kv("broker_id", b.config().BrokerID)
	kv("port", b.config().Port)
	// Where the admin API is, so that the CLI talks to this broker's
	// (issue 23): host:port, or "-" when http_port = 0.
	kv("http_addr", cmp.Or(b.HTTPAddr(), "-"))
	kv("uptime", int64(time.Since(b.start)/time.Second))
	kv("version", Version)
	repl.SummaryLines(b.replRole(), b.config().Replication, b.fo, b.slave, b.sync.master(), kv) // core/repl
	kv("curr_connections", b.stats.connections.Load())
	kv("threads", runtime.NumGoroutine())
	kv("cmd_put", b.stats.cmdPut.Load())
	kv("cmd_get", b.stats.cmdGet.Load())
	kv("cmd_offset", b.stats.cmdOffset.Load())
	kv("tx_begin", b.txm.Counts().Begins)
	kv("tx_xa_begin", b.txm.Counts().XABegins)
	kv("tx_commit", b.txm.Counts().Commits)
	kv("tx_rollback", b.txm.Counts().Rollbacks)
	kv("get_miss", b.stats.getMiss.Load())
	kv("put_failed", b.stats.putFailed.Load())
	kv("idempotent_duplicates", b.stats.idemDuplicates.Load())
	kv("idempotent_out_of_order", b.stats.idemOutOfOrder.Load())
	kv("idempotent_unknown_producer", b.stats.idemUnknown.Load())
	kv("idempotent_memory_bytes", b.idem.Budget().Used())
	kv("idempotent_memory_evicted", b.idem.Budget().Evicted())
	kv("disk_full_rejects", b.disks.Rejects.Load())
	kv("disk_used_ratio", strconv.FormatFloat(b.disks.MaxUsed(), 'f', 4, 64))
	kv("protocol_errors", b.stats.protocolErrors.Load())
	kv("refused_connections", b.stats.refusedConns.Load())
	kv("timed_out_connections", b.stats.timedOutConns.Load())
	kv("buffered_bytes", b.budget.Used())
	kv("auth_failures", b.stats.authFailures.Load())
	kv("auth_throttled", b.stats.authThrottled.Load())
	b.unauth.Stats(kv)   // core/security: connection limits
	b.tlsFails.Stats(kv) // and failed TLS handshakes
	kv("cmd_commit", b.offsets.Stats().Commits)
	kv("cmd_fetch", b.offsets.Stats().Fetches)
	kv("commit_failed", b.offsets.Stats().CommitFailed)
	hs := b.web.srv.Stats() // core/httpapi
	kv("http_connections", hs.Connections)
	kv("http_evicted", hs.Evicted)
	kv("http_refused", hs.Refused)
	kv("http_busy", hs.Busy)
	kv("total_messages", total)
	kv("topics", topics)
	kv("config_checksum", b.configChecksum())
}

// writeTopicStats answers `stats <topic>`.
func (b *Broker) writeTopicStats(sb *strings.Builder, name string) {
	t := b.topics.Get(name)
	configured := -1
	if tc, ok := b.topicConfig(name); ok && !b.config().AutoCreateTopics {
		configured = tc.NumPartitions
	}
	var st *stats.Topic
	if t != nil {
		st = &statsTopics([]*partition.Topic{t})[0]
	}
	stats.One(sb, showTopic([]byte(name)), st, configured, b.sinceReset())
}

// statsTopics are ts for the stats reports.
func statsTopics(ts []*partition.Topic) []stats.Topic {
	out := make([]stats.Topic, len(ts))
	for i, t := range ts {
		tc := t.Conf()
		out[i] = stats.Topic{Name: t.Name(), Parts: t.Parts, AcceptPublish: tc.AcceptPublish, AcceptSubscribe: tc.AcceptSubscribe, RT: &t.RT}
	}
	return out
}

// countStats answers `stats count:<topic>:<partition>:<offset>`
// (groups.CountItem).
func (c *conn) countStats(arg string, opaque int32) {
	body, err := stats.Count(arg, c.b.openParts)
	if err != nil {
		c.reply(protocol.StatusBadRequest, err.Error(), opaque)
		return
	}
	c.reply(protocol.StatusOK, body, opaque)
}
