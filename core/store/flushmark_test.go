package store

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
)

// tornThresholdCopy writes 10 records to a threshold-mode log, flushes
// them, writes 10 more (acknowledged, not flushed) and returns a copy of
// its directory taken while it is open (what a power cut leaves before a
// writeback reorders anything), the records' offsets and the flushed end.
func tornThresholdCopy(t *testing.T) (dir string, offs []int64, flushed int64) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "topic-0")
	l, err := Open(src, Options{IDs: &seqIDs{}, UnflushThreshold: 1000})
	require.NoError(t, err)
	for i := range 20 {
		if i == 10 {
			require.NoError(t, l.Flush())
			flushed = l.MaxOffset()
		}
		_, off, err := l.AppendSync([]Entry{entryf("threshold record %02d %s", i, "payload")})
		require.NoError(t, err)
		offs = append(offs, off)
	}
	require.Equal(t, offs[10], flushed)
	dir = copyDir(t, src)
	require.NoError(t, l.Close())
	return dir, offs, flushed
}

// zeroRecordHeader zeroes the header of the record at off (segment 0 of
// dir): a page the disk never wrote back, in a file grown past it by a
// later page it did write.
func zeroRecordHeader(t *testing.T, dir string, off int64) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, segmentName(0)), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt(make([]byte, message.HeaderSize), off)
	require.NoError(t, err)
}

// openCutAt opens tornThresholdCopy's dir, requires that it starts, cut
// at offs[at] with the records before it whole, and returns its log.
func openCutAt(t *testing.T, dir string, offs []int64, at int) string {
	t.Helper()
	lb := &logBuf{}
	l, err := Open(dir, Options{IDs: &seqIDs{}, UnflushThreshold: 1000, Logf: lb.logf})
	require.NoError(t, err, "a torn unsynced tail is cut, not refused")
	defer l.Close()
	require.Equal(t, offs[at], l.MaxOffset(), "cut where the lost page starts")
	recs := readAllRecords(t, l, 1<<20)
	require.Len(t, recs, at)
	for i, r := range recs {
		require.Equal(t, offs[i], r.Offset)
		require.Equal(t, fmt.Sprintf("threshold record %02d %s", i, "payload"), string(r.Data))
	}
	return lb.String()
}

// TestThresholdTornUnsyncedTail: in threshold mode a power cut that keeps
// a later unflushed page of the last segment and loses an earlier one
// leaves a zero-filled record header with valid records after it. Past
// the flush mark (the durable end of the last flush) it is a torn tail:
// Open cuts it, logs why, and every flushed record is there. Before the
// mark, the same damage is in fsynced data and still refuses the start;
// so it does in a directory without a mark (written before it).
func TestThresholdTornUnsyncedTail(t *testing.T) {
	t.Parallel()
	t.Run("past-mark", func(t *testing.T) {
		t.Parallel()
		dir, offs, flushed := tornThresholdCopy(t)
		zeroRecordHeader(t, dir, offs[13])
		log := openCutAt(t, dir, offs, 13)
		require.Contains(t, log, fmt.Sprintf("a torn unsynced tail: the valid records after it were written past the durable end %d", flushed))
		require.NoDirExists(t, filepath.Join(dir, QuarantineDir))
		// The mark now says the recovered end.
		b, err := os.ReadFile(filepath.Join(dir, FlushMarkName))
		require.NoError(t, err)
		require.Equal(t, offs[13], decodeFlushMark(b))
	})
	t.Run("at-mark", func(t *testing.T) {
		t.Parallel()
		dir, offs, _ := tornThresholdCopy(t)
		zeroRecordHeader(t, dir, offs[10]) // the first record after the flush
		l, err := Open(dir, Options{IDs: &seqIDs{}, UnflushThreshold: 1000})
		require.NoError(t, err)
		defer l.Close()
		require.Equal(t, offs[10], l.MaxOffset())
	})
	for _, tc := range []struct {
		name string
		at   int // record whose header is zeroed
		mark bool
	}{
		{"before-mark", 5, true},
		{"no-mark", 13, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, offs, _ := tornThresholdCopy(t)
			zeroRecordHeader(t, dir, offs[tc.at])
			if !tc.mark {
				require.NoError(t, os.Remove(filepath.Join(dir, FlushMarkName)))
			}
			seg := filepath.Join(dir, segmentName(0))
			before, err := os.ReadFile(seg)
			require.NoError(t, err)
			_, err = Open(dir, Options{IDs: &seqIDs{}, UnflushThreshold: 1000})
			var ce *CorruptError
			require.ErrorAs(t, err, &ce, "damage the mark does not put past the durable end refuses")
			require.Equal(t, offs[tc.at], ce.Ranges[0].Offset)
			after, err := os.ReadFile(seg)
			require.NoError(t, err)
			require.Equal(t, before, after, "nothing cut")
		})
	}
	t.Run("damage-then-torn", func(t *testing.T) {
		t.Parallel()
		// Damage before the mark and a torn tail past it: the damage is
		// judged first, and refuses.
		dir, offs, _ := tornThresholdCopy(t)
		zeroRecordHeader(t, dir, offs[4])
		zeroRecordHeader(t, dir, offs[15])
		_, err := Open(dir, Options{IDs: &seqIDs{}, UnflushThreshold: 1000})
		var ce *CorruptError
		require.ErrorAs(t, err, &ce)
		require.Len(t, ce.Ranges, 1)
		require.Equal(t, offs[4], ce.Ranges[0].Offset)
	})
}

