package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
)

// testRand returns the random source of a randomised test: seeded from the
// clock, or from METAQ_STORE_TEST_SEED when set, so that a failure can be
// replayed. The seed is logged.
func testRand(t *testing.T, stream uint64) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("METAQ_STORE_TEST_SEED"); v != "" {
		var err error
		seed, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "METAQ_STORE_TEST_SEED")
	}
	t.Logf("seed %d (METAQ_STORE_TEST_SEED=%d replays it)", seed, seed)
	return rand.New(rand.NewPCG(seed, stream))
}

// checkCounts compares CountRecords with a brute-force count over the
// log's records, for every record boundary pair near the ends and for
// random positions (record starts and arbitrary bytes). If wantExact is
// false an inexact answer is allowed; an exact one must be right.
func checkCounts(t *testing.T, rng *rand.Rand, l *Log, wantExact bool) {
	t.Helper()
	recs := readAllRecords(t, l, 1<<20)
	type span struct{ start, end int64 }
	spans := make([]span, len(recs))
	for i, r := range recs {
		spans[i] = span{r.Offset, r.Offset + int64(message.HeaderSize+len(r.Data))}
	}
	brute := func(from, to int64) int64 {
		var n int64
		for _, s := range spans {
			if s.start >= from && s.end <= to {
				n++
			}
		}
		return n
	}
	lo, hi := l.MinOffset(), l.MaxOffset()
	pos := func() int64 {
		if len(spans) > 0 && rng.IntN(2) == 0 {
			return spans[rng.IntN(len(spans))].start
		}
		return lo - 50 + rng.Int64N(hi-lo+100)
	}
	pairs := [][2]int64{{lo, hi}, {0, 1 << 62}, {hi, hi}, {lo, lo}}
	for range 150 {
		a, b := pos(), pos()
		if a > b {
			a, b = b, a
		}
		pairs = append(pairs, [2]int64{a, b})
	}
	for _, p := range pairs {
		n, exact, err := l.CountRecords(p[0], p[1])
		require.NoError(t, err)
		if !exact {
			require.False(t, wantExact, "CountRecords(%d, %d) not exact", p[0], p[1])
			continue
		}
		require.Equal(t, brute(p[0], p[1]), n, "CountRecords(%d, %d) of [%d, %d)", p[0], p[1], lo, hi)
	}
	if wantExact {
		n, exact, err := l.CountRecords(lo, hi)
		require.NoError(t, err)
		require.True(t, exact)
		require.Equal(t, l.MessageCount(), n)
	}
}

// appendRandom appends k batches of 1..8 records of random sizes (now
// and then one bigger than the index step).
func appendRandom(t *testing.T, rng *rand.Rand, l *Log, k int) {
	t.Helper()
	for range k {
		es := make([]Entry, 1+rng.IntN(8))
		for i := range es {
			n := rng.IntN(2000)
			if rng.IntN(50) == 0 {
				n = countStep + rng.IntN(countStep)
			}
			es[i] = entry(bytes.Repeat([]byte{byte('a' + i)}, n))
		}
		_, _, err := l.AppendSync(es)
		require.NoError(t, err)
	}
	require.NoError(t, l.Flush())
}

