package broker

import (
	"net/http"
	"path/filepath"
	"sort"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Prometheus metrics (/metrics, docs/http.md).
//
// The hot path does not call Prometheus for counters: the broker's own
// atomic counters (counters, partCounters, the stores' Stats) are read at
// scrape time into an httpapi.Status (metricsStatus), from which
// httpapi.Collector builds constant metrics.
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
		httpapi.NewCollector(b.metricsStatus, b.collectExtra))
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

// desc is a series' description, for the series connlimits.go keeps.
func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// collectExtra adds the series kept outside the Status: connection
// limits and the HTTP listener's.
func (b *Broker) collectExtra(ch chan<- prometheus.Metric) {
	b.collectConnLimits(ch) // connlimits.go
	b.web.srv.Collect(ch)   // core/httpapi
}

// metricsStatus reads what /metrics shows (httpapi.Collector), at each
// scrape.
func (b *Broker) metricsStatus() httpapi.Status {
	b.countOut() // msgsout.go: messages out are counted at scrapes
	cfg := b.config()
	st := httpapi.Status{
		BrokerID: cfg.BrokerID, Version: Version, StartSeconds: float64(b.start.UnixNano()) / 1e9,
		Connections: b.stats.connections.Load(), RefusedConns: b.stats.refusedConns.Load(), TimedOutConns: b.stats.timedOutConns.Load(),
		AuthFailures: b.stats.authFailures.Load(), AuthThrottled: b.stats.authThrottled.Load(), ProtocolErrors: b.stats.protocolErrors.Load(),
		Puts: b.stats.cmdPut.Load(), Gets: b.stats.cmdGet.Load(), Offsets: b.stats.cmdOffset.Load(),
		PutFailed: b.stats.putFailed.Load(), GetMisses: b.stats.getMiss.Load(), DiskRejects: b.disks.Rejects.Load(),
		BufferedBytes: b.budget.used.Load(), PartitionLabels: cfg.MetricsPartitionLabels,
	}
	ofs := b.offsets.Stats()
	st.Commits, st.Fetches, st.CommitFailed = ofs.Commits, ofs.Fetches, ofs.CommitFailed
	tc := b.txm.Counts()
	st.TxCommits, st.TxRollbacks = tc.Commits, tc.Rollbacks
	st.Ready = httpapi.Ready(b.readiness())
	st.Repl = b.replStatus() // replobs.go

	topics := b.topicList()
	partSizes := make(map[string][]groups.PartSize, len(topics))
	logs := make(map[string]*topic, len(topics))
	for _, t := range topics {
		ts := httpapi.TopicStatus{Name: t.name, Partitions: make([]httpapi.PartitionStatus, len(t.parts))}
		parts := make([]groups.PartSize, len(t.parts))
		for p, l := range t.parts {
			pc := &t.pc[p]
			n, mx, mn := l.MessageCount(), l.MaxOffset(), l.MinOffset()
			if !l.MessageCountComplete() {
				st.Indexing++
			}
			ts.Partitions[p] = httpapi.PartitionStatus{MsgsIn: pc.msgsIn.Load(), BytesIn: pc.bytesIn.Load(), BytesOut: pc.bytesOut.Load(),
				MsgsOut: pc.msgsOut.Load(), Gets: pc.gets.Load(), Messages: n, MinOffset: mn, MaxOffset: mx}
			parts[p] = groups.PartSize{Min: mn, Max: mx, Msgs: n}
		}
		st.Topics = append(st.Topics, ts)
		logs[t.name] = t
		partSizes[t.name] = parts
	}

	dirs := make([]string, 0, len(b.journals))
	for d := range b.journals {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		j := b.journals[d]
		js := j.Stats()
		at := js.LastCheckpoint
		if at.IsZero() {
			at = b.start
		}
		age := time.Since(at).Seconds()
		if js.UpToDate {
			age = 0 // idle: nothing written since the last checkpoint, which makes no new one
		}
		st.Journals = append(st.Journals, httpapi.JournalStatus{Dir: d, Rounds: js.Rounds, Fsyncs: js.Fsyncs, Bytes: js.Bytes,
			Checkpoints: js.Checkpoints, Syncfs: js.Syncfs, Led: js.Led, Behind: js.Behind, CheckpointAge: age, Failed: j.Err() != nil})
	}

	for _, dd := range b.disks.List() {
		u := dd.Last()
		if u == nil || u.Err != nil {
			continue
		}
		st.Disks = append(st.Disks, httpapi.DiskStatus{Dir: filepath.Clean(dd.Dir()), Used: u.UsedBytes, Free: u.FreeBytes,
			Ratio: u.Space, Full: dd.Full()})
	}

	st.Plugins = httpBackend{b}.Plugins()

	for _, g := range b.committed.Snapshot() {
		t, ok := logs[g.Topic]
		if !ok {
			continue
		}
		sizes := partSizes[g.Topic]
		gl := httpapi.GroupLagStatus{Group: g.Group, Topic: g.Topic}
		for p, off := range g.Offsets {
			if p >= len(sizes) || off < 0 {
				continue
			}
			l := max(sizes[p].Max-off, 0)
			gl.Bytes += l
			n, _ := groups.LagMessages(t.parts[p], sizes[p], off)
			gl.Messages += n
			if st.PartitionLabels {
				gl.Partitions = append(gl.Partitions, httpapi.PartitionLag{Partition: p, Bytes: l})
			}
		}
		st.Lags = append(st.Lags, gl)
	}
	return st
}
