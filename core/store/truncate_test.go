package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// openModeLog opens partition t-0 of a new data directory, 4 KiB
// segments, in mode: "writer" (its own writer), "threshold" (with
// unflush_threshold unflush) or "journal" (on a small journal). It returns
// the log's directory and options, for a reopen, and the log.
func openModeLog(t *testing.T, mode string, unflush int) (string, Options, *Log) {
	t.Helper()
	data := t.TempDir()
	dir := filepath.Join(data, "t-0")
	opts := Options{MaxSegmentSize: 4096}
	switch mode {
	case "threshold":
		opts.UnflushThreshold = unflush
	case "journal":
		opts.Journal = openJournal(t, data, smallJournal())
	}
	return dir, opts, openLog(t, dir, opts)
}

// TestTruncate: a log of 300 records over two 4 KiB segments is cut in
// its active segment, then inside its sealed one (which becomes active
// again, the later segment removed); an offset inside a record is refused
// with nothing changed; appends continue at the cut with the right last
// id, and a reopen sees the cut log (own writer, threshold mode, journal).
func TestTruncate(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"writer", "threshold", "journal"} {
		t.Run(mode, func(t *testing.T) {
			dir, opts, l := openModeLog(t, mode, 1000)
			var es []Entry
			for i := range 300 {
				es = append(es, entryf("m%03d", i))
			}
			for i := 0; i < len(es); i += 10 { // a batch does not span segments
				_, _, err := l.AppendSync(es[i : i+10])
				require.NoError(t, err)
			}
			require.NoError(t, l.Flush())
			const rec = 24 // header + 4 bytes
			require.Equal(t, int64(300*rec), l.MaxOffset())
			require.Equal(t, 2, l.SegmentCount())

			_, err := l.Truncate(250*rec + 1)
			require.True(t, errors.Is(err, ErrNotBoundary), "cut inside a record: %v", err)
			require.Equal(t, int64(300*rec), l.MaxOffset())
			require.Equal(t, int64(300), l.LastID())

			c, err := l.Truncate(250 * rec)
			require.NoError(t, err)
			require.Equal(t, Cut{From: 250 * rec, To: 300 * rec, Records: 50, LastID: 250}, c)
			require.Equal(t, int64(250*rec), l.MaxOffset())
			require.Equal(t, int64(250), l.LastID())
			require.Equal(t, int64(250), l.MessageCount())

			c, err = l.Truncate(100 * rec) // inside the first, sealed segment
			require.NoError(t, err)
			require.Equal(t, Cut{From: 100 * rec, To: 250 * rec, Records: 150, LastID: 100}, c)
			require.Equal(t, 1, l.SegmentCount())
			require.Equal(t, int64(100), l.MessageCount())
			c, err = l.Truncate(100 * rec)
			require.NoError(t, err, "a cut at the end changes nothing")
			require.Zero(t, c.Bytes())

			var more []Entry
			for i := range 10 {
				e := entryf("n%03d", i)
				e.ID = int64(500 + i)
				more = append(more, e)
			}
			_, off, err := l.AppendSync(more)
			require.NoError(t, err)
			require.Equal(t, int64(100*rec), off)
			require.NoError(t, l.Flush())
			check := func(l *Log) {
				recs := readAllRecords(t, l, 4096)
				require.Len(t, recs, 110)
				for i, r := range recs {
					if i < 100 {
						require.Equal(t, fmt.Sprintf("m%03d", i), string(r.Data))
						require.Equal(t, int64(i+1), r.ID)
					} else {
						require.Equal(t, fmt.Sprintf("n%03d", i-100), string(r.Data))
						require.Equal(t, int64(400+i), r.ID)
					}
				}
				require.Equal(t, int64(509), l.LastID())
			}
			check(l)
			require.NoError(t, l.Close())
			l = openLog(t, dir, opts)
			check(l)
		})
	}
}

