package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
)

// crashAfterCheckpoint writes bulk records to the journaled partition t-0
// of a fresh data directory (one big segment), waits until a checkpoint
// taken after them is durable, appends tail more records and returns a
// copy of the data directory taken while everything still runs (what a
// kill -9 leaves), with the acknowledged offsets and the last id.
func crashAfterCheckpoint(t *testing.T, bulk, tail int) (dir string, offs []int64, lastID int64) {
	t.Helper()
	src := t.TempDir()
	// No time-based checkpoint: only the two forced below. One running
	// while the directory is copied (the interval was 20 ms) made the copy
	// a state no crash leaves (a file read half-way through a write), and
	// under load TestReplayedTrustSurvivesSecondCrash found a record
	// zero-filled after replay in 2 runs of 200.
	j := openJournal(t, src, JournalOptions{CheckpointBytes: 1 << 40, CheckpointInterval: time.Hour})
	l := openJLogs(t, src, j, 1, Options{MaxSegmentSize: 1 << 30})[0]
	put := func(i int) {
		id, off := mustAppend(t, l, fmt.Appendf(bytes.Repeat([]byte{'a' + byte(i%26)}, 900), "#%d", i))
		offs = append(offs, off)
		lastID = id
	}
	for i := range bulk {
		put(i)
	}
	// Two more checkpoints: the second was snapshotted after the bulk.
	forceCheckpoint(t, j)
	forceCheckpoint(t, j)
	for i := range tail {
		put(bulk + i)
	}
	dir = filepath.Join(t.TempDir(), "crash")
	require.NoError(t, os.CopyFS(dir, os.DirFS(src)))
	return dir, offs, lastID
}

// readCounter is a segment read hook that counts the bytes recovery's
// scans read; reads at byte 0 (where the background scrub of the last
// segment starts, and a full scan too) wait for open to be closed, for at
// most a few seconds, so that what Open read can be told apart.
type readCounter struct {
	n    atomic.Int64
	open chan struct{}
}

func (c *readCounter) readAt(f *os.File, b []byte, off int64) (int, error) {
	if off == 0 {
		select {
		case <-c.open:
		case <-time.After(3 * time.Second):
		}
	}
	n, err := f.ReadAt(b, off)
	c.n.Add(int64(n))
	return n, err
}

// TestTrustedOpenReadsCheckpointInterval: after a crash, a journaled
// log's Open reads only the bytes past the last checkpoint's end (a few
// records here), not its whole last segment (hundreds of KiB); the background
// scrub reads the rest, after which the message count is complete. The
// same files opened in truncate mode (which keeps the full scan) read the
// whole segment.
func TestTrustedOpenReadsCheckpointInterval(t *testing.T) {
	t.Parallel()
	// 400 records of ~930 bytes: a segment several times what Open may read.
	const bulk, tail = 400, 5
	dir, offs, lastID := crashAfterCheckpoint(t, bulk, tail)
	lastLen := int64(len(fmt.Sprintf("%900s#%d", "", bulk+tail-1))) // crashAfterCheckpoint's last put
	segSize := offs[len(offs)-1] + message.HeaderSize + lastLen
	require.Greater(t, segSize, int64(4*64<<10), "a scan of the whole segment reads far more than the limit below")

	j := openJournal(t, dir, JournalOptions{})
	rc := &readCounter{open: make(chan struct{})}
	l := openLog(t, filepath.Join(dir, partName(0)), Options{Journal: j, MaxSegmentSize: 1 << 30, hooks: &hooks{readAt: rc.readAt}})
	opened := rc.n.Load()
	close(rc.open)
	t.Logf("Open read %d bytes of a %d-byte segment", opened, segSize)
	require.Less(t, opened, int64(64<<10), "Open read more than the records after the checkpoint")
	require.Equal(t, lastID, l.LastID())
	require.Equal(t, segSize, l.MaxOffset())
	require.Eventually(t, l.MessageCountComplete, 30*time.Second, time.Millisecond)
	require.Equal(t, int64(bulk+tail), l.MessageCount())
	require.GreaterOrEqual(t, rc.n.Load(), segSize-opened, "the background scrub reads the prefix")
	recs := readAllRecords(t, l, 1<<20)
	require.Len(t, recs, bulk+tail)
	for i, r := range recs {
		require.Equal(t, offs[i], r.Offset)
	}
	// Appends go on after the trusted prefix, and a clean reopen agrees.
	mustAppend(t, l, []byte("after"))
	require.Equal(t, int64(bulk+tail+1), l.MessageCount())

	dir2, _, _ := crashAfterCheckpoint(t, bulk, tail)
	j2 := openJournal(t, dir2, JournalOptions{})
	rc2 := &readCounter{open: make(chan struct{})}
	close(rc2.open)
	l2 := openLog(t, filepath.Join(dir2, partName(0)), Options{Journal: j2, Recovery: RecoverTruncate, MaxSegmentSize: 1 << 30, hooks: &hooks{readAt: rc2.readAt}})
	require.GreaterOrEqual(t, rc2.n.Load(), segSize, "truncate mode scans the whole last segment")
	require.Equal(t, lastID, l2.LastID())
}

