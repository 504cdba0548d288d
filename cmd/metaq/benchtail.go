package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The tail figures of bench durable (issue 25): for each row 6 point and
// each row 7 figure, the client-side put latency percentiles with the
// issue's tail bound, and the broker's own histograms over that row only
// (the difference of two /metrics scrapes, before and after it).

// latSummary is a latency distribution from exact samples (a uniform
// reservoir beyond latSampleLimit; Max is exact).
type latSummary struct {
	N     int64         `json:"n"`
	P50   time.Duration `json:"p50_ns"`
	P99   time.Duration `json:"p99_ns"`
	P999  time.Duration `json:"p999_ns"`
	P9999 time.Duration `json:"p9999_ns"`
	Max   time.Duration `json:"max_ns"`
}

// latStats summarises the samples of recs.
func latStats(recs ...*latRec) latSummary {
	var s latSummary
	var all []int64
	for _, r := range recs {
		all = append(all, r.s...)
		s.N += r.n
		s.Max = max(s.Max, time.Duration(r.max))
	}
	if len(all) == 0 {
		return s
	}
	slices.Sort(all)
	q := func(f float64) time.Duration { return time.Duration(all[int(f*float64(len(all)-1))]) }
	s.P50, s.P99, s.P999, s.P9999 = q(0.5), q(0.99), q(0.999), q(0.9999)
	return s
}

// String prints the summary compactly.
func (s latSummary) String() string {
	return fmt.Sprintf("p50 %s p99 %s p99.9 %s p99.99 %s max %s", fmtDur(s.P50), fmtDur(s.P99), fmtDur(s.P999), fmtDur(s.P9999), fmtDur(s.Max))
}

// promHist is one Prometheus histogram as scraped: its buckets' upper
// bounds (le, +Inf included) with their cumulative counts, its count and
// its sum.
type promHist struct {
	LE    []float64
	Cum   []float64
	Count float64
	Sum   float64
}

// histDelta is after minus before: the observations made between the two
// scrapes. A counter that went down (the broker restarted) or a different
// bucket layout counts as a reset: after alone is the delta.
func histDelta(before, after promHist) promHist {
	if len(before.LE) == 0 && before.Count == 0 {
		return after
	}
	reset := after.Count < before.Count || after.Sum < before.Sum || !slices.Equal(before.LE, after.LE) || len(before.Cum) != len(after.Cum)
	for i := 0; !reset && i < len(after.Cum); i++ {
		reset = after.Cum[i] < before.Cum[i]
	}
	if reset {
		return after
	}
	d := promHist{LE: after.LE, Cum: make([]float64, len(after.Cum)), Count: after.Count - before.Count, Sum: after.Sum - before.Sum}
	for i := range after.Cum {
		d.Cum[i] = after.Cum[i] - before.Cum[i]
	}
	return d
}

// histQuantile estimates the q-quantile of h as Prometheus's
// histogram_quantile does: linear interpolation within the bucket that
// holds the rank, the first bucket starting at 0. A rank in the +Inf
// bucket gives the highest finite bound (the value is at least that). ok
// is false when h has no observations or no finite bucket.
func histQuantile(h promHist, q float64) (v float64, ok bool) {
	if len(h.LE) == 0 || len(h.LE) != len(h.Cum) || math.IsNaN(q) || q < 0 || q > 1 {
		return 0, false
	}
	type bucket struct{ le, cum float64 }
	bs := make([]bucket, 0, len(h.LE)+1)
	for i, le := range h.LE {
		if !math.IsNaN(le) && !math.IsNaN(h.Cum[i]) {
			bs = append(bs, bucket{le, h.Cum[i]})
		}
	}
	slices.SortFunc(bs, func(a, b bucket) int { return cmp.Compare(a.le, b.le) })
	if len(bs) == 0 {
		return 0, false
	}
	if !math.IsInf(bs[len(bs)-1].le, 1) {
		bs = append(bs, bucket{math.Inf(1), max(h.Count, bs[len(bs)-1].cum)})
	}
	for i := 1; i < len(bs); i++ { // cumulative counts never go down
		bs[i].cum = max(bs[i].cum, bs[i-1].cum)
	}
	total := bs[len(bs)-1].cum
	if total <= 0 || len(bs) < 2 {
		return 0, false
	}
	rank := q * total
	i, _ := slices.BinarySearchFunc(bs, rank, func(b bucket, r float64) int { return cmp.Compare(b.cum, r) })
	i = min(i, len(bs)-1)
	if math.IsInf(bs[i].le, 1) {
		return bs[len(bs)-2].le, true
	}
	lower, prev := 0.0, 0.0
	if i > 0 {
		lower, prev = bs[i-1].le, bs[i-1].cum
	} else if bs[0].le <= 0 {
		return bs[0].le, true
	}
	n := bs[i].cum - prev
	if n <= 0 {
		return lower, true
	}
	return lower + (bs[i].le-lower)*(rank-prev)/n, true
}

