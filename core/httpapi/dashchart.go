package httpapi

import (
	"fmt"
	"html/template"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The dashboard's charts (docs/dashboard.md): time series drawn as
// server-rendered SVG, no script. The x axis spans the samples there are
// (first to last; one sample sits in the middle of one sample interval),
// labelled with clock times (UTC); the y axis runs from 0 to a round
// value above the largest sample, in a binary unit (B, KiB, MiB, ...,
// with /s for rates), with five labelled grid lines.

type chartPoint struct {
	At time.Time
	V  float64
}

// chartSeries is one line of a chart; Class colours it (dash.css).
type chartSeries struct {
	Name, Class string
	Pts         []chartPoint
}

// Chart geometry, in SVG user units (the SVG scales to its box).
const (
	chartW, chartH               = 640.0, 200.0
	chartLeft, chartRight        = 76.0, 12.0
	chartTop, chartBottom        = 12.0, 34.0
	chartTicks                   = 4 // intervals on the y axis
	chartUnitBytes, chartUnitBps = "B", "B/s"
)

// chartScale is the y axis: max is the top, in bytes; div and prefix
// the unit the labels use (1024^k and "KiB" ...).
type chartScale struct {
	max, step, div float64
	prefix         string
}

// yScale picks the y axis for a largest value hi (>= 0): a unit in which
// hi is below 1024, and a step of 1, 2, 2.5 or 5 times a power of ten
// such that chartTicks steps reach hi.
func yScale(hi float64) chartScale {
	if hi <= 0 || math.IsNaN(hi) || math.IsInf(hi, 0) {
		hi = 1
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	div, i := 1.0, 0
	for hi/div >= 1024 && i < len(units)-1 {
		div *= 1024
		i++
	}
	raw := hi / div / chartTicks
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw*(1-1e-9) {
			step = m * mag
			break
		}
	}
	if i == 0 && step < 1 { // no fractions of a byte
		step = 1
	}
	return chartScale{max: step * chartTicks * div, step: step, div: div, prefix: units[i]}
}

// label is the y label of tick k with unit suffix ("" or "/s").
func (s chartScale) label(k int, suffix string) string {
	v := math.Round(float64(k)*s.step*1e6) / 1e6
	return strconv.FormatFloat(v, 'f', -1, 64) + " " + s.prefix + suffix
}

// timeChart renders series as an SVG chart; unit is chartUnitBytes or
// chartUnitBps. With no samples it says so.
func timeChart(title, unit string, series ...chartSeries) template.HTML {
	for i := range series { // oldest first, whatever order they were taken in
		series[i].Pts = slices.Clone(series[i].Pts)
		slices.SortStableFunc(series[i].Pts, func(a, b chartPoint) int { return a.At.Compare(b.At) })
	}
	var first, last time.Time
	hi, n := 0.0, 0
	for _, s := range series {
		for _, p := range s.Pts {
			if n == 0 || p.At.Before(first) {
				first = p.At
			}
			if n == 0 || p.At.After(last) {
				last = p.At
			}
			if p.V > hi && !math.IsInf(p.V, 0) {
				hi = p.V
			}
			n++
		}
	}
	if n == 0 {
		return template.HTML(`<p class="muted chart-empty">` + template.HTMLEscapeString(title) + `: no samples yet (one is taken every ` + dashSampleEvery.String() + `)</p>`)
	}
	if !last.After(first) { // one instant: centre it in one sample interval
		first, last = first.Add(-dashSampleEvery/2), last.Add(dashSampleEvery/2)
	}
	ys := yScale(hi)
	suffix := strings.TrimPrefix(unit, "B")
	pw, ph := chartW-chartLeft-chartRight, chartH-chartTop-chartBottom
	span := last.Sub(first).Seconds()
	x := func(t time.Time) float64 { return chartLeft + t.Sub(first).Seconds()/span*pw }
	y := func(v float64) float64 {
		v = min(max(v, 0), ys.max)
		return chartTop + ph - v/ys.max*ph
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, `<figure class="chart"><figcaption>%s</figcaption>`, template.HTMLEscapeString(title))
	fmt.Fprintf(&sb, `<svg class="chart" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="%s">`,
		chartW, chartH, chartW, chartH, template.HTMLEscapeString(title))
	// Grid and y labels.
	for k := 0; k <= chartTicks; k++ {
		yy := y(float64(k) * ys.step * ys.div)
		fmt.Fprintf(&sb, `<line class="grid" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, chartLeft, yy, chartW-chartRight, yy)
		fmt.Fprintf(&sb, `<text class="ylabel" x="%.1f" y="%.1f" text-anchor="end">%s</text>`, chartLeft-6, yy+4, ys.label(k, suffix))
	}
	// Axes.
	fmt.Fprintf(&sb, `<line class="axis" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, chartLeft, chartTop, chartLeft, chartTop+ph)
	fmt.Fprintf(&sb, `<line class="axis" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, chartLeft, chartTop+ph, chartW-chartRight, chartTop+ph)
	// x labels: the first, middle and last instants.
	for i, anchor := range []string{"start", "middle", "end"} {
		t := first.Add(time.Duration(float64(last.Sub(first)) * float64(i) / 2))
		fmt.Fprintf(&sb, `<text class="xlabel" x="%.1f" y="%.1f" text-anchor="%s">%s</text>`, x(t), chartTop+ph+16, anchor, t.UTC().Format("15:04:05"))
	}
	fmt.Fprintf(&sb, `<text class="xlabel" x="%.1f" y="%.1f" text-anchor="middle">time (UTC), %s</text>`, chartLeft+pw/2, chartH-2, shortDur(last.Sub(first)))
	// The series.
	for _, s := range series {
		if len(s.Pts) == 0 {
			continue
		}
		fmt.Fprintf(&sb, `<g class="series %s"><title>%s</title>`, template.HTMLEscapeString(s.Class), template.HTMLEscapeString(s.Name))
		if len(s.Pts) > 1 {
			sb.WriteString(`<polyline points="`)
			for _, p := range s.Pts {
				fmt.Fprintf(&sb, "%.1f,%.1f ", x(p.At), y(p.V))
			}
			sb.WriteString(`"/>`)
		}
		if len(s.Pts) <= 30 { // few samples: each is a dot
			for _, p := range s.Pts {
				fmt.Fprintf(&sb, `<circle cx="%.1f" cy="%.1f" r="2.5"/>`, x(p.At), y(p.V))
			}
		}
		sb.WriteString(`</g>`)
	}
	sb.WriteString(`</svg><div class="legend">`)
	for _, s := range series {
		cur := "–"
		if len(s.Pts) > 0 {
			cur = humanValue(s.Pts[len(s.Pts)-1].V) + suffix
		}
		fmt.Fprintf(&sb, `<span class="key %s">%s: %s now</span> `, template.HTMLEscapeString(s.Class), template.HTMLEscapeString(s.Name), cur)
	}
	k, plural := n/max(len(series), 1), "s"
	if k == 1 {
		plural = ""
	}
	fmt.Fprintf(&sb, `<span class="muted">%d sample%s, one every %s</span></div></figure>`, k, plural, dashSampleEvery)
	return template.HTML(sb.String())
}

// humanValue is HumanBytes of a float.
func humanValue(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "?"
	}
	return HumanBytes(int64(math.Round(v)))
}

// shortDur renders a chart's span: "45s", "12m30s", "1h0m0s".
func shortDur(d time.Duration) string {
	return d.Round(time.Second).String()
}

// lagChart is the chart of a group's lag on a topic.
func lagChart(pts []lagPoint) template.HTML {
	s := chartSeries{Name: "lag", Class: "lag"}
	for _, p := range pts {
		s.Pts = append(s.Pts, chartPoint{p.At, float64(p.Lag)})
	}
	return timeChart("Lag (bytes not yet consumed)", chartUnitBytes, s)
}

// rateChart is the chart of throughput in and out.
func rateChart(title string, pts []ratePoint) template.HTML {
	in := chartSeries{Name: "in", Class: "in"}
	out := chartSeries{Name: "out", Class: "out"}
	for _, p := range pts {
		in.Pts = append(in.Pts, chartPoint{p.At, p.In})
		out.Pts = append(out.Pts, chartPoint{p.At, p.Out})
	}
	return timeChart(title, chartUnitBps, in, out)
}
