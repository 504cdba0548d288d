package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
)

// listJournalFilesRO lists the journal files of dir as listJournalFiles
// does, leaving unfinished (".new") ones alone.
func listJournalFilesRO(t testing.TB, dir string) []*jfile {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var files []*jfile
	for _, e := range ents {
		start, ok := parseJournalName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if os.IsNotExist(err) {
			continue // recycled meanwhile
		}
		require.NoError(t, err)
		fi, err := f.Stat()
		require.NoError(t, err)
		files = append(files, &jfile{start: start, size: fi.Size(), f: f})
	}
	slices.SortFunc(files, func(a, b *jfile) int { return cmpInt64(a.start, b.start) })
	require.NotEmpty(t, files, "journal files in %s", dir)
	return files
}

// crashPut is one acknowledged append of the crash workload.
type crashPut struct {
	part int
	off  int64
	data string
}

func (p crashPut) end() int64 { return p.off + int64(message.HeaderSize+len(p.data)) }

// jrec is a journal record as the test walker sees it.
type jrec struct {
	pos, end int64 // journal positions
	typ      byte
	name     string // data and register records
	dataOff  int64  // data records: partition offset of the bytes; register records: the partition's end
	dataEnd  int64  // data records: partition offset past the bytes; register records: the partition's end
	from     int64  // checkpoints
	ends     map[string]int64
	groupEnd int64 // group records
	mark     int64 // the durable mark the header carries (jHeader.mark)
}

// walkJournal decodes every record of the journal in dir from its first
// file, the way recovery does, independently of scanJournal. It changes
// nothing in dir: tests walk a live journal too, whose spare file may be
// being pre-written (a ".new" file recovery would remove: removing it
// here raced with its rename).
func walkJournal(t testing.TB, dir string) []jrec {
	t.Helper()
	files := listJournalFilesRO(t, dir)
	defer closeJFiles(files)
	var out []jrec
	fi, pos := 0, files[0].start
	var epoch uint32
	for {
		f := files[fi]
		rel := pos - f.start
		if f.size-rel < jHeaderSize {
			if fi+1 < len(files) && files[fi+1].start == f.end() {
				fi, pos = fi+1, f.end()
				continue
			}
			return out
		}
		hdr := make([]byte, jHeaderSize)
		_, err := f.f.ReadAt(hdr, rel)
		require.NoError(t, err)
		h := parseJHeader(hdr)
		if h.pos != pos || h.epoch < epoch || int64(h.n) > f.size-rel-jHeaderSize {
			return out
		}
		rec := make([]byte, jHeaderSize+int(h.n))
		_, err = f.f.ReadAt(rec, rel)
		require.NoError(t, err)
		if !verifyJRecord(rec) {
			return out
		}
		epoch = h.epoch
		r := jrec{pos: pos, end: pos + int64(len(rec)), typ: h.typ, mark: h.mark()}
		switch h.typ {
		case recData:
			d, err := parseDataPayload(rec[jHeaderSize:])
			require.NoError(t, err)
			r.name, r.dataOff, r.dataEnd = d.name, d.offset, d.offset+int64(len(d.bytes))
		case recCheckpoint:
			c, err := parseCheckpointPayload(rec[jHeaderSize:])
			require.NoError(t, err)
			r.from, r.ends = c.from, c.ends
		case recGroup:
			g, err := parseGroupPayload(rec[jHeaderSize:])
			require.NoError(t, err)
			r.groupEnd = g.end
		case recRegister:
			g, err := parseRegisterPayload(rec[jHeaderSize:])
			require.NoError(t, err)
			r.name, r.dataOff, r.dataEnd = g.name, g.end, g.end
		case recSkip, recMark:
		default:
			return out
		}
		out = append(out, r)
		if h.typ == recSkip {
			if fi+1 < len(files) && files[fi+1].start == f.end() {
				fi, pos = fi+1, f.end()
				continue
			}
			return out
		}
		pos = r.end
	}
}

