package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tornFixture is a journaled data directory copied (as a kill -9 or a
// power cut leaves it) while the journal's fdatasync hangs: the puts
// before the hang were acknowledged, the rounds staged during it were
// written but never synced. The puts of those rounds complete once the
// hang is released, after the copy.
type tornFixture struct {
	snap    string     // the copy
	synced  int64      // the journal's durable end at the copy
	acked   []crashPut // acknowledged before the copy
	pending []crashPut // acknowledged only after the copy
	recs    []jrec     // the copy's journal
	opts    JournalOptions
	// later is a copy taken after the hang was released and more puts
	// were acknowledged: the rounds unsynced in snap are durable there
	// and records after them carry marks past them.
	later      string
	laterAcked []crashPut
}

const tornParts = 3

func newTornFixture(t *testing.T) *tornFixture {
	t.Helper()
	var hold atomic.Bool
	var held atomic.Int64
	release, queued := make(chan struct{}), make(chan struct{})
	opts := JournalOptions{FileSize: 256 << 10, CheckpointBytes: 1 << 40, CheckpointInterval: time.Hour,
		hooks: &journalHooks{smallFiles: true, sync: func(f *os.File) error {
			if hold.Load() {
				if held.Add(1) == 1 {
					// The first fdatasync after the hold (a lone put's,
					// run by its own goroutine or inline by the
					// committer) waits until the other puts are queued:
					// they go to the pipeline as one large round, whose
					// fdatasync then hangs.
					<-queued
				} else {
					<-release
				}
			}
			return fdatasync(f)
		}}}
	dir := t.TempDir()
	j, err := OpenJournal(dir, opts)
	require.NoError(t, err)
	logs := make([]*Log, tornParts)
	for p := range tornParts {
		logs[p], err = Open(filepath.Join(dir, partName(p)), Options{IDs: &seqIDs{}, MaxSegmentSize: 1 << 20, Journal: j})
		require.NoError(t, err)
	}
	fx := &tornFixture{opts: opts}
	var mu sync.Mutex
	put := func(p, i int, to *[]crashPut) {
		data := fmt.Sprintf("p%d-%d-%s", p, i, strings.Repeat("t", 700+i%300))
		_, off, err := logs[p].AppendSync([]Entry{entry([]byte(data))})
		require.NoError(t, err)
		mu.Lock()
		*to = append(*to, crashPut{p, off, data})
		mu.Unlock()
	}
	for i := range 30 {
		put(i%tornParts, i, &fx.acked)
	}
	// Hang the next fdatasync: the rounds staged meanwhile are written
	// and never synced.
	hold.Store(true)
	var wg sync.WaitGroup
	wg.Go(func() { put(0, 99, &fx.pending) })
	for held.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	for g := range 24 {
		wg.Go(func() { put(g%tornParts, 100+g, &fx.pending) })
	}
	// Every put queued in its log (a fixed sleep was too short under
	// load: the round held next then had one record, not enough to reach
	// past the lost page), then a moment for the last to reach the journal.
	appends := func() (n int64) {
		for _, l := range logs {
			n += l.Stats().Appends
		}
		return n
	}
	for deadline := time.Now().Add(10 * time.Second); appends() < 30+1+24; {
		require.True(t, time.Now().Before(deadline), "the puts were not queued: %d appends", appends())
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	close(queued)
	// Wait until the committer has staged what it can (its slots are
	// taken or every put is staged): the journal stops growing.
	prev := int64(-1)
	for deadline := time.Now().Add(10 * time.Second); ; {
		time.Sleep(100 * time.Millisecond)
		n := j.Stats().Bytes
		if n == prev && held.Load() >= 2 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the journal kept growing")
		prev = n
	}
	fx.synced = j.synced.Load()
	fx.snap = filepath.Join(t.TempDir(), "snap")
	require.NoError(t, os.CopyFS(fx.snap, os.DirFS(dir)))
	hold.Store(false)
	close(release)
	wg.Wait()
	for i := range 9 {
		put(i%tornParts, 200+i, &fx.laterAcked)
	}
	fx.later = filepath.Join(t.TempDir(), "later")
	require.NoError(t, os.CopyFS(fx.later, os.DirFS(dir)))
	for _, l := range logs {
		require.NoError(t, l.Close())
	}
	require.NoError(t, j.Close())
	fx.recs = walkJournal(t, filepath.Join(fx.snap, JournalDirName))
	return fx
}

// lostPage returns the journal range a torn cut loses in the fixture: the
// unsynced bytes from the durable end to the next 4 KiB page boundary
// (the page the disk did not write back), past which valid records of
// the unsynced rounds follow.
func (fx *tornFixture) lostPage(t *testing.T) (from, to int64) {
	t.Helper()
	from = fx.synced
	to = (from/4096 + 1) * 4096
	after := 0
	for _, r := range fx.recs {
		if r.pos >= to {
			after++
		}
	}
	require.Greater(t, after, 0, "valid unsynced records follow the lost page (durable end %d, last record ends %d)",
		fx.synced, fx.recs[len(fx.recs)-1].end)
	return from, to
}

// zeroJournal zeroes the journal positions from..to of the journal in dir
// (a pre-written file's page that was never written back reads as zeros).
func zeroJournal(t *testing.T, dir string, from, to int64) {
	t.Helper()
	path, at := flipJournal(t, dir, from, 0) // (xor 0: only finds the file)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	fi, err := f.Stat()
	require.NoError(t, err)
	require.LessOrEqual(t, at+to-from, fi.Size(), "the lost page lies in one journal file")
	_, err = f.WriteAt(make([]byte, to-from), at)
	require.NoError(t, err)
}

// TestJournalTornUnsyncedTail: a power cut that keeps a later unsynced
// page of the journal and loses an earlier one (a disk with a volatile
// write cache) leaves a damaged stretch with valid records after it; the
// records after it carry durable marks at or before it (their rounds
// were staged before any fdatasync covering it returned), so it is a
// torn tail: the journal is cut there silently (the recovery line says
// so), every acknowledged put is there at its offset, and nothing of the
// torn rounds past the cut is replayed. Before durable marks this refused
// the start ("damaged records followed by valid ones").
func TestJournalTornUnsyncedTail(t *testing.T) {
	t.Parallel()
	fx := newTornFixture(t)
	from, to := fx.lostPage(t)
	dir := filepath.Join(t.TempDir(), "d")
	require.NoError(t, os.CopyFS(dir, os.DirFS(fx.snap)))
	zeroJournal(t, filepath.Join(dir, JournalDirName), from, to)

	// The hole starts at the first record at or after the durable end.
	cut := int64(-1)
	for _, r := range fx.recs {
		if r.pos >= from {
			cut = r.pos
			break
		}
	}
	require.Equal(t, fx.synced, cut, "the durable end is a record boundary")
	want, _ := expectAfterCut(fx.recs, append(append([]crashPut(nil), fx.acked...), fx.pending...), tornParts, cut)
	for _, p := range fx.acked {
		require.Contains(t, want[p.part], p, "an acknowledged put is before the torn tail")
	}
	o := fx.opts
	lb := &logBuf{}
	o.Logf = lb.logf
	o.hooks = &journalHooks{smallFiles: true}
	recoverAndCheck(t, dir, o, tornParts, want, "torn tail")
	log := lb.String()
	require.Contains(t, log, fmt.Sprintf("torn unsynced tail at %d", cut))
	require.Contains(t, log, "no damage", "a torn tail is not reported as damage")
	require.NotContains(t, log, "Not starting")
	require.NotContains(t, log, "damaged record")
	// Opening again: the torn tail is gone, nothing changes.
	recoverAndCheck(t, dir, o, tornParts, want, "reopened")
}

// TestJournalTornUnderDurableMark: the same lost page once later rounds
// were synced and records after it carry durable marks past it is damage
// in data an fdatasync covered (a bad sector, not a torn cut): with the
// segments not holding it either, the start is still refused and nothing
// is changed.
func TestJournalTornUnderDurableMark(t *testing.T) {
	t.Parallel()
	fx := newTornFixture(t)
	from, to := fx.lostPage(t)
	dir := filepath.Join(t.TempDir(), "d")
	require.NoError(t, os.CopyFS(dir, os.DirFS(fx.later)))
	zeroJournal(t, filepath.Join(dir, JournalDirName), from, to)
	for p := range tornParts {
		// A kill -9 copy: the segments may hold the rounds' bytes from
		// their tails; a power cut lost them there too.
		zeroSegments(t, filepath.Join(dir, partName(p)), 0, 1<<40)
	}
	before := treeBytes(t, dir)
	o := fx.opts
	lb := &logBuf{}
	o.Logf = lb.logf
	o.hooks = &journalHooks{smallFiles: true}
	err := openErr(dir, o)
	var je *JournalCorruptError
	require.ErrorAs(t, err, &je, "damage under a later durable mark refuses the start")
	require.True(t, errors.Is(err, ErrCorrupt))
	require.Contains(t, err.Error(), "Not starting")
	require.NotContains(t, lb.String(), "torn unsynced tail")
	require.Equal(t, before, treeBytes(t, dir), "a refused recovery changes nothing")
}
