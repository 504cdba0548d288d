package httpapi

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// The broker's series on /metrics (docs/http.md), built at each scrape
// from a Status the broker reads from its own atomic counters (the hot
// path never calls Prometheus for them), as constant metrics.

// Status is what /metrics shows of the broker, read at one scrape.
type Status struct {
	BrokerID int
	Version  string
	// StartSeconds is when the broker started, in seconds since the Unix
	// epoch.
	StartSeconds                                    float64
	Connections, RefusedConns, TimedOutConns        int64
	AuthFailures, AuthThrottled, ProtocolErrors     int64
	Puts, Gets, Offsets, Commits, Fetches           int64
	PutFailed, GetMisses, DiskRejects, CommitFailed int64
	BufferedBytes                                   int64
	TxCommits, TxRollbacks                          int64
	Ready                                           bool
	// PartitionLabels is metrics_partition_labels: series per partition.
	PartitionLabels bool
	Topics          []TopicStatus
	// Indexing counts the partitions whose start-up scrub is not done.
	Indexing int
	Journals []JournalStatus
	// KeyIndexes is the key and id index of each data directory.
	KeyIndexes []KeyIndexStatus
	Disks      []DiskStatus
	Plugins    []PluginInfo
	Lags       []GroupLagStatus
	Repl       Replication
}

// TopicStatus is one open topic at a scrape.
type TopicStatus struct {
	Name       string
	Partitions []PartitionStatus
}

// PartitionStatus is one partition's counters and offsets at a scrape.
type PartitionStatus struct {
	MsgsIn, BytesIn, BytesOut, MsgsOut, Gets int64
	Messages, MinOffset, MaxOffset           int64
}

// KeyIndexStatus is one data directory's key and id index at a scrape
// (core/index): its files' bytes, its entries (sealed and in memory), and
// the bytes of the logs not indexed yet.
type KeyIndexStatus struct {
	Dir                 string
	Bytes, Entries, Lag int64
}

// JournalStatus is one data directory's journal at a scrape.
type JournalStatus struct {
	Dir                                             string
	Rounds, Fsyncs, Bytes, Checkpoints, Syncfs, Led int64
	Behind                                          int64
	// CheckpointAge is in seconds (0 while nothing was written since).
	CheckpointAge float64
	Failed        bool
}

// DiskStatus is one data directory's file system at a scrape.
type DiskStatus struct {
	Dir        string
	Used, Free uint64
	Ratio      float64
	Full       bool
}

// GroupLagStatus is a group's lag on an open topic, from the offsets
// committed through the broker.
type GroupLagStatus struct {
	Group, Topic    string
	Bytes, Messages int64
	// Partitions is the lag in bytes by partition (those with a
	// committed offset), for metrics_partition_labels.
	Partitions []PartitionLag
}

