package store

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestJournalMarkCapped: a durable mark further back than the header's
// 24-bit field can say (about 256 MiB) is written as markMax and read as
// markCapped, a mark without a position: never as a mark higher than the
// true one. A torn tail inside such a round (its records far past the
// round's mark) is then still told from damage: the capped records after
// it neither raise the highest mark nor count as unmarked.
func TestJournalMarkCapped(t *testing.T) {
	const start = int64(1) << 32
	const far = int64(300) << 20 // past the field's reach
	for _, pos := range []int64{start + far, start + 16*(markMax-1) + 1, start + 16*(markMax-1) + 100} {
		v := markField(pos, start)
		require.Equal(t, uint32(markMax), v, "distance %d", pos-start)
		var rec [jHeaderSize]byte
		sealJRecord(rec[:], pos, 1, start, recSkip)
		h := parseJHeader(rec[:])
		require.Equal(t, int64(markCapped), h.mark(), "distance %d: the decoded mark is not above the true one %d", pos-start, start)
		sealJRecord(rec[:], pos, 1, h.mark(), recSkip)
		require.Equal(t, uint32(markMax), parseJHeader(rec[:]).markv, "a capped mark round-trips")
	}
	// The largest distance the field still holds decodes exactly (to a
	// mark at or below the true one, by less than markUnit).
	for _, d := range []int64{16*(markMax-2) - 15, 16 * (markMax - 2)} {
		var rec [jHeaderSize]byte
		sealJRecord(rec[:], start+d, 1, start, recSkip)
		m := parseJHeader(rec[:]).mark()
		require.LessOrEqual(t, m, start, "distance %d", d)
		require.Greater(t, m, start-markUnit, "distance %d", d)
	}

	// One round staged with mark start: its first file (sparse, 300 MiB
	// long) holds a record, a damaged one (the torn page), another and
	// a skip record; the next file, 300 MiB on, holds a record whose
	// mark is too far back for its field.
	dir := t.TempDir()
	rec := func(pos int64, typ byte, payload []byte) []byte {
		r := append(make([]byte, jHeaderSize), payload...)
		sealJRecord(r, pos, 1, start, typ)
		return r
	}
	reg := func(name string) []byte {
		return appendRegisterPayload(nil, registerRecord{name: name, end: 0, lastID: 0})
	}
	var f1 []byte
	f1 = append(f1, rec(start, recRegister, reg("a-0"))...)
	torn := start + int64(len(f1))
	d := rec(torn, recRegister, reg("b-0"))
	d[len(d)-1] ^= 0x40 // a lost page: the record no longer verifies
	f1 = append(f1, d...)
	f1 = append(f1, rec(start+int64(len(f1)), recRegister, reg("c-0"))...)
	f1 = append(f1, rec(start+int64(len(f1)), recSkip, nil)...)
	second := start + far
	f2 := rec(second, recRegister, reg("d-0"))
	require.Equal(t, uint32(markMax), parseJHeader(f2).markv)

	open := func(at int64, b []byte, size int64) *jfile {
		f, err := os.OpenFile(filepath.Join(dir, journalName(at)), os.O_RDWR|os.O_CREATE, 0o644)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		_, err = f.WriteAt(b, 0)
		require.NoError(t, err)
		require.NoError(t, f.Truncate(size)) // sparse
		return &jfile{start: at, size: size, f: f}
	}
	files := []*jfile{open(start, f1, far), open(second, f2, 64<<10)}
	sc, err := scanJournal(files)
	require.NoError(t, err)
	require.Equal(t, 4, sc.records, "records: %s", sc.stopped)
	require.Len(t, sc.holes, 1)
	require.Equal(t, torn, sc.holes[0].pos)
	require.Equal(t, start, sc.maxMark, "the capped mark raised the highest mark")
	require.Equal(t, int64(-1), sc.lastUnmarked, "the capped mark counted as none")
	h, ok := sc.tornCandidate()
	require.True(t, ok, "a torn tail past every durable mark is refused as damage")
	require.Equal(t, torn, h.pos)
}

// maxMark returns the highest durable mark of recs (-1: none).
func maxMark(recs []jrec) int64 {
	m := int64(-1)
	for _, r := range recs {
		m = max(m, r.mark)
	}
	return m
}