// runCrashWorkload writes puts of varying sizes to parts journaled
// partitions from 4 producers, with small segments (rolls) and small
// journal files and checkpoints (recycling), and returns a copy of the
// data directory taken while the journal is still running (what a kill -9
// leaves) with the acknowledged puts.
func runCrashWorkload(t *testing.T, parts, puts int, opts JournalOptions) (string, []crashPut) {
	t.Helper()
	src := t.TempDir()
	j, err := OpenJournal(src, opts)
	require.NoError(t, err)
	logs := make([]*Log, parts)
	for p := range parts {
		logs[p], err = Open(filepath.Join(src, partName(p)), Options{IDs: &seqIDs{}, MaxSegmentSize: 2 << 10, Journal: j, Logf: t.Logf})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	var acked []crashPut
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := w; i < puts; i += 4 {
				p := i % parts
				// Non-zero filler: a record cut short and zero-filled must not
				// still verify.
				data := fmt.Sprintf("p%d-put%d-%s", p, i, strings.Repeat(string(rune('a'+i%26)), rng.IntN(300)))
				_, off, err := logs[p].AppendSync([]Entry{entry([]byte(data))})
				if !assertNoErr(t, err) {
					return
				}
				mu.Lock()
				acked = append(acked, crashPut{p, off, data})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// A kill -9 leaves one instant's files; a copy of a live directory is
	// not one instant. The puts are done, so wait until the background work
	// (a checkpoint's fsyncs and record, spare journal files, recycling)
	// has settled before copying.
	quiesce(t, j, src)
	snap := filepath.Join(t.TempDir(), "snap")
	require.NoError(t, os.CopyFS(snap, os.DirFS(src)))
	for _, l := range logs {
		require.NoError(t, l.Close())
	}
	require.NoError(t, j.Close())
	slices.SortFunc(acked, func(a, b crashPut) int { return cmpInt64(a.off, b.off) })
	return snap, acked
}

// damageSegments simulates a power loss on the segments of dir: anything
// past the last surviving checkpoint's end (ckEnd) was not fsynced, so it
// may be cut short, read back as zeros, or (files created after it) be
// missing as a suffix of the chain.
func damageSegments(t *testing.T, dir string, ckEnd int64, rng *rand.Rand) string {
	t.Helper()
	starts, sizes, err := listSegments(dir)
	require.NoError(t, err)
	mode := rng.IntN(4)
	switch mode {
	case 1: // cut short
		for i, s := range starts {
			if end := s + sizes[i]; end > ckEnd {
				keep := max(ckEnd-s, 0)
				require.NoError(t, os.Truncate(filepath.Join(dir, segmentName(s)), keep+rng.Int64N(sizes[i]-keep+1)))
			}
		}
	case 2: // lost writes read as zeros
		damageSegmentsAfter(t, dir, ckEnd)
	case 3: // files created after the checkpoint are gone, the rest cut
		cutSegments(t, dir, ckEnd)
	}
	return [...]string{"intact", "cut", "zeroed", "removed"}[mode]
}

// cutJournal simulates a power loss of the journal at position x: every
// byte from x on reads as zeros (files are pre-written), or, if torn, the
// bytes of the record at x are garbage up to its end.
// cut is a power cut of the journal: everything from x on is zeroed,
// and if tornTo is past x, x..tornTo is random junk instead (a torn
// write; cutJournal).
type cut struct{ x, tornTo int64 }

// cutCopy copies the data directory snap (whose journal holds recs) to a
// new directory and cuts its journal as c says; x is where the journal
// then ends for recovery.
func cutCopy(t *testing.T, snap string, recs []jrec, c cut, rng *rand.Rand) (dir string, x int64) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "d")
	require.NoError(t, os.CopyFS(dir, os.DirFS(snap)))
	cutJournal(t, filepath.Join(dir, JournalDirName), c.x, c.tornTo, rng)
	x = c.x
	if c.tornTo == 0 {
		x = effectiveCut(t, filepath.Join(snap, JournalDirName), recs, x)
	}
	return dir, x
}

func cutJournal(t *testing.T, dir string, x, tornTo int64, rng *rand.Rand) {
	t.Helper()
	files, err := listJournalFiles(dir, t.Logf)
	require.NoError(t, err)
	defer closeJFiles(files)
	for _, f := range files {
		if f.end() <= x {
			continue
		}
		from := max(x-f.start, 0)
		_, err := f.f.WriteAt(make([]byte, f.size-from), from)
		require.NoError(t, err)
		if tornTo > x && x >= f.start && x < f.end() {
			junk := make([]byte, min(tornTo, f.end())-x)
			for i := range junk {
				junk[i] = byte(rng.Uint32())
			}
			_, err := f.f.WriteAt(junk, x-f.start)
			require.NoError(t, err)
		}
	}
}