// TestCountRecords: CountRecords against a brute-force count over random
// record sizes, segment rolls, retention deleting old segments, a clean
// restart, a crash (a copy of the running data directory), in the three
// write modes.
func TestCountRecords(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"journal", "group", "threshold"} {
		t.Run(mode, func(t *testing.T) {
			rng := testRand(t, 7)
			dataDir := t.TempDir()
			// gate holds the background scrub of a reopened log back
			// until the test closes it.
			var gate chan struct{}
			open := func(dir string) (*Journal, *Log) {
				var j *Journal
				g := gate
				opts := Options{IDs: &seqIDs{}, MaxSegmentSize: 128 << 10, Logf: t.Logf,
					hooks: &hooks{scrubStart: func() { <-g }}}
				switch mode {
				case "journal":
					var err error
					j, err = OpenJournal(dir, testFileSize(JournalOptions{Logf: t.Logf, CheckpointInterval: 20 * time.Millisecond}))
					require.NoError(t, err)
					opts.Journal = j
				case "threshold":
					opts.UnflushThreshold = 3
				}
				l, err := Open(filepath.Join(dir, "t-0"), opts)
				require.NoError(t, err)
				return j, l
			}
			shut := func(j *Journal, l *Log) {
				require.NoError(t, l.Close())
				if j != nil {
					require.NoError(t, j.Close())
				}
			}
			gate = make(chan struct{})
			close(gate)
			j, l := open(dataDir)
			checkCounts(t, rng, l, true) // empty
			appendRandom(t, rng, l, 60)
			for i := 0; i < 20 && l.SegmentCount() <= 3; i++ { // random sizes: roll at least 3 times
				appendRandom(t, rng, l, 10)
			}
			require.Greater(t, l.SegmentCount(), 3)
			checkCounts(t, rng, l, true)

			// Retention: the two oldest segments go.
			old := time.Now().Add(-2 * time.Hour)
			l.segMu.RLock()
			for _, s := range l.segs[:2] {
				require.NoError(t, os.Chtimes(s.path, old, old))
			}
			l.segMu.RUnlock()
			n, err := l.DeleteOlderThan(time.Hour, time.Now())
			require.NoError(t, err)
			require.Equal(t, 2, n)
			checkCounts(t, rng, l, true)

			// A crash: a copy of the directory while the log runs.
			// (The journal may rename a file during the copy: try again.)
			crash := filepath.Join(t.TempDir(), "crash")
			for i := 0; ; i++ {
				err := os.CopyFS(crash, os.DirFS(dataDir))
				if err == nil || i == 20 {
					require.NoError(t, err)
					break
				}
				require.NoError(t, os.RemoveAll(crash))
			}
			shut(j, l)

			for _, dir := range []string{dataDir, crash} {
				gate = make(chan struct{})
				j, l = open(dir)
				n, exact, err := l.CountRecords(0, 1<<62)
				require.NoError(t, err)
				require.False(t, exact, "before the scrub (%d)", n)
				checkCounts(t, rng, l, false) // exact only in what Open scanned
				appendRandom(t, rng, l, 12)   // appends before the scrub
				checkCounts(t, rng, l, false)
				close(gate)
				require.Eventually(t, l.MessageCountComplete, 20*time.Second, time.Millisecond)
				checkCounts(t, rng, l, true)
				appendRandom(t, rng, l, 12)
				checkCounts(t, rng, l, true)
				shut(j, l)
			}
		})
	}
}

// FuzzCountRecords: for records of the sizes the input gives (appended in
// batches, over segment rolls), CountRecords of any range equals a
// brute-force count of the whole records in it.
func FuzzCountRecords(f *testing.F) {
	f.Add([]byte{0, 10, 0, 0, 1, 255, 255, 2, 3}, uint32(0), uint32(1<<20))
	f.Add(bytes.Repeat([]byte{0x80, 0x40, 0x12}, 40), uint32(17), uint32(300000))
	f.Add([]byte{255, 255, 255, 255, 255, 255, 0, 0, 0}, uint32(65552), uint32(131104))
	f.Fuzz(func(t *testing.T, sizes []byte, from, to uint32) {
		if len(sizes) > 3*48 {
			sizes = sizes[:3*48]
		}
		l := openLog(t, t.TempDir(), Options{MaxSegmentSize: 150 << 10, UnflushThreshold: 1 << 20})
		var spans [][2]int64
		var batch []Entry
		flush := func() {
			if len(batch) == 0 {
				return
			}
			_, off, err := l.AppendSync(batch)
			require.NoError(t, err)
			for _, e := range batch {
				end := off + int64(message.HeaderSize+len(e.Data))
				spans = append(spans, [2]int64{off, end})
				off = end
			}
			batch = batch[:0]
		}
		for i := 0; i+3 <= len(sizes); i += 3 {
			n := int(sizes[i])<<8 | int(sizes[i+1])
			batch = append(batch, entry(make([]byte, n)))
			if sizes[i+2]&1 == 1 {
				flush()
			}
		}
		flush()
		require.NoError(t, l.Flush())
		a, b := int64(from), int64(to)
		var want int64
		for _, s := range spans {
			if s[0] >= a && s[1] <= b {
				want++
			}
		}
		n, exact, err := l.CountRecords(a, b)
		require.NoError(t, err)
		require.True(t, exact)
		require.Equal(t, want, n, "CountRecords(%d, %d)", a, b)
	})
}