// PartitionLag is one partition's lag in bytes.
type PartitionLag struct {
	Partition int
	Bytes     int64
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	dBuildInfo     = desc("metaq_build_info", "Always 1; the labels give the broker's version and id.", "version", "broker_id")
	dUp            = desc("metaq_start_time_seconds", "When the broker started, in seconds since the Unix epoch.")
	dConnections   = desc("metaq_connections", "Client connections open now.")
	dConnRefused   = desc("metaq_connections_refused_total", "Connections refused over max_connections.")
	dConnTimedOut  = desc("metaq_connections_timed_out_total", "Connections closed by idle_timeout or request_timeout.")
	dAuthFailures  = desc("metaq_auth_failures_total", "Failed authentications: auth PLAIN on the wire and HTTP basic auth.")
	dAuthThrottled = desc("metaq_auth_throttled_total", "Logins refused by the failed-login limiter without a password check (wire and HTTP).")
	dProtoErrors   = desc("metaq_protocol_errors_total", "Malformed requests.")
	dRequests      = desc("metaq_requests_total", "Requests by command (put counts put and mput).", "command")
	dPutFailed     = desc("metaq_put_failures_total", "Puts and mputs refused or failed.")
	dGetMisses     = desc("metaq_get_misses_total", "Gets that found no message at their offset.")
	dDiskRejects   = desc("metaq_disk_full_rejects_total", "Puts refused because their data directory is over disk_max_used_ratio.")
	dBuffered      = desc("metaq_buffered_bytes", "Memory held for clients now (bodies being received, queued replies).")
	dTopics        = desc("metaq_topics", "Topics open.")
	dTopicParts    = desc("metaq_topic_partitions", "Partitions of the topic.", "topic")
	dTopicMsgsIn   = desc("metaq_topic_messages_in_total", "Messages accepted for append (puts, mputs and committed transactions) since start.", "topic")
	dTopicBytesIn  = desc("metaq_topic_bytes_in_total", "Message body bytes accepted for append since start.", "topic")
	dTopicBytesOut = desc("metaq_topic_bytes_out_total", "Bytes of stored records served to gets since start.", "topic")
	dTopicMsgsOut  = desc("metaq_topic_messages_out_total", "Whole messages served to gets since start (counted from the byte ranges sent, at each scrape; a final partial record of a reply is not counted: the client fetches it again).", "topic")
	dTopicGets     = desc("metaq_topic_get_requests_total", "Gets served (with data or a miss) since start.", "topic")
	dTopicMsgs     = desc("metaq_topic_messages", "Messages stored (low while the start-up count of old segments runs).", "topic")
	dTopicBytes    = desc("metaq_topic_size_bytes", "Bytes stored: max_offset - min_offset summed over the partitions.", "topic")
	dDLQMsgs       = desc("metaq_dlq_messages", "Messages stored in the group's dead-letter topic <group>.dlq (docs/sdk.md, RetryTopics).", "group")
	dRetriesIn     = desc("metaq_retry_messages_in_total", "Messages accepted for append to the group's retry topic <group>.retry since start: the redeliveries its consumers asked for.", "group")
	dPartMsgsIn    = desc("metaq_partition_messages_in_total", "Messages accepted for append since start (metrics_partition_labels).", "topic", "partition")
	dPartBytesIn   = desc("metaq_partition_bytes_in_total", "Message body bytes accepted for append since start (metrics_partition_labels).", "topic", "partition")
	dPartBytesOut  = desc("metaq_partition_bytes_out_total", "Bytes of stored records served to gets since start (metrics_partition_labels).", "topic", "partition")
	dPartMsgsOut   = desc("metaq_partition_messages_out_total", "Whole messages served to gets since start (metrics_partition_labels).", "topic", "partition")
	dPartMsgs      = desc("metaq_partition_messages", "Messages stored (metrics_partition_labels).", "topic", "partition")
	dPartMaxOffset = desc("metaq_partition_max_offset_bytes", "The partition's max offset: the byte position after its last readable record (metrics_partition_labels).", "topic", "partition")
	dPartMinOffset = desc("metaq_partition_min_offset_bytes", "The partition's min offset: the byte position of its first kept record (metrics_partition_labels).", "topic", "partition")
	dJRounds       = desc("metaq_journal_commit_rounds_total", "Group-commit rounds that wrote records.", "data_dir")
	dJFsyncs       = desc("metaq_journal_fsyncs_total", "fdatasyncs of journal files.", "data_dir")
	dJBytes        = desc("metaq_journal_written_bytes_total", "Journal bytes written.", "data_dir")
	dJCkpts        = desc("metaq_journal_checkpoints_total", "Journal checkpoints made durable.", "data_dir")
	dJSyncfs       = desc("metaq_journal_checkpoint_syncfs_total", "Journal checkpoints whose segments one syncfs of the file system made durable (journal_checkpoint_sync = \"auto\").", "data_dir")
	dJLed          = desc("metaq_journal_led_rounds_total", "Group-commit rounds run by the appending connection itself on an idle journal (a lone synchronous put: no handoff to the committer).", "data_dir")
	dKIBytes       = desc("metaq_key_index_bytes", "Bytes of the key and msgId index files of the data directory's partitions (index_keys).", "data_dir")
	dKIEntries     = desc("metaq_key_index_entries", "Entries of the key and msgId index (a message has one for its msgId and one for its key), in files and in memory.", "data_dir")
	dKILag         = desc("metaq_key_index_lag_bytes", "Bytes of the partitions' logs the indexer has not indexed yet (a lookup scans them).", "data_dir")
	dJLag          = desc("metaq_journal_lag_bytes", "Journal bytes written after the last durable checkpoint: what a restart would replay.", "data_dir")
	dJCkptAge      = desc("metaq_journal_checkpoint_age_seconds", "Seconds since the last durable checkpoint (since start before the first); 0 while nothing was written after it.", "data_dir")
	dJFailed       = desc("metaq_journal_failed", "1 once a journal write or fsync failed (every durable put is then refused until restart).", "data_dir")
	dDiskUsed      = desc("metaq_disk_used_bytes", "Bytes used on the data directory's file system (as df counts them).", "data_dir")
	dDiskFree      = desc("metaq_disk_free_bytes", "Bytes available to the broker on the data directory's file system.", "data_dir")
	dDiskRatio     = desc("metaq_disk_used_ratio", "used / (used + available) of the data directory's file system, as disk_max_used_ratio compares it.", "data_dir")
	dDiskFull      = desc("metaq_disk_full", "1 while puts to the data directory are refused (disk_max_used_ratio).", "data_dir")
	dPluginUp      = desc("metaq_plugin_up", "1 while the plugin process runs.", "kind", "name")
	dPluginCalls   = desc("metaq_plugin_calls_total", "Calls made to the plugin.", "kind", "name")
	dPluginErrors  = desc("metaq_plugin_errors_total", "Plugin calls that failed.", "kind", "name")
	dPluginRestart = desc("metaq_plugin_restarts_total", "Restarts of the plugin process.", "kind", "name")
	dGroupLag      = desc("metaq_consumer_group_lag_bytes", "Bytes between the group's last offset committed through this broker and the partitions' max offset, summed over the topic's partitions (offsets are byte positions).", "group", "topic")
	dGroupLagMsgs  = desc("metaq_consumer_group_lag_messages", "Messages between the group's last offset committed through this broker and the partitions' max offset, summed over the topic's partitions: counted exactly from the partitions' record-count index; estimated from the mean record size only where that does not cover the range yet (metaq_partitions_indexing > 0: after a restart, until the background scrub has indexed the segments found at start).", "group", "topic")
	dIndexing      = desc("metaq_partitions_indexing", "Partitions whose segments found at start the background scrub has not walked yet: their message counts are low and lag in messages over those segments is estimated until it is 0.")
	dGroupPartLag  = desc("metaq_consumer_group_partition_lag_bytes", "Bytes between the group's last committed offset and the partition's max offset (metrics_partition_labels).", "group", "topic", "partition")
	dCommits       = desc("metaq_offset_commits_total", "Offset commits received.")
	dCommitFailed  = desc("metaq_offset_commit_failures_total", "Offset commits the offset store refused.")
	dTxOpen        = desc("metaq_transactions_total", "Transactions by outcome.", "outcome")
	dReady         = desc("metaq_ready", "1 while /readyz would answer 200.")
)

