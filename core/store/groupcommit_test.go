package store

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
)

// slowSync makes every segment fsync take at least d, so that appenders
// pile up behind it the way they do on a real disk.
func slowSync(d time.Duration) *hooks {
	return &hooks{sync: func(f *os.File) error {
		time.Sleep(d)
		return fdatasync(f)
	}}
}

// checkWaiter checks every completion as it happens.
type checkWaiter struct {
	t  testing.TB
	l  *Log
	mu sync.Mutex
	// by token: the completion and the readable mark when it was signalled
	got  map[uint64]doneCall
	size map[uint64]int64 // bytes of the append with this token
	dups int
	// signal[p] is told when an append of producer p (token>>32) is done
	signal []chan struct{}
}

func (w *checkWaiter) AppendDone(token uint64, id, off int64, err error) {
	hwm := w.l.MaxOffset()
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.got[token]; ok {
		w.dups++
	}
	w.got[token] = doneCall{token: token, id: id, offset: off, err: err, maxAtSignal: hwm}
	if p := int(token >> 32); p < len(w.signal) {
		w.signal[p] <- struct{}{}
	}
}

func TestGroupCommitConcurrent(t *testing.T) {
	t.Parallel()
	const (
		producers = 16
		perProd   = 60
	)
	l := openLog(t, t.TempDir(), Options{MaxSegmentSize: 16 << 10, hooks: slowSync(300 * time.Microsecond)})
	w := &checkWaiter{t: t, l: l, got: map[uint64]doneCall{}, size: map[uint64]int64{}}
	for range producers {
		w.signal = append(w.signal, make(chan struct{}, 1))
	}
	data := func(p, i, j int) []byte { return fmt.Appendf(nil, "p%d-i%d-j%d-%s", p, i, j, make([]byte, (p*7+i)%50)) }
	batchLen := func(p, i int) int { return 1 + (p+i)%3 }

	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProd {
				es := make([]Entry, batchLen(p, i))
				var size int64
				for j := range es {
					es[j] = entry(data(p, i, j))
					size += int64(message.HeaderSize + len(es[j].Data))
				}
				tok := uint64(p)<<32 | uint64(i)
				w.mu.Lock()
				w.size[tok] = size
				w.mu.Unlock()
				if err := l.Append(es, w, tok); err != nil {
					t.Error(err)
					return
				}
				<-w.signal[p] // one append in flight per producer, like a sync producer
			}
		})
	}
	wg.Wait()
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.got) == producers*perProd
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, l.Close()) // no more completions after this

	require.Zero(t, w.dups, "a completion was called twice")
	calls := make([]doneCall, 0, len(w.got))
	for _, c := range w.got {
		require.NoError(t, c.err)
		require.GreaterOrEqual(t, c.maxAtSignal, c.offset+w.size[c.token], "completed before readable")
		calls = append(calls, c)
	}
	sort.Slice(calls, func(i, j int) bool { return calls[i].offset < calls[j].offset })
	next, nextID := int64(0), int64(1)
	for _, c := range calls {
		require.Equal(t, next, c.offset, "offsets are not contiguous")
		require.Equal(t, nextID, c.id, "ids do not rise with offsets")
		next += w.size[c.token]
		nextID += int64(batchLen(int(c.token>>32), int(uint32(c.token))))
	}

	st := l.Stats()
	t.Logf("stats: %+v", st)
	require.Equal(t, int64(producers*perProd), st.Appends)
	require.Less(t, st.Fsyncs, st.Appends/2, "group commit should share fsyncs")
	require.Equal(t, st.Fsyncs, st.Writes)
	require.Greater(t, st.Rolls, int64(3))

	// Everything is there after reopening, in order, with the right data.
	l2 := openLog(t, l.Dir(), Options{MaxSegmentSize: 16 << 10})
	require.Equal(t, next, l2.MaxOffset())
	recs := readAllRecords(t, l2, 4096)
	require.Len(t, recs, int(nextID-1))
	k := 0
	for _, c := range calls {
		p, i := int(c.token>>32), int(uint32(c.token))
		for j := range batchLen(p, i) {
			require.Equal(t, data(p, i, j), recs[k].Data)
			require.Equal(t, c.id+int64(j), recs[k].ID)
			k++
		}
	}
}

// gateSync blocks segment fsyncs while the gate is closed and reports each
// fsync that starts.
type gateSync struct {
	started chan struct{}
	release chan struct{}
}

func newGateSync() *gateSync {
	return &gateSync{started: make(chan struct{}, 100), release: make(chan struct{})}
}

func (g *gateSync) sync(f *os.File) error {
	g.started <- struct{}{}
	<-g.release
	return fdatasync(f)
}

func TestGroupCommitVisibleOnlyAfterFsync(t *testing.T) {
	t.Parallel()
	g := newGateSync()
	l := openLog(t, t.TempDir(), Options{hooks: &hooks{sync: g.sync}})
	w := &recWaiter{}
	require.NoError(t, l.Append([]Entry{entryf("one")}, w, 1))
	<-g.started // written, fsync in progress

	require.Equal(t, int64(0), l.MaxOffset())
	_, err := l.Read(0, 100)
	require.ErrorIs(t, err, ErrNoData)
	require.Empty(t, w.calls())

	// Appends made during the fsync wait for the next one and share it.
	for i := range 5 {
		require.NoError(t, l.Append([]Entry{entryf("more%d", i)}, w, uint64(10+i)))
	}
	close(g.release)
	require.Eventually(t, func() bool { return len(w.calls()) == 6 }, 5*time.Second, time.Millisecond)
	require.Equal(t, int64(2), l.Stats().Fsyncs)
	require.Equal(t, int64(6*message.HeaderSize+3+5*5), l.MaxOffset())
	calls := w.calls()
	require.Equal(t, uint64(1), calls[0].token)
	require.Equal(t, int64(0), calls[0].offset)
}

