package store

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// atomicResult is one part's AppendDone.
type atomicResult struct {
	id, off int64
	err     error
}

// atomicWaiter collects the AppendDone calls of one AppendAtomic.
type atomicWaiter struct {
	mu   sync.Mutex
	got  map[uint64]atomicResult
	want int
	done chan struct{}
}

func newAtomicWaiter(parts int) *atomicWaiter {
	return &atomicWaiter{got: map[uint64]atomicResult{}, want: parts, done: make(chan struct{})}
}

func (w *atomicWaiter) AppendDone(token uint64, id, off int64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.got[token]; dup {
		panic(fmt.Sprintf("AppendDone twice for token %d", token))
	}
	w.got[token] = atomicResult{id, off, err}
	if len(w.got) == w.want {
		close(w.done)
	}
}

func (w *atomicWaiter) wait(t testing.TB) map[uint64]atomicResult {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Fatal("AppendAtomic not completed within 10 s")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.got
}

// groupEntries returns the entries of part p of group g: n records.
func groupEntries(g, p, n int) []Entry {
	es := make([]Entry, n)
	for i := range es {
		es[i] = entryf("g%d-p%d-e%d", g, p, i)
	}
	return es
}

// TestJournalAtomicAppend: groups appended atomically to three partitions
// while plain appends go to the same partitions (rolls included): each
// part is acknowledged with its offset, stored contiguously there, and
// the journal holds each group's data records behind its group record.
// Parts that cannot be appended together are refused.
func TestJournalAtomicAppend(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	j := openJournal(t, dataDir, smallJournal())
	logs := openJLogs(t, dataDir, j, 3, Options{MaxSegmentSize: 1 << 10})
	const groups, plain = 40, 60
	var wg sync.WaitGroup
	for p := range 2 {
		wg.Go(func() {
			for i := range plain {
				_, _, err := logs[(p+i)%3].AppendSync([]Entry{entryf("plain-%d-%d", p, i)})
				assert := require.New(t)
				assert.NoError(err)
			}
		})
	}
	res := make([]map[uint64]atomicResult, groups)
	for g := range groups {
		wg.Go(func() {
			w := newAtomicWaiter(3)
			parts := make([]AtomicPart, 3)
			for p := range parts {
				parts[p] = AtomicPart{Log: logs[p], Entries: groupEntries(g, p, 1+(g+p)%3), Token: uint64(p)}
			}
			if g%2 == 0 { // ids given, as a transaction's commit gives them
				for p := range parts {
					for i := range parts[p].Entries {
						parts[p].Entries[i].ID = int64(1_000_000 + g*100 + p*10 + i)
					}
				}
			}
			if err := j.AppendAtomic(parts, w); err != nil {
				t.Errorf("group %d: %v", g, err)
				return
			}
			res[g] = w.wait(t)
		})
	}
	wg.Wait()
	for g, r := range res {
		for p := range 3 {
			require.NoError(t, r[uint64(p)].err, "group %d part %d", g, p)
		}
	}
	for p, l := range logs {
		recs := readAllRecords(t, l, 1<<20)
		at := map[int64]int{}
		for i, r := range recs {
			at[r.Offset] = i
		}
		for g := range groups {
			want := groupEntries(g, p, 1+(g+p)%3)
			i, ok := at[res[g][uint64(p)].off]
			require.True(t, ok, "group %d part %d: no record at offset %d", g, p, res[g][uint64(p)].off)
			for k, e := range want {
				require.Less(t, i+k, len(recs))
				require.Equal(t, string(e.Data), string(recs[i+k].Data), "group %d part %d entry %d", g, p, k)
				if g%2 == 0 {
					require.Equal(t, int64(1_000_000+g*100+p*10+k), recs[i+k].ID)
				}
			}
			if g%2 == 0 {
				require.Equal(t, int64(1_000_000+g*100+p*10), res[g][uint64(p)].id)
			}
		}
	}
	// The journal: every group record is followed by data records only,
	// up to its end, one at least for each partition.
	recs := walkJournal(t, filepath.Join(dataDir, JournalDirName))
	n := 0
	for i, r := range recs {
		if r.typ != recGroup {
			continue
		}
		n++
		names := map[string]bool{}
		k := i + 1
		for ; k < len(recs) && recs[k].pos < r.groupEnd; k++ {
			require.Contains(t, []byte{recData, recSkip}, recs[k].typ, "record %d inside the group at %d", k, r.pos)
			names[recs[k].name] = true
		}
		require.Less(t, k-1, len(recs))
		require.Equal(t, r.groupEnd, recs[k-1].end, "group at %d ends after a record", r.pos)
		require.Len(t, names, 3, "group at %d", r.pos)
	}
	require.Equal(t, groups, n, "group records")

	other := t.TempDir()
	j2 := openJournal(t, other, smallJournal())
	foreign := openJLogs(t, other, j2, 1, Options{})
	for _, parts := range [][]AtomicPart{
		{{Log: logs[0], Entries: groupEntries(0, 0, 1)}, {Log: logs[0], Entries: groupEntries(0, 1, 1)}},
		{{Log: logs[0], Entries: groupEntries(0, 0, 1)}, {Log: foreign[0], Entries: groupEntries(0, 1, 1)}},
	} {
		require.ErrorIs(t, j.AppendAtomic(parts, nil), ErrNotAtomic)
	}
	require.ErrorIs(t, j.AppendAtomic(nil, nil), ErrEmptyBatch)
	require.ErrorIs(t, j.AppendAtomic([]AtomicPart{{Log: logs[1]}}, nil), ErrEmptyBatch)
}

