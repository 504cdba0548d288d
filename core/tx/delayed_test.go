package tx

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/core/timer"
	"github.com/metaq-go/metaq/sdk/message"
)

// delayedEntry is a put of body asking for delay.
func delayedEntry(body string, delay time.Duration) store.Entry {
	m := &message.Message{Topic: "t", Body: []byte(body), Delay: delay}
	data := m.AppendData(nil)
	return store.Entry{Flag: m.Flag(), CRC: message.Checksum(data), Data: data}
}

// timerRecords parses the timer log's records.
func timerRecords(t *testing.T, h *testHost) map[int64]timer.Message {
	t.Helper()
	out := map[int64]timer.Message{}
	for _, r := range logRecords(t, h.timer) {
		rec, err := timer.Parse(r.Data)
		require.NoError(t, err)
		require.Equal(t, timer.KindMessage, int(rec.Kind))
		_, dup := out[r.ID]
		require.False(t, dup, "msgId %d twice in the timer log", r.ID)
		out[r.ID] = rec.Msg
	}
	return out
}

// TestTxDelayedCommit: a commit turns its delayed messages into timer log
// records, due from the commit, with the ids of their puts, and stores
// only the plain ones in their partitions; a rollback leaves nothing.
func TestTxDelayedCommit(t *testing.T) {
	m, h, closeAll := openTestManager(t, t.TempDir())
	defer closeAll()
	peer := newTestPeer()
	s := m.NewSession(peer)
	_, err := m.BeginLocal(s, "TX:s:1", "s", 0)
	require.NoError(t, err)
	plain := putTest(t, m, h, s, "TX:s:1", false, 0, "plain")
	var delayed []int64
	for p := int32(0); p < 2; p++ {
		id, err := m.Put(s, "TX:s:1", false, testTopic("t"), h.parts[p], p, delayedEntry("later", 5*time.Second))
		require.NoError(t, err)
		delayed = append(delayed, id)
	}
	time.Sleep(20 * time.Millisecond) // the delay counts from the commit, not the puts
	before := time.Now().UnixMilli()
	m.CommitLocal(s, "TX:s:1", 1)
	require.NoError(t, (<-peer.done).err)
	after := time.Now().UnixMilli()

	recs := h.records(t, 0)
	require.Len(t, recs, 1)
	require.Equal(t, plain, recs[0].ID)
	require.Empty(t, h.records(t, 1))
	tm := timerRecords(t, h)
	require.Len(t, tm, 2)
	for p, id := range delayed {
		msg, ok := tm[id]
		require.True(t, ok, "the timer record keeps the put's msgId")
		require.Equal(t, int32(p), msg.Partition)
		require.Equal(t, "t", msg.Topic)
		require.Equal(t, delayedEntry("later", 5*time.Second).Data, msg.Data, "the put's record, headers included")
		require.GreaterOrEqual(t, msg.Due, before+5000)
		require.LessOrEqual(t, msg.Due, after+5000)
	}

	_, err = m.BeginLocal(s, "TX:s:2", "s", 0)
	require.NoError(t, err)
	_, err = m.Put(s, "TX:s:2", false, testTopic("t"), h.parts[1], 1, delayedEntry("never", 0))
	require.NoError(t, err)
	require.NoError(t, m.RollbackLocal(s, "TX:s:2"))
	require.Len(t, timerRecords(t, h), 2, "a rollback schedules nothing")
}

