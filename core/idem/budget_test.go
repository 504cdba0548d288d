package idem

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBudget: tables sharing a budget forget, past its bound, the least
// recently used producer of them all (here in another table than the new
// producer's); the forgotten producer is refused as UnknownProducer at its
// next sequence and at 0 (never stored twice), the others are untouched;
// Reset and Release give their bytes back.
func TestBudget(t *testing.T) {
	bud := NewBudget(3*ProducerBytes + 8*GhostBytes)
	a := NewTable(Config{Budget: bud})
	b := NewTable(Config{Budget: bud})
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	start := func(tb *Table, id, seq int64, now time.Time, want Verdict) {
		t.Helper()
		v, _, k := tb.Start(id, seq, seq, now)
		require.Equal(t, want, v, "producer %d seq %d", id, seq)
		if v == Append {
			tb.Finish(k, Result{FirstID: id*100 + seq, Count: 1}, true)
		}
	}
	start(a, 1, 0, at(0), Append)
	start(b, 2, 0, at(1), Append)
	start(a, 3, 0, at(2), Append)
	require.EqualValues(t, 3*ProducerBytes, bud.Used())
	start(a, 1, 1, at(3), Append) // 1 is used again: 2 (in b) is now the oldest
	start(a, 4, 0, at(4), Append) // over the bound: 2 goes
	require.EqualValues(t, 1, bud.Evicted())
	require.EqualValues(t, 3*ProducerBytes+GhostBytes, bud.Used())
	require.Equal(t, 0, b.Len())
	require.Equal(t, 3, a.Len())
	start(b, 2, 1, at(5), UnknownProducer) // its next put
	start(b, 2, 0, at(5), UnknownProducer) // a retry of its first put
	start(a, 1, 2, at(5), Append)
	v, r := a.Begin(1, 1, 1, at(5)) // the others keep their results
	require.Equal(t, Duplicate, v)
	require.EqualValues(t, 101, r.FirstID)
	require.Equal(t, a.Bytes()+b.Bytes(), bud.Used())

	// A ticket whose producer was forgotten meanwhile changes nothing.
	start(b, 5, 0, at(6), Append) // evicts 3, the oldest of a
	v, _, k := a.Start(4, 1, 1, at(7))
	require.Equal(t, Append, v)
	start(b, 6, 0, at(8), Append)  // evicts 1
	start(b, 7, 0, at(9), Append)  // evicts 5
	start(b, 9, 0, at(10), Append) // evicts 4, its put in flight
	a.Finish(k, Result{FirstID: 9, Count: 1}, true)
	start(a, 4, 2, at(11), UnknownProducer)
	require.EqualValues(t, 5, bud.Evicted())
	require.LessOrEqual(t, bud.Used(), bud.Limit())

	a.Reset()
	require.Zero(t, a.Bytes())
	require.Equal(t, b.Bytes(), bud.Used())
	b.Release()
	require.Zero(t, bud.Used())
	// A released table is out of the budget: no eviction picks it.
	start(a, 10, 0, at(12), Append)
	require.EqualValues(t, ProducerBytes, bud.Used())
}

// TestBudgetRebuild: a rebuilt table counts its producers (and their
// ranges) and evicts past the budget like one filled by puts.
func TestBudgetRebuild(t *testing.T) {
	bud := NewBudget(2 * ProducerBytes)
	tb := NewTable(Config{Budget: bud})
	var recs []Record
	for id := int64(1); id <= 3; id++ {
		recs = append(recs, Record{Producer: id, Seq: 0, ID: id, Offset: id * 100, Size: 100})
	}
	tb.Rebuild(t0, func() (Record, bool) {
		if len(recs) == 0 {
			return Record{}, false
		}
		r := recs[0]
		recs = recs[1:]
		return r, true
	})
	require.Equal(t, tb.Bytes(), bud.Used())
	require.Greater(t, bud.Used(), bud.Limit()) // a rebuild does not evict by itself ...
	v, _ := tb.Begin(3, 1, 1, t0)               // ... the next put does
	require.Equal(t, Append, v)
	require.LessOrEqual(t, bud.Used(), bud.Limit())
	require.Less(t, tb.Len(), 3)
}

// BenchmarkTablePut: the table's work per put of a pipelined producer
// (16 producers taking turns, one sequence each): Begin and Done by the
// producer's id (two map lookups), Start and Finish with its ticket (one),
// and the same with a budget; then Start and Finish of 1,000 producers
// putting in a random order (the least-recently-used order's work on
// producers whose neighbours are not in the cache).
func BenchmarkTablePut(b *testing.B) {
	for _, arm := range []string{"begin-done", "start-finish", "budget", "start-finish-1000"} {
		b.Run(arm, func(b *testing.B) {
			producers := 16
			if arm == "start-finish-1000" {
				producers = 1000
			}
			cfg := Config{}
			if arm == "budget" {
				cfg.Budget = NewBudget(64 << 20)
			}
			tb := NewTable(cfg)
			seq := make([]int64, producers)
			turns := make([]int, 1<<16) // which producer puts at each turn
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range turns {
				turns[i] = i % producers
				if producers > 16 {
					turns[i] = rng.IntN(producers)
				}
			}
			b.ReportAllocs()
			for i := range b.N {
				j := turns[i%len(turns)]
				id := int64(j) + 1<<62
				s := seq[j]
				seq[j]++
				if arm == "begin-done" {
					if v, _ := tb.Begin(id, s, s, t0); v != Append {
						b.Fatal(v)
					}
					tb.Done(id, s, Result{FirstID: int64(i), FirstOffset: int64(i), Count: 1})
					continue
				}
				v, _, k := tb.Start(id, s, s, t0)
				if v != Append {
					b.Fatal(v)
				}
				tb.Finish(k, Result{FirstID: int64(i), FirstOffset: int64(i), Count: 1}, true)
			}
		})
	}
}

// TestBuildSettles: a Build after a Reset waits for the puts begun before
// it to finish before it reads the log (one not in the log yet would make
// its retry look new), and fails, to be retried, when they do not.
func TestBuildSettles(t *testing.T) {
	tb := NewTable(Config{})
	none := func() (func() (Record, bool), error) {
		return func() (Record, bool) { return Record{}, false }, nil
	}
	require.NoError(t, tb.Build(t0, none))
	v, _, k := tb.Start(1, 0, 0, t0)
	require.Equal(t, Append, v)
	tb.Reset()
	scanned := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- tb.Build(t0, func() (func() (Record, bool), error) {
			close(scanned)
			return none()
		})
	}()
	select {
	case <-scanned:
		t.Fatal("the rebuild read the log with a put in flight")
	case <-time.After(50 * time.Millisecond):
	}
	tb.Finish(k, Result{Count: 1}, true)
	require.NoError(t, <-done)
	<-scanned

	old := settleWait
	settleWait = 20 * time.Millisecond
	defer func() { settleWait = old }()
	_, _, k = tb.Start(2, 0, 0, t0)
	tb.Reset()
	require.ErrorContains(t, tb.Build(t0, none), "still in flight")
	require.False(t, tb.Built())
	tb.Finish(k, Result{}, false)
	require.NoError(t, tb.Build(t0, none))
}