// TestCountRecordsTruncate: counts stay exact across Truncate: a cut in
// the active segment (then appends over the cut bytes' old positions), a
// cut inside a sealed segment (which becomes the active one again), in
// the three write modes, and after a reopen.
func TestCountRecordsTruncate(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"writer", "threshold", "journal"} {
		t.Run(mode, func(t *testing.T) {
			rng := testRand(t, 11)
			dir, opts, l := openModeLog(t, mode, 3)
			opts.MaxSegmentSize = 128 << 10
			require.NoError(t, l.Close())
			l = openLog(t, dir, opts)
			// starts returns the record starts of the segment holding off.
			starts := func(l *Log, in func(off int64) bool) []int64 {
				var out []int64
				for _, r := range readAllRecords(t, l, 1<<20) {
					if in(r.Offset) {
						out = append(out, r.Offset)
					}
				}
				return out
			}
			cut := func(l *Log, offs []int64) {
				require.NotEmpty(t, offs)
				off := offs[len(offs)/2]
				before := l.MessageCount()
				c, err := l.Truncate(off)
				require.NoError(t, err)
				require.Equal(t, before-c.Records, l.MessageCount())
			}
			for l.SegmentCount() < 3 {
				appendRandom(t, rng, l, 10)
			}
			checkCounts(t, rng, l, true)

			// In the active segment.
			l.segMu.RLock()
			active, second := l.segs[len(l.segs)-1].start, l.segs[1].start
			l.segMu.RUnlock()
			inActive := func(off int64) bool { return off > active }
			// The roll may have left the active segment a single record:
			// give it some past its first (bounded; an append that rolls
			// again starts the count over in the new active segment).
			for i := 0; len(starts(l, inActive)) < 2 && i < 50; i++ {
				appendRandom(t, rng, l, 1)
				l.segMu.RLock()
				active = l.segs[len(l.segs)-1].start
				l.segMu.RUnlock()
			}
			cut(l, starts(l, inActive))
			checkCounts(t, rng, l, true)
			appendRandom(t, rng, l, 8)
			checkCounts(t, rng, l, true)

			// Inside the first sealed segment.
			cut(l, starts(l, func(off int64) bool { return off > 0 && off < second }))
			require.Equal(t, 1, l.SegmentCount())
			checkCounts(t, rng, l, true)
			appendRandom(t, rng, l, 8)
			checkCounts(t, rng, l, true)
			for l.SegmentCount() < 2 {
				appendRandom(t, rng, l, 10)
			}
			checkCounts(t, rng, l, true)

			require.NoError(t, l.Close())
			l = openLog(t, dir, opts)
			require.Eventually(t, l.MessageCountComplete, 20*time.Second, time.Millisecond)
			checkCounts(t, rng, l, true)
		})
	}
}

// TestCountRecordsScrubbedPrefix: a journaled log reopened after a clean
// close trusts its last segment (the background scrub verifies that
// prefix later), and the scrub repairs a damaged record in it from the
// Repairer. Once the scrub is done, every count is exact and the message
// count right, also after appends, a Truncate after the prefix, inside it
// or at its start made before the scrub got there.
func TestCountRecordsScrubbedPrefix(t *testing.T) {
	t.Parallel()
	for _, tc := range []string{"repaired", "appended", "cut-after-prefix", "cut-in-prefix", "cut-prefix"} {
		t.Run(tc, func(t *testing.T) { testCountRecordsScrubbedPrefix(t, tc, testRand(t, 13)) })
	}
	// Seeds that failed: the record to damage had no data (appendRandom
	// makes one in 1000), so the flip hit the next record's length and
	// Truncate's header walk refused the cut.
	for _, seed := range []uint64{1796600287168293849} {
		for _, tc := range []string{"cut-after-prefix", "cut-in-prefix"} {
			t.Run(fmt.Sprintf("%s/seed=%d", tc, seed), func(t *testing.T) {
				testCountRecordsScrubbedPrefix(t, tc, rand.New(rand.NewPCG(seed, 13)))
			})
		}
	}
}