// effectiveCut returns where a zero-filling cut at x really ends the
// journal: a cut inside a record whose bytes from x on were zeros already
// (a checkpoint's payload often ends in zero bytes) leaves the record
// intact, so the journal ends after it.
func effectiveCut(t *testing.T, dir string, recs []jrec, x int64) int64 {
	t.Helper()
	i := slices.IndexFunc(recs, func(r jrec) bool { return r.pos < x && x < r.end })
	if i < 0 {
		return x
	}
	files, err := listJournalFiles(dir, t.Logf)
	require.NoError(t, err)
	defer closeJFiles(files)
	for _, f := range files {
		if f.start <= x && x < f.end() {
			b := make([]byte, recs[i].end-x)
			_, err := f.f.ReadAt(b, x-f.start)
			require.NoError(t, err)
			if bytes.Count(b, []byte{0}) == len(b) {
				return recs[i].end
			}
			return x
		}
	}
	return x
}

// expectAfterCut returns, for each partition, the puts recovery must
// yield when the journal is cut at x: every put inside the journaled end
// (the last checkpoint's end, or a data record wholly before x).
func expectAfterCut(recs []jrec, acked []crashPut, parts int, x int64) (want [][]crashPut, ckEnds map[string]int64) {
	ends := map[string]int64{}
	ckEnds = map[string]int64{}
	for _, r := range recs {
		if r.end > x {
			break
		}
		switch r.typ {
		case recData, recRegister:
			ends[r.name] = max(ends[r.name], r.dataEnd)
		case recCheckpoint:
			ckEnds = r.ends
			for n, e := range r.ends {
				ends[n] = max(ends[n], e)
			}
		}
	}
	want = make([][]crashPut, parts)
	for _, p := range acked {
		if p.end() <= ends[partName(p.part)] {
			want[p.part] = append(want[p.part], p)
		}
	}
	return want, ckEnds
}

// recoverAndCheck opens the journal and the logs of dir and checks that
// each partition holds exactly want, at the acknowledged offsets.
func recoverAndCheck(t *testing.T, dir string, opts JournalOptions, parts int, want [][]crashPut, what string) {
	t.Helper()
	j, err := OpenJournal(dir, opts)
	require.NoError(t, err, what)
	defer func() { require.NoError(t, j.Close(), what) }()
	for p := range parts {
		l, err := Open(filepath.Join(dir, partName(p)), Options{IDs: &seqIDs{}, MaxSegmentSize: 2 << 10, Journal: j})
		require.NoError(t, err, what)
		recs := readAllRecords(t, l, 1<<20)
		got := make([]crashPut, len(recs))
		for i, r := range recs {
			got[i] = crashPut{p, r.Offset, string(r.Data)}
		}
		w := want[p]
		if w == nil {
			w = []crashPut{}
		}
		if len(got) != len(w) || (len(w) > 0 && !slices.Equal(got, w)) {
			require.Equal(t, len(w), len(got), "%s: partition %d record count", what, p)
			require.Equal(t, w, got, "%s: partition %d", what, p)
		}
		var end int64
		if len(w) > 0 {
			end = w[len(w)-1].end()
		}
		require.Equal(t, end, l.MaxOffset(), "%s: partition %d end", what, p)
		require.NoError(t, l.Close())
	}
}

// TestJournalCrashCuts: the data directory of a running journal (a kill
// -9), its journal cut at every record boundary and at random bytes inside
// records (torn), with the segments' unsynced parts cut, zeroed or
// removed (a power loss): recovery yields exactly the journaled prefix of
// each partition at its acknowledged offsets, and recovering again (also
// after a crash in the middle of replay) gives the same. So does a journal
// written without register records (by a binary from before them, which
// asked for a checkpoint at every registration instead).
func TestJournalCrashCuts(t *testing.T) {
	t.Parallel()
	t.Run("registers", func(t *testing.T) { t.Parallel(); testJournalCrashCuts(t, false) })
	t.Run("no-registers", func(t *testing.T) { t.Parallel(); testJournalCrashCuts(t, true) })
}

