package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
)

// openJournal opens the journal of dataDir and closes it at the end of the
// test (after the logs, whose cleanups run first).
func openJournal(t testing.TB, dataDir string, opts JournalOptions) *Journal {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	j, err := OpenJournal(dataDir, testFileSize(opts))
	require.NoError(t, err)
	t.Cleanup(func() { _ = j.Close() })
	return j
}

// testFileSize gives opts without a FileSize the smallest accepted,
// MinJournalFileSize: a journal pre-writes (zero-fills and fsyncs) its
// current file and two spares, 192 MiB at DefaultJournalFileSize, which
// these tests' data never needs. (TestJournalStartupManyPartitions keeps
// the defaults: it measures the journal as the broker opens it.)
func testFileSize(opts JournalOptions) JournalOptions {
	if opts.FileSize == 0 {
		opts.FileSize = MinJournalFileSize
	}
	return opts
}

// smallJournal gives 64 KiB journal files and no timed checkpoints.
func smallJournal() JournalOptions {
	return JournalOptions{FileSize: 64 << 10, CheckpointBytes: 1 << 40, CheckpointInterval: time.Hour, hooks: &journalHooks{smallFiles: true}}
}

func partName(p int) string { return fmt.Sprintf("t-%d", p) }

// openJLogs opens n journaled partition logs t-0 ... t-(n-1) in dataDir.
func openJLogs(t testing.TB, dataDir string, j *Journal, n int, opts Options) []*Log {
	t.Helper()
	logs := make([]*Log, n)
	for p := range n {
		o := opts
		o.Journal = j
		logs[p] = openLog(t, filepath.Join(dataDir, partName(p)), o)
	}
	return logs
}

// TestJournalManyPartitions: appends to 64 partitions from concurrent
// producers all go through the one journal: offsets are dense per
// partition, reads give back what was acknowledged, and far fewer
// fdatasyncs than appends were needed.
func TestJournalManyPartitions(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	j := openJournal(t, dataDir, smallJournal())
	const parts, producers, per = 64, 8, 200
	logs := openJLogs(t, dataDir, j, parts, Options{MaxSegmentSize: 16 << 10})

	acked := newAckedPuts(parts)
	var wg sync.WaitGroup
	for w := range producers {
		wg.Go(func() {
			for i := range per {
				p := (w*per + i) % parts
				data := fmt.Sprintf("w%d-i%d-%s", w, i, "xxxxxxxxxxxxxxxx")
				_, off, err := logs[p].AppendSync([]Entry{entry([]byte(data))})
				if !assertNoErr(t, err) {
					return
				}
				acked.add(p, off, data)
			}
		})
	}
	wg.Wait()
	got := acked.got
	for p, l := range logs {
		recs := readAllRecords(t, l, 1<<20)
		require.Len(t, recs, len(got[p]))
		byOff := map[int64]string{}
		for _, g := range got[p] {
			byOff[g.off] = g.data
		}
		for _, r := range recs {
			require.Equal(t, byOff[r.Offset], string(r.Data), "partition %d offset %d", p, r.Offset)
		}
		require.Equal(t, int64(0), l.Stats().Fsyncs, "a journaled log never fsyncs per append")
	}
	st := j.Stats()
	require.Less(t, st.Fsyncs, int64(producers*per), "rounds share fdatasyncs")
	t.Logf("journal: %+v", st)
}

// ackedPut is an acknowledged put: its offset and data.
type ackedPut struct {
	off  int64
	data string
}

// ackedPuts collects the acknowledged puts of concurrent producers, by
// partition.
type ackedPuts struct {
	mu  sync.Mutex
	got [][]ackedPut
}

func newAckedPuts(parts int) *ackedPuts { return &ackedPuts{got: make([][]ackedPut, parts)} }

func (a *ackedPuts) add(p int, off int64, data string) {
	a.mu.Lock()
	a.got[p] = append(a.got[p], ackedPut{off, data})
	a.mu.Unlock()
}

