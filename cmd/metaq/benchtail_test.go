package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestHistQuantile: percentiles of a histogram delta, interpolated within
// buckets, with hostile inputs: nothing, +Inf only, one finite bucket,
// a counter reset, NaN and out-of-order buckets.
func TestHistQuantile(t *testing.T) {
	inf := math.Inf(1)
	h := func(le []float64, cum []float64, count, sum float64) promHist {
		return promHist{LE: le, Cum: cum, Count: count, Sum: sum}
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for _, c := range []struct {
		name string
		h    promHist
		q    float64
		want float64
		ok   bool
	}{
		{"empty", promHist{}, 0.5, 0, false},
		{"no observations", h([]float64{1, 2, inf}, []float64{0, 0, 0}, 0, 0), 0.5, 0, false},
		{"+Inf only", h([]float64{inf}, []float64{5}, 5, 10), 0.5, 0, false},
		{"one finite bucket, no +Inf", h([]float64{2}, []float64{4}, 4, 3), 0.5, 1, true},
		{"first bucket from 0", h([]float64{1, 2, inf}, []float64{10, 10, 10}, 10, 5), 0.5, 0.5, true},
		{"interpolated", h([]float64{1, 2, inf}, []float64{0, 10, 10}, 10, 15), 0.5, 1.5, true},
		{"rank in +Inf: highest finite bound", h([]float64{1, 2, inf}, []float64{1, 2, 10}, 10, 50), 0.99, 2, true},
		{"q 1", h([]float64{1, 2, inf}, []float64{5, 10, 10}, 10, 12), 1, 2, true},
		{"out of order, decreasing cum", h([]float64{2, 1, inf}, []float64{10, 0, 10}, 10, 15), 0.5, 1.5, true},
		{"NaN bucket ignored", h([]float64{1, math.NaN(), 2, inf}, []float64{0, 3, 10, 10}, 10, 15), 0.5, 1.5, true},
		{"NaN q", h([]float64{1, inf}, []float64{1, 1}, 1, 1), math.NaN(), 0, false},
		{"length mismatch", h([]float64{1, inf}, []float64{1}, 1, 1), 0.5, 0, false},
	} {
		got, ok := histQuantile(c.h, c.q)
		if ok != c.ok || (ok && !near(got, c.want)) {
			t.Errorf("%s: histQuantile = %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}

	before := h([]float64{1, 2, inf}, []float64{100, 150, 160}, 160, 200)
	after := h([]float64{1, 2, inf}, []float64{100, 160, 170}, 170, 215)
	d := histDelta(before, after)
	if d.Count != 10 || d.Sum != 15 || d.Cum[0] != 0 || d.Cum[1] != 10 || d.Cum[2] != 10 {
		t.Fatalf("delta %+v", d)
	}
	if v, ok := histQuantile(d, 0.5); !ok || !near(v, 1.5) {
		t.Fatalf("delta p50 = %v, %v; want 1.5 (only the row's observations)", v, ok)
	}
	// A counter reset (the broker restarted): after alone.
	reset := h([]float64{1, 2, inf}, []float64{3, 4, 4}, 4, 2)
	if d := histDelta(before, reset); d.Count != 4 || d.Cum[0] != 3 {
		t.Fatalf("reset delta %+v", d)
	}
	// A changed layout counts as a reset too; a missing before is zero.
	if d := histDelta(before, h([]float64{5, inf}, []float64{170, 170}, 170, 1)); d.Count != 170 {
		t.Fatalf("layout change delta %+v", d)
	}
	if d := histDelta(promHist{}, after); d.Count != 170 {
		t.Fatalf("no before %+v", d)
	}
	if s := summarise(histDelta(after, after)); s.Count != 0 || s.P50S != 0 || s.String() != "n=0" {
		t.Fatalf("empty delta summary %+v", s)
	}
}

// TestParseMetrics reads the histograms and counters bench durable
// needs from a /metrics exposition and ignores everything else.
func TestParseMetrics(t *testing.T) {
	text := `# HELP metaq_fsync_duration_seconds x
# TYPE metaq_fsync_duration_seconds histogram
metaq_fsync_duration_seconds_bucket{kind="journal",le="5e-05"} 1
metaq_fsync_duration_seconds_bucket{kind="journal",le="0.0001"} 3
metaq_fsync_duration_seconds_bucket{kind="journal",le="+Inf"} 4
metaq_fsync_duration_seconds_sum{kind="journal"} 0.5
metaq_fsync_duration_seconds_count{kind="journal"} 4
metaq_fsync_duration_seconds_bucket{kind="checkpoint",le="+Inf"} 2
metaq_fsync_duration_seconds_count{kind="checkpoint"} 2
metaq_put_duration_seconds_bucket{le="0.0001"} 7
metaq_put_duration_seconds_bucket{le="+Inf"} 9
metaq_put_duration_seconds_count 9
metaq_put_duration_seconds_sum 0.25
metaq_journal_fsyncs_total{data_dir="/a"} 10
metaq_journal_fsyncs_total{data_dir="/b"} 5
metaq_journal_written_bytes_total{data_dir="/a"} 3e+06
metaq_get_duration_seconds_count 99
garbage line
metaq_put_duration_seconds_bucket{le="oops"} 1
`
	m := parseMetrics(strings.NewReader(text))
	j := m.hists["journal_fsync"]
	if len(j.LE) != 3 || j.Cum[1] != 3 || !math.IsInf(j.LE[2], 1) || j.Count != 4 || j.Sum != 0.5 {
		t.Fatalf("journal %+v", j)
	}
	if c := m.hists["checkpoint_fsync"]; c.Count != 2 || len(c.LE) != 1 {
		t.Fatalf("checkpoint %+v", c)
	}
	if p := m.hists["put"]; p.Count != 9 || len(p.LE) != 2 || p.Sum != 0.25 {
		t.Fatalf("put %+v", p)
	}
	if m.counters["metaq_journal_fsyncs_total"] != 15 || m.counters["metaq_journal_written_bytes_total"] != 3e6 {
		t.Fatalf("counters %+v", m.counters)
	}
	b := brokerDelta(metricsScrape{}, m)
	if b.BytesPerFsync != 2e5 || b.Series["put"].Count != 9 || b.Series["segment_fsync"].Count != 0 {
		t.Fatalf("broker %+v", b)
	}
}

// TestNewTail: the bound is the larger of 8 x p50 and 1.5 x the raw
// fdatasync p99.9 + p50, and says which.
func TestNewTail(t *testing.T) {
	ms := time.Millisecond
	c := latSummary{N: 1000, P50: ms, P99: 3 * ms, P999: 9 * ms, P9999: 10 * ms, Max: 11 * ms}
	tl := newTail(c, latSummary{N: 10, P999: 2 * ms}, "x", nil)
	if tl.Bound != 8*ms || tl.BoundBy != "8 x p50" || tl.Met || tl.P999OverP50 != 9 {
		t.Fatalf("%+v", tl)
	}
	tl = newTail(c, latSummary{N: 10, P999: 6 * ms}, "x", nil)
	if tl.Bound != 10*ms || !strings.HasPrefix(tl.BoundBy, "1.5 x raw") || !tl.Met {
		t.Fatalf("%+v", tl)
	}
	if tl := newTail(latSummary{}, latSummary{}, "x", nil); tl.Met || tl.P999OverP50 != 0 {
		t.Fatalf("no samples: %+v", tl)
	}
}
