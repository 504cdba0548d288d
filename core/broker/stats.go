package broker

import (
	"cmp"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/repl"
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

// statsHelpCRLF is statsHelp with the protocol's line ends, built once.
var statsHelpCRLF = strings.ReplaceAll(statsHelp, "\n", "\r\n")

const statsHelp = `STATS
stats               broker summary (pid, broker_id, uptime, counters, ...)
stats topics        one line per topic: partitions, message_count, message_bytes, accept flags
stats offsets       one line per partition: min_offset and max_offset
stats partitions    one line per partition: min_offset, max_offset and message_count
stats realtime      counters since the last reset, all topics with stat=true
stats config        the effective configuration, secrets shown as <redacted>
stats plugins       one line per plugin process: kind, name, version, pid, state, restarts, calls, errors
stats groups        one line per consumer group coordinated here (local mode): members, generation; groups with committed offsets and no live member: members 0
stats members       one line per member of those groups: its id and the partitions it holds
stats disks         one line per data directory: used_ratio, inodes_used_ratio, full (disk_max_used_ratio)
stats transactions  the open transactions, oldest first: key, type, state, session, messages, bytes, age, timeout
stats count:T:P:O   the messages of topic T partition P from offset O to its max offset: messages N exact true|false
stats reset         reset the realtime counters
stats help          this text
stats <topic>       one topic: result code (0 exists, 1 unknown, 2 configured but empty), partitions, counts
END
`

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
		sb.WriteString("STATS\r\n")
		for _, t := range b.visibleTopics(v) {
			var count, size int64
			for _, l := range t.parts {
				count += l.MessageCount()
				size += l.SizeBytes()
			}
			fmt.Fprintf(&sb, "%s partitions %d message_count %d message_bytes %d accept_publish %t accept_subscribe %t\r\n",
				t.name, len(t.parts), count, size, t.conf().AcceptPublish, t.conf().AcceptSubscribe)
		}
		sb.WriteString("END\r\n")
	case "offsets":
		sb.WriteString("STATS\r\n")
		for _, t := range b.visibleTopics(v) {
			for p, l := range t.parts {
				fmt.Fprintf(&sb, "%s part %d min_offset %d max_offset %d\r\n", t.name, p, l.MinOffset(), l.MaxOffset())
			}
		}
		sb.WriteString("END\r\n")
	case "partitions":
		sb.WriteString("STATS\r\n")
		for _, t := range b.visibleTopics(v) {
			for p, l := range t.parts {
				fmt.Fprintf(&sb, "%s part %d min_offset %d max_offset %d message_count %d\r\n", t.name, p,
					l.MinOffset(), l.MaxOffset(), l.MessageCount())
			}
		}
		sb.WriteString("END\r\n")
	case "realtime":
		since := b.sinceReset()
		var agg partition.Realtime // core/partition
		for _, t := range b.visibleTopics(v) {
			t.rt.AddTo(&agg)
		}
		sb.WriteString("STATS\r\n")
		for i, name := range partition.RealtimeNames {
			fmt.Fprintf(&sb, "realtime_%s %s\r\n", name, agg.All()[i].Format(since))
		}
		sb.WriteString("END\r\n")
	case "config":
		sb.Write(b.config().Redacted())
	case "plugins":
		var infos []host.Info
		if b.plugins != nil {
			infos = b.plugins.List()
		}
		writeStatsLines(&sb, func(line func(string)) { host.StatsLines(infos, line) })
	case "groups": // core/groups, of the groups and topics v may see
		writeStatsLines(&sb, func(line func(string)) { b.groups.StatsLines(b.committed, v.GroupTopic, line) })
	case "members":
		writeStatsLines(&sb, func(line func(string)) { b.groups.MemberLines(v.GroupTopic, line) })
	case "disks":
		b.disks.WriteStats(&sb)
	case "delayed": // delay.go
		writeStatsLines(&sb, b.writeDelayedStats)
	case "transactions":
		writeStatsLines(&sb, func(line func(string)) { b.txm.Status().StatsLines(time.Now(), line) }) // core/tx
	case "reset":
		for _, t := range b.topicList() {
			t.rt.Reset()
		}
		b.stats.resetAt.Store(time.Now().UnixNano())
		c.connAudit("stats.reset") // audit.go
		sb.WriteString("reset ok")
	case "help":
		c.reply(protocol.StatusOK, statsHelpCRLF, r.Opaque) // no garbage per request
		return
	default:
		b.writeTopicStats(&sb, item)
	}
	c.reply(protocol.StatusOK, sb.String(), r.Opaque)
}