func assertNoErr(t testing.TB, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// TestJournalAckAfterFsync: an append is neither acknowledged nor readable
// before the journal fdatasync that covers it returns.
func TestJournalAckAfterFsync(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	g := newGateSync()
	var gate atomic.Bool
	opts := smallJournal()
	opts.hooks.sync = func(f *os.File) error {
		if gate.Load() {
			return g.sync(f)
		}
		return fdatasync(f)
	}
	j := openJournal(t, dataDir, opts)
	logs := openJLogs(t, dataDir, j, 2, Options{})
	gate.Store(true)
	w := &recWaiter{}
	require.NoError(t, logs[0].Append([]Entry{entry([]byte("a"))}, w, 1))
	require.NoError(t, logs[1].Append([]Entry{entry([]byte("b"))}, w, 2))
	<-g.started
	time.Sleep(20 * time.Millisecond)
	require.Empty(t, w.calls(), "acknowledged before the journal fdatasync")
	require.Equal(t, int64(0), logs[0].MaxOffset()+logs[1].MaxOffset(), "readable before the journal fdatasync")
	gate.Store(false)
	close(g.release)
	require.Eventually(t, func() bool { return len(w.calls()) == 2 }, 10*time.Second, time.Millisecond)
	for _, c := range w.calls() {
		require.NoError(t, c.err)
	}
	require.Positive(t, logs[0].MaxOffset())
	require.Positive(t, logs[1].MaxOffset())
}

// TestJournalFsyncFailureFinal: a failed journal fdatasync fails the
// appends it covers and every later durable append of every partition,
// with an error naming the journal; it is never retried.
func TestJournalFsyncFailureFinal(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	var fail atomic.Bool
	var syncs atomic.Int64
	opts := smallJournal()
	opts.hooks.sync = func(f *os.File) error {
		syncs.Add(1)
		if fail.Load() {
			return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: syscall.EIO}
		}
		return fdatasync(f)
	}
	j := openJournal(t, dataDir, opts)
	logs := openJLogs(t, dataDir, j, 3, Options{})
	mustAppend(t, logs[0], []byte("good"))
	good := logs[0].MaxOffset()
	fail.Store(true)
	_, _, err := logs[1].AppendSync([]Entry{entry([]byte("bad"))})
	require.ErrorIs(t, err, syscall.EIO)
	require.ErrorIs(t, err, ErrFailed)
	require.ErrorContains(t, err, "journal")
	n := syncs.Load()
	fail.Store(false)
	for _, l := range logs {
		_, _, err := l.AppendSync([]Entry{entry([]byte("refused"))})
		require.ErrorIs(t, err, ErrFailed)
		require.ErrorIs(t, l.Err(), syscall.EIO)
	}
	require.Equal(t, n, syncs.Load(), "a failed journal fdatasync was retried")
	require.Equal(t, good, logs[0].MaxOffset())
	require.Equal(t, int64(0), logs[1].MaxOffset())
	require.Len(t, readAllRecords(t, logs[0], 1000), 1)
}