// TestTrustedOpenBitFlipNotServed: a bit flipped at rest in the part of
// the last segment that a trusted Open no longer scans (checkpointed long
// before the crash) does not stop the start, but it is never served as
// data: before the background scrub reaches it a read of it is refused
// (the range is verified first), reads before it end where it starts, and
// after the scrub it is quarantined, logged, and refused with the next
// valid offset; nothing is deleted and every other record is served.
func TestTrustedOpenBitFlipNotServed(t *testing.T) {
	t.Parallel()
	const bulk, tail = 200, 3
	dir, offs, _ := crashAfterCheckpoint(t, bulk, tail)
	seg := filepath.Join(dir, partName(0), segmentName(0))
	victim := offs[2]
	flip(t, seg, victim+message.HeaderSize+5, 0x10)
	damaged, err := os.ReadFile(seg)
	require.NoError(t, err)

	var lb logBuf
	j := openJournal(t, dir, JournalOptions{})
	rc := &readCounter{open: make(chan struct{})} // holds the scrub back
	l := openLog(t, filepath.Join(dir, partName(0)), Options{Journal: j, MaxSegmentSize: 1 << 30, Logf: lb.logf, hooks: &hooks{readAt: rc.readAt}})

	// Before the scrub: the damaged record is refused, reads before it
	// stop at it.
	_, err = l.Read(victim, 4096)
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	v, err := l.Read(0, 1<<20)
	require.NoError(t, err)
	require.Equal(t, victim, int64(v.Len))
	v.Release()

	close(rc.open)
	require.Eventually(t, l.MessageCountComplete, 30*time.Second, time.Millisecond)
	require.Contains(t, lb.String(), fmt.Sprintf("last segment %s has an invalid record at byte %d", segmentName(0), victim))
	_, err = l.Read(victim, 4096)
	require.ErrorAs(t, err, &ce)
	require.True(t, errors.Is(err, ErrCorrupt))
	require.Contains(t, err.Error(), fmt.Sprintf("the next valid record is at offset %d", offs[3]))
	q, err := os.ReadFile(filepath.Join(dir, partName(0), QuarantineDir, fmt.Sprintf("%s.%d.bad", segmentName(0), victim)))
	require.NoError(t, err)
	require.Equal(t, damaged[victim:offs[3]], q)

	// Every other record is served, each valid; nothing was cut.
	var served []int64
	for off := int64(0); off < l.MaxOffset(); {
		v, err := l.Read(off, 4096)
		if errors.As(err, &ce) {
			require.Equal(t, victim, off)
			off = offs[3]
			continue
		}
		require.NoError(t, err)
		b, err := v.ReadAll(nil)
		v.Release()
		require.NoError(t, err)
		it := message.NewIterator(b, off, 0)
		for it.Next() {
			served = append(served, it.Record().Offset)
		}
		require.NoError(t, it.Err(), "a corrupt record was served")
		off = it.NextOffset()
	}
	want := append(append([]int64(nil), offs[:2]...), offs[3:]...)
	require.Equal(t, want, served)
	got, err := os.ReadFile(seg)
	require.NoError(t, err)
	require.Equal(t, damaged, got[:len(damaged)], "nothing was deleted")
}

