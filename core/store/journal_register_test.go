package store

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// registerRun is a data directory whose partitions t-0 .. t-(parts-1)
// hold puts from a first run that stopped cleanly: they register with an
// end and a last id in the next run.
type registerRun struct {
	dir   string
	acked []crashPut
	ends  []int64 // each partition's end after the first run
	ids   []int64 // and its last id
}

func newRegisterRun(t *testing.T, parts, puts int) *registerRun {
	t.Helper()
	rr := &registerRun{dir: t.TempDir(), ends: make([]int64, parts), ids: make([]int64, parts)}
	j, err := OpenJournal(rr.dir, smallJournal())
	require.NoError(t, err)
	for p := range parts {
		l, err := Open(filepath.Join(rr.dir, partName(p)), Options{IDs: &seqIDs{}, MaxSegmentSize: 2 << 10, Journal: j})
		require.NoError(t, err)
		for i := range puts {
			rr.put(t, l, p, fmt.Sprintf("p%d-first-%d-%s", p, i, strings.Repeat("f", 10+7*i)))
		}
		rr.ends[p], rr.ids[p] = l.MaxOffset(), l.LastID()
		require.NoError(t, l.Close())
	}
	require.NoError(t, j.Close())
	return rr
}

func (rr *registerRun) put(t *testing.T, l *Log, p int, data string) {
	t.Helper()
	_, off, err := l.AppendSync([]Entry{entry([]byte(data))})
	require.NoError(t, err)
	rr.acked = append(rr.acked, crashPut{p, off, data})
}

func (rr *registerRun) open(t *testing.T, j *Journal, p int) *Log {
	t.Helper()
	l, err := Open(filepath.Join(rr.dir, partName(p)), Options{IDs: &seqIDs{}, MaxSegmentSize: 2 << 10, Journal: j, Logf: t.Logf})
	require.NoError(t, err)
	return l
}

// byPart returns the acknowledged puts by partition, in offset order.
func byPart(acked []crashPut, parts int) [][]crashPut {
	s := slices.Clone(acked)
	slices.SortFunc(s, func(a, b crashPut) int { return cmpInt64(a.off, b.off) })
	want := make([][]crashPut, parts)
	for _, p := range s {
		want[p.part] = append(want[p.part], p)
	}
	return want
}