// TestJournalTransientFailures runs the transient roll failures of
// TestTransientFailures through a journal: they fail only that append, and
// offsets never move. (A journaled log writes its segments at checkpoints,
// not at appends: TestJournalCheckpointWriteFailure has the write
// failures.)
func TestJournalTransientFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		inject func(*fsFaults)
		cause  error
	}{
		{"roll/create-EMFILE", func(f *fsFaults) { f.create = syscall.EMFILE }, syscall.EMFILE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := t.TempDir()
			j := openJournal(t, dataDir, smallJournal())
			dir := filepath.Join(dataDir, partName(0))
			fs := &fsFaults{}
			l := openLog(t, dir, Options{MaxSegmentSize: 64, hooks: fs.hooks(dir), Journal: j})
			var a acked
			for _, d := range []string{"good-1", "good-2", "good-3"} {
				a.appendOK(t, l, d)
			}
			fs.set(tc.inject)
			for range 3 {
				_, _, err := l.AppendSync([]Entry{entryf("bad-%s", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")})
				require.ErrorIs(t, err, tc.cause)
				require.NotErrorIs(t, err, ErrFailed)
			}
			fs.set(func(f *fsFaults) { f.create, f.write, f.partial = nil, nil, nil })
			for _, d := range []string{"good-4", "good-5", "good-6", "good-7"} {
				a.appendOK(t, l, d)
			}
			a.check(t, l)
			require.NoError(t, l.Close())
			a.checkFiles(t, dir)
			require.NoError(t, j.Close())

			j2 := openJournal(t, dataDir, smallJournal())
			l = openLog(t, dir, Options{MaxSegmentSize: 64, Journal: j2})
			a.check(t, l)
			a.appendOK(t, l, "good-8")
			a.check(t, l)
		})
	}
}

// TestJournalCheckpointWriteFailure: a segment write() that fails at a
// checkpoint (ENOSPC, a disk filling up in the middle of the write) fails
// no append and does not fail the log: the records are durable in the
// journal, that checkpoint is skipped (and said so), and the first
// checkpoint after the fault writes and fsyncs the segments. Nothing is
// lost and offsets never move, before and after a reopen.
func TestJournalCheckpointWriteFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		inject func(*fsFaults)
	}{
		{"ENOSPC", func(f *fsFaults) { f.write = syscall.ENOSPC }},
		{"partial-ENOSPC", func(f *fsFaults) { f.partial = syscall.ENOSPC }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := t.TempDir()
			var lb logBuf
			o := smallJournal()
			o.CheckpointInterval = 20 * time.Millisecond
			o.Logf = lb.logf
			j := openJournal(t, dataDir, o)
			dir := filepath.Join(dataDir, partName(0))
			fs := &fsFaults{}
			l := openLog(t, dir, Options{MaxSegmentSize: 64, hooks: fs.hooks(dir), Journal: j})
			var a acked
			for _, d := range []string{"good-1", "good-2", "good-3"} {
				a.appendOK(t, l, d)
			}
			fs.set(tc.inject)
			for i := range 6 {
				a.appendOK(t, l, fmt.Sprintf("during-%d-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", i))
			}
			require.Eventually(t, func() bool { return strings.Contains(lb.String(), "checkpoint skipped") }, 10*time.Second, 5*time.Millisecond)
			require.Contains(t, lb.String(), "no space left on device")
			require.NoError(t, l.Err())
			a.check(t, l)
			before := j.Stats().Checkpoints
			fs.set(func(f *fsFaults) { f.write, f.partial = nil, nil })
			require.Eventually(t, func() bool { return j.Stats().Checkpoints > before }, 10*time.Second, 5*time.Millisecond)
			for _, d := range []string{"good-4", "good-5"} {
				a.appendOK(t, l, d)
			}
			a.check(t, l)
			require.NoError(t, l.Close())
			a.checkFiles(t, dir)
			require.NoError(t, j.Close())

			j2 := openJournal(t, dataDir, smallJournal())
			l = openLog(t, dir, Options{MaxSegmentSize: 64, Journal: j2})
			a.check(t, l)
			a.appendOK(t, l, "good-6")
			a.check(t, l)
		})
	}
}

// TestJournalCleanReopen: a closed journal replays nothing; the logs keep
// every record.
func TestJournalCleanReopen(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	j := openJournal(t, dataDir, smallJournal())
	logs := openJLogs(t, dataDir, j, 4, Options{MaxSegmentSize: 1 << 10})
	for i := range 100 {
		mustAppend(t, logs[i%4], fmt.Appendf(nil, "rec-%d-%s", i, make([]byte, 50)))
	}
	ends := make([]int64, 4)
	for p, l := range logs {
		ends[p] = l.MaxOffset()
		require.NoError(t, l.Close())
	}
	require.NoError(t, j.Close())
	j = openJournal(t, dataDir, smallJournal())
	require.Equal(t, int64(0), j.Stats().Replayed+j.Stats().Skipped)
	logs = openJLogs(t, dataDir, j, 4, Options{MaxSegmentSize: 1 << 10})
	for p, l := range logs {
		require.Equal(t, ends[p], l.MaxOffset())
		require.Len(t, readAllRecords(t, l, 1<<20), 25)
	}
}