// histSummary is a broker histogram over one row: count and sum exact,
// the percentiles bucket-resolution estimates (histQuantile), in seconds.
type histSummary struct {
	Count  float64 `json:"count"`
	SumS   float64 `json:"sum_s"`
	P50S   float64 `json:"p50_s"`
	P99S   float64 `json:"p99_s"`
	P999S  float64 `json:"p999_s"`
	P9999S float64 `json:"p9999_s"`
}

func summarise(h promHist) histSummary {
	s := histSummary{Count: h.Count, SumS: h.Sum}
	s.P50S, _ = histQuantile(h, 0.5)
	s.P99S, _ = histQuantile(h, 0.99)
	s.P999S, _ = histQuantile(h, 0.999)
	s.P9999S, _ = histQuantile(h, 0.9999)
	return s
}

func secs(s float64) string { return fmtDur(time.Duration(s * 1e9)) }

// String prints the summary compactly.
func (s histSummary) String() string {
	if s.Count == 0 {
		return "n=0"
	}
	return fmt.Sprintf("n=%.0f sum %s p50 %s p99 %s p99.9 %s p99.99 %s", s.Count, secs(s.SumS), secs(s.P50S), secs(s.P99S), secs(s.P999S), secs(s.P9999S))
}

// metricsScrape is what bench durable reads from the broker's /metrics.
type metricsScrape struct {
	hists    map[string]promHist // by brokerSeries key
	counters map[string]float64  // summed over their labels
}

// brokerSeries are the histograms the tail figures report: key, metric
// name, kind label ("" = none).
var brokerSeries = [][3]string{
	{"journal_fsync", "metaq_fsync_duration_seconds", "journal"},
	{"checkpoint_fsync", "metaq_fsync_duration_seconds", "checkpoint"},
	{"segment_fsync", "metaq_fsync_duration_seconds", "segment"},
	{"put", "metaq_put_duration_seconds", ""},
}

// brokerCounters are the counters (and gauges) scraped with them, each
// summed over its labels: the journal's for the tail figures, and what
// bench produce --ab reports under each run (benchab.go).
var brokerCounters = []string{"metaq_journal_written_bytes_total", "metaq_journal_fsyncs_total",
	"metaq_journal_commit_rounds_total", "metaq_key_index_bytes", "go_gc_duration_seconds_count",
	"go_memstats_alloc_bytes_total", "go_memstats_mallocs_total", "go_memstats_heap_alloc_bytes"}

// parseMetrics reads the series of brokerSeries and brokerCounters from a
// Prometheus text exposition; other lines are ignored.
func parseMetrics(r io.Reader) metricsScrape {
	m := metricsScrape{hists: map[string]promHist{}, counters: map[string]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		name, labels := line[:sp], ""
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name, labels = name[:i], name[i:]
		}
		if slices.Contains(brokerCounters, name) {
			m.counters[name] += v
			continue
		}
		for _, s := range brokerSeries {
			base, ok := strings.CutPrefix(name, s[1])
			if !ok || (s[2] != "" && !strings.Contains(labels, `kind="`+s[2]+`"`)) {
				continue
			}
			h := m.hists[s[0]]
			switch base {
			case "_bucket":
				le, ok := labelValue(labels, "le")
				if !ok {
					continue
				}
				f, err := strconv.ParseFloat(le, 64)
				if err != nil {
					continue
				}
				h.LE, h.Cum = append(h.LE, f), append(h.Cum, v)
			case "_count":
				h.Count = v
			case "_sum":
				h.Sum = v
			default:
				continue
			}
			m.hists[s[0]] = h
		}
	}
	return m
}

// labelValue is the value of label name in a {a="x",b="y"} label set.
func labelValue(labels, name string) (string, bool) {
	i := strings.Index(labels, name+`="`)
	if i < 0 || (i > 0 && labels[i-1] != '{' && labels[i-1] != ',') {
		return "", false
	}
	rest := labels[i+len(name)+2:]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return "", false
	}
	return rest[:j], true
}

