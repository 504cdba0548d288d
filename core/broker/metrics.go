package broker

import (
	"time"

	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/core/store"
	"github.com/prometheus/client_golang/prometheus"
)

// Prometheus metrics (/metrics, docs/http.md).
//
// The hot path does not call Prometheus for counters: the broker's own
// atomic counters (counters, partition.Counters, the stores' Stats) are read at
// scrape time into an httpapi.Status (metricsStatus), from which
// httpapi.Collector builds constant metrics. Only the histograms of
// httpapi.Registry are observed on the hot path.

// monoEpoch is the origin of monoNow, a monotonic clock in nanoseconds
// that fits an atomic.Int64.
var monoEpoch = time.Now()

func monoNow() int64 { return int64(time.Since(monoEpoch)) }

// metrics is the broker's Prometheus registry (core/httpapi
// registry.go), with the hot path's histograms at hand.
type metrics struct {
	*httpapi.Registry
	// put and get are the request latency histograms; put is sampled (at
	// most one put in flight per connection is timed: conn.probeTok).
	put, get prometheus.Observer
}

func newMetrics(b *Broker) *metrics {
	r := httpapi.NewRegistry(httpapi.NewCollector(b.metricsStatus, b.collectExtra))
	return &metrics{Registry: r, put: r.Put, get: r.Get}
}

// collectExtra adds the series kept outside the Status: connection
// limits and the HTTP listener's.
func (b *Broker) collectExtra(ch chan<- prometheus.Metric) {
	b.unauth.Collect(ch)   // core/security: connection limits
	b.tlsFails.Collect(ch) // and failed TLS handshakes
	b.web.srv.Collect(ch)  // core/httpapi
	b.delay.Collect(ch)    // core/timer
}

// counters is the broker's counters (the Status without its topics,
// journals, disks, plugins, lags and replication).
func (b *Broker) counters() httpapi.Status {
	cfg := b.config()
	st := httpapi.Status{
		BrokerID: cfg.BrokerID, Version: Version, StartSeconds: float64(b.start.UnixNano()) / 1e9,
		Connections: b.stats.connections.Load(), RefusedConns: b.stats.refusedConns.Load(), TimedOutConns: b.stats.timedOutConns.Load(),
		AuthFailures: b.stats.authFailures.Load(), AuthThrottled: b.stats.authThrottled.Load(), ProtocolErrors: b.stats.protocolErrors.Load(),
		Puts: b.stats.cmdPut.Load(), Gets: b.stats.cmdGet.Load(), Offsets: b.stats.cmdOffset.Load(),
		PutFailed: b.stats.putFailed.Load(), GetMisses: b.stats.getMiss.Load(), DiskRejects: b.disks.Rejects.Load(),
		BufferedBytes: b.budget.Used(), PartitionLabels: cfg.MetricsPartitionLabels,
	}
	ofs := b.offsets.Stats()
	st.Commits, st.Fetches, st.CommitFailed = ofs.Commits, ofs.Fetches, ofs.CommitFailed
	tc := b.txm.Counts()
	st.TxCommits, st.TxRollbacks = tc.Commits, tc.Rollbacks
	return st
}

// metricsStatus reads what /metrics shows (httpapi.Collector), at each
// scrape.
func (b *Broker) metricsStatus() httpapi.Status {
	b.countOut() // msgsout.go: messages out are counted at scrapes
	st := b.counters()
	st.Ready = httpapi.Ready(b.readiness())
	st.Repl = b.replStatus() // replobs.go

	topics := b.topicList()
	logs := make(map[string][]*store.Log, len(topics))
	for _, t := range topics {
		ts, indexing := httpapi.TopicStatusOf(t)
		st.Topics, st.Indexing = append(st.Topics, ts), st.Indexing+indexing
		logs[t.Name()] = t.Parts
	}
	st.Journals, st.Disks = httpapi.JournalStatuses(b.journals, b.start), httpapi.DiskStatuses(b.disks)
	for _, d := range b.indexes.Stats() {
		st.KeyIndexes = append(st.KeyIndexes, httpapi.KeyIndexStatus{Dir: d.Dir, Bytes: d.Bytes, Entries: d.Entries, Lag: d.Lag})
	}
	st.Plugins = httpBackend{b}.Plugins()
	st.AddGroupLags(b.committed.Snapshot(), logs)
	return st
}
