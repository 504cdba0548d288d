package httpapi

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Registry is the broker's Prometheus registry: the broker's Collector,
// the Go and process collectors, and the latency and batch-size
// histograms, the only series observed on the hot path, through the
// observers here resolved once (an Observe is a few atomic adds).
type Registry struct {
	*prometheus.Registry
	// Put and Get are the request latency histograms; Put is sampled (at
	// most one put in flight per connection is timed).
	Put, Get prometheus.Observer
	// fsyncJournal, fsyncSegment and fsyncCheckpoint are
	// metaq_fsync_duration_seconds by kind; rounds is
	// metaq_journal_commit_round_appends.
	fsyncJournal, fsyncSegment, fsyncCheckpoint, rounds prometheus.Observer
}

// latencyBuckets span 50 µs to about 1.6 s.
var latencyBuckets = prometheus.ExponentialBuckets(0.00005, 2, 16)

// NewRegistry returns the registry of c and the histograms.
func NewRegistry(c *Collector) *Registry {
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
		Help:    "Duration of fsync/fdatasync calls: kind journal (group-commit rounds), checkpoint (the segment fsyncs and the syncfs of the journal's checkpoints) or segment (threshold-mode flushes, rolls, closes).",
		Buckets: latencyBuckets,
	}, []string{"kind"})
	rounds := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "metaq_journal_commit_round_appends",
		Help:    "Appends (puts and mputs) committed by one group-commit journal round, all partitions of the data directory together.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 12),
	})
	r := &Registry{Registry: prometheus.NewRegistry(), Put: put, Get: get, rounds: rounds,
		fsyncJournal: fsync.WithLabelValues("journal"), fsyncSegment: fsync.WithLabelValues("segment"),
		fsyncCheckpoint: fsync.WithLabelValues("checkpoint")}
	r.MustRegister(put, get, fsync, rounds,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		c)
	return r
}

// Handler serves every series (/metrics for an admin).
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	})
}

// StoreObserver is a store.Observer feeding the fsync and round
// histograms, and a store.CheckpointObserver.
type StoreObserver struct {
	fsync, rounds, ckpt prometheus.Observer
}

// ObserveFsync observes an fsync's duration.
func (o StoreObserver) ObserveFsync(d time.Duration) { o.fsync.Observe(d.Seconds()) }

// ObserveCheckpointFsync observes the duration of a checkpoint's segment
// fsync or syncfs (kind checkpoint; journals only, else as ObserveFsync).
func (o StoreObserver) ObserveCheckpointFsync(d time.Duration) {
	if o.ckpt == nil {
		o.ObserveFsync(d)
		return
	}
	o.ckpt.Observe(d.Seconds())
}

// ObserveCommitRound observes a journal round's appends (journals only).
func (o StoreObserver) ObserveCommitRound(n int) {
	if o.rounds != nil {
		o.rounds.Observe(float64(n))
	}
}

// JournalObserver and SegmentObserver are the observers of journals and
// partition logs.
func (r *Registry) JournalObserver() StoreObserver {
	return StoreObserver{fsync: r.fsyncJournal, rounds: r.rounds, ckpt: r.fsyncCheckpoint}
}

// SegmentObserver: see JournalObserver.
func (r *Registry) SegmentObserver() StoreObserver { return StoreObserver{fsync: r.fsyncSegment} }
