package idem

import (
	"container/list"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lruIDs returns the table's producers least recently used first.
func lruIDs(tb *Table) []int64 {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var ids []int64
	for e := tb.lru.Back(); e != nil; e = e.Prev() {
		ids = append(ids, e.Value.(*producer).id)
	}
	return ids
}

// checkRecent checks the recent cache against the map: each entry is a
// producer the table knows, under its id.
func checkRecent(t *testing.T, tb *Table) {
	t.Helper()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for i, p := range tb.recentP {
		if p != nil {
			require.Equal(t, p.id, tb.recentID[i])
			require.Same(t, p, tb.producers[p.id], "recent entry %d: producer %d", i, p.id)
		}
	}
}

// TestTableLRUOrder: the table keeps the exact least-recently-used order
// (a model list here), through random puts of known producers, new ones,
// evictions past MaxProducers and idle expiry.
func TestTableLRUOrder(t *testing.T) {
	for _, max := range []int{1, 3, 40} {
		tb := NewTable(Config{MaxProducers: max, IdleExpiry: time.Hour})
		model := list.New() // ids, most recently used at the front
		elems := map[int64]*list.Element{}
		next := map[int64]int64{} // the next sequence of each known producer
		rng := rand.New(rand.NewPCG(uint64(max), 26))
		nextID := int64(1)
		now := t0
		for i := range 3000 {
			var id int64
			if len(next) == 0 || rng.IntN(8) == 0 {
				id, nextID = nextID, nextID+1
			} else {
				k := rng.IntN(len(next))
				for pid := range next {
					if k == 0 {
						id = pid
						break
					}
					k--
				}
			}
			if i%1000 == 999 { // everyone idle past the expiry but the next put's producer
				now = now.Add(2 * time.Hour)
				for e := model.Back(); e != nil; e = model.Back() {
					delete(elems, e.Value.(int64))
					delete(next, e.Value.(int64))
					model.Remove(e)
				}
				if _, ok := next[id]; !ok {
					id, nextID = nextID, nextID+1
				}
			}
			seq := next[id]
			v, _ := tb.Begin(id, seq, seq, now)
			require.Equal(t, Append, v, "put %d producer %d seq %d", i, id, seq)
			tb.Done(id, seq, Result{FirstID: int64(i), Count: 1})
			next[id] = seq + 1
			if e := elems[id]; e != nil {
				model.MoveToFront(e)
			} else {
				elems[id] = model.PushFront(id)
			}
			for model.Len() > max {
				e := model.Back()
				delete(elems, e.Value.(int64))
				delete(next, e.Value.(int64))
				model.Remove(e)
			}
			var want []int64
			for e := model.Back(); e != nil; e = e.Prev() {
				want = append(want, e.Value.(int64))
			}
			require.Equal(t, want, lruIDs(tb), "put %d", i)
			require.Equal(t, len(want), tb.Len())
			checkRecent(t, tb)
		}
	}
}

// TestTableLRURebuild: a rebuild's producers come before (older than) the
// producers put meanwhile, the last one the log shows the newest of them;
// the next eviction takes the rebuild's oldest.
func TestTableLRURebuild(t *testing.T) {
	tb := NewTable(Config{MaxProducers: 4})
	begin(t, tb, 9, 0, 0, Append) // a put that raced the rebuild
	tb.Rebuild(t0, recs([]Record{
		{Producer: 1, Seq: 0, ID: 1, Offset: 0, Size: 10},
		{Producer: 2, Seq: 0, ID: 2, Offset: 10, Size: 10},
		{Producer: 1, Seq: 1, ID: 3, Offset: 20, Size: 10},
	}))
	require.Equal(t, []int64{2, 1, 9}, lruIDs(tb))
	begin(t, tb, 2, 1, 1, Append)
	require.Equal(t, []int64{1, 9, 2}, lruIDs(tb))
	begin(t, tb, 3, 0, 0, Append)
	begin(t, tb, 4, 0, 0, Append) // past 4: 1 goes
	require.Equal(t, []int64{9, 2, 3, 4}, lruIDs(tb))
	begin(t, tb, 1, 2, 2, UnknownProducer)
	tb.Reset()
	require.Empty(t, lruIDs(tb))
	begin(t, tb, 5, 0, 0, Append)
	require.Equal(t, []int64{5}, lruIDs(tb))
}

// TestTableConcurrent: producers putting to one table from several
// goroutines at once (Start, then Finish from another goroutine, as the
// store's completer does), with Tick and a shared budget evicting from a
// second table, under -race: every put of a producer is appended until
// the producer is forgotten, then refused as UnknownProducer; the bounds
// hold at the end.
func TestTableConcurrent(t *testing.T) {
	bud := NewBudget(24 * ProducerBytes)
	a := NewTable(Config{MaxProducers: 16, Budget: bud})
	b := NewTable(Config{MaxProducers: 16, Budget: bud})
	var wg sync.WaitGroup
	done := make(chan struct{})
	finish := make(chan func(), 64)
	go func() { // the completer
		for f := range finish {
			f()
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			a.Tick(t0)
			b.Tick(t0)
			time.Sleep(100 * time.Microsecond)
		}
	}()
	var pw sync.WaitGroup
	for g := range 6 {
		pw.Add(1)
		go func() {
			defer pw.Done()
			tb := a
			if g%3 == 2 {
				tb = b
			}
			for k := range 8 {
				id := int64(g*100 + k)
				forgotten := false
				for seq := int64(0); seq < 200; seq++ {
					v, _, tk := tb.Start(id, seq, seq, t0)
					if forgotten {
						assert.Equal(t, UnknownProducer, v, "producer %d seq %d after it was forgotten", id, seq)
						break
					}
					if v == UnknownProducer {
						forgotten = true
						continue
					}
					if !assert.Equal(t, Append, v, "producer %d seq %d", id, seq) {
						return
					}
					var fin sync.WaitGroup
					fin.Add(1)
					finish <- func() {
						tb.Finish(tk, Result{FirstID: seq, Count: 1}, true)
						fin.Done()
					}
					fin.Wait()
				}
			}
		}()
	}
	pw.Wait()
	close(done)
	wg.Wait()
	close(finish)
	require.LessOrEqual(t, a.Len(), 16)
	require.LessOrEqual(t, b.Len(), 16)
	require.LessOrEqual(t, bud.Used(), bud.Limit())
	require.Equal(t, a.Bytes()+b.Bytes(), bud.Used())
	for _, tb := range []*Table{a, b} {
		ids := lruIDs(tb)
		require.Len(t, ids, tb.Len())
	}
}