// TestTxRecoveryDelayed: a broker killed in the middle of a commit with
// delayed messages left their timer records and the commit record in the
// journal, no batch stored: the start stores the plain batch in its
// partition and the timer batch in the timer log, each once (a second
// start with the same journal finds both in place); the original puts of
// the delayed messages are not stored. A prepared branch whose commit
// record was torn off after its timer records stays prepared with its
// puts as they were.
func TestTxRecoveryDelayed(t *testing.T) {
	dataDir := t.TempDir()
	dir := filepath.Join(dataDir, DirName)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	j, err := openTxLog(dir, txFlushCommit, 0, t.Logf)
	require.NoError(t, err)
	h := openTestHost(t, dataDir)
	m := &Manager{host: h}
	put := func(tr *tx, p int32, e store.Entry, id int64) txMsg {
		e.ID = id
		tm := txMsg{t: testTopic("t"), l: h.parts[p], p: p, e: e}
		_, err := j.write(tr, txRecAppend, encodeTxAppend(tr.key, &tm))
		require.NoError(t, err)
		return tm
	}
	a := &tx{key: "TX:s:1"}
	plainData := []byte("plain")
	msgs := []txMsg{
		put(a, 0, store.Entry{CRC: message.Checksum(plainData), Data: plainData}, 1000),
		put(a, 0, delayedEntry("d0", time.Hour), 1001),
		put(a, 1, delayedEntry("d1", time.Hour), 1002),
	}
	all, timers, err := m.commitTimerMsgs(msgs, time.Now().UnixMilli())
	require.NoError(t, err)
	require.Len(t, timers, 2)
	for i := range timers {
		_, err := j.write(a, txRecAppend, encodeTxAppend(a.key, &timers[i]))
		require.NoError(t, err)
	}
	var locs []txBatchLoc
	for _, bt := range txBatches(all) {
		locs = append(locs, txBatchLoc{topic: bt.t.Name(), partition: bt.p, firstID: bt.entries[0].ID, n: len(bt.entries), crc: batchCRC(bt.entries)})
	}
	require.Len(t, locs, 2, "t-0 and the timer partition")
	_, err = j.write(a, txRecCommit, encodeTxCommit(a.key, locs))
	require.NoError(t, err)
	// A prepared XA branch: its puts, prepare, then a commit's timer
	// record without the commit record.
	x := &tx{key: "XID:1:aa:bb:q"}
	xm := put(x, 1, delayedEntry("x", time.Hour), 2000)
	_, err = j.write(x, txRecPrepare, encodeTxPrepare(x.key, ""))
	require.NoError(t, err)
	_, xt, err := m.commitTimerMsgs([]txMsg{xm}, time.Now().UnixMilli())
	require.NoError(t, err)
	_, err = j.write(x, txRecAppend, encodeTxAppend(x.key, &xt[0]))
	require.NoError(t, err)
	require.NoError(t, j.close())
	h.close()
	journal, err := os.ReadFile(filepath.Join(dir, txFileName(1)))
	require.NoError(t, err)

	for start := range 2 {
		if start == 1 { // the journal as the crash left it, the batches in place
			require.NoError(t, os.RemoveAll(dir))
			require.NoError(t, os.MkdirAll(dir, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, txFileName(1)), journal, 0o644))
		}
		m, h, closeAll := openTestManager(t, dataDir)
		recs := h.records(t, 0)
		require.Len(t, recs, 1, "start %d: the plain message alone", start)
		require.Equal(t, int64(1000), recs[0].ID)
		require.Empty(t, h.records(t, 1), "start %d", start)
		tm := timerRecords(t, h)
		require.Len(t, tm, 2, "start %d: the timer batch, once", start)
		for _, id := range []int64{1001, 1002} {
			require.Equal(t, timers[id-1001].e.Data, timer.AppendMessage(nil, ptr(tm[id])), "start %d: msgId %d", start, id)
		}
		st := m.Status()
		require.Len(t, st.Open, 1)
		require.Equal(t, "XID:1:aa:bb:q", st.Open[0].Key)
		require.Equal(t, 1, st.Open[0].Messages, "start %d: the prepared branch keeps its put, not the torn commit's timer record", start)
		require.Equal(t, int32(1), m.xa["XID:1:aa:bb:q"].msgs[0].p)
		closeAll()
	}
}

func ptr[T any](v T) *T { return &v }

type countTopic struct {
	testTopic
	msgs *int
}

func (t countTopic) CountIn(_ int32, msgs int, _ int64) { *t.msgs += msgs }

type storedTimer [][2]int

func (s *storedTimer) Stored(i int, msgs int) { *s = append(*s, [2]int{i, msgs}) }

// TestTimerTopic: a commit's timer batch counts in the timer topic's
// traffic and as accepted by the timer service (its partition woken);
// ReadyTimer, without a sync master, only opens the timer log.
func TestTimerTopic(t *testing.T) {
	n, st := 0, storedTimer{}
	tt := TimerTopic{Topic: countTopic{testTopic(conf.TimerTopic), &n}, Timer: &st}
	tt.CountIn(3, 2, 100)
	if n != 2 || len(st) != 1 || st[0] != [2]int{3, 2} || tt.Name() != conf.TimerTopic {
		t.Fatalf("%d %v", n, st)
	}
	m, _, done := openTestManager(t, t.TempDir())
	defer done()
	m.ReadyTimer("t", 1)
}