// TestCheckpointFormats: a checkpoint written before the last-id table
// still parses (without last ids), the table round-trips, and a damaged
// table is refused.
func TestCheckpointFormats(t *testing.T) {
	t.Parallel()
	old := appendCheckpointPayload(nil, checkpoint{from: 42, ends: map[string]int64{"t-0": 100, "t-1": 7}})
	c, err := parseCheckpointPayload(old)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"t-0": 100, "t-1": 7}, c.ends)
	require.Nil(t, c.lastIDs)

	ids := map[string]int64{"t-0": 9, "t-1": 0}
	p := appendCheckpointPayload(nil, checkpoint{from: 42, ends: c.ends, lastIDs: ids})
	require.Equal(t, len(old)+5+8*2, len(p))
	require.Equal(t, old[:12], p[:12])
	c, err = parseCheckpointPayload(p)
	require.NoError(t, err)
	require.Equal(t, ids, c.lastIDs)
	require.Nil(t, c.closed)

	closed := map[string]closedEnd{"t-2": {end: 4096, lastID: 77}}
	p2 := appendCheckpointPayload(nil, checkpoint{from: 42, ends: c.ends, lastIDs: ids, closed: closed})
	c2, err := parseCheckpointPayload(p2)
	require.NoError(t, err)
	require.Equal(t, closed, c2.closed)
	require.Equal(t, ids, c2.lastIDs)
	require.False(t, c2.registers)
	// A section of a later version is skipped.
	c3, err := parseCheckpointPayload(append(bytes.Clone(p2), 9, 0, 0, 0, 2, 0xff, 0xff))
	require.NoError(t, err)
	require.Equal(t, closed, c3.closed)
	// The register records' section: empty; readers before it skip it.
	p4 := appendCheckpointPayload(nil, checkpoint{from: 42, ends: c.ends, lastIDs: ids, closed: closed, registers: true})
	require.Len(t, p4, len(p2)+5)
	require.Equal(t, []byte{ckptRegisters, 0, 0, 0, 0}, p4[len(p2):])
	c4, err := parseCheckpointPayload(p4)
	require.NoError(t, err)
	require.True(t, c4.registers)
	require.Equal(t, closed, c4.closed)
	_, err = parseCheckpointPayload(append(bytes.Clone(p2), ckptRegisters, 0, 0, 0, 1, 0))
	require.ErrorIs(t, err, errBadJRecord)

	_, err = parseCheckpointPayload(p[:len(p)-1])
	require.ErrorIs(t, err, errBadJRecord)
	bad := bytes.Clone(p)
	bad[len(old)+4] = 8 // the last ids' length does not match the ends
	_, err = parseCheckpointPayload(bad)
	require.ErrorIs(t, err, errBadJRecord)
}

// TestTrustedOpenOldCheckpoint: a last checkpoint of the format without
// last ids, and nothing replayed after it, cannot give the last record's
// id without a scan: Open says so and scans the last segment as before.
func TestTrustedOpenOldCheckpoint(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	j := openJournal(t, dataDir, JournalOptions{})
	l := openJLogs(t, dataDir, j, 1, Options{})[0]
	for i := range 10 {
		mustAppend(t, l, fmt.Appendf(nil, "rec-%d", i))
	}
	end, lastID := l.MaxOffset(), l.LastID()
	require.NoError(t, l.Close())
	require.NoError(t, j.Close())

	j, err := OpenJournal(dataDir, testFileSize(JournalOptions{Logf: t.Logf}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = j.Close() })
	j.noteTrusted(&checkpoint{ends: map[string]int64{partName(0): end}}, nil, map[string]int64{partName(0): end}, nil)
	var lb logBuf
	rc := &readCounter{open: make(chan struct{})}
	close(rc.open)
	l = openLog(t, filepath.Join(dataDir, partName(0)), Options{Journal: j, Logf: lb.logf, hooks: &hooks{readAt: rc.readAt}})
	require.Contains(t, lb.String(), "does not give the last record's id; scanning the last segment")
	require.Equal(t, lastID, l.LastID())
	require.Equal(t, end, rc.n.Load())
}