// TestThresholdTornHeaderReadsEmpty: a power cut that loses the page
// holding the start of a record header and keeps the next page leaves a
// header whose length, checksum and first id bytes are zero, and whose
// last bytes are the real id's and flag's. With length 0 its checksum (of
// no bytes) is right, so it reads as an empty record, followed by the
// real record's data read as a header. TestPowerCutsThreshold served such
// a record as a message (body ""). Past the durable end the empty record
// is cut with the torn tail behind it; an empty record that was really
// sent stays when nothing torn follows it.
func TestThresholdTornHeaderReadsEmpty(t *testing.T) {
	t.Parallel()
	t.Run("torn", func(t *testing.T) {
		t.Parallel()
		dir, offs, flushed := tornThresholdCopy(t)
		f, err := os.OpenFile(filepath.Join(dir, segmentName(0)), os.O_RDWR, 0)
		require.NoError(t, err)
		_, err = f.WriteAt(make([]byte, 13), offs[13]) // length, checksum, 5 id bytes
		require.NoError(t, err)
		require.NoError(t, f.Close())
		require.Contains(t, openCutAt(t, dir, offs, 13), fmt.Sprintf("past the durable end %d of the last flush, never fsynced (and 1 empty record(s) before it", flushed))
	})
	t.Run("torn-past-count-entries", func(t *testing.T) {
		t.Parallel()
		// Over countStep of flushed records before the torn header: the
		// cut is walked back from a record-count index entry, and the
		// count and the index it leaves are a whole walk's.
		src := filepath.Join(t.TempDir(), "topic-0")
		l, err := Open(src, Options{IDs: &seqIDs{}, UnflushThreshold: 1000})
		require.NoError(t, err)
		body := string(make([]byte, 1000))
		var offs []int64
		for i := range 103 {
			if i == 100 {
				require.NoError(t, l.Flush())
			}
			_, off, err := l.AppendSync([]Entry{entryf("%03d%s", i, body)})
			require.NoError(t, err)
			offs = append(offs, off)
		}
		dir := copyDir(t, src)
		require.NoError(t, l.Close())
		f, err := os.OpenFile(filepath.Join(dir, segmentName(0)), os.O_RDWR, 0)
		require.NoError(t, err)
		_, err = f.WriteAt(make([]byte, 13), offs[101])
		require.NoError(t, err)
		require.NoError(t, f.Close())
		l2, err := Open(dir, Options{IDs: &seqIDs{}, UnflushThreshold: 1000})
		require.NoError(t, err)
		defer l2.Close()
		require.Equal(t, offs[101], l2.MaxOffset())
		require.Equal(t, int64(101), l2.MessageCount())
		for _, at := range []int{0, 40, 70, 100} {
			n, exact, err := l2.CountRecords(offs[at], l2.MaxOffset())
			require.NoError(t, err)
			require.True(t, exact)
			require.Equal(t, int64(101-at), n, "records from offset %d", offs[at])
		}
		require.Len(t, readAllRecords(t, l2, 1<<20), 101)
	})
	t.Run("sent-empty-kept", func(t *testing.T) {
		t.Parallel()
		src := filepath.Join(t.TempDir(), "topic-0")
		l, err := Open(src, Options{IDs: &seqIDs{}, UnflushThreshold: 1000})
		require.NoError(t, err)
		_, _, err = l.AppendSync([]Entry{entryf("flushed")})
		require.NoError(t, err)
		require.NoError(t, l.Flush())
		_, off, err := l.AppendSync([]Entry{entry(nil), entry(nil)}) // two empty messages, never flushed
		require.NoError(t, err)
		end := off + 2*message.HeaderSize
		dir := copyDir(t, src)
		require.NoError(t, l.Close())
		l2, err := Open(dir, Options{IDs: &seqIDs{}, UnflushThreshold: 1000})
		require.NoError(t, err)
		defer l2.Close()
		require.Equal(t, end, l2.MaxOffset(), "empty records with nothing torn after them stay")
		require.Len(t, readAllRecords(t, l2, 1<<20), 3)
	})
}