// Collector is the broker's series: status is read at each scrape, and
// extra adds the series other parts of the broker keep (connection
// limits, replication, this listener's).
type Collector struct {
	status func() Status
	extra  func(ch chan<- prometheus.Metric)
}

// NewCollector returns the collector of status and extra.
func NewCollector(status func() Status, extra func(ch chan<- prometheus.Metric)) *Collector {
	return &Collector{status: status, extra: extra}
}

// Describe sends nothing: the collector is unchecked (its series depend
// on the topics, groups and plugins of the moment).
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect sends the series of one Status.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.status()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	flag := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	gauge(dBuildInfo, 1, st.Version, strconv.Itoa(st.BrokerID))
	gauge(dUp, st.StartSeconds)
	gauge(dConnections, float64(st.Connections))
	counter(dConnRefused, st.RefusedConns)
	counter(dConnTimedOut, st.TimedOutConns)
	counter(dAuthFailures, st.AuthFailures)
	counter(dAuthThrottled, st.AuthThrottled)
	counter(dProtoErrors, st.ProtocolErrors)
	counter(dRequests, st.Puts, "put")
	counter(dRequests, st.Gets, "get")
	counter(dRequests, st.Offsets, "offset")
	counter(dRequests, st.Commits, "commit")
	counter(dRequests, st.Fetches, "fetch")
	counter(dPutFailed, st.PutFailed)
	counter(dGetMisses, st.GetMisses)
	counter(dDiskRejects, st.DiskRejects)
	gauge(dBuffered, float64(st.BufferedBytes))
	counter(dCommits, st.Commits)
	counter(dCommitFailed, st.CommitFailed)
	counter(dTxOpen, st.TxCommits, "commit")
	counter(dTxOpen, st.TxRollbacks, "rollback")
	gauge(dReady, flag(st.Ready))
	st.Repl.collect(gauge, counter)
	if c.extra != nil {
		c.extra(ch)
	}

	gauge(dTopics, float64(len(st.Topics)))
	for _, t := range st.Topics {
		var in, bin, bout, mout, gets, msgs, size int64
		for p, x := range t.Partitions {
			in, bin, bout, mout, gets = in+x.MsgsIn, bin+x.BytesIn, bout+x.BytesOut, mout+x.MsgsOut, gets+x.Gets
			msgs, size = msgs+x.Messages, size+(x.MaxOffset-x.MinOffset)
			if st.PartitionLabels {
				ps := strconv.Itoa(p)
				counter(dPartMsgsIn, x.MsgsIn, t.Name, ps)
				counter(dPartBytesIn, x.BytesIn, t.Name, ps)
				counter(dPartBytesOut, x.BytesOut, t.Name, ps)
				counter(dPartMsgsOut, x.MsgsOut, t.Name, ps)
				gauge(dPartMsgs, float64(x.Messages), t.Name, ps)
				gauge(dPartMaxOffset, float64(x.MaxOffset), t.Name, ps)
				gauge(dPartMinOffset, float64(x.MinOffset), t.Name, ps)
			}
		}
		gauge(dTopicParts, float64(len(t.Partitions)), t.Name)
		counter(dTopicMsgsIn, in, t.Name)
		counter(dTopicBytesIn, bin, t.Name)
		counter(dTopicBytesOut, bout, t.Name)
		counter(dTopicMsgsOut, mout, t.Name)
		counter(dTopicGets, gets, t.Name)
		gauge(dTopicMsgs, float64(msgs), t.Name)
		gauge(dTopicBytes, float64(size), t.Name)
		if g, ok := strings.CutSuffix(t.Name, ".dlq"); ok && g != "" {
			gauge(dDLQMsgs, float64(msgs), g)
		} else if g, ok := strings.CutSuffix(t.Name, ".retry"); ok && g != "" {
			counter(dRetriesIn, in, g)
		}
	}
	gauge(dIndexing, float64(st.Indexing))

	for _, j := range st.Journals {
		d := j.Dir
		counter(dJRounds, j.Rounds, d)
		counter(dJFsyncs, j.Fsyncs, d)
		counter(dJBytes, j.Bytes, d)
		counter(dJCkpts, j.Checkpoints, d)
		counter(dJSyncfs, j.Syncfs, d)
		counter(dJLed, j.Led, d)
		gauge(dJLag, float64(j.Behind), d)
		gauge(dJCkptAge, j.CheckpointAge, d)
		gauge(dJFailed, flag(j.Failed), d)
	}

	for _, k := range st.KeyIndexes {
		gauge(dKIBytes, float64(k.Bytes), k.Dir)
		gauge(dKIEntries, float64(k.Entries), k.Dir)
		gauge(dKILag, float64(k.Lag), k.Dir)
	}

	for _, dd := range st.Disks {
		gauge(dDiskUsed, float64(dd.Used), dd.Dir)
		gauge(dDiskFree, float64(dd.Free), dd.Dir)
		gauge(dDiskRatio, dd.Ratio, dd.Dir)
		gauge(dDiskFull, flag(dd.Full), dd.Dir)
	}

	for _, p := range st.Plugins {
		gauge(dPluginUp, flag(p.PID != 0), p.Kind, p.Name)
		counter(dPluginCalls, p.Calls, p.Kind, p.Name)
		counter(dPluginErrors, p.Errors, p.Kind, p.Name)
		counter(dPluginRestart, p.Restarts, p.Kind, p.Name)
	}

	for _, g := range st.Lags {
		if st.PartitionLabels {
			for _, p := range g.Partitions {
				gauge(dGroupPartLag, float64(p.Bytes), g.Group, g.Topic, strconv.Itoa(p.Partition))
			}
		}
		gauge(dGroupLag, float64(g.Bytes), g.Group, g.Topic)
		gauge(dGroupLagMsgs, float64(g.Messages), g.Group, g.Topic)
	}
}