// TestJournalRegisterRecords: opening partitions asks for no checkpoint
// and writes nothing; a partition's first data record after it opened is
// preceded, in the same round, by a register record naming it with its
// end and last id at that moment; a partition whose first data is a part
// of an atomic group gets its register record before the group record;
// one that takes no puts gets none. After a crash, recovery takes each
// register record as its partition's checkpoint entry: a trust point at
// the registered end (so the next Open verifies only what follows it).
func TestJournalRegisterRecords(t *testing.T) {
	t.Parallel()
	rr := newRegisterRun(t, 3, 4)
	j := openJournal(t, rr.dir, smallJournal())
	st := j.Stats()
	logs := make([]*Log, 3)
	for p := range logs {
		logs[p] = rr.open(t, j, p)
	}
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, st, j.Stats(), "opening partitions writes nothing to the journal")
	require.Equal(t, int64(1), st.Checkpoints, "the recovery checkpoint only")

	rr.put(t, logs[0], 0, "p0-second-0")
	w := newAtomicWaiter(2)
	require.NoError(t, j.AppendAtomic([]AtomicPart{
		{Log: logs[0], Entries: groupEntries(0, 0, 2), Token: 0},
		{Log: logs[2], Entries: groupEntries(0, 2, 1), Token: 1},
	}, w))
	res := w.wait(t)
	for token, part := range []int{0, 2} {
		r := res[uint64(token)]
		require.NoError(t, r.err)
		off := r.off
		for _, e := range groupEntries(0, part, 2-token) {
			rr.acked = append(rr.acked, crashPut{part, off, string(e.Data)})
			off = rr.acked[len(rr.acked)-1].end()
		}
	}
	rr.put(t, logs[2], 2, "p2-second-1")
	require.Equal(t, int64(1), j.Stats().Checkpoints)
	quiesce(t, j, rr.dir)
	snap := filepath.Join(t.TempDir(), "snap")
	require.NoError(t, os.CopyFS(snap, os.DirFS(rr.dir)))
	ends := []int64{logs[0].MaxOffset(), logs[1].MaxOffset(), logs[2].MaxOffset()}

	recs := walkJournal(t, filepath.Join(snap, JournalDirName))
	last := slices.IndexFunc(recs, func(r jrec) bool { return r.typ == recCheckpoint && r.pos >= j.ckptFrom.Load() })
	require.GreaterOrEqual(t, last, 0)
	var kinds []string
	for _, r := range recs[last+1:] {
		switch r.typ {
		case recRegister:
			kinds = append(kinds, fmt.Sprintf("register %s %d", r.name, r.dataEnd))
		case recData:
			kinds = append(kinds, fmt.Sprintf("data %s %d", r.name, r.dataOff))
		case recGroup:
			kinds = append(kinds, "group")
		case recMark:
			// After each round here (sequential puts): its completion
			// found no later record covering it (cover).
		default:
			kinds = append(kinds, fmt.Sprintf("type %d", r.typ))
		}
	}
	second := func(p, k int) int64 { // offset of the k-th record of the second run in partition p
		return byPart(rr.acked, 3)[p][4+k].off
	}
	require.Equal(t, []string{
		fmt.Sprintf("register t-0 %d", rr.ends[0]), fmt.Sprintf("data t-0 %d", rr.ends[0]),
		fmt.Sprintf("register t-2 %d", rr.ends[2]), "group",
		fmt.Sprintf("data t-0 %d", second(0, 1)), fmt.Sprintf("data t-2 %d", rr.ends[2]),
		fmt.Sprintf("data t-2 %d", second(2, 1)),
	}, kinds)
	p, err := parseRegisterPayload(registerPayloadAt(t, snap, recs[last+1].pos))
	require.NoError(t, err)
	require.Equal(t, registerRecord{name: "t-0", end: rr.ends[0], lastID: rr.ids[0]}, p)

	for _, l := range logs {
		require.NoError(t, l.Close())
	}
	require.NoError(t, j.Close())

	// The crash: register records are the trust points of their
	// partitions; t-1 is trusted from the closed table.
	j2 := openJournal(t, snap, smallJournal())
	require.Equal(t, trustPoint{ckEnd: rr.ends[0], end: ends[0], lastID: rr.ids[0], haveID: true}, j2.trusted["t-0"])
	require.Equal(t, trustPoint{ckEnd: rr.ends[1], end: ends[1], lastID: rr.ids[1], haveID: true}, j2.trusted["t-1"])
	require.Equal(t, trustPoint{ckEnd: rr.ends[2], end: ends[2], lastID: rr.ids[2], haveID: true}, j2.trusted["t-2"])
	for p, want := range byPart(rr.acked, 3) {
		var lb logBuf
		l := openLog(t, filepath.Join(snap, partName(p)), Options{IDs: &seqIDs{}, MaxSegmentSize: 2 << 10, Journal: j2, Logf: lb.logf})
		require.NotContains(t, lb.String(), "scanning the last segment", "partition %d", p)
		require.Equal(t, ends[p], l.MaxOffset())
		var got []crashPut
		for _, r := range readAllRecords(t, l, 1<<20) {
			got = append(got, crashPut{p, r.Offset, string(r.Data)})
		}
		require.Equal(t, want, got, "partition %d", p)
	}
}

// registerPayloadAt returns the payload of the journal record at position
// pos of the journal in dataDir.
func registerPayloadAt(t *testing.T, dataDir string, pos int64) []byte {
	t.Helper()
	files, err := listJournalFiles(filepath.Join(dataDir, JournalDirName), t.Logf)
	require.NoError(t, err)
	defer closeJFiles(files)
	for _, f := range files {
		if pos >= f.start && pos < f.end() {
			hdr := make([]byte, jHeaderSize)
			_, err := f.f.ReadAt(hdr, pos-f.start)
			require.NoError(t, err)
			b := make([]byte, parseJHeader(hdr).n)
			_, err = f.f.ReadAt(b, pos-f.start+jHeaderSize)
			require.NoError(t, err)
			return b
		}
	}
	t.Fatalf("no journal file holds position %d", pos)
	return nil
}

