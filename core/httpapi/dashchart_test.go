package httpapi

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	chartCircle = regexp.MustCompile(`<circle cx="([0-9.]+)" cy="([0-9.]+)"`)
	chartYLabel = regexp.MustCompile(`<text class="ylabel"[^>]*>([^<]*)</text>`)
	chartXLabel = regexp.MustCompile(`<text class="xlabel"[^>]*>([^<]*)</text>`)
)

func chartDots(t *testing.T, svg string) [][2]float64 {
	t.Helper()
	var out [][2]float64
	for _, m := range chartCircle.FindAllStringSubmatch(svg, -1) {
		x, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		y, err := strconv.ParseFloat(m[2], 64)
		require.NoError(t, err)
		out = append(out, [2]float64{x, y})
	}
	return out
}

func chartLabels(re *regexp.Regexp, svg string) []string {
	var out []string
	for _, m := range re.FindAllStringSubmatch(svg, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestDashboardChartScale: the y axis is 0 to a round value in a binary
// unit, with the unit on every label.
func TestDashboardChartScale(t *testing.T) {
	for _, c := range []struct {
		hi     float64
		labels []string
	}{
		{0, []string{"0 B", "1 B", "2 B", "3 B", "4 B"}},
		{1, []string{"0 B", "1 B", "2 B", "3 B", "4 B"}},
		{7, []string{"0 B", "2 B", "4 B", "6 B", "8 B"}},
		{1000, []string{"0 B", "250 B", "500 B", "750 B", "1000 B"}},
		{5000, []string{"0 KiB", "2 KiB", "4 KiB", "6 KiB", "8 KiB"}},
		{3 << 20, []string{"0 MiB", "1 MiB", "2 MiB", "3 MiB", "4 MiB"}},
		{3e12, []string{"0 TiB", "1 TiB", "2 TiB", "3 TiB", "4 TiB"}},
		{1.5 * (1 << 60), []string{"0 EiB", "0.5 EiB", "1 EiB", "1.5 EiB", "2 EiB"}},
	} {
		s := yScale(c.hi)
		var got []string
		for k := 0; k <= chartTicks; k++ {
			got = append(got, s.label(k, ""))
		}
		require.Equal(t, c.labels, got, "hi %v", c.hi)
		require.GreaterOrEqual(t, s.max, c.hi, "the top is above every value")
	}
}

// TestDashboardChart: the x axis spans the samples there are (a few
// minutes of them fill the width, not a sliver of an hour), one sample
// sits in the middle, zero values lie on the x axis, large values are
// labelled in their unit.
func TestDashboardChart(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 6, 0, 0, 0, time.UTC)
	left, right := chartLeft, chartW-chartRight
	bottom := chartH - chartBottom

	// Few samples, in their first minutes: first at the left edge, last
	// at the right.
	pts := []lagPoint{{t0, 100}, {t0.Add(15 * time.Second), 300}, {t0.Add(30 * time.Second), 200}}
	svg := string(lagChart(pts))
	dots := chartDots(t, svg)
	require.Len(t, dots, 3)
	require.InDelta(t, left, dots[0][0], 0.1)
	require.InDelta(t, (left+right)/2, dots[1][0], 0.1)
	require.InDelta(t, right, dots[2][0], 0.1)
	require.Equal(t, []string{"0 B", "100 B", "200 B", "300 B", "400 B"}, chartLabels(chartYLabel, svg))
	require.Equal(t, []string{"06:00:00", "06:00:15", "06:00:30", "time (UTC), 30s"}, chartLabels(chartXLabel, svg))
	require.InDelta(t, bottom-300.0/400*(bottom-chartTop), dots[1][1], 0.1, "300 B at three quarters of the height")
	require.Contains(t, svg, "<polyline")
	require.Contains(t, svg, "lag: 200 B now")

	// Samples noted out of order are drawn oldest first.
	svg = string(lagChart([]lagPoint{pts[2], pts[0], pts[1]}))
	dots = chartDots(t, svg)
	require.Len(t, dots, 3)
	require.InDelta(t, left, dots[0][0], 0.1)
	require.InDelta(t, right, dots[2][0], 0.1)
	require.Contains(t, svg, "lag: 200 B now", "the latest sample")

	// One sample: a dot in the middle, no line.
	svg = string(lagChart([]lagPoint{{t0, 42}}))
	dots = chartDots(t, svg)
	require.Len(t, dots, 1)
	require.InDelta(t, (left+right)/2, dots[0][0], 0.1)
	require.NotContains(t, svg, "<polyline")
	require.Contains(t, svg, "1 sample, one every 15s")

	// Zero values: on the x axis, labels still in bytes.
	svg = string(rateChart("t", []ratePoint{{t0, 0, 0}, {t0.Add(time.Minute), 0, 0}}))
	for _, d := range chartDots(t, svg) {
		require.InDelta(t, bottom, d[1], 0.1)
	}
	require.Equal(t, []string{"0 B/s", "1 B/s", "2 B/s", "3 B/s", "4 B/s"}, chartLabels(chartYLabel, svg))

	// Large values: GiB/s, the largest below the top.
	svg = string(rateChart("t", []ratePoint{{t0, 3 << 30, 1 << 30}, {t0.Add(time.Hour), 1 << 30, 5 << 29}}))
	require.Equal(t, []string{"0 GiB/s", "1 GiB/s", "2 GiB/s", "3 GiB/s", "4 GiB/s"}, chartLabels(chartYLabel, svg))
	require.Contains(t, svg, "in: 1.0 GiB/s now")
	require.Contains(t, svg, "out: 2.5 GiB/s now")
	require.Contains(t, svg, "time (UTC), 1h0m0s")

	// No samples.
	require.Contains(t, string(lagChart(nil)), "no samples yet")
	// The title is escaped.
	require.NotContains(t, string(timeChart(`<x>`, chartUnitBytes, chartSeries{Pts: []chartPoint{{t0, 1}}})), "<x>")
}