// openAtomicPair opens a quiet small journal in a new data directory src
// and two partitions' logs on it (2 KiB segments).
func openAtomicPair(t *testing.T) (JournalOptions, string, *Journal, []*Log) {
	t.Helper()
	return openAtomicPairSize(t, smallJournal().FileSize)
}

// openAtomicPairSize is openAtomicPair with journal files of fileSize bytes.
func openAtomicPairSize(t *testing.T, fileSize int64) (JournalOptions, string, *Journal, []*Log) {
	t.Helper()
	opts := smallJournal()
	opts.FileSize = fileSize
	opts.Logf = func(string, ...any) {}
	src := t.TempDir()
	j, err := OpenJournal(src, opts)
	require.NoError(t, err)
	logs := make([]*Log, 2)
	for p := range logs {
		logs[p], err = Open(filepath.Join(src, partName(p)), Options{IDs: &seqIDs{}, MaxSegmentSize: 2 << 10, Journal: j})
		require.NoError(t, err)
	}
	return opts, src, j, logs
}

// appendAtomicPuts appends parts (tokens 0 and 1) as one atomic group,
// waits for w, and adds each part's records to puts.
func appendAtomicPuts(t *testing.T, j *Journal, parts []AtomicPart, w *atomicWaiter, puts *[2][]crashPut) {
	t.Helper()
	require.NoError(t, j.AppendAtomic(parts, w))
	got := w.wait(t)
	for p := range parts {
		require.NoError(t, got[uint64(p)].err)
		off := got[uint64(p)].off
		for _, e := range parts[p].Entries {
			cp := crashPut{p, off, string(e.Data)}
			puts[p] = append(puts[p], cp)
			off = cp.end()
		}
	}
}