func testJournalCrashCuts(t *testing.T, noRegisters bool) {
	const parts = 3
	opts := JournalOptions{FileSize: 64 << 10, CheckpointBytes: 6 << 10, CheckpointInterval: time.Hour, Logf: t.Logf,
		hooks: &journalHooks{smallFiles: true, noRegisters: noRegisters}}
	snap, acked := runCrashWorkload(t, parts, 800, opts)
	recs := walkJournal(t, filepath.Join(snap, JournalDirName))
	require.NotEmpty(t, recs)
	var cps, regs int
	for _, r := range recs {
		switch r.typ {
		case recCheckpoint:
			cps++
		case recRegister:
			regs++
		}
	}
	t.Logf("%d acknowledged puts, %d journal records from %d to %d, %d checkpoints, %d register records", len(acked), len(recs), recs[0].pos, recs[len(recs)-1].end, cps, regs)
	if noRegisters {
		require.Zero(t, regs)
	}

	// Every put is in the uncut journal.
	want, _ := expectAfterCut(recs, acked, parts, recs[len(recs)-1].end)
	var n int
	for _, w := range want {
		n += len(w)
	}
	require.Equal(t, len(acked), n, "every acknowledged put is journaled")

	rng := rand.New(rand.NewPCG(1, 2))
	// The files before the first live one were freed by a checkpoint
	// whose from is past them, durable by then: a power loss can only cut
	// after it.
	first := slices.IndexFunc(recs, func(r jrec) bool { return r.typ == recCheckpoint && r.from >= recs[0].pos })
	require.GreaterOrEqual(t, first, 0)
	// Every record boundary, and a sample of zero-filled and torn cuts
	// inside records.
	var cuts, marks, plain, inside []cut
	for _, r := range recs[first+1:] {
		if r.typ == recCheckpoint || r.typ == recRegister {
			marks = append(marks, cut{r.pos, 0})
		} else {
			plain = append(plain, cut{r.pos, 0})
		}
		if r.end-r.pos > 1 {
			inside = append(inside, cut{r.pos + 1 + rng.Int64N(r.end-r.pos-1), 0})     // zero tail inside a record
			inside = append(inside, cut{r.pos, r.pos + 1 + rng.Int64N(r.end-r.pos-1)}) // torn record
		}
	}
	cuts = append(cuts, cut{recs[first].end, 0}, cut{recs[len(recs)-1].end, 0})
	// make test cuts at a random sample of each kind: boundaries before
	// checkpoint and register records (there are only a few: all of
	// them), other boundaries, and inside records, 20 of each; make soak
	// (METAQ_JOURNAL_CUTS=all) at every boundary.
	for _, cs := range [][]cut{marks, plain, inside} {
		rng.Shuffle(len(cs), func(i, k int) { cs[i], cs[k] = cs[k], cs[i] })
	}
	n, nInside := 20, 20
	switch {
	case os.Getenv("METAQ_JOURNAL_CUTS") == "all":
		n, nInside = len(recs), 100
	case testing.Short():
		n, nInside = 10, 10
	}
	cuts = append(cuts, marks[:min(len(marks), n)]...)
	cuts = append(cuts, plain[:min(len(plain), n)]...)
	cuts = append(cuts, inside[:min(len(inside), nInside)]...)
	t.Logf("%d of %d checkpoint and register boundaries, %d of %d other boundaries, %d of %d cuts inside records",
		min(len(marks), n), len(marks), min(len(plain), n), len(plain), min(len(inside), nInside), len(inside))
	t.Logf("%d cuts", len(cuts))
	for i, c := range cuts {
		dir, x := cutCopy(t, snap, recs, c, rng)
		want, ckEnds := expectAfterCut(recs, acked, parts, x)
		var modes []string
		for p := range parts {
			modes = append(modes, damageSegments(t, filepath.Join(dir, partName(p)), ckEnds[partName(p)], rng))
		}
		what := fmt.Sprintf("cut %d at %d (torn to %d), segments %v", i, c.x, c.tornTo, modes)
		if i%4 == 0 {
			// A crash in the middle of replay, then recovery again.
			o := opts
			o.hooks = &journalHooks{smallFiles: true, replayLimit: 1 + rng.IntN(4), noRegisters: noRegisters}
			if j, err := OpenJournal(dir, o); err == nil {
				require.NoError(t, j.Close())
			} else {
				require.ErrorIs(t, err, errReplayStopped, what)
			}
		}
		recoverAndCheck(t, dir, opts, parts, want, what)
		recoverAndCheck(t, dir, opts, parts, want, what+", reopened")
	}
}

