package broker

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/idem"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/core/timer"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// firstSeen polls topic t's partitions on the broker at addr until every
// msgId of want is there (or 20 s pass) and returns when each was first
// read; deliveredIDs fails on a msgId twice.
func firstSeen(t *testing.T, addr string, want map[int64]int32) map[int64]time.Time {
	t.Helper()
	seen := map[int64]time.Time{}
	for deadline := time.Now().Add(20 * time.Second); len(seen) < len(want) && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for p := int32(0); p < 2; p++ {
			ids := deliveredIDs(t, addr, "t", p)
			read := time.Now()
			for id := range ids {
				if wp, ok := want[id]; ok && seen[id].IsZero() {
					require.Equal(t, wp, p, "msgId %d in its partition", id)
					seen[id] = read
				}
			}
		}
	}
	require.Len(t, seen, len(want), "every message delivered")
	return seen
}

// TestTxDelayedLocal: a local transaction (the SDK's Transaction) with
// plain and delayed messages: nothing is visible before the commit; at
// the commit the plain message is, and the delayed ones are delivered
// from it (a delay counts from the commit, not from the put; a time in
// the past is now), each once, with the msgId its put was answered with.
// A rolled-back transaction's delayed message is never delivered, and a
// delay over max_delay is refused at the put.
func TestTxDelayedLocal(t *testing.T) {
	t.Parallel()
	b := fixture{mods: []func(*conf.Config){func(c *conf.Config) { c.MaxDelay = 3600_000 }}}.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(client.Brokers(b.Addr()), client.Logger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	defer cl.Close(ctx)

	// Rolled back: its due-now message is never delivered.
	rb, err := cl.BeginTransaction(ctx)
	require.NoError(t, err)
	rbRes, err := rb.Produce(ctx, &message.Message{Topic: "t", Body: []byte("rolled back"), DeliverAt: time.Now().Add(-time.Minute)})
	require.NoError(t, err)
	require.NoError(t, rb.Rollback(ctx))

	tx, err := cl.BeginTransaction(ctx)
	require.NoError(t, err)
	const delay = 600 * time.Millisecond
	res, err := tx.Produce(ctx,
		&message.Message{Topic: "t", Body: []byte("plain")},
		&message.Message{Topic: "t", Body: []byte("delayed"), Delay: delay},
		&message.Message{Topic: "t", Body: []byte("past"), DeliverAt: time.Now().Add(-time.Hour)})
	require.NoError(t, err)
	for _, r := range res {
		require.Equal(t, int64(-1), r.Offset)
	}
	// A delay from the put would be due now.
	time.Sleep(delay + 100*time.Millisecond)
	for p := int32(0); p < 2; p++ {
		require.Empty(t, deliveredIDs(t, b.Addr(), "t", p), "nothing before the commit")
	}
	committing := time.Now()
	require.NoError(t, tx.Commit(ctx))
	_, ok := deliveredIDs(t, b.Addr(), "t", res[0].Partition)[res[0].ID]
	require.True(t, ok, "the plain message is stored by the commit")

	want := map[int64]int32{}
	for _, r := range res {
		want[r.ID] = r.Partition
	}
	seen := firstSeen(t, b.Addr(), want)
	require.False(t, seen[res[1].ID].Before(committing.Add(delay)), "delivered %v after the commit began: early",
		seen[res[1].ID].Sub(committing))
	time.Sleep(3 * timer.Tick)
	n := 0
	for p := int32(0); p < 2; p++ {
		ids := deliveredIDs(t, b.Addr(), "t", p)
		n += len(ids)
		_, ok := ids[rbRes[0].ID]
		require.False(t, ok, "a rolled-back delayed message is delivered")
	}
	require.Equal(t, 3, n, "each once")
	require.Contains(t, statsItem(t, b, "delayed"), "\r\naccepted 2\r\ndelivered 2\r\n")

	// max_delay is checked at the put: the transaction is rollback-only.
	over, err := cl.BeginTransaction(ctx)
	require.NoError(t, err)
	_, err = over.Produce(ctx, &message.Message{Topic: "t", Body: []byte("x"), Delay: 2 * time.Hour})
	require.Error(t, err)
	require.Contains(t, err.Error(), "exceeds max_delay")
	require.ErrorIs(t, over.Commit(ctx), client.ErrTransactionRolledBack)
}

// TestTxDelayedXARestart: XA branches with delayed messages are prepared
// (the SDK's XABroker), the broker restarts, and one is committed after
// the restart: its delayed message is delivered once, with its put's
// msgId, its delay counted from the commit; the other, rolled back after
// the restart, delivers nothing.
func TestTxDelayedXARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := fixture{dir: dir}.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	quiet := client.Logger(slog.New(slog.DiscardHandler))
	cl, err := client.New(client.Brokers(b.Addr()), quiet)
	require.NoError(t, err)
	const delay = 500 * time.Millisecond
	keys := []string{"XID:1:aa:bb:q", "XID:1:aa:cc:q"}
	var ids []client.SendResult
	xb, err := cl.XABroker(ctx, "t")
	require.NoError(t, err)
	for _, key := range keys {
		_, err := xb.Command(ctx, protocol.TxBegin, key, 0)
		require.NoError(t, err)
		res, err := xb.Produce(ctx, key, &message.Message{Topic: "t", Body: []byte(key), Delay: delay})
		require.NoError(t, err)
		ids = append(ids, res[0])
		_, err = xb.Command(ctx, protocol.TxEnd, key, 0)
		require.NoError(t, err)
		out, err := xb.Command(ctx, protocol.TxPrepare, key, 0)
		require.NoError(t, err)
		require.Equal(t, "0", out)
	}
	require.NoError(t, cl.Close(ctx))
	require.NoError(t, b.Close())
	time.Sleep(delay) // due now if the delay counted from the put

	b = fixture{dir: dir}.start(t)
	cl, err = client.New(client.Brokers(b.Addr()), quiet)
	require.NoError(t, err)
	defer cl.Close(ctx)
	xb, err = cl.XABroker(ctx, "t")
	require.NoError(t, err)
	out, err := xb.Command(ctx, protocol.TxRecover, protocol.NullTxKey, 0)
	require.NoError(t, err)
	require.Equal(t, strings.Join(keys, "\r\n"), out)
	_, err = xb.Command(ctx, protocol.TxRollback, keys[1], 0)
	require.NoError(t, err)
	committing := time.Now()
	_, err = xb.Command(ctx, protocol.TxCommitTwoPhase, keys[0], 0)
	require.NoError(t, err)
	seen := firstSeen(t, b.Addr(), map[int64]int32{ids[0].ID: ids[0].Partition})
	require.False(t, seen[ids[0].ID].Before(committing.Add(delay)), "delivered %v after the commit began: early",
		seen[ids[0].ID].Sub(committing))
	time.Sleep(3 * timer.Tick)
	n := 0
	for p := int32(0); p < 2; p++ {
		n += len(deliveredIDs(t, b.Addr(), "t", p))
	}
	require.Equal(t, 1, n, "the committed branch's message, once; nothing of the rolled-back one")
}