// TestTrustedOpenAfterClose: a clean close lists the closed partitions in
// the final checkpoint, so the next Open reads nothing of their segments
// at start. A partition closed and then written in threshold mode is not
// cut at its closed end (the closed table is not an end to cut at), and
// its next Open sees the mismatch and scans.
func TestTrustedOpenAfterClose(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	// open opens both partitions, t-1 in threshold mode if threshold is
	// set; with hold, reads at byte 0 (the background scrub) wait for
	// the caller to close the counter's open.
	open := func(threshold int, hold bool) (*Journal, []*Log, *readCounter, *logBuf) {
		j, err := OpenJournal(dataDir, testFileSize(JournalOptions{Logf: t.Logf}))
		require.NoError(t, err)
		rc := &readCounter{open: make(chan struct{})}
		if !hold {
			close(rc.open)
		}
		var lb logBuf
		logs := make([]*Log, 2)
		for p := range logs {
			logs[p], err = Open(filepath.Join(dataDir, partName(p)), Options{IDs: &seqIDs{}, Journal: j, UnflushThreshold: threshold * p,
				Logf: lb.logf, hooks: &hooks{readAt: rc.readAt}})
			require.NoError(t, err)
		}
		return j, logs, rc, &lb
	}
	shut := func(j *Journal, logs []*Log) {
		for _, l := range logs {
			require.NoError(t, l.Close())
		}
		require.NoError(t, j.Close())
	}
	j, logs, _, _ := open(0, false)
	for i := range 200 {
		mustAppend(t, logs[i%2], fmt.Appendf(nil, "rec-%d-%s", i, bytes.Repeat([]byte("x"), 100)))
	}
	ends := []int64{logs[0].MaxOffset(), logs[1].MaxOffset()}
	shut(j, logs)

	// Clean reopen: nothing read at Open, ids and counts as before.
	j, logs, rc, _ := open(0, true)
	require.Zero(t, rc.n.Load())
	close(rc.open) // let the background scrub read
	for p, l := range logs {
		require.Equal(t, ends[p], l.MaxOffset())
		require.Equal(t, int64(100), l.LastID())
		require.Eventually(t, l.MessageCountComplete, 10*time.Second, time.Millisecond)
		require.Equal(t, int64(100), l.MessageCount())
	}
	shut(j, logs)

	// t-1 in threshold mode: it grows past its closed end.
	j, logs, _, _ = open(1, false)
	_, off := mustAppend(t, logs[1], []byte("threshold"))
	require.Equal(t, ends[1], off)
	require.NoError(t, logs[1].Close())
	// A crash now (t-1's closed end is in the checkpoints, t-0 is open).
	snap := filepath.Join(t.TempDir(), "snap")
	require.NoError(t, os.CopyFS(snap, os.DirFS(dataDir)))
	shut(j, logs[:1])

	for _, dir := range []string{dataDir, snap} {
		dataDir = dir
		j, logs, _, lb := open(0, false)
		require.Equal(t, ends[0], logs[0].MaxOffset())
		require.Len(t, readAllRecords(t, logs[1], 1<<20), 101, "%s: the threshold-mode record is kept", dir)
		require.Contains(t, lb.String(), "does not match the segments")
		shut(j, logs)
	}
}

// TestAppendsWaitForCheckpoints: while a checkpoint's segment fsync
// hangs, appends stop once the journal is two checkpoints' worth past the
// last durable checkpoint (what a restart would replay stays bounded),
// and go on once it completes.
func TestAppendsWaitForCheckpoints(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	const ckBytes = 64 << 10
	j := openJournal(t, dataDir, JournalOptions{FileSize: 1 << 20, CheckpointBytes: ckBytes, CheckpointInterval: time.Hour,
		hooks: &journalHooks{smallFiles: true}})
	gate := make(chan struct{})
	var gated atomic.Bool
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	l := openJLogs(t, dataDir, j, 1, Options{hooks: &hooks{sync: func(f *os.File) error {
		gated.Store(true)
		<-gate
		return fdatasync(f)
	}}})[0]

	const n = 1000
	var done atomic.Int64
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for i := range n {
			if _, _, err := l.AppendSync([]Entry{entryf("%04d-%s", i, bytes.Repeat([]byte("p"), 1000))}); !assertNoErr(t, err) {
				return
			}
			done.Add(1)
		}
	}()
	require.Eventually(t, gated.Load, 30*time.Second, time.Millisecond, "no checkpoint fsync started")
	// Wait until the appends stop (bounded), then check where.
	last := int64(-1)
	for range 100 {
		time.Sleep(50 * time.Millisecond)
		if d := done.Load(); d == last {
			break
		} else {
			last = d
		}
	}
	require.Less(t, done.Load(), int64(n), "appends went on while no checkpoint could complete")
	require.LessOrEqual(t, j.behind(), j.maxBehind+2*1024+jHeaderSize*4+64, "the journal ran past the bound")
	release()
	select {
	case <-finished:
	case <-time.After(60 * time.Second):
		t.Fatal("appends did not resume after the checkpoint completed")
	}
	require.Equal(t, int64(n), done.Load())
}