// Committed is a group's offsets committed on a topic, by partition (-1:
// none).
type Committed struct {
	Group, Topic string
	Offsets      []int64
}

// AddLags sets st.Lags: each committed group's lag on st's topics, in
// bytes from the partitions' max offsets, and in messages as msgs counts
// them (partition p of topic, ps, from off to its max offset).
func (st *Status) AddLags(committed []Committed, msgs func(topic string, p int, ps PartitionStatus, off int64) int64) {
	at := make(map[string][]PartitionStatus, len(st.Topics))
	for _, t := range st.Topics {
		at[t.Name] = t.Partitions
	}
	for _, g := range committed {
		parts, ok := at[g.Topic]
		if !ok {
			continue
		}
		gl := GroupLagStatus{Group: g.Group, Topic: g.Topic}
		for p, off := range g.Offsets {
			if p >= len(parts) || off < 0 {
				continue
			}
			l := max(parts[p].MaxOffset-off, 0)
			gl.Bytes += l
			gl.Messages += msgs(g.Topic, p, parts[p], off)
			if st.PartitionLabels {
				gl.Partitions = append(gl.Partitions, PartitionLag{Partition: p, Bytes: l})
			}
		}
		st.Lags = append(st.Lags, gl)
	}
}

// Summary is st's counters as GET /api/v1/stats shows them; the caller
// fills the fields a Status does not hold.
func (st *Status) Summary() Summary {
	return Summary{
		BrokerID: st.BrokerID, Version: st.Version,
		Connections: st.Connections, RefusedConnections: st.RefusedConns, TimedOutConnections: st.TimedOutConns,
		AuthFailures: st.AuthFailures, AuthThrottled: st.AuthThrottled, ProtocolErrors: st.ProtocolErrors,
		CmdPut: st.Puts, CmdGet: st.Gets, CmdOffset: st.Offsets, CmdCommit: st.Commits, CmdFetch: st.Fetches,
		GetMiss: st.GetMisses, PutFailed: st.PutFailed, CommitFailed: st.CommitFailed, DiskFullRejects: st.DiskRejects,
		BufferedBytes: st.BufferedBytes, TxCommit: st.TxCommits, TxRollback: st.TxRollbacks,
	}
}

