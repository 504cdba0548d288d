package broker

import (
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/core/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Prometheus metrics (/metrics, docs/http.md).
//
// The hot path does not call Prometheus for counters: the broker's own
// atomic counters (counters, partCounters, the stores' Stats) are read at
// scrape time by brokerCollector, which builds constant metrics from them.
// Only the latency and batch-size histograms are observed on the hot path,
// through observers resolved once (an Observe is a few atomic adds).

// partCounters are one partition's traffic counters, always kept (unlike
// topicRealtime, which `stats reset` clears and stat = false turns off).
type partCounters struct {
	msgsIn, bytesIn, bytesOut, gets atomic.Int64
	// msgsOut is counted off the get path (msgsout.go).
	msgsOut atomic.Int64
	_       [24]byte // keep neighbouring partitions' counters off one cache line
}

// monoEpoch is the origin of monoNow, a monotonic clock in nanoseconds
// that fits an atomic.Int64.
var monoEpoch = time.Now()

func monoNow() int64 { return int64(time.Since(monoEpoch)) }

// metrics are the broker's histograms and its Prometheus registry.
type metrics struct {
	reg *prometheus.Registry
	// put and get are the request latency histograms; put is sampled (at
	// most one put in flight per connection is timed: conn.probeTok).
	put, get prometheus.Observer
	// fsyncJournal and fsyncSegment are metaq_fsync_duration_seconds by
	// kind; rounds is metaq_journal_commit_round_appends.
	fsyncJournal, fsyncSegment prometheus.Observer
	rounds                     prometheus.Observer
}

// latencyBuckets span 50 µs to about 1.6 s.
var latencyBuckets = prometheus.ExponentialBuckets(0.00005, 2, 16)

func newMetrics(b *Broker) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	put := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "metaq_put_duration_seconds",
		Help:    "Time from a put or mput being parsed to its reply being queued (sampled: at most one put in flight per connection is timed).",
		Buckets: latencyBuckets,
	})
	get := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "metaq_get_duration_seconds",
		Help:    "Time to serve a get, from its parse to its reply written.",
		Buckets: latencyBuckets,
	})
	fsync := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "metaq_fsync_duration_seconds",
		Help:    "Duration of fsync/fdatasync calls: kind journal (group-commit rounds) or segment (checkpoints, threshold-mode flushes, rolls).",
		Buckets: latencyBuckets,
	}, []string{"kind"})
	rounds := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "metaq_journal_commit_round_appends",
		Help:    "Appends (puts and mputs) committed by one group-commit journal round, all partitions of the data directory together.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 12),
	})
	m.put, m.get, m.rounds = put, get, rounds
	m.fsyncJournal = fsync.WithLabelValues("journal")
	m.fsyncSegment = fsync.WithLabelValues("segment")
	m.reg.MustRegister(put, get, fsync, rounds,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&brokerCollector{b: b})
	return m
}

// storeObserver is a store.Observer feeding the fsync and round histograms.
type storeObserver struct {
	fsync, rounds prometheus.Observer
}

func (o storeObserver) ObserveFsync(d time.Duration) { o.fsync.Observe(d.Seconds()) }

func (o storeObserver) ObserveCommitRound(n int) {
	if o.rounds != nil {
		o.rounds.Observe(float64(n))
	}
}

// journalObserver and segmentObserver are the observers of journals and
// partition logs.
func (m *metrics) journalObserver() storeObserver {
	return storeObserver{fsync: m.fsyncJournal, rounds: m.rounds}
}

func (m *metrics) segmentObserver() storeObserver { return storeObserver{fsync: m.fsyncSegment} }

// handler serves /metrics.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	})
}

// brokerCollector reads the broker's counters at scrape time.
type brokerCollector struct{ b *Broker }

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

// Describe sends nothing: the collector is unchecked (its series depend
// on the topics, groups and plugins of the moment).
func (c *brokerCollector) Describe(chan<- *prometheus.Desc) {}