// TestAppendsOutwaitStalledCheckpoint: a checkpoint that never completes
// holds appends back for a bounded time only (stallChecks checkpoint
// intervals each), never for good.
func TestAppendsOutwaitStalledCheckpoint(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	j := openJournal(t, dataDir, JournalOptions{FileSize: 1 << 20, CheckpointBytes: 16 << 10, CheckpointInterval: 10 * time.Millisecond,
		hooks: &journalHooks{smallFiles: true}})
	gate := make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release) // after the logs' Close (cleanups run last first), which fsyncs
	l := openJLogs(t, dataDir, j, 1, Options{hooks: &hooks{sync: func(f *os.File) error {
		<-gate
		return fdatasync(f)
	}}})[0]
	defer release()
	const n = 50 // about 20 past the bound of 32 KiB
	finished := make(chan error, 1)
	go func() {
		for i := range n {
			if _, _, err := l.AppendSync([]Entry{entryf("%04d-%s", i, bytes.Repeat([]byte("p"), 1000))}); err != nil {
				finished <- err
				return
			}
		}
		finished <- nil
	}()
	select {
	case err := <-finished:
		require.NoError(t, err)
	case <-time.After(2 * time.Minute):
		t.Fatal("appends hang behind a stalled checkpoint")
	}
	require.Greater(t, j.behind(), j.maxBehind, "the appends went past the bound")
}

// TestPowerCutGapAfterRoll: a power cut that keeps a roll's new segment
// but not the unsynced end of the segment before it (what a kill -9 and
// a cut on the fault file system left in core/e2e's
// TestTxPowerCutMidRound) leaves a gap between them. The partition was
// in the last checkpoint's closed table, so replay did not cut it. Past
// the journal's durable end nothing was acknowledged: the log opens, the
// later segment is removed with one line saying why, every acknowledged
// record reads back and appends go on. A gap inside what the journal
// vouches for is still refused. Without a trust point, only empty later
// segments are removed.
func TestPowerCutGapAfterRoll(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	opts := Options{MaxSegmentSize: 4096}
	j := openJournal(t, src, JournalOptions{})
	l := openJLogs(t, src, j, 1, opts)[0]
	var datas [][]byte
	for i := range 12 {
		d := fmt.Appendf(bytes.Repeat([]byte{'a' + byte(i)}, 900), "#%d", i)
		mustAppend(t, l, d)
		datas = append(datas, d)
	}
	require.NoError(t, l.Close())
	require.NoError(t, j.Close())
	starts, sizes, err := listSegments(filepath.Join(src, partName(0)))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(starts), 3, "the records span several segments")
	n := len(starts)
	end := starts[n-1] + sizes[n-1]

	open := func(dir string) (*Log, *logBuf, error) {
		lines := &logBuf{}
		jo, err := OpenJournal(dir, testFileSize(JournalOptions{Logf: lines.logf}))
		require.NoError(t, err)
		t.Cleanup(func() { _ = jo.Close() })
		o := opts
		o.Journal, o.IDs, o.Logf = jo, &seqIDs{}, lines.logf
		lo, err := Open(filepath.Join(dir, partName(0)), o)
		if err == nil {
			t.Cleanup(func() { _ = lo.Close() })
		}
		return lo, lines, err
	}
	copyDir := func() string {
		dir := filepath.Join(t.TempDir(), "cut")
		require.NoError(t, os.CopyFS(dir, os.DirFS(src)))
		return dir
	}

	t.Run("past the durable end", func(t *testing.T) {
		dir := copyDir()
		// The roll's new segment, with bytes the lost round wrote to it.
		gapSeg := filepath.Join(dir, partName(0), segmentName(end+5250))
		require.NoError(t, os.WriteFile(gapSeg, bytes.Repeat([]byte{'z'}, 3000), 0o644))
		lo, lines, err := open(dir)
		require.NoError(t, err)
		require.Contains(t, lines.String(), "removed 1 segment(s) from "+segmentName(end+5250))
		require.NoFileExists(t, gapSeg)
		require.Equal(t, end, lo.MaxOffset())
		recs := readAllRecords(t, lo, 1<<20)
		require.Len(t, recs, len(datas))
		for i, r := range recs {
			require.Equal(t, datas[i], r.Data)
		}
		mustAppend(t, lo, []byte("after the cut"))
		require.Len(t, readAllRecords(t, lo, 1<<20), len(datas)+1)
	})

	// Not vouched for: the journal holds no trust point for the partition
	// (a fresh journal here; TestReplayedTrustSurvivesSecondCrash has the
	// restart killed after a replay, which the closed table now covers).
	// An empty later
	// segment is a roll whose journaled end before it never reached the
	// disk: removed. One with bytes is still refused.
	untrusted := func(gapBytes int) (string, string) {
		dir := filepath.Join(t.TempDir(), "untrusted")
		require.NoError(t, os.CopyFS(filepath.Join(dir, partName(0)), os.DirFS(filepath.Join(src, partName(0)))))
		gapSeg := filepath.Join(dir, partName(0), segmentName(end+20980))
		require.NoError(t, os.WriteFile(gapSeg, bytes.Repeat([]byte{'z'}, gapBytes), 0o644))
		return dir, gapSeg
	}
	t.Run("an empty roll, not vouched for", func(t *testing.T) {
		dir, gapSeg := untrusted(0)
		lo, lines, err := open(dir)
		require.NoError(t, err)
		require.Contains(t, lines.String(), "removed 1 empty segment(s) from "+segmentName(end+20980))
		require.NoFileExists(t, gapSeg)
		require.Equal(t, end, lo.MaxOffset())
		require.Len(t, readAllRecords(t, lo, 1<<20), len(datas))
		mustAppend(t, lo, []byte("after the cut"))
		require.Len(t, readAllRecords(t, lo, 1<<20), len(datas)+1)
	})
	t.Run("a roll with bytes, not vouched for", func(t *testing.T) {
		dir, gapSeg := untrusted(3000)
		_, _, err := open(dir)
		require.ErrorIs(t, err, ErrBrokenChain)
		require.FileExists(t, gapSeg)
	})

	t.Run("inside vouched-for data", func(t *testing.T) {
		dir := copyDir()
		// A sealed segment lost acknowledged, checkpointed bytes: real damage.
		sealed := filepath.Join(dir, partName(0), segmentName(starts[n-2]))
		require.NoError(t, os.Truncate(sealed, sizes[n-2]-100))
		_, _, err := open(dir)
		require.ErrorIs(t, err, ErrBrokenChain)
	})
}