// TestJournalMarkRecords: every acknowledged put's journal record lies
// under a durable mark carried by a record written before the put was
// acknowledged, so a copy of the journal taken right after the
// acknowledgement (a kill -9) already says the put was synced. On an
// idle journal that record is a mark record written after the round's
// fdatasync (fdatasynced by itself only after markSyncDelay of idleness);
// there is at most one per fdatasync, and an idle journal writes nothing
// more (no fdatasync, no checkpoint).
func TestJournalMarkRecords(t *testing.T) {
	t.Parallel()
	opts := JournalOptions{FileSize: 64 << 10, CheckpointBytes: 1 << 40, CheckpointInterval: 50 * time.Millisecond,
		hooks: &journalHooks{smallFiles: true}}
	dir := t.TempDir()
	j, err := OpenJournal(dir, opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, j.Close()) }()
	logs := make([]*Log, 2)
	for p := range logs {
		logs[p], err = Open(filepath.Join(dir, partName(p)), Options{IDs: &seqIDs{}, MaxSegmentSize: 16 << 10, Journal: j})
		require.NoError(t, err)
		defer func() { require.NoError(t, logs[p].Close()) }()
	}
	jdir := filepath.Join(dir, JournalDirName)
	// covered checks that the journal as it is now on disk holds the
	// put at off of partition p, under a mark.
	covered := func(p int, off int64, what string) {
		t.Helper()
		recs := walkJournal(t, jdir)
		k := slices.IndexFunc(recs, func(r jrec) bool {
			return r.typ == recData && r.name == partName(p) && r.dataOff <= off && off < r.dataEnd
		})
		require.GreaterOrEqual(t, k, 0, "%s: the put's record is in the journal", what)
		require.Less(t, recs[k].end, maxMark(recs)+markUnit, "%s: the put's record lies under a durable mark", what)
	}
	for i := range 40 {
		p := i % 2
		_, off, err := logs[p].AppendSync([]Entry{entry(fmt.Appendf(nil, "seq-%d-%s", i, strings.Repeat("m", i*37)))})
		require.NoError(t, err)
		covered(p, off, fmt.Sprintf("sequential put %d", i))
	}
	st := j.Stats()
	require.Positive(t, st.Marks, "sequential puts on an idle journal wrote mark records")
	require.LessOrEqual(t, st.Marks, st.Fsyncs, "at most one mark record per fdatasync")

	// Concurrent puts: every one is under a mark once acknowledged.
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 30 {
				p := (g + i) % 2
				_, off, err := logs[p].AppendSync([]Entry{entry(fmt.Appendf(nil, "conc-%d-%d", g, i))})
				if !assert.NoError(t, err) {
					return
				}
				recs := walkJournal(t, jdir)
				k := slices.IndexFunc(recs, func(r jrec) bool {
					return r.typ == recData && r.name == partName(p) && r.dataOff <= off && off < r.dataEnd
				})
				if assert.GreaterOrEqual(t, k, 0) {
					assert.Less(t, recs[k].end, maxMark(recs)+markUnit, "concurrent put %d/%d under a mark", g, i)
				}
			}
		})
	}
	wg.Wait()
	st = j.Stats()
	require.LessOrEqual(t, st.Marks, st.Fsyncs, "at most one mark record per fdatasync")

	// Idle: the last mark record is fdatasynced by itself once, within
	// markSyncDelay (TestJournalMarkSyncedIdle), makes no checkpoint
	// due, and nothing more is written.
	time.Sleep(4 * opts.CheckpointInterval) // the checkpoint of the puts' bytes
	before := j.Stats()
	time.Sleep(4 * opts.CheckpointInterval)
	after := j.Stats()
	require.Equal(t, before.Fsyncs, after.Fsyncs, "fdatasyncs while idle")
	require.Equal(t, before.Checkpoints, after.Checkpoints, "checkpoints while idle")
	require.Equal(t, before.Bytes, after.Bytes, "journal bytes while idle")
}

// TestJournalFlipLastAcked: a flip in the last acknowledged round's data
// record, the journal copied right after its acknowledgement (a kill
// -9): the mark record after it says that round was synced, so the flip
// is damage, not a torn tail. The segment holding the bytes (as a kill
// -9 that caught a checkpoint's write-back leaves them), nothing is
// lost; the segment not holding them (a power cut), the start is
// refused, naming the range. Before mark records, that round lay past
// every mark, and the flip was taken for a torn tail: its acknowledged
// put was dropped without a word.
func TestJournalFlipLastAcked(t *testing.T) {
	t.Parallel()
	fx := newFlipFixture(t)
	k := len(fx.recs) - 1
	for k >= 0 && fx.recs[k].typ != recData {
		k--
	}
	require.Positive(t, k)
	r := fx.recs[k]
	require.Equal(t, byte(recMark), fx.recs[len(fx.recs)-1].typ, "a mark record ends the journal")
	require.LessOrEqual(t, r.end, maxMark(fx.recs), "the last data record lies under the mark record's mark")

	fx.heldAndLost(t, r, r.end-2, 0x20, "flip in the last acknowledged record")
}