func (c *brokerCollector) Collect(ch chan<- prometheus.Metric) {
	b := c.b
	b.countOut() // msgsout.go: messages out are counted at scrapes
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(dBuildInfo, 1, Version, strconv.Itoa(b.config().BrokerID))
	gauge(dUp, float64(b.start.UnixNano())/1e9)
	gauge(dConnections, float64(b.stats.connections.Load()))
	counter(dConnRefused, b.stats.refusedConns.Load())
	counter(dConnTimedOut, b.stats.timedOutConns.Load())
	counter(dAuthFailures, b.stats.authFailures.Load())
	counter(dAuthThrottled, b.stats.authThrottled.Load())
	b.collectConnLimits(ch) // connlimits.go
	counter(dProtoErrors, b.stats.protocolErrors.Load())
	counter(dRequests, b.stats.cmdPut.Load(), "put")
	counter(dRequests, b.stats.cmdGet.Load(), "get")
	counter(dRequests, b.stats.cmdOffset.Load(), "offset")
	counter(dRequests, b.offsets.Stats().Commits, "commit")
	counter(dRequests, b.offsets.Stats().Fetches, "fetch")
	counter(dPutFailed, b.stats.putFailed.Load())
	counter(dGetMisses, b.stats.getMiss.Load())
	counter(dDiskRejects, b.disks.rejects.Load())
	gauge(dBuffered, float64(b.budget.used.Load()))
	counter(dCommits, b.offsets.Stats().Commits)
	counter(dCommitFailed, b.offsets.Stats().CommitFailed)
	counter(dTxOpen, b.txm.Counts().Commits, "commit")
	counter(dTxOpen, b.txm.Counts().Rollbacks, "rollback")
	ready := 0.0
	if httpapi.Ready(b.readiness()) {
		ready = 1
	}
	gauge(dReady, ready)
	b.collectReplication(gauge, counter) // replobs.go
	b.web.srv.Collect(ch)                // core/httpapi

	topics := b.topicList()
	gauge(dTopics, float64(len(topics)))
	indexing := 0
	perPart := b.config().MetricsPartitionLabels
	maxOffsets := make(map[string][]int64, len(topics))
	partSizes := make(map[string][]partSize, len(topics))
	logs := make(map[string]*topic, len(topics))
	for _, t := range topics {
		var in, bin, bout, mout, gets, msgs, size int64
		maxs := make([]int64, len(t.parts))
		parts := make([]partSize, len(t.parts))
		for p, l := range t.parts {
			pc := &t.pc[p]
			pin, pbin, pbout := pc.msgsIn.Load(), pc.bytesIn.Load(), pc.bytesOut.Load()
			pmout := pc.msgsOut.Load()
			in, bin, bout, mout, gets = in+pin, bin+pbin, bout+pbout, mout+pmout, gets+pc.gets.Load()
			n, mx, mn := l.MessageCount(), l.MaxOffset(), l.MinOffset()
			if !l.MessageCountComplete() {
				indexing++
			}
			msgs, size = msgs+n, size+(mx-mn)
			maxs[p] = mx
			parts[p] = partSize{min: mn, max: mx, msgs: n}
			if perPart {
				ps := strconv.Itoa(p)
				counter(dPartMsgsIn, pin, t.name, ps)
				counter(dPartBytesIn, pbin, t.name, ps)
				counter(dPartBytesOut, pbout, t.name, ps)
				counter(dPartMsgsOut, pmout, t.name, ps)
				gauge(dPartMsgs, float64(n), t.name, ps)
				gauge(dPartMaxOffset, float64(mx), t.name, ps)
				gauge(dPartMinOffset, float64(mn), t.name, ps)
			}
		}
		maxOffsets[t.name] = maxs
		logs[t.name] = t
		partSizes[t.name] = parts
		gauge(dTopicParts, float64(len(t.parts)), t.name)
		counter(dTopicMsgsIn, in, t.name)
		counter(dTopicBytesIn, bin, t.name)
		counter(dTopicBytesOut, bout, t.name)
		counter(dTopicMsgsOut, mout, t.name)
		counter(dTopicGets, gets, t.name)
		gauge(dTopicMsgs, float64(msgs), t.name)
		gauge(dTopicBytes, float64(size), t.name)
	}

	gauge(dIndexing, float64(indexing))

	dirs := make([]string, 0, len(b.journals))
	for d := range b.journals {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		j := b.journals[d]
		st := j.Stats()
		counter(dJRounds, st.Rounds, d)
		counter(dJFsyncs, st.Fsyncs, d)
		counter(dJBytes, st.Bytes, d)
		counter(dJCkpts, st.Checkpoints, d)
		counter(dJSyncfs, st.Syncfs, d)
		counter(dJLed, st.Led, d)
		gauge(dJLag, float64(st.Behind), d)
		at := st.LastCheckpoint
		if at.IsZero() {
			at = b.start
		}
		age := time.Since(at).Seconds()
		if st.UpToDate {
			age = 0 // idle: nothing written since the last checkpoint, which makes no new one
		}
		gauge(dJCkptAge, age, d)
		failed := 0.0
		if j.Err() != nil {
			failed = 1
		}
		gauge(dJFailed, failed, d)
	}

	for _, dd := range b.disks.list() {
		u := dd.last.Load()
		if u == nil || u.err != nil {
			continue
		}
		dir := filepath.Clean(dd.dir)
		gauge(dDiskUsed, float64(u.usedBytes), dir)
		gauge(dDiskFree, float64(u.freeBytes), dir)
		gauge(dDiskRatio, u.space, dir)
		full := 0.0
		if dd.full.Load() {
			full = 1
		}
		gauge(dDiskFull, full, dir)
	}

	if b.plugins != nil {
		for _, p := range b.plugins.List() {
			up := 0.0
			if p.PID != 0 {
				up = 1
			}
			kind := string(p.Kind)
			gauge(dPluginUp, up, kind, p.Name)
			counter(dPluginCalls, p.Calls, kind, p.Name)
			counter(dPluginErrors, p.Errors, kind, p.Name)
			counter(dPluginRestart, p.Restarts, kind, p.Name)
		}
	}

	for _, g := range b.committed.Snapshot() {
		maxs, ok := maxOffsets[g.Topic]
		if !ok {
			continue
		}
		var lag, lagMsgs int64
		sizes := partSizes[g.Topic]
		t := logs[g.Topic]
		for p, off := range g.Offsets {
			if p >= len(maxs) || off < 0 {
				continue
			}
			l := max(maxs[p]-off, 0)
			lag += l
			n, _ := lagMessages(t.parts[p], sizes[p], off)
			lagMsgs += n
			if perPart {
				gauge(dGroupPartLag, float64(l), g.Group, g.Topic, strconv.Itoa(p))
			}
		}
		gauge(dGroupLag, float64(lag), g.Group, g.Topic)
		gauge(dGroupLagMsgs, float64(lagMsgs), g.Group, g.Topic)
	}
}

// lagMessages is the number of messages of l from committed to s.max
// (s is l's offsets and count, read once per scrape): counted with the
// record-count index, or, while that does not cover the range yet (after
// a restart, until the background scrub has indexed the old segments),
// estimated (exact false).
func lagMessages(l *store.Log, s partSize, committed int64) (n int64, exact bool) {
	if committed >= s.max {
		return 0, true
	}
	if n, exact, err := l.CountRecords(committed, s.max); err == nil && exact {
		return n, true
	}
	return s.lagMessages(committed), false
}

// partSize is a partition's offsets and message count at a scrape.
type partSize struct{ min, max, msgs int64 }

// lagMessages is the number of messages from committed to the end: 0 at
// the end, every message from the start, else the byte lag over the mean
// record size (0 while the count is not known yet).
func (s partSize) lagMessages(committed int64) int64 {
	lag := s.max - committed
	switch {
	case lag <= 0:
		return 0
	case s.msgs < 0:
		return 0
	case committed <= s.min:
		return s.msgs
	case s.max > s.min:
		return (lag*s.msgs + (s.max-s.min)/2) / (s.max - s.min)
	}
	return 0
}