// scrapeMetrics GETs addr's /metrics (ok false on any failure: the tail
// figures then lack the broker's side).
func scrapeMetrics(ctx context.Context, addr string, timeout time.Duration) (metricsScrape, bool) {
	if addr == "" {
		return metricsScrape{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/metrics", nil)
	if err != nil {
		return metricsScrape{}, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return metricsScrape{}, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return metricsScrape{}, false
	}
	return parseMetrics(bytes.NewReader(b)), true
}

// brokerTail is the broker's side of one row: its histograms over the row
// (bucket-resolution estimates) and the journal's bytes per fdatasync.
type brokerTail struct {
	Note          string                 `json:"note"`
	Series        map[string]histSummary `json:"series"`
	BytesPerFsync float64                `json:"journal_bytes_per_fdatasync,omitempty"`
}

const bucketNote = "from the broker's /metrics histograms over this row only; percentiles are bucket-resolution estimates (linear within buckets of 50µs x 2^k)"

// brokerDelta is the broker's side of the row between scrapes a and b.
func brokerDelta(a, b metricsScrape) *brokerTail {
	t := &brokerTail{Note: bucketNote, Series: map[string]histSummary{}}
	for _, s := range brokerSeries {
		t.Series[s[0]] = summarise(histDelta(a.hists[s[0]], b.hists[s[0]]))
	}
	w := b.counters["metaq_journal_written_bytes_total"] - a.counters["metaq_journal_written_bytes_total"]
	n := b.counters["metaq_journal_fsyncs_total"] - a.counters["metaq_journal_fsyncs_total"]
	if w > 0 && n > 0 {
		t.BytesPerFsync = w / n
	}
	return t
}

// tailStats are the tail figures of a row 6 point or a row 7 figure.
type tailStats struct {
	Client      latSummary `json:"client"`
	P999OverP50 float64    `json:"p999_over_p50"`
	// Bound is the p99.9 target: the larger of 8 x p50 and 1.5 x
	// the raw fdatasync p99.9 + p50; BoundBy says which.
	Bound   time.Duration `json:"tail_bound_ns"`
	BoundBy string        `json:"tail_bound_by"`
	Met     bool          `json:"tail_met"`
	// Raw is the raw fdatasync latency the bound used, RawFrom where it
	// was measured.
	Raw     latSummary  `json:"raw_fdatasync"`
	RawFrom string      `json:"raw_from"`
	Broker  *brokerTail `json:"broker,omitempty"`
}

// newTail computes the tail figures of client latencies c against the
// raw fdatasync latencies raw.
func newTail(c latSummary, raw latSummary, rawFrom string, broker *brokerTail) *tailStats {
	t := &tailStats{Client: c, Raw: raw, RawFrom: rawFrom, Broker: broker}
	if c.P50 > 0 {
		t.P999OverP50 = float64(c.P999) / float64(c.P50)
	}
	t.Bound, t.BoundBy = 8*c.P50, "8 x p50"
	if r := time.Duration(1.5*float64(raw.P999)) + c.P50; r > t.Bound {
		t.Bound, t.BoundBy = r, "1.5 x raw fdatasync p99.9 + p50"
	}
	t.Met = c.N > 0 && c.P999 <= t.Bound
	return t
}

// printTails prints the tail figures of rows after their table: two or
// three lines per row that has them.
func printTails(w io.Writer, rows []benchRow) {
	first := true
	for _, r := range rows {
		t := r.Tail
		if t == nil {
			continue
		}
		if first {
			fmt.Fprintf(w, "\nTAIL (client: exact from samples; broker: %s)\n", bucketNote)
			first = false
		}
		fmt.Fprintf(w, "%s\n", r.Name)
		fmt.Fprintf(w, "  client put %s; p99.9/p50 %.1f; bound %s (%s; raw fdatasync p99.9 %s, %s) met %s\n",
			t.Client, t.P999OverP50, fmtDur(t.Bound), t.BoundBy, fmtDur(t.Raw.P999), t.RawFrom, map[bool]string{true: "yes", false: "no"}[t.Met])
		if b := t.Broker; b != nil {
			fmt.Fprintf(w, "  broker journal fdatasync %s", b.Series["journal_fsync"])
			if b.BytesPerFsync > 0 {
				fmt.Fprintf(w, " (%.0f B each)", b.BytesPerFsync)
			}
			fmt.Fprintf(w, "; checkpoint fsync %s; segment fsync %s; put %s\n", b.Series["checkpoint_fsync"], b.Series["segment_fsync"], b.Series["put"])
		}
	}
}
