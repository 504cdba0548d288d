package broker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/timer"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/stretchr/testify/require"
)

// TestTimerRetentionKeepsPending: lowering max_delay makes the timer
// log's age rule (2 × max_delay) reach segments holding delayed messages
// not due yet; retention deletes the segments whose messages were all
// delivered and keeps those (the review's probe: one timer partition,
// 64 KiB segments, 40 puts of 4 KB due in 24 h, max_delay lowered to 1 s,
// retention three hours later, a restart: 40 pending, not 6).
func TestTimerRetentionKeepsPending(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var mu sync.Mutex
	var logs strings.Builder
	opts := Options{Logf: func(f string, a ...any) { mu.Lock(); fmt.Fprintf(&logs, f+"\n", a...); mu.Unlock() }}
	mods := func(maxDelay int64) []func(*conf.Config) {
		return []func(*conf.Config){func(c *conf.Config) {
			c.TimerPartitions, c.MaxSegmentSize = 1, 64<<10
			if maxDelay > 0 {
				c.MaxDelay = maxDelay
			}
		}}
	}
	pending := func(b *Broker) string {
		s := statsItem(t, b, "delayed")
		return s[:strings.Index(s, "\r\naccepted")]
	}
	b := fixture{dir: dir, mods: mods(0)}.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(client.Brokers(b.Addr()), client.Logger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	defer cl.Close(ctx)
	body := make([]byte, 4000)
	// Delivered ones first: their segments may go.
	for range 40 {
		_, err := cl.ProduceSync(ctx, &message.Message{Topic: "t", Body: body, Delay: time.Millisecond})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		return strings.Contains(statsItem(t, b, "delayed"), "STATS\r\npending 0\r\naccepted 40\r\ndelivered 40\r\n")
	}, 20*time.Second, 20*time.Millisecond)
	time.Sleep(3 * 50 * time.Millisecond) // the last round's mark
	for range 40 {
		_, err := cl.ProduceSync(ctx, &message.Message{Topic: "t", Body: body, Delay: 24 * time.Hour})
		require.NoError(t, err)
	}
	require.NoError(t, cl.Close(ctx))
	require.NoError(t, b.Close())

	b = fixture{dir: dir, mods: mods(1000), opts: opts}.start(t)
	require.Eventually(t, func() bool { return pending(b) == "STATS\r\npending 40" }, 10*time.Second, 20*time.Millisecond)
	mu.Lock()
	require.Contains(t, logs.String(), "timer 0: 40 pending message(s) due later than now + max_delay (1s)")
	mu.Unlock()
	tl, _, err := timerHost{b}.TimerLog(0)
	require.NoError(t, err)
	segs := tl.SegmentCount()
	require.GreaterOrEqual(t, segs, 5)
	b.applyRetention(time.Now().Add(3 * time.Hour)) // the age rule reaches every sealed segment
	require.Greater(t, tl.MinOffset(), int64(0), "the delivered messages' segments go")
	require.Less(t, tl.SegmentCount(), segs)
	require.GreaterOrEqual(t, tl.SegmentCount(), 3, "40 × 4 KB pending need 3 segments of 64 KiB")
	mu.Lock()
	require.Contains(t, logs.String(), "older than 1h0m0s kept: they hold delayed messages not delivered yet")
	mu.Unlock()
	b.applyRetention(time.Now().Add(3 * time.Hour)) // again: nothing more goes
	require.NoError(t, b.Close())

	b = fixture{dir: dir, mods: mods(1000)}.start(t)
	require.Eventually(t, func() bool { return pending(b) == "STATS\r\npending 40" }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(3 * 50 * time.Millisecond)
	require.Equal(t, "STATS\r\npending 40", pending(b), "every pending message kept")
}

// TestSlaveTimerRetention: a sync slave (which runs no timer) applies the
// same rule to its copy of the timer log: the delivered messages'
// segments go, and what is left rebuilds to the master's pending
// messages, which a promotion needs.
func TestSlaveTimerRetention(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/repl-timerkeep-%d", time.Now().UnixNano())
	small := func(c *conf.Config) { c.TimerPartitions, c.MaxSegmentSize = 1, 64<<10 }
	master := replBroker(t, zkAddr, root, t.TempDir(), "", -1, func(c *conf.Config) { small(c); c.Replication = conf.ReplicationSync })
	slave := replBroker(t, zkAddr, root, t.TempDir(), "", 1, small)
	waitInSync(t, master, "2/2")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(client.Brokers(master.Addr()), client.Logger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	defer cl.Close(ctx)
	body := make([]byte, 4000)
	for range 40 {
		_, err := cl.ProduceSync(ctx, &message.Message{Topic: "t", Body: body, Delay: time.Millisecond})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		return strings.Contains(statsItem(t, master, "delayed"), "STATS\r\npending 0\r\naccepted 40\r\ndelivered 40\r\n")
	}, 20*time.Second, 20*time.Millisecond)
	time.Sleep(3 * 50 * time.Millisecond) // the last round's mark
	for range 40 {
		_, err := cl.ProduceSync(ctx, &message.Message{Topic: "t", Body: body, Delay: 24 * time.Hour})
		require.NoError(t, err)
	}
	ml, _, err := timerHost{master}.TimerLog(0)
	require.NoError(t, err)
	sl, _, err := timerHost{slave}.TimerLog(0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return sl.MaxOffset() == ml.MaxOffset() }, 15*time.Second, 20*time.Millisecond)
	segs := sl.SegmentCount()
	slave.applyRetention(time.Now().Add(100 * 24 * time.Hour)) // past 2 × max_delay (40 days)
	require.Greater(t, sl.MinOffset(), int64(0), "the delivered messages' segments go")
	require.Less(t, sl.SegmentCount(), segs)
	w, err := timer.Open(t.TempDir(), sl, 1<<20)
	require.NoError(t, err)
	require.Equal(t, int64(40), w.Pending(), "the slave's copy rebuilds to the 40 pending messages")
}