// TestReplayedTrustSurvivesSecondCrash: a restart replays a partition's
// records past the last checkpoint and is killed before the partition
// opens (or before a checkpoint lists it): the recovery checkpoint's
// closed table vouches for the replayed end, so the next restart trusts
// the partition. A roll's gap with bytes past that end (a power cut kept
// the new segment, not the end before it) is mended; a gap inside it is
// damage and refused. Once the partition registers, the closed table no
// longer carries it (its register record and the checkpoints' ends do).
func TestReplayedTrustSurvivesSecondCrash(t *testing.T) {
	t.Parallel()
	crash, offs, lastID := crashAfterCheckpoint(t, 20, 6)
	name := partName(0)
	seg0 := filepath.Join(crash, name, segmentName(0))
	// A power cut lost the segment's unsynced tail: replay writes it.
	require.NoError(t, os.Truncate(seg0, offs[20]))
	open := func(dir string) (*Journal, *logBuf) {
		lb := &logBuf{}
		j, err := OpenJournal(dir, testFileSize(JournalOptions{Logf: lb.logf}))
		require.NoError(t, err)
		t.Cleanup(func() { _ = j.Close() })
		return j, lb
	}
	closedOf := func(j *Journal) (closedEnd, bool) {
		j.mu.Lock()
		defer j.mu.Unlock()
		c, ok := j.closedTableLocked()[name]
		return c, ok
	}

	// The restart that replays: killed once recovery is done.
	j, _ := open(crash)
	fi, err := os.Stat(seg0)
	require.NoError(t, err)
	end := fi.Size()
	require.Greater(t, end, offs[25], "replay wrote the records past the checkpoint")
	c, ok := closedOf(j)
	require.True(t, ok, "the replayed partition is in the closed table")
	require.Equal(t, closedEnd{end: end, lastID: lastID}, c)
	twice := filepath.Join(t.TempDir(), "twice")
	require.NoError(t, os.CopyFS(twice, os.DirFS(crash)))

	// The partition registers: the closed table drops it, and a
	// checkpoint lists it in its ends instead.
	l := openLog(t, filepath.Join(crash, name), Options{Journal: j, MaxSegmentSize: 1 << 30})
	_, ok = closedOf(j)
	require.False(t, ok, "a registered partition is not in the closed table")
	forceCheckpoint(t, j)
	_, ok = closedOf(j)
	require.False(t, ok)
	require.Equal(t, end, l.MaxOffset())
	require.Equal(t, lastID, l.LastID())

	copyTwice := func() string {
		dir := filepath.Join(t.TempDir(), "cut")
		require.NoError(t, os.CopyFS(dir, os.DirFS(twice)))
		return dir
	}
	openLogErr := func(dir string, lb *logBuf, j *Journal) (*Log, error) {
		lo, err := Open(filepath.Join(dir, name), Options{Journal: j, IDs: &seqIDs{}, Logf: lb.logf, MaxSegmentSize: 1 << 30})
		if err == nil {
			t.Cleanup(func() { _ = lo.Close() })
		}
		return lo, err
	}

	t.Run("a gap with bytes past the replayed end", func(t *testing.T) {
		dir := copyTwice()
		gapSeg := filepath.Join(dir, name, segmentName(end+20980))
		require.NoError(t, os.WriteFile(gapSeg, bytes.Repeat([]byte{'z'}, 3000), 0o644))
		j, lb := open(dir)
		c, ok := closedOf(j)
		require.True(t, ok, "a second recovery still vouches for the partition")
		require.Equal(t, closedEnd{end: end, lastID: lastID}, c)
		lo, err := openLogErr(dir, lb, j)
		require.NoError(t, err, "the restart after the second crash starts")
		require.Contains(t, lb.String(), "removed 1 segment(s) from "+segmentName(end+20980))
		require.NoFileExists(t, gapSeg)
		require.Equal(t, end, lo.MaxOffset())
		require.Equal(t, lastID, lo.LastID())
		recs := readAllRecords(t, lo, 1<<20)
		require.Len(t, recs, len(offs))
		for i, r := range recs {
			require.Equal(t, fmt.Appendf(bytes.Repeat([]byte{'a' + byte(i%26)}, 900), "#%d", i), r.Data)
		}
		_, off := mustAppend(t, lo, []byte("after the mend"))
		require.Equal(t, end, off)
	})

	t.Run("a gap inside the replayed end", func(t *testing.T) {
		dir := copyTwice()
		// Bytes the replay fsynced are missing: damage, not a torn roll.
		require.NoError(t, os.Truncate(filepath.Join(dir, name, segmentName(0)), end-100))
		gapSeg := filepath.Join(dir, name, segmentName(end))
		require.NoError(t, os.WriteFile(gapSeg, bytes.Repeat([]byte{'z'}, 3000), 0o644))
		j, lb := open(dir)
		_, err := openLogErr(dir, lb, j)
		require.ErrorIs(t, err, ErrBrokenChain)
		require.FileExists(t, gapSeg)
	})
}