// writeStatsLines writes a stats reply's body: STATS, the lines lines
// emits (a component's: core/tx, core/groups, plugins/host), END.
func writeStatsLines(sb *strings.Builder, lines func(line func(string))) {
	sb.WriteString("STATS\r\n")
	lines(func(l string) { sb.WriteString(l); sb.WriteString("\r\n") })
	sb.WriteString("END\r\n")
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
		for _, l := range t.parts {
			total += l.MessageCount()
		}
	}
	kv := func(k string, v any) { fmt.Fprintf(sb, "%s %v\r\n", k, v) }
	sb.WriteString("STATS\r\n")
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
	kv("idempotent_memory_bytes", b.idemBudget().Used())
	kv("idempotent_memory_evicted", b.idemBudget().Evicted())
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
	kv("topics", len(topics))
	kv("config_checksum", b.configChecksum())
	sb.WriteString("END\r\n")
}

// writeTopicStats answers `stats <topic>`.
func (b *Broker) writeTopicStats(sb *strings.Builder, name string) {
	sb.WriteString("STATS\r\n")
	b.mu.RLock()
	t := b.topics[name]
	b.mu.RUnlock()
	code := 0
	var count, size int64
	parts := 0
	if t == nil {
		code = 1
		if tc, ok := b.topicConfig(name); ok && !b.config().AutoCreateTopics {
			code, parts = 2, tc.NumPartitions
		}
	} else {
		parts = len(t.parts)
		for _, l := range t.parts {
			count += l.MessageCount()
			size += l.SizeBytes()
		}
		if count == 0 {
			code = 2
		}
	}
	fmt.Fprintf(sb, "topic %s\r\n", showTopic([]byte(name)))
	fmt.Fprintf(sb, "result_code %d\r\n", code)
	fmt.Fprintf(sb, "partitions %d\r\n", parts)
	fmt.Fprintf(sb, "message_count %d\r\n", count)
	fmt.Fprintf(sb, "message_bytes %d\r\n", size)
	since := b.sinceReset()
	for i, n := range partition.RealtimeNames {
		v := "null"
		if t != nil {
			v = t.rt.All()[i].Format(since)
		}
		sb.WriteString("topic_realtime_" + n + " " + v + "\r\n")
	}
	sb.WriteString("END\r\n")
}

// countStats answers `stats count:<topic>:<partition>:<offset>`
// (groups.CountItem).
func (c *conn) countStats(arg string, opaque int32) {
	name, p, from, err := groups.ParseCountItem(arg)
	if err != nil {
		c.reply(protocol.StatusBadRequest, "stats "+groups.CountItem+"<topic>:<partition>:<offset>: "+err.Error(), opaque)
		return
	}
	b := c.b
	b.mu.RLock()
	t := b.topics[name]
	b.mu.RUnlock()
	if t == nil || p >= len(t.parts) {
		c.reply(protocol.StatusBadRequest, "stats "+groups.CountItem+": no partition "+strconv.Itoa(p)+" of topic "+quoteName(name), opaque)
		return
	}
	l := t.parts[p]
	s := groups.PartSize{Min: l.MinOffset(), Max: l.MaxOffset(), Msgs: l.MessageCount()}
	n, exact := groups.LagMessages(l, s, from)
	c.reply(protocol.StatusOK, fmt.Sprintf("STATS\r\n%s part %d from %d to %d messages %d exact %t\r\nEND\r\n",
		name, p, from, s.Max, n, exact), opaque)
}