// TestJournalAtomicCut: the data directory of a running journal (a kill
// -9) whose last round is an atomic group of two partitions that crosses
// a journal file end, with the segments holding the group's bytes (a
// checkpoint in progress wrote them), cut (zeroed, or torn with junk)
// throughout the group: after recovery both parts are there or
// neither, the acknowledged puts before the group are at their offsets,
// nothing past them remains, and a second run after a dropped group
// never brings it back.
func TestJournalAtomicCut(t *testing.T) {
	t.Parallel()
	// 8 KiB journal files: every cut's recovery replays the whole first
	// file (no checkpoint), so a small one keeps each of the hundreds of
	// recoveries short; the group still crosses its end.
	opts, src, j, logs := openAtomicPairSize(t, 8<<10)
	// Plain puts until the journal's file is nearly full.
	var acked []crashPut
	for i := 0; j.Stats().Bytes < opts.FileSize-260; i++ {
		p := i % 2
		data := fmt.Sprintf("plain %d %s", i, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"[:i%32])
		_, off, err := logs[p].AppendSync([]Entry{entryf("%s", data)})
		require.NoError(t, err)
		acked = append(acked, crashPut{p, off, data})
	}
	w := newAtomicWaiter(2)
	var group [2][]crashPut
	parts := make([]AtomicPart, 2)
	for p := range parts {
		parts[p] = AtomicPart{Log: logs[p], Entries: groupEntries(7, p, 2), Token: uint64(p)}
	}
	appendAtomicPuts(t, j, parts, w, &group)
	quiesce(t, j, src) // the segments hold the group's bytes too
	snap := filepath.Join(t.TempDir(), "snap")
	require.NoError(t, os.CopyFS(snap, os.DirFS(src)))
	for _, l := range logs {
		require.NoError(t, l.Close())
	}
	require.NoError(t, j.Close())

	jdir := filepath.Join(snap, JournalDirName)
	recs := walkJournal(t, jdir)
	gi := slices.IndexFunc(recs, func(r jrec) bool { return r.typ == recGroup })
	require.GreaterOrEqual(t, gi, 0, "no group record")
	g := recs[gi]
	require.Greater(t, g.groupEnd, (g.pos/opts.FileSize+1)*opts.FileSize, "the group does not cross a file end")
	before := make([][]crashPut, 2)
	for _, a := range acked {
		before[a.part] = append(before[a.part], a)
	}
	all := make([][]crashPut, 2)
	for p := range all {
		all[p] = append(slices.Clone(before[p]), group[p]...)
	}
	t.Logf("group record at %d, ending at %d", g.pos, g.groupEnd)
	check := func(t *testing.T, rng *rand.Rand, x, tornTo int64, again bool) {
		dir := filepath.Join(t.TempDir(), "d")
		require.NoError(t, os.CopyFS(dir, os.DirFS(snap)))
		cutJournal(t, filepath.Join(dir, JournalDirName), x, tornTo, rng)
		what := fmt.Sprintf("cut at %d (group %d..%d, torn to %d)", x, g.pos, g.groupEnd, tornTo)
		want := before
		if x >= g.groupEnd {
			want = all
		}
		recoverAndCheck(t, dir, opts, 2, want, what)
		if again {
			// A put after the dropped group, and a crash-free restart: the
			// group stays dropped and the put stays where it went.
			j, err := OpenJournal(dir, opts)
			require.NoError(t, err, what)
			l, err := Open(filepath.Join(dir, partName(1)), Options{IDs: &seqIDs{}, MaxSegmentSize: 2 << 10, Journal: j})
			require.NoError(t, err, what)
			_, off, err := l.AppendSync([]Entry{entryf("after")})
			require.NoError(t, err, what)
			require.NoError(t, l.Close())
			require.NoError(t, j.Close())
			w2 := slices.Clone(want)
			w2[1] = append(slices.Clone(want[1]), crashPut{1, off, "after"})
			recoverAndCheck(t, dir, opts, 2, w2, what+", then a put and a restart")
		}
	}
	// Every byte of the records' headers and fixed fields (the group
	// record, the data records' names and offsets, a skip record), the
	// last byte of each record, and every 4th byte of the message bytes
	// (cuts inside them all read the same: a record that fails its crc).
	var xs []int64
	for _, r := range recs[gi:] {
		if r.pos >= g.groupEnd {
			break
		}
		fixed := r.pos + jHeaderSize + 2 + int64(len(r.name)) + jDataFixed
		for x := r.pos; x < r.end; x++ {
			if x < fixed || x == r.end-1 || (x-fixed)%4 == 0 {
				xs = append(xs, x)
			}
		}
	}
	xs = append(xs, g.groupEnd)
	t.Logf("%d cuts", len(xs))
	const workers = 4 // the recoveries wait for fsyncs mostly
	for w := range workers {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(7, uint64(w)))
			for i := w; i < len(xs); i += workers {
				x := xs[i]
				check(t, rng, x, 0, i%40 == 0 || x == g.groupEnd)
				if i%11 == 5 {
					check(t, rng, x, g.groupEnd, false)
				}
			}
		})
	}
}