// TestFlushMark: every fsync of a log that is not journaled raises its
// flush mark (threshold flushes and rolls, group-commit chunks), Truncate
// lowers it, and a mark that does not decode is none.
func TestFlushMark(t *testing.T) {
	t.Parallel()
	read := func(dir string) int64 {
		b, err := os.ReadFile(filepath.Join(dir, FlushMarkName))
		require.NoError(t, err)
		return decodeFlushMark(b)
	}
	dir := filepath.Join(t.TempDir(), "topic-1")
	l, err := Open(dir, Options{IDs: &seqIDs{}, UnflushThreshold: 1000, MaxSegmentSize: 200})
	require.NoError(t, err)
	require.Equal(t, int64(0), read(dir), "a new log's mark is its empty end")
	mustAppend(t, l, []byte("one"), []byte("two"))
	require.Equal(t, int64(0), read(dir), "unflushed")
	require.NoError(t, l.Flush())
	end := l.MaxOffset()
	require.Equal(t, end, read(dir))
	for range 20 { // rolls fsync the full segment
		mustAppend(t, l, []byte("rolling along"))
	}
	require.Greater(t, read(dir), end)
	require.NoError(t, l.Flush())
	require.Equal(t, l.MaxOffset(), read(dir))
	_, err = l.Truncate(end)
	require.NoError(t, err)
	require.Equal(t, end, read(dir), "Truncate lowers the mark")
	require.NoError(t, l.Close())

	gdir := filepath.Join(t.TempDir(), "topic-2")
	g, err := Open(gdir, Options{IDs: &seqIDs{}})
	require.NoError(t, err)
	mustAppend(t, g, []byte("group commit without a journal"))
	require.Equal(t, g.MaxOffset(), read(gdir))
	require.NoError(t, g.Close())

	var b [flushMarkSize]byte
	encodeFlushMark(b[:], 12345)
	require.Equal(t, int64(12345), decodeFlushMark(b[:]))
	b[6] ^= 1
	require.Equal(t, int64(-1), decodeFlushMark(b[:]))
	require.Equal(t, int64(-1), decodeFlushMark(make([]byte, flushMarkSize)))
}

// TestFlushMarkDroppedByJournal: a partition opened with the journal
// removes the flush mark of an earlier threshold-mode run (it would go
// stale: a later threshold-mode run would take damage in data fsynced
// meanwhile for a torn tail), and threshold mode writes a new one.
func TestFlushMarkDroppedByJournal(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	dir := filepath.Join(dataDir, "t-0")
	l, err := Open(dir, Options{IDs: &seqIDs{}, UnflushThreshold: 10})
	require.NoError(t, err)
	mustAppend(t, l, []byte("threshold"))
	require.NoError(t, l.Close())
	require.FileExists(t, filepath.Join(dir, FlushMarkName))

	j, err := OpenJournal(dataDir, JournalOptions{})
	require.NoError(t, err)
	g, err := Open(dir, Options{IDs: &seqIDs{}, Journal: j})
	require.NoError(t, err)
	require.NoFileExists(t, filepath.Join(dir, FlushMarkName))
	mustAppend(t, g, []byte("group commit"))
	require.NoError(t, g.Close())
	require.NoError(t, j.Close())

	l, err = Open(dir, Options{IDs: &seqIDs{}, UnflushThreshold: 10})
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, FlushMarkName))
	require.NoError(t, err)
	require.Equal(t, l.MaxOffset(), decodeFlushMark(b))
	require.NoError(t, l.Close())
}

