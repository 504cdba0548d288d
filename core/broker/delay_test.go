package broker

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/core/timer"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// delivered reads partition p of topic t on the broker at addr from 0 and
// returns each record's msgId with its offset.
func deliveredIDs(t *testing.T, addr, topic string, p int32) map[int64]message.Record {
	t.Helper()
	c := dialRaw(t, addr)
	out := map[int64]message.Record{}
	var off int64
	for {
		r := c.roundTrip(t, protocol.AppendGet(nil, topic, "g", p, off, 1<<20, 5))
		if r.Op != protocol.OpValue {
			return out
		}
		it := message.NewIterator(r.Body, off, 0)
		for it.Next() {
			rec := *it.Record()
			rec.Data = append([]byte(nil), rec.Data...)
			if _, dup := out[rec.ID]; dup {
				t.Fatalf("msgId %d twice in %s-%d", rec.ID, topic, p)
			}
			out[rec.ID] = rec
		}
		if it.NextOffset() == off {
			return out
		}
		off = it.NextOffset()
	}
}

// TestDelayedMessages: delayed messages (Delay, DeliverAt, one in the past)
// are answered at once with offset -1, appear in their partitions only when
// due, with the msgIds their puts were answered with, exactly once; a
// cancelled one never appears; plain messages flow meanwhile; a restart
// with messages pending delivers them after it; stats delayed counts.
func TestDelayedMessages(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := fixture{dir: dir}.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	quiet := client.Logger(slog.New(slog.DiscardHandler))
	cl, err := client.New(client.Brokers(b.Addr()), quiet, client.Batching(16, 1<<20, time.Millisecond))
	require.NoError(t, err)
	defer cl.Close(ctx)

	type sent struct {
		due  time.Time
		part int32
	}
	want := map[int64]sent{}
	var msgs []*message.Message
	start := time.Now()
	for i := range 40 {
		m := &message.Message{Topic: "t", Body: []byte("d" + strconv.Itoa(i)), Key: []byte(strconv.Itoa(i))}
		switch {
		case i == 0:
			m.DeliverAt = start.Add(-time.Hour) // past: now
		case i%2 == 0:
			m.Delay = time.Duration(i*30) * time.Millisecond
		default:
			m.DeliverAt = start.Add(time.Duration(i*30) * time.Millisecond)
		}
		msgs = append(msgs, m)
	}
	res, err := cl.ProduceSync(ctx, msgs...)
	require.NoError(t, err)
	for i, r := range res {
		require.Equal(t, int64(-1), r.Offset, "delayed put answered with offset -1")
		due := msgs[i].DeliverAt
		if msgs[i].Delay > 0 {
			due = start.Add(msgs[i].Delay)
		}
		if i == 0 {
			due = start
		}
		want[r.ID] = sent{due, r.Partition}
	}
	// One to cancel, and one plain message that is there at once.
	cm := &message.Message{Topic: "t", Body: []byte("cancelled"), Delay: 1500 * time.Millisecond}
	cr, err := cl.ProduceSync(ctx, cm)
	require.NoError(t, err)
	require.NoError(t, cl.CancelDelayed(ctx, b.Addr(), "t", cr[0].Partition, cr[0].ID))
	pr, err := cl.ProduceSync(ctx, &message.Message{Topic: "t", Body: []byte("plain")})
	require.NoError(t, err)
	require.GreaterOrEqual(t, pr[0].Offset, int64(0))

	// Poll: each message appears no earlier than its due time.
	seen := map[int64]time.Time{}
	for deadline := time.Now().Add(20 * time.Second); len(seen) < len(want) && time.Now().Before(deadline); {
		for p := int32(0); p < 2; p++ {
			ids := deliveredIDs(t, b.Addr(), "t", p)
			read := time.Now() // each record read was appended by now
			for id := range ids {
				w, ok := want[id]
				if !ok || !seen[id].IsZero() {
					continue
				}
				require.Equal(t, w.part, p, "msgId %d in its partition", id)
				require.False(t, read.Before(w.due), "msgId %d read by %v, due %v: early", id, read, w.due)
				seen[id] = read
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Len(t, seen, len(want))
	time.Sleep(time.Until(start.Add(2 * time.Second)))
	for p := int32(0); p < 2; p++ {
		_, ok := deliveredIDs(t, b.Addr(), "t", p)[cr[0].ID]
		require.False(t, ok, "cancelled message delivered")
	}

	// Pending across a restart.
	late, err := cl.ProduceSync(ctx, &message.Message{Topic: "t", Body: []byte("after restart"), Delay: 1500 * time.Millisecond})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return strings.Contains(statsItem(t, b, "delayed"), "STATS\r\npending 1\r\n")
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, b.Close())
	b = fixture{dir: dir}.start(t)
	require.Eventually(t, func() bool {
		_, ok := deliveredIDs(t, b.Addr(), "t", late[0].Partition)[late[0].ID]
		return ok
	}, 20*time.Second, 50*time.Millisecond)
	// Nothing delivered before the restart came again.
	n := 0
	for p := int32(0); p < 2; p++ {
		n += len(deliveredIDs(t, b.Addr(), "t", p))
	}
	require.Equal(t, len(want)+2, n, "40 delayed, 1 plain, 1 after the restart")
	require.Eventually(t, func() bool {
		return strings.Contains(statsItem(t, b, "delayed"), "STATS\r\npending 0\r\n")
	}, 10*time.Second, 20*time.Millisecond)
}

// TestDelayedLostMarks: a broker whose delivered marks are lost (a test
// knob writes none, as if a crash lost each round's mark) delivers due
// messages; after a restart the rebuilt wheel holds them as pending
// again, and the restarted timer finds them in their partitions from its
// delivery intents and does not deliver them twice (docs/delayed.md,
// "Durability").
func TestDelayedLostMarks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := fixture{dir: dir, knobs: knobs{noTimerMarks: true}}.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(client.Brokers(b.Addr()), client.Logger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	defer cl.Close(ctx)
	want := map[int64]int32{}
	for i := range 30 {
		r, err := cl.ProduceSync(ctx, &message.Message{Topic: "t", Body: []byte("d" + strconv.Itoa(i)),
			Delay: time.Duration(i%3) * 100 * time.Millisecond})
		require.NoError(t, err)
		want[r[0].ID] = r[0].Partition
	}
	all := func(b *Broker) int {
		n := 0
		for p := int32(0); p < 2; p++ {
			for id := range deliveredIDs(t, b.Addr(), "t", p) { // fails on a msgId twice
				if _, ok := want[id]; ok {
					n++
				}
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return all(b) == len(want) }, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, b.Close())
	b = fixture{dir: dir}.start(t)
	require.Eventually(t, func() bool {
		return strings.Contains(statsItem(t, b, "delayed"), "STATS\r\npending 0\r\n")
	}, 10*time.Second, 20*time.Millisecond)
	time.Sleep(3 * timer.Tick)
	require.Equal(t, len(want), all(b), "each delivered once")
	require.Contains(t, statsItem(t, b, "delayed"), "\r\ndelivered 0\r\n", "nothing delivered again")
}

// TestDelayedRefusals: what the broker refuses of delayed puts.
func TestDelayedRefusals(t *testing.T) {
	t.Parallel()
	b := fixture{mods: []func(*conf.Config){func(c *conf.Config) { c.MaxDelay = 60_000 }}}.start(t)
	c := dialRaw(t, b.Addr())
	put := func(h message.Headers, producer bool) protocol.Request {
		m := &message.Message{Topic: "t", Body: []byte("x"), Headers: h}
		if producer {
			m.ProducerID, m.ProducerSeq = 7, 0
		}
		data := m.AppendData(nil)
		return c.roundTrip(t, append(protocol.AppendPutHeader(nil, "t", 0, len(data), m.Flag(), int64(message.Checksum(data)), 1), data...))
	}
	r := put(message.Headers{{Key: message.HeaderDelay, Value: []byte("120000")}}, false)
	require.Equal(t, protocol.StatusBadRequest, r.Code)
	require.Contains(t, string(r.Body), "exceeds max_delay")
	r = put(message.Headers{{Key: message.HeaderDelay, Value: []byte("soon")}}, false)
	require.Equal(t, protocol.StatusBadRequest, r.Code, "%s", r.Body)
	r = put(message.Headers{{Key: message.HeaderCancel, Value: []byte("10")}}, true)
	require.Equal(t, protocol.StatusBadRequest, r.Code)
	require.True(t, strings.Contains(string(r.Body), "idempotent"), "%s", r.Body)
	r = put(message.Headers{{Key: message.HeaderDelay, Value: []byte("10")}, {Key: message.HeaderDeliverAt, Value: []byte("10")}}, false)
	require.Equal(t, protocol.StatusBadRequest, r.Code)
	// Clients do not put into the timer topic.
	r = c.roundTrip(t, append(protocol.AppendPutHeader(nil, conf.TimerTopic, 0, 1, 0, -1, 1), 'x'))
	require.NotEqual(t, protocol.StatusOK, r.Code)
}

// TestSyncPairDelayed: a sync master takes delayed puts (the slave opens
// the timer topic on the first sync of it) and its timer log is on its
// slave: what a promoted slave rebuilds its wheel from. (Delivery on a
// sync master is not checked here: docs/delayed.md, "Not built yet".)
func TestSyncPairDelayed(t *testing.T) {
	t.Parallel()
	master, slave := syncPair(t, "delayed")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(client.Brokers(master.Addr()), client.Logger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	defer cl.Close(ctx)
	var msgs []*message.Message
	for i := range 20 {
		msgs = append(msgs, &message.Message{Topic: "t", Body: []byte("d" + strconv.Itoa(i)), Delay: time.Hour})
	}
	_, err = cl.ProduceSync(ctx, msgs...)
	require.NoError(t, err)
	late, err := cl.ProduceSync(ctx, &message.Message{Topic: "t", Body: []byte("pending"), Delay: time.Hour})
	require.NoError(t, err)
	// The timer logs match, marks included.
	mt, err := master.lookup([]byte(conf.TimerTopic), false)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := slave.lookup([]byte(conf.TimerTopic), false)
		if err != nil {
			return false
		}
		for p, l := range mt.Parts {
			if st.Parts[p].MaxOffset() != l.MaxOffset() {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond)
	// The slave's copy rebuilds to one pending message: the hour-long one.
	st, _ := slave.lookup([]byte(conf.TimerTopic), false)
	var pending int64
	for p, l := range st.Parts {
		w, err := timer.Open(filepath.Join(t.TempDir(), strconv.Itoa(p)), l, 1<<20)
		require.NoError(t, err)
		pending += w.Pending()
	}
	require.Equal(t, int64(21), pending, "the slave's timer log holds the 21 pending, %d among them", late[0].ID)
}

// TestSyncPairDelayedDelivery: on a sync pair the master delivers due
// messages (each to the partition its put chose), with their msgIds, and
// the slave's copy of each target partition holds them too, though plain
// puts with higher ids came before them.
func TestSyncPairDelayedDelivery(t *testing.T) {
	t.Parallel()
	master, slave := syncPair(t, "delayed-deliver")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(client.Brokers(master.Addr()), client.Logger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	defer cl.Close(ctx)
	ids := map[int64]bool{}
	for i := range 10 {
		res, err := cl.ProduceSync(ctx, &message.Message{Topic: "t", Body: []byte("due" + strconv.Itoa(i)), Delay: 300 * time.Millisecond})
		require.NoError(t, err)
		ids[res[0].ID] = true
	}
	// Plain puts to both partitions before they are due: the deliveries'
	// ids (their acceptances') are below the partitions' last ids, which
	// the slave must not take for syncs its puller copied already.
	for p := range int32(2) {
		res, err := cl.ProduceSync(ctx, &message.Message{Topic: "t", Partition: p, Body: []byte("plain")})
		require.NoError(t, err)
		ids[res[0].ID] = true
	}
	mt, err := master.lookup([]byte("t"), false)
	require.NoError(t, err)
	// Every due message is delivered on the master, and copied to the slave.
	found := func(parts []*store.Log) map[int64]bool {
		got := map[int64]bool{}
		for _, l := range parts {
			v, err := l.Read(l.MinOffset(), 1<<20)
			if err != nil {
				continue
			}
			b, err := v.ReadAll(nil)
			v.Release()
			if err != nil {
				continue
			}
			it := message.NewIterator(b, 0, 0)
			for it.Next() {
				got[it.Record().ID] = true
			}
		}
		return got
	}
	require.Eventually(t, func() bool { return len(found(mt.Parts)) == len(ids) }, 15*time.Second, 50*time.Millisecond,
		"the sync master delivers the due messages")
	require.Equal(t, ids, found(mt.Parts), "delivered with the msgIds their puts were answered with")
	require.Eventually(t, func() bool {
		st, err := slave.lookup([]byte("t"), false)
		return err == nil && len(found(st.Parts)) == len(ids)
	}, 15*time.Second, 50*time.Millisecond, "the slave holds the delivered messages")
	// Later puts land at the same offsets on both: the copies are equal.
	for range 4 {
		_, err := cl.ProduceSync(ctx, &message.Message{Topic: "t", Body: []byte("after")})
		require.NoError(t, err)
	}
	st, err := slave.lookup([]byte("t"), false)
	require.NoError(t, err)
	requireCopiesEqual(t, mt.Parts, st.Parts, 15*time.Second)
}

// logBytes is what log l holds, from its start (up to 1 MiB).
func logBytes(l *store.Log) []byte {
	v, err := l.Read(l.MinOffset(), 1<<20)
	if err != nil {
		return nil
	}
	b, _ := v.ReadAll(nil)
	v.Release()
	return b
}

// requireCopiesEqual waits up to wait for each slave partition to hold
// the bytes of the master's, and lists both copies (logDiff) if one
// never does.
func requireCopiesEqual(t *testing.T, master, slave []*store.Log, wait time.Duration) {
	t.Helper()
	for p, l := range master {
		if !assert.Eventually(t, func() bool { return string(logBytes(l)) == string(logBytes(slave[p])) }, wait, 50*time.Millisecond,
			"partition %d: the slave's copy equals the master's", p) {
			t.Fatalf("partition %d differs:\n%s", p, logDiff(logBytes(l), logBytes(slave[p])))
		}
	}
}

// TestSyncPairDeliveryPulledFirst: the link to a sync slave is slow when
// delayed messages are delivered, so the slave's puller, which pulls the
// master's partitions meanwhile, copies the deliveries before their syncs
// arrive: those syncs are duplicates whether a delivery's id (its
// acceptance's) was above the partition's last id when the puller copied
// it (no put to the partition since the delayed ones: such a sync was
// appended a second time) or below it (a plain put after them), and the
// copies end equal.
func TestSyncPairDeliveryPulledFirst(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/delayed-pulled-first-%d", time.Now().UnixNano())
	master, slave, proxy := proxiedSyncPairConf(t, zkAddr, root, func(c *conf.Config) { c.SyncTimeout = 10000 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(client.Brokers(master.Addr()), client.Logger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	defer cl.Close(ctx)
	// A put whose sync the proxy holds until the puller copied it: the
	// puller has read the master's topics (every 2 s) and pulls t.
	proxy.Hold()
	first := make(chan error, 1)
	go func() {
		_, err := cl.ProduceSync(ctx, &message.Message{Topic: "t", Body: []byte("first")})
		first <- err
	}()
	require.Eventually(t, func() bool { return slave.slave.Status().Copied > 0 }, 10*time.Second, 10*time.Millisecond,
		"the puller copies a put whose sync is held")
	proxy.Release()
	require.NoError(t, <-first)
	// Round-robin: two due messages to each partition, then a plain put
	// to one of them.
	var placed []int32
	for i := range 5 {
		m := &message.Message{Topic: "t", Body: []byte("due" + strconv.Itoa(i)), Delay: time.Second}
		if i == 4 {
			m = &message.Message{Topic: "t", Body: []byte("plain")}
		}
		res, err := cl.ProduceSync(ctx, m)
		require.NoError(t, err)
		placed = append(placed, res[0].Partition)
	}
	t.Logf("partitions %v", placed)
	// Each chunk on the link waits 250 ms: the puller polls at least every
	// slave_max_delay/4 (125 ms) and sees a delivery once the master's
	// copy is durable, before its sync.
	proxy.Delay(250 * time.Millisecond)
	require.Eventually(t, func() bool { return master.delay.Delivered.Load() == 4 }, 20*time.Second, 20*time.Millisecond,
		"the sync master delivers the due messages")
	proxy.Delay(0)
	st := slave.slave.Status()
	t.Logf("slave: %d copied by the puller, %d syncs stored, %d syncs of copied messages", st.Copied, st.Syncs, st.SyncDups)
	mt, err := master.lookup([]byte("t"), false)
	require.NoError(t, err)
	stp, err := slave.lookup([]byte("t"), false)
	require.NoError(t, err)
	requireCopiesEqual(t, mt.Parts, stp.Parts, 10*time.Second)
}

// logDiff lists two copies of a partition's records side by side (offset,
// id, flag, length, body), marking the records that differ, so a test that
// finds a slave's copy unlike its master's shows how.
func logDiff(master, slave []byte) string {
	type rec struct {
		off  int64
		id   int64
		flag int32
		n    int
		body string
	}
	recs := func(b []byte) ([]rec, int) {
		var rs []rec
		it := message.NewIterator(b, 0, 0)
		end := 0
		for it.Next() {
			r := it.Record()
			body := string(r.Data)
			if len(body) > 24 {
				body = body[:24] + "..."
			}
			rs = append(rs, rec{r.Offset, r.ID, r.Flag, r.Size(), strconv.Quote(body)})
			end = int(r.Offset) + r.Size()
		}
		return rs, len(b) - end
	}
	m, mt := recs(master)
	s, st := recs(slave)
	var sb strings.Builder
	fmt.Fprintf(&sb, "master %d bytes, %d records (%d bytes after them); slave %d bytes, %d records (%d bytes after them)\n",
		len(master), len(m), mt, len(slave), len(s), st)
	for i := 0; i < max(len(m), len(s)); i++ {
		var a, b string
		same := i < len(m) && i < len(s) && m[i] == s[i]
		if i < len(m) {
			a = fmt.Sprintf("off %d id %d flag %d len %d %s", m[i].off, m[i].id, m[i].flag, m[i].n, m[i].body)
		}
		if i < len(s) {
			b = fmt.Sprintf("off %d id %d flag %d len %d %s", s[i].off, s[i].id, s[i].flag, s[i].n, s[i].body)
		}
		mark := "  "
		if !same {
			mark = "!="
		}
		fmt.Fprintf(&sb, "%s #%d master: %s | slave: %s\n", mark, i, a, b)
	}
	return sb.String()
}

// TestAsyncSlaveDelayed: an async slave copies the timer topic (it is not
// registered in ZooKeeper, where the slave learns the other topics) with
// its get in the slave group, which no other group may do: its copy of
// the timer log rebuilds to the master's pending messages, so a promoted
// async slave delivers them too; and the due ones it copies like any put.
func TestAsyncSlaveDelayed(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/async-delayed-%d", time.Now().UnixNano())
	master := replBroker(t, zkAddr, root, t.TempDir(), "", -1, nil)
	slave := replBroker(t, zkAddr, root, t.TempDir(), "", 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(client.Brokers(master.Addr()), client.Logger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	defer cl.Close(ctx)
	for i := range 20 {
		d := time.Hour
		if i%2 == 0 {
			d = 200 * time.Millisecond
		}
		_, err := cl.ProduceSync(ctx, &message.Message{Topic: "t", Body: []byte("d" + strconv.Itoa(i)), Delay: d})
		require.NoError(t, err)
	}
	// A client may not read the timer log, in any other group.
	mc := dialRaw(t, master.Addr())
	r := mc.roundTrip(t, protocol.AppendGet(nil, conf.TimerTopic, "g", 0, 0, 1<<20, 5))
	require.Equal(t, protocol.StatusForbidden, r.Code, "%s", r.Body)
	mt, err := master.lookup([]byte(conf.TimerTopic), false)
	require.NoError(t, err)
	same := func(topic string) bool {
		a, err := master.lookup([]byte(topic), false)
		if err != nil {
			return false
		}
		b, err := slave.lookup([]byte(topic), false)
		if err != nil || len(b.Parts) != len(a.Parts) {
			return false
		}
		for p, l := range a.Parts {
			if b.Parts[p].MaxOffset() != l.MaxOffset() {
				return false
			}
		}
		return true
	}
	// The ten due ones are delivered on the master, then both copies match.
	require.Eventually(t, func() bool {
		return strings.Contains(statsItem(t, master, "delayed"), "\r\ndelivered 10\r\n")
	}, 15*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return same(conf.TimerTopic) && same("t") }, 15*time.Second, 20*time.Millisecond,
		"the async slave copies the timer log and the deliveries")
	requireSameEnds(t, master, slave, "t")
	st, err := slave.lookup([]byte(conf.TimerTopic), false)
	require.NoError(t, err)
	var pending int64
	for p, l := range st.Parts {
		require.Equal(t, mt.Parts[p].MaxOffset(), l.MaxOffset())
		w, err := timer.Open(filepath.Join(t.TempDir(), strconv.Itoa(p)), l, 1<<20)
		require.NoError(t, err)
		pending += w.Pending()
	}
	require.Equal(t, int64(10), pending, "the slave's timer log holds the 10 pending")
}