// TestJournalCrashCutsLateRegister is TestJournalCrashCuts for partitions
// that register after the last checkpoint with data from an earlier run
// (fsynced by its clean stop): t-0 registers and takes puts, a
// checkpoint lists it, then t-1 registers and both take puts. The journal
// of that running broker cut at every record boundary after the
// checkpoint and inside records, torn and zeroed, with the segments'
// bytes past what was durable (the checkpoint's end, or the registered
// end) cut, zeroed or removed: recovery yields exactly the journaled
// prefix, the first run's puts included, and again when reopened.
//
// A partition the cut journal does not name at all (t-1, cut before its
// register record) is left as its segments are: its late bytes there are
// removed in the model, since only a checkpoint could have written them,
// and one that snapshotted t-1 after that round was staged wrote them,
// fsynced and survived while the round's fdatasync did not is a case
// recovery cannot see (docs/storage.md, "Register records").
func TestJournalCrashCutsLateRegister(t *testing.T) {
	t.Parallel()
	const parts = 2
	rr := newRegisterRun(t, parts, 6)
	first := len(rr.acked)
	opts := smallJournal()
	opts.Logf = t.Logf
	j, err := OpenJournal(rr.dir, opts)
	require.NoError(t, err)
	l0 := rr.open(t, j, 0)
	for i := range 5 {
		rr.put(t, l0, 0, fmt.Sprintf("p0-second-%d-%s", i, strings.Repeat("s", 30+i)))
	}
	forceCheckpoint(t, j)
	l1 := rr.open(t, j, 1)
	for i := range 20 {
		p := i % parts
		rr.put(t, []*Log{l0, l1}[p], p, fmt.Sprintf("p%d-late-%d-%s", p, i, strings.Repeat("l", 50+3*i)))
	}
	quiesce(t, j, rr.dir)
	snap := filepath.Join(t.TempDir(), "snap")
	require.NoError(t, os.CopyFS(snap, os.DirFS(rr.dir)))
	require.NoError(t, l0.Close())
	require.NoError(t, l1.Close())
	require.NoError(t, j.Close())

	recs := walkJournal(t, filepath.Join(snap, JournalDirName))
	last := -1
	for i, r := range recs {
		if r.typ == recCheckpoint {
			last = i
		}
	}
	require.GreaterOrEqual(t, last, 0)
	require.True(t, slices.ContainsFunc(recs[last+1:], func(r jrec) bool { return r.typ == recRegister && r.name == "t-1" }),
		"t-1 registered after the last checkpoint")
	durable := map[string]int64{}
	for p := range parts {
		durable[partName(p)] = max(rr.ends[p], recs[last].ends[partName(p)])
	}
	rng := rand.New(rand.NewPCG(5, 6))
	var cuts []cut
	for _, r := range recs[last+1:] {
		cuts = append(cuts, cut{r.pos, 0}, cut{r.pos + 1 + rng.Int64N(r.end-r.pos-1), 0}, cut{r.pos, r.pos + 1 + rng.Int64N(r.end-r.pos-1)})
	}
	cuts = append(cuts, cut{recs[len(recs)-1].end, 0})
	t.Logf("%d records after the last checkpoint, %d cuts", len(recs)-last-1, len(cuts))
	for i, c := range cuts {
		dir, x := cutCopy(t, snap, recs, c, rng)
		want, _ := expectAfterCut(recs, rr.acked[first:], parts, x)
		for _, a := range rr.acked[:first] {
			want[a.part] = append(want[a.part], a)
		}
		var modes []string
		for p := range parts {
			pdir := filepath.Join(dir, partName(p))
			named := slices.ContainsFunc(recs[last+1:], func(r jrec) bool { return r.end <= x && r.name == partName(p) })
			if _, ok := recs[last].ends[partName(p)]; !ok && !named {
				cutSegments(t, pdir, durable[partName(p)])
				modes = append(modes, "not named")
			} else {
				modes = append(modes, damageSegments(t, pdir, durable[partName(p)], rng))
			}
			want[p] = byPart(want[p], parts)[p]
		}
		what := fmt.Sprintf("cut %d at %d (torn to %d), segments %v", i, c.x, c.tornTo, modes)
		recoverAndCheck(t, dir, opts, parts, want, what)
		recoverAndCheck(t, dir, opts, parts, want, what+", reopened")
	}
}