// TestTxDelayedSyncPair: a transaction committed on a sync master stores
// its delayed message in the timer log of both: the slave's copy of the
// timer log holds it, with its put's msgId, as the master's does.
func TestTxDelayedSyncPair(t *testing.T) {
	t.Parallel()
	master, slave := syncPair(t, "txdelayed")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(client.Brokers(master.Addr()), client.Logger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	defer cl.Close(ctx)
	tx, err := cl.BeginTransaction(ctx)
	require.NoError(t, err)
	res, err := tx.Produce(ctx,
		&message.Message{Topic: "t", Body: []byte("plain")},
		&message.Message{Topic: "t", Body: []byte("in an hour"), Delay: time.Hour})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	timerIDs := func(b *Broker) map[int64]timer.Message {
		out := map[int64]timer.Message{}
		tt, err := b.lookup([]byte(conf.TimerTopic), false)
		if err != nil {
			return out
		}
		for _, l := range tt.Parts {
			for _, r := range logRecordsOf(t, l) {
				if rec, err := timer.Parse(r.Data); err == nil && rec.Kind == timer.KindMessage {
					out[r.ID] = rec.Msg
				}
			}
		}
		return out
	}
	mt := timerIDs(master)
	require.Contains(t, mt, res[1].ID, "the master's timer log")
	require.Equal(t, "t", mt[res[1].ID].Topic)
	// The commit is answered once the slave has it: no waiting.
	st := timerIDs(slave)
	require.Contains(t, st, res[1].ID, "the slave's timer log")
	require.Equal(t, mt[res[1].ID], st[res[1].ID])
	_, ok := deliveredIDs(t, master.Addr(), "t", res[0].Partition)[res[0].ID]
	require.True(t, ok)

	// An XA branch: prepared on both (the slave holds it with its put),
	// then committed: the slave ends its branch with the timer record.
	xb, err := cl.XABroker(ctx, "t")
	require.NoError(t, err)
	const key = "XID:1:aa:dd:q"
	_, err = xb.Command(ctx, protocol.TxBegin, key, 0)
	require.NoError(t, err)
	xres, err := xb.Produce(ctx, key, &message.Message{Topic: "t", Body: []byte("xa in an hour"), Delay: time.Hour})
	require.NoError(t, err)
	_, err = xb.Command(ctx, protocol.TxEnd, key, 0)
	require.NoError(t, err)
	_, err = xb.Command(ctx, protocol.TxPrepare, key, 0)
	require.NoError(t, err)
	_, held := txOpen(slave)
	require.Equal(t, []string{key}, held, "the slave holds the branch prepared")
	_, err = xb.Command(ctx, protocol.TxCommitTwoPhase, key, 0)
	require.NoError(t, err)
	mt, st = timerIDs(master), timerIDs(slave)
	require.Contains(t, st, xres[0].ID, "the slave's timer log")
	require.Equal(t, mt[xres[0].ID], st[xres[0].ID])
	require.Eventually(t, func() bool { n, _ := txOpen(slave); return n == 0 }, 5*time.Second, 20*time.Millisecond,
		"the slave ended its branch")
}

// logRecordsOf reads every record of l.
func logRecordsOf(t *testing.T, l *store.Log) []message.Record {
	t.Helper()
	var out []message.Record
	var buf []byte
	for off := l.MinOffset(); off < l.MaxOffset(); {
		v, err := l.Read(off, 1<<20)
		require.NoError(t, err)
		buf, err = v.ReadAll(buf[:0])
		v.Release()
		require.NoError(t, err)
		it := message.NewIterator(buf, off, 0)
		for it.Next() {
			r := *it.Record()
			r.Data = append([]byte(nil), r.Data...)
			out = append(out, r)
		}
		require.Positive(t, it.Consumed())
		off = it.NextOffset()
	}
	return out
}

// TestDelayedIdempotent: an idempotent producer's delayed put sent twice
// (a retry after a lost reply) is held once and the copy answered with
// the first one's msgId and offset -1; a gap in the sequences is refused
// as out of order; after a restart the table is rebuilt from the timer
// log, so a retry is still answered as held; the plain puts of the
// partition, another producer, are not disturbed; each delayed message is
// delivered once.
func TestDelayedIdempotent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := fixture{dir: dir}.start(t)
	put := func(b *Broker, pid, seq int64, delay time.Duration, body string) protocol.Request {
		c := dialRaw(t, b.Addr())
		m := &message.Message{Topic: "t", Body: []byte(body), Delay: delay, ProducerID: pid, ProducerSeq: seq}
		data := m.AppendData(nil)
		return c.roundTrip(t, append(protocol.AppendPutHeader(nil, "t", 1, len(data), m.Flag(), int64(message.Checksum(data)), 1), data...))
	}
	result := func(r protocol.Request) (id, off int64) {
		require.Equal(t, protocol.StatusOK, r.Code, "%s", r.Body)
		f := strings.Fields(string(r.Body))
		require.Len(t, f, 3)
		id, _ = strconv.ParseInt(f[0], 10, 64)
		off, _ = strconv.ParseInt(f[2], 10, 64)
		return id, off
	}
	const pid, plainPID = 1<<62 | 7, 1<<62 | 8
	id0, off := result(put(b, pid, 0, 300*time.Millisecond, "soon"))
	require.Equal(t, int64(-1), off)
	again, off := result(put(b, pid, 0, 300*time.Millisecond, "soon"))
	require.Equal(t, id0, again, "the retry is answered with the first copy's msgId")
	require.Equal(t, int64(-1), off)
	id1, _ := result(put(b, pid, 1, time.Hour, "later"))
	r := put(b, pid, 5, time.Hour, "gap")
	require.Equal(t, protocol.StatusInternalError, r.Code)
	require.Contains(t, string(r.Body), protocol.CauseOutOfOrderSequence)
	// A plain put of the partition's own producer.
	_, off = result(put(b, plainPID, 0, 0, "plain"))
	require.GreaterOrEqual(t, off, int64(0))
	require.Contains(t, statsItem(t, b, "delayed"), "\r\naccepted 2\r\n")
	seen := firstSeen(t, b.Addr(), map[int64]int32{id0: 1})
	require.NotZero(t, seen[id0])

	require.NoError(t, b.Close())
	b = fixture{dir: dir}.start(t)
	again, _ = result(put(b, pid, 1, time.Hour, "later"))
	require.Equal(t, id1, again, "after a restart, the table rebuilt from the timer log")
	id2, _ := result(put(b, pid, 2, time.Hour, "next"))
	require.NotEqual(t, id1, id2)
	_, off = result(put(b, plainPID, 1, 0, "plain 2"))
	require.GreaterOrEqual(t, off, int64(0), "the plain producer's sequences go on")
	require.Eventually(t, func() bool {
		return strings.Contains(statsItem(t, b, "delayed"), "STATS\r\npending 2\r\n")
	}, 10*time.Second, 20*time.Millisecond, "later and next held, once each")
	time.Sleep(3 * timer.Tick)
	ids := deliveredIDs(t, b.Addr(), "t", 1) // fails on a msgId twice
	_, ok := ids[id0]
	require.True(t, ok)
	require.Len(t, ids, 3, "soon, plain, plain 2")
}