// TestTruncateDuringCheckpoints: Truncate of a journaled log while the
// journal takes checkpoints all the time (another partition's appends make
// one due every millisecond): a snapshot reads the log's end and last id
// while Truncate may be changing them, so under -race this catches a read
// of either outside the log's mu (it did: Journal.snapshot read stagedID
// after unlocking). After the loop, a reopen from the last checkpoint has
// the cut log's end and last id.
func TestTruncateDuringCheckpoints(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	jopts := JournalOptions{CheckpointInterval: time.Millisecond, CheckpointBytes: 1 << 40}
	j := openJournal(t, data, jopts)
	opts := Options{Journal: j, MaxSegmentSize: 4096}
	dir := filepath.Join(data, "t-0")
	l := openLog(t, dir, opts)
	other := openLog(t, filepath.Join(data, "t-1"), Options{Journal: j})

	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		var err error
		for err == nil {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			_, _, err = other.AppendSync([]Entry{entryf("o")})
		}
		done <- err
	}()

	const rec = 24 // header + 4 bytes
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; i < 300 && time.Now().Before(deadline); i++ {
		es := make([]Entry, 10)
		for k := range es {
			es[k] = entryf("m%03d", k)
		}
		firstID, off, err := l.AppendSync(es)
		require.NoError(t, err)
		// Keep 6 of the 10; the cut may fall in a sealed segment when
		// the batch rolled.
		c, err := l.Truncate(off + 6*rec)
		require.NoError(t, err)
		require.Equal(t, int64(4), c.Records)
		require.Equal(t, firstID+5, c.LastID)
		require.Equal(t, firstID+5, l.LastID())
		require.Equal(t, off+6*rec, l.MaxOffset())
	}
	close(stop)
	require.NoError(t, <-done)
	end, last := l.MaxOffset(), l.LastID()
	require.NoError(t, l.Close())
	require.NoError(t, other.Close())
	require.NoError(t, j.Close())

	j = openJournal(t, data, jopts)
	opts.Journal = j
	l = openLog(t, dir, opts)
	require.Equal(t, end, l.MaxOffset())
	require.Equal(t, last, l.LastID())
}

// TestTruncateWaitsForAtomic: Truncate of a log with a part of an
// AppendAtomic waiting for its round (the committer busy staging another
// partition's round) waits for it like for any append in flight: the cut
// removes the atomic part's records too, and its Waiter is called first.
func TestTruncateWaitsForAtomic(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	var armed atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	jopts := smallJournal()
	jopts.hooks.writeAt = func(f *os.File, b []byte, off int64) (int, error) {
		if armed.CompareAndSwap(true, false) {
			close(entered)
			<-release
		}
		return f.WriteAt(b, off)
	}
	j := openJournal(t, data, jopts)
	l := openLog(t, filepath.Join(data, "t-0"), Options{Journal: j, MaxSegmentSize: 4096})
	other := openLog(t, filepath.Join(data, "t-1"), Options{Journal: j})
	var es []Entry
	for i := range 10 {
		es = append(es, entryf("m%03d", i))
	}
	_, _, err := l.AppendSync(es)
	require.NoError(t, err)
	const rec = 24 // header + 4 bytes

	// The committer stops in the journal write of t-1's round.
	armed.Store(true)
	ow := make(chanWaiter, 1)
	require.NoError(t, other.Append([]Entry{entryf("o")}, ow, 1))
	<-entered
	aw := newAtomicWaiter(1)
	require.NoError(t, j.AppendAtomic([]AtomicPart{{Log: l, Entries: []Entry{entryf("a000"), entryf("a001"), entryf("a002")}, Token: 7}}, aw))
	type result struct {
		c   Cut
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := l.Truncate(5 * rec)
		res <- result{c, err}
	}()
	time.Sleep(20 * time.Millisecond) // Truncate waits (or, wrongly, cuts now)
	close(release)
	r := <-res
	require.NoError(t, r.err)
	select {
	case <-aw.done:
	default:
		t.Fatal("Truncate returned before the atomic append in flight completed")
	}
	require.NoError(t, aw.got[7].err)
	require.Equal(t, int64(10*rec), aw.got[7].off, "the atomic part went after the 10 records")
	require.Equal(t, Cut{From: 5 * rec, To: 13 * rec, Records: 8, LastID: 5}, r.c)
	require.Equal(t, int64(5*rec), l.MaxOffset())
	require.Equal(t, int64(5), l.LastID())
	require.NoError(t, (<-ow).err)
}

// TestCutsConsistent: Cuts pairs a count with its own cut's offset while
// cuts go on (core/index follows a single cut from its offset: paired
// with a later cut's offset, it kept what the earlier one removed).
func TestCutsConsistent(t *testing.T) {
	t.Parallel()
	_, _, l := openModeLog(t, "writer", 0)
	const rec, rounds = 24, 60
	froms := make([]int64, rounds+1) // froms[n]: where cut n cut
	var done atomic.Bool
	go func() {
		defer done.Store(true)
		for n := 1; n <= rounds; n++ {
			var es []Entry
			for i := range 10 {
				es = append(es, entryf("m%03d", i))
			}
			if _, _, err := l.AppendSync(es); err != nil {
				t.Error(err)
				return
			}
			from := l.MaxOffset() - int64(1+n%5)*rec
			froms[n] = from // before the cut: a reader may see it right after
			if _, err := l.Truncate(from); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	type pair struct{ n, from int64 }
	var seen []pair
	for !done.Load() {
		if n, from := l.Cuts(); n > 0 && (len(seen) == 0 || seen[len(seen)-1].n != n) {
			seen = append(seen, pair{n, from})
		}
	}
	n, from := l.Cuts()
	require.EqualValues(t, rounds, n)
	seen = append(seen, pair{n, from})
	for _, p := range seen {
		require.Equal(t, froms[p.n], p.from, "cut %d", p.n)
	}
}