func TestGroupCommitPendingCapAndChunks(t *testing.T) {
	t.Parallel()
	g := newGateSync()
	var mu sync.Mutex
	var writes []int
	h := &hooks{
		sync:       g.sync,
		pendingCap: 3 << 20,
		writeAt: func(f *os.File, b []byte, off int64) (int, error) {
			mu.Lock()
			writes = append(writes, len(b))
			mu.Unlock()
			return f.WriteAt(b, off)
		},
	}
	l := openLog(t, t.TempDir(), Options{hooks: h})
	w := &recWaiter{}
	big := make([]byte, 1<<20)
	require.NoError(t, l.Append([]Entry{entry(big)}, w, 0))
	<-g.started // the writer holds the first append in its fsync

	// Three more fill the pending buffer to the cap; the fourth must wait.
	for i := 1; i <= 3; i++ {
		require.NoError(t, l.Append([]Entry{entry(big)}, w, uint64(i)))
	}
	blocked := make(chan error, 1)
	go func() { blocked <- l.Append([]Entry{entry(big)}, w, 4) }()
	select {
	case err := <-blocked:
		t.Fatalf("append beyond the pending cap did not wait (err %v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(g.release)
	require.NoError(t, <-blocked)
	require.Eventually(t, func() bool { return len(w.calls()) == 5 }, 5*time.Second, time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for _, n := range writes {
		require.LessOrEqual(t, n, maxWriteChunk)
	}
	require.GreaterOrEqual(t, len(writes), 3)
}

func TestGroupCommitCloseUnblocksWaitingAppender(t *testing.T) {
	t.Parallel()
	g := newGateSync()
	l := openLog(t, t.TempDir(), Options{hooks: &hooks{sync: g.sync, pendingCap: 10}})
	w := &recWaiter{}
	require.NoError(t, l.Append([]Entry{entryf("first")}, w, 0))
	<-g.started
	require.NoError(t, l.Append([]Entry{entryf("second, fills the pending buffer")}, w, 1))
	blocked := make(chan error, 1)
	go func() { blocked <- l.Append([]Entry{entryf("third")}, w, 2) }()
	time.Sleep(20 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	require.ErrorIs(t, <-blocked, ErrClosed)
	close(g.release)
	require.NoError(t, <-closed)
	calls := w.calls()
	require.Len(t, calls, 2)
	for _, c := range calls {
		require.NoError(t, c.err)
	}
}

// TestConcurrentReadersAndRetention runs producers, tailing readers and
// retention at once: readers see only whole, valid records in id order,
// and jump to the minimum when retention passes them.
func TestConcurrentReadersAndRetention(t *testing.T) {
	t.Parallel()
	for _, threshold := range []int{0, 8} {
		t.Run(fmt.Sprintf("threshold=%d", threshold), func(t *testing.T) {
			const (
				producers = 4
				perProd   = 150
				total     = producers * perProd
			)
			l := openLog(t, t.TempDir(), Options{MaxSegmentSize: 2 << 10, UnflushThreshold: threshold,
				UnflushInterval: time.Millisecond, Logf: func(string, ...any) {}})
			var wg sync.WaitGroup
			for p := range producers {
				wg.Go(func() {
					for i := range perProd {
						if _, _, err := l.AppendSync([]Entry{entryf("p%d-%d", p, i)}); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			stop := make(chan struct{})
			var deleted int
			var dwg, rwg sync.WaitGroup
			dwg.Go(func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(2 * time.Millisecond):
					}
					n, err := l.DeleteOlderThan(0, time.Now().Add(time.Hour))
					if err != nil {
						t.Error(err)
						return
					}
					deleted += n
				}
			})
			for range 3 {
				rwg.Go(func() {
					off, lastID := int64(0), int64(0)
					deadline := time.Now().Add(20 * time.Second)
					for lastID < total && time.Now().Before(deadline) {
						v, err := l.Read(off, 700)
						var oor *OffsetOutOfRangeError
						switch {
						case errors.As(err, &oor):
							off = oor.Min
							continue
						case errors.Is(err, ErrNoData):
							time.Sleep(100 * time.Microsecond)
							continue
						case err != nil:
							t.Error(err)
							return
						}
						b, err := v.ReadAll(nil)
						v.Release()
						if err != nil {
							t.Error(err)
							return
						}
						it := message.NewIterator(b, off, 0)
						for it.Next() {
							if id := it.Record().ID; id <= lastID {
								t.Errorf("id %d after %d", id, lastID)
								return
							} else {
								lastID = id
							}
						}
						if it.Err() != nil || it.Consumed() == 0 {
							t.Errorf("bad read at %d: %v", off, it.Err())
							return
						}
						off = it.NextOffset()
					}
					if lastID != total {
						t.Errorf("reader stopped at id %d", lastID)
					}
				})
			}
			wg.Wait()
			if threshold > 0 {
				require.NoError(t, l.Flush())
			}
			rwg.Wait() // readers reach the last record
			close(stop)
			dwg.Wait()
			n, err := l.DeleteOlderThan(0, time.Now().Add(time.Hour))
			require.NoError(t, err)
			require.Positive(t, deleted+n)
			require.Equal(t, 1, l.SegmentCount())
			require.Equal(t, int64(total), l.LastID())
		})
	}
}
