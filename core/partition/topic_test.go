package partition

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
)

// TestTopic: a topic's partitions by number (-1 a random one, out of
// range nil), their counters (a get of -1 finds the random log's), a
// batch counted in with the realtime statistics only while stat is on,
// a grown value sharing the partitions and carrying the counters over
// but not the realtime statistics, and Close.
func TestTopic(t *testing.T) {
	m, _ := testLogs(t)
	tc := &conf.TopicConfig{Name: "t", NumPartitions: 2}
	parts, err := m.Open("t", tc, 0, 2)
	require.NoError(t, err)
	tp := NewTopic("t", tc, parts, nil, nil)
	require.Equal(t, "t", tp.Name())
	require.Same(t, tc, tp.Conf())
	require.False(t, tp.ThresholdFlush())
	require.Len(t, tp.PC, 2)

	require.Same(t, parts[1], tp.Partition(1))
	require.Nil(t, tp.Partition(2))
	require.Nil(t, tp.Partition(-2))
	l := tp.Partition(-1)
	require.Contains(t, parts, l)
	require.Same(t, &tp.PC[1], tp.Counters(1, parts[1]))
	require.Same(t, &tp.PC[map[bool]int{true: 0, false: 1}[l == parts[0]]], tp.Counters(-1, l))

	tp.CountIn(1, 3, 30)
	tp.CountIn(5, 1, 1) // out of range: not counted
	require.Equal(t, int64(3), tp.PC[1].MsgsIn.Load())
	require.Equal(t, int64(30), tp.PC[1].BytesIn.Load())
	require.Equal(t, int64(0), tp.RT.Put.count.Load())
	on := *tc
	on.Stat, on.UnflushThreshold = true, 10
	tp.SetConf(&on)
	require.True(t, tp.ThresholdFlush())
	tp.CountIn(0, 2, 20)
	require.Equal(t, int64(2), tp.PC[0].MsgsIn.Load())
	require.Equal(t, int64(2), tp.RT.Put.value.Load())
	require.Equal(t, int64(20), tp.RT.Size.value.Load())
	tp.PC[0].Gets.Add(4)
	tp.PC[1].BytesOut.Add(5)
	tp.PC[1].MsgsOut.Add(6)

	grown := *tc
	grown.NumPartitions = 3
	more, err := m.Open("t", &grown, 2, 3)
	require.NoError(t, err)
	nt := tp.Grow(&grown, more)
	require.Equal(t, append(parts[:2:2], more...), nt.Parts)
	require.Len(t, nt.PC, 3)
	require.Equal(t, int64(2), nt.PC[0].MsgsIn.Load())
	require.Equal(t, int64(4), nt.PC[0].Gets.Load())
	require.Equal(t, int64(30), nt.PC[1].BytesIn.Load())
	require.Equal(t, int64(5), nt.PC[1].BytesOut.Load())
	require.Equal(t, int64(6), nt.PC[1].MsgsOut.Load())
	require.Equal(t, int64(0), nt.PC[2].MsgsIn.Load())
	require.Equal(t, int64(0), nt.RT.Put.count.Load())
	require.Same(t, &grown, nt.Conf())
	require.Len(t, tp.Parts, 2, "the old value keeps its partitions")

	require.NoError(t, nt.Close())
}