// Info is topic t as the admin API describes it, with its partitions when
// parts; the caller fills its configuration and source.
func (t TopicStatus) Info(parts bool) TopicInfo {
	j := TopicInfo{Name: t.Name, Partitions: len(t.Partitions)}
	for p, x := range t.Partitions {
		j.Messages += x.Messages
		j.SizeBytes += x.MaxOffset - x.MinOffset
		if parts {
			j.PartitionList = append(j.PartitionList, PartitionInfo{Partition: p, MinOffset: x.MinOffset, MaxOffset: x.MaxOffset,
				Messages: x.Messages, MessagesIn: x.MsgsIn, BytesIn: x.BytesIn, MessagesOut: x.MsgsOut, BytesOut: x.BytesOut, GetRequests: x.Gets})
		}
	}
	return j
}

// Traffic is each topic's traffic counters, for the dashboard's samples.
func Traffic(ts []TopicStatus) []TopicTraffic {
	out := make([]TopicTraffic, 0, len(ts))
	for _, t := range ts {
		x := TopicTraffic{Name: t.Name}
		for _, p := range t.Partitions {
			x.MsgsIn, x.BytesIn, x.BytesOut = x.MsgsIn+p.MsgsIn, x.BytesIn+p.BytesIn, x.BytesOut+p.BytesOut
		}
		out = append(out, x)
	}
	return out
}

// GroupLags is lags (by group and topic) as the dashboard samples them.
func GroupLags(lags map[[2]string]int64) []GroupLag {
	var out []GroupLag
	for k, lag := range lags {
		out = append(out, GroupLag{Group: k[0], Topic: k[1], Lag: lag})
	}
	return out
}