// TestNoteTrustedReplayedTails: which trusted partitions the closed table
// of the checkpoints after a recovery carries. A partition replayed to its
// journaled end goes in with the replayed last id, also under a
// checkpoint of the format without last ids; one whose journaled end a
// damaged record kept (or a truncate cut) beyond what replay wrote, one
// whose record boundaries replay lost (no tail), and one the journal
// names nowhere (data records only) do not.
func TestNoteTrustedReplayedTails(t *testing.T) {
	t.Parallel()
	j := &Journal{}
	for _, withIDs := range []bool{true, false} {
		last := &checkpoint{ends: map[string]int64{"a": 100, "b": 100, "c": 100, "d": 100}}
		if withIDs {
			last.lastIDs = map[string]int64{"a": 5, "b": 5, "c": 5, "d": 5}
		}
		ends := map[string]int64{"a": 300, "b": 400, "c": 300, "d": 100, "e": 200}
		tails := map[string]closedEnd{"a": {300, 9}, "b": {300, 9}, "e": {200, 3}}
		j.noteTrusted(last, nil, ends, tails)
		want := map[string]closedEnd{"a": {300, 9}}
		wantA := trustPoint{ckEnd: 100, end: 300} // this run's Open verifies from the checkpoint's end
		if withIDs {
			want["d"] = closedEnd{100, 5}
			wantA.lastID, wantA.haveID = 5, true
		}
		j.mu.Lock()
		require.Equal(t, want, j.closedTableLocked(), "last ids: %v", withIDs)
		require.Equal(t, wantA, j.trusted["a"])
		j.mu.Unlock()
	}
}

