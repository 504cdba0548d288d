package broker

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/timer"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
	"github.com/stretchr/testify/require"
)

// TestTxReplayAfterRetention: the transaction journal keeps the records
// of transactions finished long ago (its file rotates at
// journal_file_size) and a start replays them; a committed XA branch's
// batch whose segment retention has deleted since is not appended again:
// neither its plain message (t-0 would hold it twice) nor its delayed one
// (the timer would deliver it a second time). The review's probes 3 and 4.
func TestTxReplayAfterRetention(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	small := []func(*conf.Config){func(c *conf.Config) {
		c.TimerPartitions, c.MaxSegmentSize, c.NumPartitions = 1, 64<<10, 1
	}}
	b := fixture{dir: dir, mods: small}.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	quiet := client.Logger(slog.New(slog.DiscardHandler))
	cl, err := client.New(client.Brokers(b.Addr()), quiet)
	require.NoError(t, err)
	xb, err := cl.XABroker(ctx, "t")
	require.NoError(t, err)
	key := "XID:1:aa:bb:r"
	_, err = xb.Command(ctx, protocol.TxBegin, key, 0)
	require.NoError(t, err)
	res, err := xb.Produce(ctx, key, &message.Message{Topic: "t", Body: []byte("plain")},
		&message.Message{Topic: "t", Body: []byte("delayed"), Delay: time.Millisecond})
	require.NoError(t, err)
	for _, op := range []protocol.TxType{protocol.TxEnd, protocol.TxPrepare, protocol.TxCommitTwoPhase} {
		_, err = xb.Command(ctx, op, key, 0)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		return strings.Contains(statsItem(t, b, "delayed"), "\r\ndelivered 1\r\n")
	}, 20*time.Second, 20*time.Millisecond)
	// Fill both partitions past several segments: delayed ones, delivered,
	// in the timer log, plain ones in t-0.
	body := make([]byte, 4000)
	for range 40 {
		_, err := cl.ProduceSync(ctx, &message.Message{Topic: "t", Body: body, Delay: time.Millisecond})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		return strings.Contains(statsItem(t, b, "delayed"), "\r\ndelivered 41\r\n")
	}, 20*time.Second, 20*time.Millisecond, "the 40 delayed ones delivered to t-0 as well")
	time.Sleep(3 * timer.Tick) // the last round's mark
	for range 40 {             // a delivery round is one append: plain puts roll t-0's segments
		_, err := cl.ProduceSync(ctx, &message.Message{Topic: "t", Body: body})
		require.NoError(t, err)
	}
	require.NoError(t, cl.Close(ctx))
	tl, _, err := timerHost{b}.TimerLog(0)
	require.NoError(t, err)
	p0, err := b.lookup([]byte("t"), false)
	require.NoError(t, err)
	b.applyRetention(time.Now().Add(100 * 24 * time.Hour))
	require.Greater(t, tl.MinOffset(), int64(0), "the timer log's first segment, with the transaction's timer record, is gone")
	require.Greater(t, p0.Parts[0].MinOffset(), int64(0), "t-0's first segment, with the transaction's plain message, is gone")
	ends := []int64{tl.MaxOffset(), p0.Parts[0].MaxOffset()}
	require.NoError(t, b.Close())

	b = fixture{dir: dir, mods: small}.start(t)
	time.Sleep(3 * timer.Tick)
	tl, _, err = timerHost{b}.TimerLog(0)
	require.NoError(t, err)
	p0, err = b.lookup([]byte("t"), false)
	require.NoError(t, err)
	require.Equal(t, ends, []int64{tl.MaxOffset(), p0.Parts[0].MaxOffset()}, "nothing appended again at the start")
	require.Contains(t, statsItem(t, b, "delayed"), "\r\ndelivered 0\r\n", "the delayed message is not delivered again")
	recs := deliveredIDs(t, b.Addr(), "t", 0) // fails on a msgId twice
	require.NotContains(t, recs, res[0].ID, "the plain message's segment was deleted: not there again")
	require.NotContains(t, recs, res[1].ID, "the delayed message's delivery was deleted: not there again")
}