// TestJournalReplayIdempotent: applying a journal to segments that already
// hold its records changes nothing, and applying it twice gives the same
// files as once.
func TestJournalReplayIdempotent(t *testing.T) {
	t.Parallel()
	const parts = 3
	opts := JournalOptions{FileSize: 8 << 10, CheckpointBytes: 1 << 40, CheckpointInterval: time.Hour,
		hooks: &journalHooks{smallFiles: true}}
	snap, _ := runCrashWorkload(t, parts, 120, opts)

	apply := func(dir string) {
		files, err := listJournalFiles(filepath.Join(dir, JournalDirName), t.Logf)
		require.NoError(t, err)
		defer closeJFiles(files)
		sc, err := scanJournal(files)
		require.NoError(t, err)
		require.NotEmpty(t, sc.refs)
		j := &Journal{dataDir: dir, dir: filepath.Join(dir, JournalDirName), logf: t.Logf}
		require.NoError(t, j.replay(sc, 0))
	}
	segBytes := func(dir string) map[string][]byte {
		out := map[string][]byte{}
		for p := range parts {
			pdir := filepath.Join(dir, partName(p))
			starts, _, err := listSegments(pdir)
			require.NoError(t, err)
			for _, s := range starts {
				b, err := os.ReadFile(filepath.Join(pdir, segmentName(s)))
				require.NoError(t, err)
				out[filepath.Join(partName(p), segmentName(s))] = b
			}
		}
		return out
	}
	before := segBytes(snap)
	once := filepath.Join(t.TempDir(), "once")
	require.NoError(t, os.CopyFS(once, os.DirFS(snap)))
	// Lose the segments' unsynced bytes (past the last checkpoint), so
	// that the replay writes.
	var ckEnds map[string]int64
	for _, r := range walkJournal(t, filepath.Join(snap, JournalDirName)) {
		if r.typ == recCheckpoint {
			ckEnds = r.ends
		}
	}
	for p := range parts {
		damageSegmentsAfter(t, filepath.Join(once, partName(p)), ckEnds[partName(p)])
	}
	twice := filepath.Join(t.TempDir(), "twice")
	require.NoError(t, os.CopyFS(twice, os.DirFS(once)))
	apply(once)
	apply(twice)
	apply(twice)
	sameFiles := func(a, b map[string][]byte, msg string) {
		t.Helper()
		require.Equal(t, len(a), len(b), msg)
		for name, x := range a {
			require.True(t, bytes.Equal(x, b[name]), "%s: %s differs", msg, name)
		}
	}
	sameFiles(segBytes(once), segBytes(twice), "replayed once and twice")
	sameFiles(before, segBytes(once), "replay restores the segments as they were written")
}

// damageSegmentsAfter zeroes the bytes of dir's segments from partition
// offset from on (never fsynced).
func damageSegmentsAfter(t *testing.T, dir string, from int64) {
	starts, sizes, err := listSegments(dir)
	require.NoError(t, err)
	for i, s := range starts {
		if s+sizes[i] <= from {
			continue
		}
		keep := max(from-s, 0)
		f, err := os.OpenFile(filepath.Join(dir, segmentName(s)), os.O_RDWR, 0)
		require.NoError(t, err)
		_, err = f.WriteAt(make([]byte, sizes[i]-keep), keep)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
}

// quiesce waits (at most 10 s) until j has no checkpoint in progress and
// the files under dir stop changing (names, sizes and modification times
// equal over 50 ms).
func quiesce(t *testing.T, j *Journal, dir string) {
	t.Helper()
	// The segments' in-memory tails go to their files (no fsync), as a
	// checkpoint that crashed before its record leaves them: the tests
	// that copy a live directory then model the loss of unsynced segment
	// bytes themselves (damageSegments), or check that the segments'
	// copies make journal damage harmless.
	flushTails(t, j)
	print := func() string {
		var b strings.Builder
		_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if fi, err := d.Info(); err == nil {
				fmt.Fprintf(&b, "%s %d %d\n", path, fi.Size(), fi.ModTime().UnixNano())
			}
			return nil
		})
		return b.String()
	}
	deadline := time.Now().Add(10 * time.Second)
	prev := print()
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		cur := print()
		if cur == prev && !j.ckptBusy.Load() {
			return
		}
		prev = cur
	}
	t.Fatalf("the journal's files of %s kept changing for 10 s after the puts", dir)
}

// flushTails writes every in-memory segment tail of j's logs to its file.
func flushTails(t *testing.T, j *Journal) {
	t.Helper()
	j.mu.Lock()
	logs := make([]*Log, 0, len(j.logs))
	for l := range j.logs {
		logs = append(logs, l)
	}
	j.mu.Unlock()
	for _, l := range logs {
		l.segMu.RLock()
		segs := slices.Clone(l.segs)
		l.segMu.RUnlock()
		for _, s := range segs {
			_, _, err := s.flushTail(s.size.Load(), l.writeAt, nil)
			require.NoError(t, err)
		}
	}
}