// TestRecWalk: replay's walk of a partition's record boundaries finds the
// end and id of the last whole record however the bytes are split into
// data records (a record, even its header, spanning two of them: a chunk
// that did not fit in a journal file), skips bytes before what it walked
// (replay's overlap with the checkpoint), and is lost at a gap or a
// negative record length.
func TestRecWalk(t *testing.T) {
	t.Parallel()
	const ckEnd, ckID = 1000, 40
	rng := rand.New(rand.NewPCG(7, 25))
	for round := range 300 {
		// Records from ckEnd on, ids from ckID+1, then one more partial
		// record the walk must not count.
		var stream []byte
		var lastEnd, lastID int64 = ckEnd, ckID
		n := rng.IntN(6)
		for i := range n {
			stream = message.AppendRecord(stream, ckID+1+int64(i), 0, bytes.Repeat([]byte{'r'}, rng.IntN(40)))
			lastEnd, lastID = ckEnd+int64(len(stream)), ckID+1+int64(i)
		}
		partial := rng.IntN(2) == 1
		if partial {
			rec := message.AppendRecord(nil, 99, 0, []byte("partial"))
			stream = append(stream, rec[:1+rng.IntN(len(rec)-1)]...)
		}
		// Some bytes before ckEnd (replay's overlap), then the stream in
		// pieces cut anywhere, some overlapping the one before.
		pre := rng.IntN(30)
		data := append(bytes.Repeat([]byte{0xee}, pre), stream...)
		base := int64(ckEnd - pre)
		w := newRecWalk(trustPoint{ckEnd: ckEnd, end: ckEnd, lastID: ckID, haveID: true})
		for at := 0; at < len(data); {
			k := min(len(data), at+1+rng.IntN(30))
			from := at
			if at > 0 && rng.IntN(4) == 0 {
				from = max(0, at-rng.IntN(10)) // an overlap
			}
			w.feed(base+int64(from), data[from:k])
			at = k
		}
		require.False(t, w.lost, "round %d", round)
		require.Equal(t, lastEnd, w.end, "round %d: %d records, partial %v", round, n, partial)
		require.Equal(t, lastID, w.id, "round %d", round)
	}

	// Without a last id (the older checkpoint format) nothing walked is no end.
	w := newRecWalk(trustPoint{ckEnd: ckEnd, end: ckEnd})
	require.Equal(t, int64(-1), w.end)
	rec := message.AppendRecord(nil, 7, 0, []byte("x"))
	w.feed(ckEnd, rec)
	require.Equal(t, ckEnd+int64(len(rec)), w.end)
	require.Equal(t, int64(7), w.id)

	// A gap loses the walk for good.
	w = newRecWalk(trustPoint{ckEnd: ckEnd, end: ckEnd, lastID: ckID, haveID: true})
	w.feed(ckEnd+1, rec)
	require.True(t, w.lost)
	w.feed(ckEnd, rec)
	require.True(t, w.lost)
	// So does a negative length.
	w = newRecWalk(trustPoint{ckEnd: ckEnd, end: ckEnd, lastID: ckID, haveID: true})
	w.feed(ckEnd, []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	require.True(t, w.lost)
}

// TestReplayedTrustSplitRecords: records past the checkpoint whose data
// records a journal file boundary split (a record's bytes in two data
// records, the second at the next file's start): replay still finds the
// last record's end and id for the closed table.
func TestReplayedTrustSplitRecords(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	opts := JournalOptions{FileSize: 64 << 10, CheckpointBytes: 1 << 40, CheckpointInterval: time.Hour, hooks: &journalHooks{smallFiles: true}}
	j := openJournal(t, src, opts)
	l := openJLogs(t, src, j, 1, Options{MaxSegmentSize: 1 << 30})[0]
	bounds := map[int64]bool{}
	var lastID int64
	for i := range 160 {
		if i == 10 {
			forceCheckpoint(t, j)
			forceCheckpoint(t, j)
		}
		id, off := mustAppend(t, l, bytes.Repeat([]byte{'a' + byte(i%26)}, 700+i*7%300))
		bounds[off], lastID = true, id
	}
	end := l.MaxOffset()
	bounds[end] = true
	crash := filepath.Join(t.TempDir(), "crash")
	require.NoError(t, os.CopyFS(crash, os.DirFS(src)))
	splits := 0
	for _, r := range walkJournal(t, filepath.Join(crash, JournalDirName)) {
		if r.typ == recData && (!bounds[r.dataOff] || !bounds[r.dataEnd]) {
			splits++
		}
	}
	require.Positive(t, splits, "a record spans two data records")

	opts.Logf = t.Logf
	j2, err := OpenJournal(crash, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = j2.Close() })
	j2.mu.Lock()
	c, ok := j2.closedTableLocked()[partName(0)]
	j2.mu.Unlock()
	require.True(t, ok)
	require.Equal(t, closedEnd{end: end, lastID: lastID}, c)
}