// TestJournalUnfinishedFile: a journal file whose pre-write a crash
// interrupted (its .new name, short, never renamed) is deleted at the next
// open, and the journal goes on with whole files only.
func TestJournalUnfinishedFile(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	var lb logBuf
	o := smallJournal()
	o.Logf = lb.logf
	j := openJournal(t, dataDir, o)
	logs := openJLogs(t, dataDir, j, 2, Options{MaxSegmentSize: 1 << 10})
	for i := range 20 {
		mustAppend(t, logs[i%2], fmt.Appendf(nil, "rec-%d", i))
	}
	for _, l := range logs {
		require.NoError(t, l.Close())
	}
	require.NoError(t, j.Close())
	jdir := filepath.Join(dataDir, JournalDirName)
	files, err := listJournalFiles(jdir, t.Logf)
	require.NoError(t, err)
	last := files[len(files)-1]
	closeJFiles(files)
	unfinished := filepath.Join(jdir, journalName(last.end())+journalNewSuffix)
	require.NoError(t, os.WriteFile(unfinished, make([]byte, 1000), 0o644))

	j = openJournal(t, dataDir, o)
	require.NoFileExists(t, unfinished)
	require.Contains(t, lb.String(), "pre-write was interrupted")
	logs = openJLogs(t, dataDir, j, 2, Options{MaxSegmentSize: 1 << 10})
	for i := range 200 { // past the end of the journal's files: new ones are made whole
		mustAppend(t, logs[i%2], fmt.Appendf(nil, "more-%d-%s", i, make([]byte, 500)))
	}
	files, err = listJournalFiles(jdir, t.Logf)
	require.NoError(t, err)
	for _, f := range files {
		require.Equal(t, o.FileSize, f.size, "journal file %s", journalName(f.start))
	}
	closeJFiles(files)
	for p, l := range logs {
		require.Len(t, readAllRecords(t, l, 1<<20), 110, "partition %d", p)
	}
}

// TestJournalCheckpointFreesFiles: checkpoints every few KiB let the
// journal recycle its files (renamed forward, never more than a few on
// disk) while the logs keep everything.
func TestJournalCheckpointFreesFiles(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	opts := smallJournal()
	opts.CheckpointBytes = 16 << 10
	j := openJournal(t, dataDir, opts)
	logs := openJLogs(t, dataDir, j, 4, Options{MaxSegmentSize: 32 << 10})
	data := make([]byte, 1000)
	for i := range 1000 { // ~1 MiB through 64 KiB journal files
		mustAppend(t, logs[i%4], data)
	}
	require.Eventually(t, func() bool { return j.Stats().Recycled > 0 }, 10*time.Second, time.Millisecond)
	ents, err := os.ReadDir(j.Dir())
	require.NoError(t, err)
	require.LessOrEqual(t, len(ents), 8, "freed journal files are reused, not accumulated")
	st := j.Stats()
	require.Greater(t, st.Checkpoints, int64(10))
	t.Logf("journal: %+v, %d files", st, len(ents))
	for _, l := range logs {
		require.Len(t, readAllRecords(t, l, 1<<20), 250)
	}
}

// TestJournalKeepsSpareFiles: two pre-written files wait ahead of the
// current one from the start and after the journal moves on, so a round
// never has to create one.
func TestJournalKeepsSpareFiles(t *testing.T) {
	t.Parallel()
	j := openJournal(t, t.TempDir(), smallJournal())
	spares := func() int {
		cur := j.curStart.Load()
		j.fmu.Lock()
		defer j.fmu.Unlock()
		return j.sparesLocked(cur)
	}
	require.Eventually(t, func() bool { return spares() == wantSpareJournalFiles }, 10*time.Second, time.Millisecond)
	l := openJLogs(t, filepath.Dir(j.Dir()), j, 1, Options{})[0]
	data := make([]byte, 1000)
	for range 200 { // ~200 KiB through 64 KiB files
		mustAppend(t, l, data)
	}
	require.Greater(t, j.curStart.Load(), int64(0), "the journal moved to a later file")
	require.Eventually(t, func() bool { return spares() == wantSpareJournalFiles }, 10*time.Second, time.Millisecond)
	require.Len(t, readAllRecords(t, l, 1<<20), 200)
}

// TestJournalRejectsForeignDir: a journaled log must live directly in the
// journal's data directory.
func TestJournalRejectsForeignDir(t *testing.T) {
	t.Parallel()
	j := openJournal(t, t.TempDir(), smallJournal())
	_, err := Open(filepath.Join(t.TempDir(), "t-0"), Options{IDs: &seqIDs{}, Journal: j})
	require.ErrorContains(t, err, "not a partition directory")
}

