package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
)

func TestThresholdVisibility(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Options{UnflushThreshold: 3})
	w := &recWaiter{}
	const size = message.HeaderSize + 2
	for i := range 3 {
		require.NoError(t, l.Append([]Entry{entryf("m%d", i)}, w, uint64(i)))
		// Acked synchronously after the write, but not readable: unflushed.
		require.Len(t, w.calls(), i+1)
		require.Equal(t, int64(i*size), w.calls()[i].offset)
		require.Equal(t, int64(0), l.MaxOffset())
		_, err := l.Read(0, 100)
		require.ErrorIs(t, err, ErrNoData)
	}
	require.Equal(t, int64(0), l.Stats().Fsyncs)
	require.Equal(t, int64(3), l.MessageCount())

	// The 4th unflushed message passes the threshold (> 3): fsync, visible.
	require.NoError(t, l.Append([]Entry{entryf("m3")}, w, 3))
	require.Equal(t, int64(1), l.Stats().Fsyncs)
	require.Equal(t, int64(4*size), l.MaxOffset())
	require.Len(t, readAllRecords(t, l, 1000), 4)

	// Flush makes the rest visible; a flush with nothing unflushed is free.
	require.NoError(t, l.Append([]Entry{entryf("m4")}, w, 4))
	require.Equal(t, int64(4*size), l.MaxOffset())
	require.NoError(t, l.Flush())
	require.Equal(t, int64(5*size), l.MaxOffset())
	require.NoError(t, l.Flush())
	require.Equal(t, int64(2), l.Stats().Fsyncs)

	// A batch counts as many messages.
	require.NoError(t, l.Append([]Entry{entryf("b0"), entryf("b1"), entryf("b2"), entryf("b3")}, w, 5))
	require.Equal(t, int64(9*size), l.MaxOffset())
	for _, c := range w.calls() {
		require.NoError(t, c.err)
	}
}

func TestThresholdIntervalTicker(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Options{UnflushThreshold: 1000, UnflushInterval: 20 * time.Millisecond})
	_, off, err := l.AppendSync([]Entry{entryf("tick")})
	require.NoError(t, err)
	require.Equal(t, int64(0), off)
	// Either the append itself or the background ticker flushes it soon.
	require.Eventually(t, func() bool { return l.MaxOffset() == message.HeaderSize+4 }, 5*time.Second, time.Millisecond)
	fs := l.Stats().Fsyncs
	require.GreaterOrEqual(t, fs, int64(1))
	// Nothing unflushed: the ticker does not fsync again.
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, fs, l.Stats().Fsyncs)
}

func TestThresholdIntervalOnAppend(t *testing.T) {
	t.Parallel()
	// A long ticker period: only the append-side check can flush here.
	l := openLog(t, t.TempDir(), Options{UnflushThreshold: 1000, UnflushInterval: time.Hour})
	mustAppend(t, l, []byte("a"))
	require.Equal(t, int64(0), l.MaxOffset())
	l.mu.Lock()
	l.lastFlush = time.Now().Add(-2 * time.Hour)
	l.mu.Unlock()
	mustAppend(t, l, []byte("b"))
	require.Equal(t, int64(2*(message.HeaderSize+1)), l.MaxOffset())
}

func TestThresholdRollFlushesOldSegment(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Options{UnflushThreshold: 1000, MaxSegmentSize: 100})
	for i := range 10 {
		mustAppend(t, l, fmt.Appendf(nil, "%030d", i)) // 50 bytes each
	}
	// Rolls fsynced the sealed segments; the active one is unflushed.
	require.Equal(t, int64(4), l.Stats().Rolls)
	require.Equal(t, int64(400), l.MaxOffset())
	require.NoError(t, l.Flush())
	require.Equal(t, int64(500), l.MaxOffset())
	require.Len(t, readAllRecords(t, l, 1000), 10)
}

func TestCloseFlushesThresholdMode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLog(t, dir, Options{UnflushThreshold: 1000})
	mustAppend(t, l, []byte("x"), []byte("y"))
	require.Equal(t, int64(0), l.MaxOffset())
	require.NoError(t, l.Close())
	require.Equal(t, int64(1), l.Stats().Fsyncs)
	l2 := openLog(t, dir, Options{UnflushThreshold: 1000})
	require.Equal(t, int64(2*(message.HeaderSize+1)), l2.MaxOffset())
	require.Equal(t, int64(2), l2.LastID())
}

func TestAppendAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation count")
	}
	data := make([]byte, 100)
	es := []Entry{entry(data), entry(data)}
	w := &nopWaiter{}

	l := openLog(t, t.TempDir(), Options{UnflushThreshold: 100, MaxSegmentSize: 1 << 30})
	allocs := testing.AllocsPerRun(2000, func() {
		if err := l.Append(es, w, 0); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs, "threshold-mode Append allocates")

	g := openLog(t, t.TempDir(), Options{})
	allocs = testing.AllocsPerRun(200, func() {
		if _, _, err := g.AppendSync(es); err != nil {
			t.Fatal(err)
		}
	})
	if raceEnabled {
		// The pooled waiter is sometimes dropped by the race detector's
		// sync.Pool; one allocation per call at most is that, more is a leak.
		require.LessOrEqual(t, allocs, 1.0, "group-commit AppendSync allocates")
	} else {
		require.Zero(t, allocs, "group-commit AppendSync allocates")
	}
}

type nopWaiter struct{ n int }

func (w *nopWaiter) AppendDone(uint64, int64, int64, error) { w.n++ }