// TestDelayedIdempotentPipelinedRestart: delayed puts of one producer
// pipelined on one connection lie next to each other in the timer log,
// with consecutive ids; after a restart the table rebuilt from it answers
// each one's retry with its own msgId, as it does before a restart (the
// review's probe 2: all but the first were answered "held already",
// without the msgId a cancel needs).
func TestDelayedIdempotentPipelinedRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// idem.Window puts: the table keeps each producer's last Window
	// results (an older retry is answered "held already", restart or not).
	const pid, n = 1<<62 | 9, idem.Window
	pipeline := func(b *Broker) []int64 {
		c := dialRaw(t, b.Addr())
		var out []byte
		for seq := range int64(n) {
			m := &message.Message{Topic: "t", Body: []byte("m" + strconv.FormatInt(seq, 10)), Delay: time.Hour, ProducerID: pid, ProducerSeq: seq}
			data := m.AppendData(nil)
			out = append(out, protocol.AppendPutHeader(nil, "t", 0, len(data), m.Flag(), int64(message.Checksum(data)), int32(seq))...)
			out = append(out, data...)
		}
		c.nc.SetDeadline(time.Now().Add(30 * time.Second))
		_, err := c.nc.Write(out)
		require.NoError(t, err)
		ids := make([]int64, n)
		for range n {
			var r protocol.Request
			require.NoError(t, c.dec.Decode(&r))
			require.Equal(t, protocol.StatusOK, r.Code, "%s", r.Body)
			f := strings.Fields(string(r.Body))
			require.Len(t, f, 3, "%s", r.Body)
			ids[r.Opaque], err = strconv.ParseInt(f[0], 10, 64)
			require.NoError(t, err)
		}
		return ids
	}
	b := fixture{dir: dir}.start(t)
	first := pipeline(b)
	require.NoError(t, b.Close())
	b = fixture{dir: dir}.start(t)
	require.Equal(t, first, pipeline(b), "each retry answered with its put's msgId")
	require.Contains(t, statsItem(t, b, "delayed"), "\r\naccepted 0\r\n", "none scheduled again")
}