// TestJournalAtomicRollFailure: a group one of whose parts needs a segment
// roll that fails (EMFILE) fails in every part: nothing of it is stored in
// either partition, before or after a reopen, and the next group and the
// plain appends go where the failed one would have gone.
func TestJournalAtomicRollFailure(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	j := openJournal(t, dataDir, smallJournal())
	dir0 := filepath.Join(dataDir, partName(0))
	fs := &fsFaults{}
	l0 := openLog(t, dir0, Options{MaxSegmentSize: 48, hooks: fs.hooks(dir0), Journal: j})
	l1 := openLog(t, filepath.Join(dataDir, partName(1)), Options{Journal: j})
	group := func(g int) map[uint64]atomicResult {
		w := newAtomicWaiter(2)
		require.NoError(t, j.AppendAtomic([]AtomicPart{
			{Log: l1, Entries: groupEntries(g, 1, 2), Token: 1},
			{Log: l0, Entries: groupEntries(g, 0, 2), Token: 0},
		}, w))
		return w.wait(t)
	}
	for _, r := range group(0) {
		require.NoError(t, r.err)
	}
	end0, end1 := l0.MaxOffset(), l1.MaxOffset()
	require.GreaterOrEqual(t, end0, int64(48), "the next part of t-0 needs a roll")
	fs.set(func(f *fsFaults) { f.create = syscall.EMFILE })
	for _, r := range group(1) {
		require.ErrorIs(t, r.err, syscall.EMFILE)
	}
	require.Equal(t, end0, l0.MaxOffset())
	require.Equal(t, end1, l1.MaxOffset(), "the part that could be written was not")
	fs.set(func(f *fsFaults) { f.create = nil })
	got := group(2)
	require.NoError(t, got[0].err)
	require.NoError(t, got[1].err)
	require.Equal(t, end0, got[0].off)
	require.Equal(t, end1, got[1].off)
	check := func(l *Log, p int) {
		var data []string
		for _, r := range readAllRecords(t, l, 1<<20) {
			data = append(data, string(r.Data))
		}
		require.Equal(t, []string{fmt.Sprintf("g0-p%d-e0", p), fmt.Sprintf("g0-p%d-e1", p), fmt.Sprintf("g2-p%d-e0", p), fmt.Sprintf("g2-p%d-e1", p)}, data)
	}
	check(l0, 0)
	check(l1, 1)
	require.NoError(t, l0.Close())
	require.NoError(t, l1.Close())
	require.NoError(t, j.Close())
	j2 := openJournal(t, dataDir, smallJournal())
	ls := openJLogs(t, dataDir, j2, 2, Options{MaxSegmentSize: 48})
	check(ls[0], 0)
	check(ls[1], 1)
}

// TestJournalAtomicFlip: a bit flip in a group record, or in one of its
// data records, with valid records after the group (damage, not a tear):
// the damaged group record is a framed stretch of known length, its data
// records are judged as any, and with the segments holding the bytes (a
// kill -9) nothing is lost and every part is there.
func TestJournalAtomicFlip(t *testing.T) {
	t.Parallel()
	opts, src, j, logs := openAtomicPair(t)
	var all [2][]crashPut
	plain := func(i int) {
		p := i % 2
		data := fmt.Sprintf("plain %d", i)
		_, off, err := logs[p].AppendSync([]Entry{entryf("%s", data)})
		require.NoError(t, err)
		all[p] = append(all[p], crashPut{p, off, data})
	}
	for i := range 6 {
		plain(i)
	}
	w := newAtomicWaiter(2)
	parts := []AtomicPart{{Log: logs[0], Entries: groupEntries(3, 0, 2), Token: 0}, {Log: logs[1], Entries: groupEntries(3, 1, 2), Token: 1}}
	appendAtomicPuts(t, j, parts, w, &all)
	for i := 6; i < 12; i++ {
		plain(i)
	}
	quiesce(t, j, src)
	snap := filepath.Join(t.TempDir(), "snap")
	require.NoError(t, os.CopyFS(snap, os.DirFS(src)))
	for _, l := range logs {
		require.NoError(t, l.Close())
	}
	require.NoError(t, j.Close())
	recs := walkJournal(t, filepath.Join(snap, JournalDirName))
	gi := slices.IndexFunc(recs, func(r jrec) bool { return r.typ == recGroup })
	require.GreaterOrEqual(t, gi, 0)
	g, member := recs[gi], recs[gi+1]
	require.Equal(t, byte(recData), member.typ)
	for _, at := range []struct {
		what string
		pos  int64
	}{
		{"group record crc", g.pos},
		{"group record end", g.pos + jHeaderSize + 3},
		{"group record count", g.pos + jHeaderSize + 10},
		{"member data", member.end - 2},
		{"member header length", member.pos + 6},
	} {
		dir := filepath.Join(t.TempDir(), "d")
		require.NoError(t, os.CopyFS(dir, os.DirFS(snap)))
		flipJournal(t, filepath.Join(dir, JournalDirName), at.pos, 0x20)
		want := [][]crashPut{all[0], all[1]}
		recoverAndCheck(t, dir, opts, 2, want, at.what)
	}
}