// markSyncRecorder is a flush mark fdatasync that records the mark each
// sync made durable: what a power cut that drops every unsynced write
// (faultfs.DropAll) leaves in the file.
type markSyncRecorder struct {
	durable atomic.Int64
	n       atomic.Int64
}

func (r *markSyncRecorder) sync(f *os.File) error {
	var b [flushMarkSize]byte
	_, err := f.ReadAt(b[:], 0)
	if err == nil {
		err = fdatasync(f)
	}
	if err == nil {
		r.durable.Store(decodeFlushMark(b[:]))
		r.n.Add(1)
	}
	return err
}

// TestFlushMarkDurable: the flush mark a power cut leaves is never far
// behind the data fsynced and acknowledged before it (a lower mark takes
// damage in that data for a torn tail and cuts it): a raised mark is
// fdatasynced within about flushMarkSyncEvery, off the put path and at
// most once per interval however often it changes, at once at a
// threshold-mode roll, after the threshold-mode ticker's flush and at
// Close; a lowered one (Truncate) before
// Truncate returns, so that the old higher mark cannot come back.
func TestFlushMarkDurable(t *testing.T) {
	t.Parallel()
	within := func(r *markSyncRecorder, want int64, what string) {
		t.Helper()
		start := time.Now()
		require.Eventually(t, func() bool { return r.durable.Load() == want },
			3*flushMarkSyncEvery, 5*time.Millisecond, "%s: the durable mark %d never reached %d", what, r.durable.Load(), want)
		t.Logf("%s: durable after %v", what, time.Since(start))
	}
	read := func(dir string) int64 {
		b, err := os.ReadFile(filepath.Join(dir, FlushMarkName))
		require.NoError(t, err)
		return decodeFlushMark(b)
	}

	t.Run("threshold", func(t *testing.T) {
		t.Parallel()
		r := &markSyncRecorder{}
		r.durable.Store(-1)
		dir := filepath.Join(t.TempDir(), "topic-0")
		l, err := Open(dir, Options{IDs: &seqIDs{}, UnflushThreshold: 1000, MaxSegmentSize: 400,
			hooks: &hooks{markSync: r.sync}})
		require.NoError(t, err)
		defer l.Close()
		require.Equal(t, int64(0), r.durable.Load(), "a new log's first mark is durable at Open")

		// Many flushes in a burst: the mark follows within the bound,
		// with at most one fdatasync per interval.
		n0 := r.n.Load()
		start := time.Now()
		for i := range 30 {
			mustAppend(t, l, fmt.Appendf(nil, "flushed %d", i))
			require.NoError(t, l.Flush())
			if l.MaxOffset() > 300 {
				break // no roll yet
			}
		}
		end := l.MaxOffset()
		require.Equal(t, end, read(dir))
		within(r, end, "flushes")
		require.LessOrEqual(t, r.n.Load()-n0, int64(time.Since(start)/flushMarkSyncEvery)+1, "at most one fdatasync per interval")

		// A roll fdatasyncs the mark at once.
		for range 40 {
			before := read(dir)
			mustAppend(t, l, []byte("rolling along"))
			if m := read(dir); m != before {
				require.Equal(t, m, r.durable.Load(), "a roll fdatasyncs the mark")
				break
			}
		}
		require.Greater(t, r.durable.Load(), end, "rolled")

		// Truncate lowers it durably before it returns.
		require.NoError(t, l.Flush())
		high := l.MaxOffset()
		within(r, high, "flush before truncate")
		_, err = l.Truncate(end)
		require.NoError(t, err)
		require.Equal(t, end, read(dir))
		require.Equal(t, end, r.durable.Load(), "a lowered mark is durable when Truncate returns")

		// Close fdatasyncs a mark it has not yet.
		mustAppend(t, l, []byte("last"))
		require.NoError(t, l.Flush())
		last := l.MaxOffset()
		require.NoError(t, l.Close())
		require.Equal(t, last, r.durable.Load(), "Close leaves the mark durable")
	})

	t.Run("threshold-idle", func(t *testing.T) {
		t.Parallel()
		// The puts stop right after a flush of the threshold (nothing
		// left for the ticker, an hour away): the mark is fdatasynced
		// once the log is found idle, flushMarkIdleAfter later, not a
		// timer's interval later; puts going on leave it to the timer.
		r := &markSyncRecorder{}
		r.durable.Store(-1)
		dir := filepath.Join(t.TempDir(), "topic-3")
		l, err := Open(dir, Options{IDs: &seqIDs{}, UnflushThreshold: 4, UnflushInterval: time.Hour,
			hooks: &hooks{markSync: r.sync}})
		require.NoError(t, err)
		defer l.Close()
		for burst := range 2 {
			n0 := r.n.Load()
			prev := l.MaxOffset()
			for i := range 5 { // the fifth passes the threshold: flushed
				mustAppend(t, l, fmt.Appendf(nil, "burst %d put %d", burst, i))
			}
			end := l.MaxOffset()
			require.Greater(t, end, prev, "burst %d: the threshold flushed", burst)
			require.Equal(t, end, read(dir))
			start := time.Now()
			require.Eventually(t, func() bool { return r.durable.Load() == end },
				flushMarkSyncEvery/2, 2*time.Millisecond, "burst %d: the mark of the last flush of the threshold fdatasynced once idle", burst)
			t.Logf("burst %d: the mark durable %v after the flush", burst, time.Since(start))
			require.LessOrEqual(t, r.n.Load()-n0, int64(1), "burst %d: one fdatasync of the mark", burst)
		}
	})

	t.Run("ticker", func(t *testing.T) {
		t.Parallel()
		// The threshold-mode ticker's flush (the one that makes the last
		// puts of a burst durable) fdatasyncs the mark at once, not a
		// timer's interval later.
		r := &markSyncRecorder{}
		dir := filepath.Join(t.TempDir(), "topic-2")
		l, err := Open(dir, Options{IDs: &seqIDs{}, UnflushThreshold: 1000, UnflushInterval: flushMarkSyncEvery,
			hooks: &hooks{markSync: r.sync}})
		require.NoError(t, err)
		defer l.Close()
		for i := range 2 {
			prev := l.MaxOffset() // readable: flushed
			mustAppend(t, l, fmt.Appendf(nil, "left to the ticker %d", i))
			deadline := time.Now().Add(3 * flushMarkSyncEvery)
			for l.MaxOffset() == prev {
				require.True(t, time.Now().Before(deadline), "the ticker flushed within its interval")
				time.Sleep(2 * time.Millisecond)
			}
			end := l.MaxOffset()
			require.Equal(t, end, read(dir))
			start := time.Now()
			require.Eventually(t, func() bool { return r.durable.Load() == end },
				flushMarkSyncEvery/2, 2*time.Millisecond, "the ticker's flush fdatasyncs its mark at once")
			t.Logf("tick %d: the mark durable %v after the flush", i, time.Since(start))
		}
	})

	t.Run("group-commit", func(t *testing.T) {
		t.Parallel()
		r := &markSyncRecorder{}
		dir := filepath.Join(t.TempDir(), "topic-1")
		g, err := Open(dir, Options{IDs: &seqIDs{}, hooks: &hooks{markSync: r.sync}})
		require.NoError(t, err)
		defer g.Close()
		for i := range 20 {
			mustAppend(t, g, fmt.Appendf(nil, "group commit %d", i))
		}
		within(r, g.MaxOffset(), "group commit")
	})

	t.Run("recovery-cut", func(t *testing.T) {
		t.Parallel()
		// A recovery cut below the mark lowers it durably during Open.
		dir, offs, _ := tornThresholdCopy(t)
		var b [flushMarkSize]byte
		encodeFlushMark(b[:], offs[19]) // as if every record had been flushed
		require.NoError(t, os.WriteFile(filepath.Join(dir, FlushMarkName), b[:], 0o644))
		seg := filepath.Join(dir, segmentName(0))
		require.NoError(t, os.Truncate(seg, offs[15]+5)) // a torn last record
		r := &markSyncRecorder{}
		l, err := Open(dir, Options{IDs: &seqIDs{}, UnflushThreshold: 1000, hooks: &hooks{markSync: r.sync}})
		require.NoError(t, err)
		defer l.Close()
		require.Equal(t, offs[15], l.MaxOffset())
		require.Equal(t, offs[15], r.durable.Load(), "the lowered mark is durable when Open returns")
	})
}