func testCountRecordsScrubbedPrefix(t *testing.T, tc string, rng *rand.Rand) {
	dataDir := t.TempDir()
	dir := filepath.Join(dataDir, "t-0")
	var gate chan struct{}
	var lb logBuf
	rep := &fakeRepairer{data: map[string][]byte{}}
	// Reopened, the journal keeps new records in memory (segment
	// tails) for a while: until the next checkpoint.
	interval := 20 * time.Millisecond
	open := func() (*Journal, *Log) {
		j := openJournal(t, dataDir, JournalOptions{CheckpointInterval: interval, CheckpointBytes: 1 << 40})
		g := gate
		l := openLog(t, dir, Options{Journal: j, MaxSegmentSize: 128 << 10, Repairer: rep, Logf: lb.logf,
			hooks: &hooks{scrubStart: func() {
				if g != nil {
					<-g
				}
			}}})
		return j, l
	}
	j, l := open()
	for l.SegmentCount() < 3 {
		appendRandom(t, rng, l, 10)
	}
	// tailRecords returns the record starts of the last segment.
	tailRecords := func() (start int64, offs []int64) {
		l.segMu.RLock()
		start = l.segs[len(l.segs)-1].start
		l.segMu.RUnlock()
		for _, r := range readAllRecords(t, l, 1<<20) {
			if r.Offset >= start {
				offs = append(offs, r.Offset)
			}
		}
		return start, offs
	}
	// Small records until the last segment holds a few and has
	// room for more.
	// small returns where its appends start.
	small := func(k int) (offs []int64) {
		for range k {
			es := make([]Entry, 5)
			for i := range es {
				es[i] = entry(bytes.Repeat([]byte{'s'}, 100+rng.IntN(400)))
			}
			_, off, err := l.AppendSync(es)
			require.NoError(t, err)
			offs = append(offs, off)
		}
		require.NoError(t, l.Flush())
		return offs
	}
	for {
		_, offs := tailRecords()
		if len(offs) >= 40 && l.MaxOffset()-offs[0] < 64<<10 {
			break
		}
		small(4)
	}
	// A record in the last segment, a quarter into it, gets a bit
	// flipped while the log is closed.
	tailStart, inTail := tailRecords()
	l.segMu.RLock()
	tailPath := l.segs[len(l.segs)-1].path
	l.segMu.RUnlock()
	require.Greater(t, len(inTail), 8)
	require.NoError(t, l.Close())
	require.NoError(t, j.Close())
	orig, err := os.ReadFile(tailPath)
	require.NoError(t, err)
	rep.data["t-0"], rep.base = orig, tailStart
	// A bit of its data: a record with fewer than 2 bytes of data
	// has none there (the flip would damage the next record's
	// length, and Truncate, which walks the headers, would refuse
	// the cut), so the first one after with at least 2.
	bad := len(inTail) / 4
	for inTail[bad+1]-inTail[bad] < message.HeaderSize+2 {
		bad++
	}
	require.Less(t, bad, len(inTail)/2, "the damaged record is before the cuts")
	flip(t, tailPath, inTail[bad]-tailStart+message.HeaderSize+1, 0x08)

	gate, interval = make(chan struct{}), 500*time.Millisecond
	var gateOnce sync.Once
	scrub := func() { gateOnce.Do(func() { close(gate) }) }
	j, l = open()
	defer func() {
		scrub()
		require.NoError(t, l.Close())
		require.NoError(t, j.Close())
	}()
	l.segMu.RLock()
	tail := l.segs[len(l.segs)-1]
	l.segMu.RUnlock()
	require.Equal(t, tail.size.Load(), tail.integ.prefix.Load(), "the whole last segment is trusted")
	require.Equal(t, tailStart, tail.start)
	_, exact, err := l.CountRecords(tailStart, l.MaxOffset())
	require.NoError(t, err)
	require.False(t, exact, "the prefix is not counted before the scrub")
	// readBack reads records appended after a cut, right away.
	readBack := func(offs []int64) {
		for _, off := range offs {
			v, err := l.Read(off, 1<<20)
			require.NoError(t, err, "read at %d", off)
			v.Release()
		}
	}
	switch tc {
	case "appended":
		appendRandom(t, rng, l, 6)
	case "cut-after-prefix":
		after := small(8)[1:]
		require.Equal(t, tail, l.segs[len(l.segs)-1], "no roll")
		before := l.MessageCount()
		c, err := l.Truncate(after[len(after)/2])
		require.NoError(t, err)
		require.Equal(t, before-c.Records, l.MessageCount())
		readBack(small(2))
	case "cut-in-prefix":
		_, err := l.Truncate(inTail[len(inTail)/2])
		require.NoError(t, err)
		readBack(small(2))
	case "cut-prefix": // the damaged record too
		_, err := l.Truncate(tailStart)
		require.NoError(t, err)
		readBack(small(2))
	}
	scrub()
	require.Eventually(t, l.MessageCountComplete, 20*time.Second, time.Millisecond)
	if tc != "cut-prefix" {
		require.Contains(t, lb.String(), "repaired ")
	}
	require.NotContains(t, lb.String(), "counting ", "the scrub failed")
	checkCounts(t, rng, l, true)
	var n int64
	for _, r := range readAllRecords(t, l, 1<<20) {
		if r.Offset >= tailStart && r.Offset < tail.end() {
			n++
		}
	}
	require.Equal(t, n, tail.count.Load(), "the last segment's count")
	appendRandom(t, rng, l, 4)
	checkCounts(t, rng, l, true)
}