// TestJournalFlipMarkRecord: a flip anywhere in a mark record with valid
// records after it (its crc, length, position, epoch, type or mark
// field) is damage that held no partition data: nothing is lost, also
// when the flip leaves its extent unknown (a stretch shorter than the
// smallest data record held none). A flip in the last one, which ends
// the journal, is a torn tail; the records before it are intact.
func TestJournalFlipMarkRecord(t *testing.T) {
	t.Parallel()
	fx := newFlipFixture(t)
	k := slices.IndexFunc(fx.recs[fx.last+1:len(fx.recs)-1], func(r jrec) bool { return r.typ == recMark })
	require.GreaterOrEqual(t, k, 0, "a mark record in the replay range")
	r := fx.recs[fx.last+1+k]
	require.Equal(t, int64(jHeaderSize), r.end-r.pos)
	for _, fl := range []struct {
		name string
		at   int64
	}{{"crc", 2}, {"length", 6}, {"length-high", 4}, {"position", 15}, {"epoch", 19}, {"type", 20}, {"mark", 23}} {
		t.Run(fl.name, func(t *testing.T) {
			dir := fx.copy(t)
			flipJournal(t, filepath.Join(dir, JournalDirName), r.pos+fl.at, 0x02)
			o, lb := fx.logged()
			recoverAndCheck(t, dir, o, flipParts, fx.all(), "flip in a mark record's "+fl.name)
			require.Contains(t, lb.String(), "no partition data")
			require.Contains(t, lb.String(), "nothing lost")
		})
	}
	t.Run("last", func(t *testing.T) {
		last := fx.recs[len(fx.recs)-1]
		require.Equal(t, byte(recMark), last.typ)
		dir := fx.copy(t)
		flipJournal(t, filepath.Join(dir, JournalDirName), last.pos+6, 0x02)
		o, lb := fx.logged()
		recoverAndCheck(t, dir, o, flipParts, fx.all(), "flip in the last mark record")
		require.NotContains(t, lb.String(), "damaged record")
	})
}

// TestJournalMarkSyncSlowDevice: on a slow device (every fdatasync 25
// ms, over the mark record's 10 ms delay) under a steady stream of puts,
// a mark record's own fdatasync is not added while a round is being
// synced (a later round's records carry the mark; an earlier one's
// completion writes a later mark record): the mark records are made
// durable by the rounds, and the last one, once the journal is idle, by
// an fdatasync of its own.
func TestJournalMarkSyncSlowDevice(t *testing.T) {
	t.Parallel()
	slow := func(f *os.File) error {
		time.Sleep(25 * time.Millisecond)
		return fdatasync(f)
	}
	opts := JournalOptions{FileSize: 1 << 20, CheckpointBytes: 1 << 40, CheckpointInterval: time.Hour,
		hooks: &journalHooks{smallFiles: true, sync: slow}}
	dir := t.TempDir()
	j, err := OpenJournal(dir, opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, j.Close()) }()
	logs := make([]*Log, 2)
	for p := range logs {
		logs[p], err = Open(filepath.Join(dir, partName(p)), Options{IDs: &seqIDs{}, MaxSegmentSize: 256 << 10, Journal: j})
		require.NoError(t, err)
		defer func() { require.NoError(t, logs[p].Close()) }()
	}
	stop := time.Now().Add(400 * time.Millisecond)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				_, _, err := logs[(g+i)%2].AppendSync([]Entry{entry(fmt.Appendf(nil, "slow-%d-%d", g, i))})
				if !assert.NoError(t, err) {
					return
				}
			}
		})
	}
	wg.Wait()
	busy := j.Stats()
	require.Positive(t, busy.Marks)
	require.Eventually(t, func() bool { return j.Stats().MarkSyncs > busy.MarkSyncs }, 5*time.Second, 5*time.Millisecond,
		"the idle journal's last mark record fdatasynced")
	time.Sleep(100 * time.Millisecond)
	st := j.Stats()
	t.Logf("%d rounds, %d fdatasyncs, %d mark records; mark fdatasyncs: %d under load, %d in all", st.Rounds, st.Fsyncs, st.Marks, busy.MarkSyncs, st.MarkSyncs)
	// (Without the check for a round in flight: one per mark record,
	// 15 of 17. A few may come where all four producers paused for
	// over 10 ms between a put's acknowledgement and the next, under
	// -race on a loaded machine.)
	require.LessOrEqual(t, busy.MarkSyncs, int64(3), "mark fdatasyncs while rounds were being synced")
	require.LessOrEqual(t, st.MarkSyncs-busy.MarkSyncs, int64(2), "the idle journal's")
}