// cutSegments cuts the segment chain of pdir at end.
func cutSegments(t *testing.T, pdir string, end int64) {
	t.Helper()
	starts, sizes, err := listSegments(pdir)
	require.NoError(t, err)
	for i, s := range starts {
		path := filepath.Join(pdir, segmentName(s))
		switch {
		case s > end:
			require.NoError(t, os.Remove(path))
		case s+sizes[i] > end:
			require.NoError(t, os.Truncate(path, end-s))
		}
	}
}

// TestJournalDowngradeAfterCleanClose: after a clean Close, the journal's
// files hold no register record a binary from before them could meet: the
// final checkpoint starts a file of its own and the files before it are
// freed, so the scan from the first file finds that checkpoint and nothing
// valid after it. Such a binary ends the journal at a record of a type it
// does not know: the older binary is played here by this one with every
// register record's type changed to 17 (reserved, unknown to it too). In
// the workload a checkpoint listing t-0 precedes t-1's register record in
// the last journal file and t-0 takes puts after it: without the fresh
// file, the older binary replayed from that checkpoint up to the register
// record and cut t-0 there, deleting its later acknowledged puts.
func TestJournalDowngradeAfterCleanClose(t *testing.T) {
	t.Parallel()
	rr := &registerRun{dir: t.TempDir()}
	opts := JournalOptions{FileSize: 8 << 10, CheckpointBytes: 2 << 10, CheckpointInterval: time.Hour, hooks: &journalHooks{smallFiles: true}}
	j, err := OpenJournal(rr.dir, opts)
	require.NoError(t, err)
	l0 := rr.open(t, j, 0)
	for i := range 100 {
		rr.put(t, l0, 0, fmt.Sprintf("p0-%d-%s", i, strings.Repeat("a", 100)))
	}
	forceCheckpoint(t, j)
	l1 := rr.open(t, j, 1)
	for i := range 10 {
		p := i % 2
		rr.put(t, []*Log{l0, l1}[p], p, fmt.Sprintf("p%d-late-%d-%s", p, i, strings.Repeat("d", 40+i)))
	}
	require.NoError(t, l0.Close())
	require.NoError(t, l1.Close())
	require.NoError(t, j.Close())

	// The older binary, on a copy: every valid register record left (in
	// the spare files' stale bytes none is valid at its position) becomes
	// type 17.
	old := filepath.Join(t.TempDir(), "old")
	require.NoError(t, os.CopyFS(old, os.DirFS(rr.dir)))
	files, err := listJournalFiles(filepath.Join(old, JournalDirName), t.Logf)
	require.NoError(t, err)
	for _, f := range files {
		for rel := int64(0); rel+jHeaderSize <= f.size; rel++ {
			hdr := make([]byte, jHeaderSize)
			_, err := f.f.ReadAt(hdr, rel)
			require.NoError(t, err)
			h := parseJHeader(hdr)
			if h.typ != recRegister || h.pos != f.start+rel {
				continue
			}
			var rec []byte
			if _, valid, err := validJRecord(f, rel, hdr, 0, &rec); err != nil || !valid {
				continue
			}
			sealJRecord(rec, h.pos, h.epoch, h.mark(), 17)
			_, err = f.f.WriteAt(rec, rel)
			require.NoError(t, err)
		}
	}
	closeJFiles(files)
	recoverAndCheck(t, old, opts, 2, byPart(rr.acked, 2), "the older binary")

	jdir := filepath.Join(rr.dir, JournalDirName)
	recs := walkJournal(t, jdir)
	require.Len(t, recs, 1, "%+v", recs)
	require.Equal(t, byte(recCheckpoint), recs[0].typ)
	files, err = listJournalFiles(jdir, t.Logf)
	require.NoError(t, err)
	require.Equal(t, recs[0].pos, files[0].start, "the final checkpoint starts the first file")
	var sbuf, srec []byte
	_, q, _, ok, err := findNextJRecord(files, 0, recs[0].pos, 0, &sbuf, &srec)
	require.NoError(t, err)
	require.False(t, ok, "a valid record at %d after the final checkpoint", q)
	closeJFiles(files)
	recoverAndCheck(t, rr.dir, opts, 2, byPart(rr.acked, 2), "reopened")
}