// recordsOf returns the records of the partition directory dir read
// straight from its segment files.
func recordsOf(t testing.TB, dir string) []message.Record {
	t.Helper()
	starts, _, err := listSegments(dir)
	require.NoError(t, err)
	var out []message.Record
	for _, s := range starts {
		b, err := os.ReadFile(filepath.Join(dir, segmentName(s)))
		require.NoError(t, err)
		it := message.NewIterator(b, s, 0)
		for it.Next() {
			out = append(out, *it.Record())
		}
	}
	return out
}

// TestJournalCloseDrains: closing journaled logs (then the journal) while
// appends are in flight completes every accepted append exactly once, and
// what was acknowledged is there after a reopen, with nothing to replay.
func TestJournalCloseDrains(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	j, err := OpenJournal(dataDir, smallJournal())
	require.NoError(t, err)
	const parts = 8
	logs := make([]*Log, parts)
	for p := range parts {
		logs[p], err = Open(filepath.Join(dataDir, partName(p)), Options{IDs: &seqIDs{}, Journal: j})
		require.NoError(t, err)
	}
	w := &recWaiter{}
	accepted := 0
	for i := range 2000 {
		if logs[i%parts].Append([]Entry{entryf("m-%d", i)}, w, uint64(i)) == nil {
			accepted++
		}
		if i == 1000 {
			for _, l := range logs[:parts/2] {
				go l.Close()
			}
		}
	}
	for _, l := range logs {
		require.NoError(t, l.Close())
	}
	require.NoError(t, j.Close())
	calls := w.calls()
	require.Len(t, calls, accepted, "every accepted append completes once")
	okByPart := make([]int, parts)
	for _, c := range calls {
		if c.err == nil {
			okByPart[c.token%parts]++
		}
	}
	j = openJournal(t, dataDir, smallJournal())
	require.Zero(t, j.Stats().Replayed)
	logs = openJLogs(t, dataDir, j, parts, Options{})
	for p, l := range logs {
		require.Len(t, readAllRecords(t, l, 1<<20), okByPart[p], "partition %d", p)
	}
}

// TestJournalIdleCheckpoints: an idle journal stops checkpointing once a
// checkpoint covers what was written: a checkpoint record alone does not
// make the next one due (before, an idle journal wrote a checkpoint,
// listing every partition, and fdatasynced it every interval for good).
func TestJournalIdleCheckpoints(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	const interval = 20 * time.Millisecond
	j := openJournal(t, dataDir, JournalOptions{FileSize: 1 << 20, CheckpointInterval: interval, hooks: &journalHooks{smallFiles: true}})
	logs := openJLogs(t, dataDir, j, 4, Options{IDs: &seqIDs{}})
	for i, l := range logs {
		mustAppend(t, l, fmt.Appendf(nil, "m%d", i))
	}
	require.Eventually(t, func() bool { return j.Stats().Checkpoints > 0 && !j.ckptBusy.Load() }, 10*time.Second, time.Millisecond)
	// A checkpoint due at the next interval completes: wait until the
	// count holds still for 5 intervals (bounded; on a loaded machine the
	// due one may take longer than 5 intervals). A journal that kept
	// checkpointing while idle never holds still and fails below.
	st := j.Stats()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(5 * interval)
		next := j.Stats()
		if next.Checkpoints == st.Checkpoints && !j.ckptBusy.Load() {
			break
		}
		st = next
	}
	time.Sleep(20 * interval)
	after := j.Stats()
	require.Equal(t, st.Checkpoints, after.Checkpoints, "checkpoints while idle")
	require.Equal(t, st.Bytes, after.Bytes, "journal bytes written while idle")
	require.True(t, after.UpToDate, "nothing written after the last checkpoint")
	j.ckptBusy.Store(true) // no checkpoint between the put and the check below
	mustAppend(t, logs[0], []byte("more"))
	require.False(t, j.Stats().UpToDate, "a put after the last checkpoint")
	j.ckptBusy.Store(false)
	require.Eventually(t, func() bool { return j.Stats().Checkpoints > after.Checkpoints }, 10*time.Second, time.Millisecond,
		"a put makes the next checkpoint due")
}
