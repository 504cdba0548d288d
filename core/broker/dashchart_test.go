package broker

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/sdk/cluster"
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

// TestDashboardClusterConsole: the cluster view built from a read of
// ZooKeeper: brokers with masters and slaves, topics with the brokers
// holding them, groups with members and owners; a broker that went is
// shown down with its partitions and owners unreachable; a user sees only
// the topics they may describe and the groups they may use.
func TestDashboardClusterConsole(t *testing.T) {
	cfg := conf.Default()
	b := &Broker{committed: &groups.Committed{}}
	b.cfgp.Store(cfg)
	now := time.Now()
	both := &cluster.Layout{
		Brokers: []cluster.BrokerInfo{
			{ID: 0, Master: "meta://127.0.0.1:1", Slaves: map[string]string{"slave1": "meta://127.0.0.1:3"}},
			{ID: 1, Master: "meta://127.0.0.1:2"},
		},
		Topics: []cluster.TopicBrokers{
			{Name: "orders", Brokers: []cluster.TopicPartition{
				{Broker: "0-m", BrokerID: 0, NumParts: 3, Publish: true, Subscribe: true},
				{Broker: "0-s1", BrokerID: 0, NumParts: 3, Subscribe: true},
				{Broker: "1-m", BrokerID: 1, NumParts: 2, Publish: true, Subscribe: true}}},
			{Name: "secret", Brokers: []cluster.TopicPartition{{Broker: "1-m", BrokerID: 1, NumParts: 1, Publish: true, Subscribe: true}}},
		},
	}
	groups := []zkGroupView{
		{Group: "billing", Topics: []string{"orders"},
			Members: []zkMember{{ID: "c1", Topics: []string{"orders"}, Partitions: 3}, {ID: "c2", Topics: []string{"orders"}, Partitions: 2}},
			Owners: []zkOwner{{Topic: "orders", BrokerID: 0, Partition: 0, Owner: "c1"},
				{Topic: "orders", BrokerID: 1, Partition: 1, Owner: "c2"}}},
		{Group: "spies", Topics: []string{"secret"}},
	}
	c := b.buildConsole(viewer{}, both, groups, false, "", now)
	require.Len(t, c.Brokers, 2)
	require.True(t, c.Brokers[0].Self)
	require.False(t, c.Brokers[1].Down)
	require.Equal(t, [][2]string{{"slave 1", "meta://127.0.0.1:3"}}, c.Brokers[0].Slaves)
	require.Len(t, c.Topics, 2)
	require.Equal(t, "orders", c.Topics[0].Name)
	require.Equal(t, 5, c.Topics[0].Total, "the masters' partitions")
	require.Len(t, c.Topics[0].Holders, 3)
	require.Len(t, c.Groups, 2)
	require.Len(t, c.Groups[0].Members, 2)
	require.False(t, c.Groups[0].Owners[1].Unreachable)

	// A failed read says nothing about who went.
	c = b.buildConsole(viewer{}, &cluster.Layout{}, nil, false, "ZooKeeper did not answer", now.Add(time.Second))
	require.Empty(t, c.Brokers)
	require.Equal(t, "ZooKeeper did not answer", c.Err)

	// Broker 1's session ended: its nodes are gone.
	one := &cluster.Layout{Brokers: both.Brokers[:1], Topics: []cluster.TopicBrokers{
		{Name: "orders", Brokers: both.Topics[0].Brokers[:2]}}}
	c = b.buildConsole(viewer{}, one, groups, false, "", now.Add(2*time.Second))
	require.Len(t, c.Brokers, 2)
	require.True(t, c.Brokers[1].Down)
	require.Equal(t, "meta://127.0.0.1:2", c.Brokers[1].Master, "the address it had")
	require.Equal(t, now.Add(2*time.Second), c.Brokers[1].DownSince)
	require.Equal(t, 3, c.Topics[0].Total)
	require.Equal(t, 2, c.Topics[0].Down)
	h := c.Topics[0].Holders[2]
	require.Equal(t, consoleHolder{BrokerID: 1, Name: "1-m", NumParts: 2, Publish: true, Subscribe: true, Master: true, Unreachable: true}, h)
	require.Equal(t, "secret", c.Topics[1].Name)
	require.True(t, c.Topics[1].Holders[0].Unreachable)
	require.False(t, c.Groups[0].Owners[0].Unreachable)
	require.True(t, c.Groups[0].Owners[1].Unreachable)

	// An id registered with no master is down too.
	c = b.buildConsole(viewer{}, &cluster.Layout{Brokers: []cluster.BrokerInfo{{ID: 0, Master: "meta://127.0.0.1:1"}, {ID: 1}}}, nil, false, "", now.Add(3*time.Second))
	require.True(t, c.Brokers[1].Down)
	require.Len(t, c.Brokers, 2)

	// Back: up again, nothing unreachable.
	c = b.buildConsole(viewer{}, both, groups, false, "", now.Add(4*time.Second))
	require.False(t, c.Brokers[1].Down)
	require.Zero(t, c.Topics[0].Down)

	// A user who may describe orders and use group billing only.
	alice := &conf.User{Name: "alice", Subscribe: []string{"orders"}, Groups: []string{"billing"}}
	c = b.buildConsole(viewer{on: true, u: alice}, both, groups, false, "", now.Add(5*time.Second))
	require.Len(t, c.Topics, 1)
	require.Equal(t, "orders", c.Topics[0].Name)
	require.Len(t, c.Groups, 1)
	require.Equal(t, "billing", c.Groups[0].Group)
	for _, s := range []string{"secret", "spies"} {
		for _, tp := range c.Topics {
			require.NotContains(t, strings.ToLower(tp.Name), s)
		}
	}
}
