package idem

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Unix(1_765_000_000, 0)

func begin(t *testing.T, tb *Table, id, first, last int64, want Verdict) Result {
	t.Helper()
	v, r := tb.Begin(id, first, last, t0)
	require.Equal(t, want, v, "producer %d seqs %d..%d", id, first, last)
	return r
}

// TestTableDupGap: a producer starts at 0 (a first sight past it is
// refused), the next put is appended, a retry of a stored put (or of its
// start) is answered with its result, a retry of one still in flight told
// so, a gap or a put of stored and new sequences together refused, a
// retry from inside a stored put answered as stored.
func TestTableDupGap(t *testing.T) {
	tb := NewTable(Config{})
	begin(t, tb, 7, 10, 10, UnknownProducer) // unknown producer, not at 0
	begin(t, tb, 7, 0, 0, Append)
	begin(t, tb, 7, 0, 0, InFlight)
	tb.Done(7, 0, Result{FirstID: 100, FirstOffset: 0, Count: 1})
	require.Equal(t, Result{FirstID: 100, FirstOffset: 0, Count: 1}, begin(t, tb, 7, 0, 0, Duplicate))
	begin(t, tb, 7, 1, 3, Append) // an mput of three
	begin(t, tb, 7, 2, 2, InFlight)
	tb.Done(7, 1, Result{FirstID: 101, FirstOffset: 50, Count: 3})
	require.Equal(t, Result{FirstID: 101, FirstOffset: 50, Count: 3}, begin(t, tb, 7, 1, 3, Duplicate))
	// Its messages retried one by one: the first gets its offset, the
	// others are known stored.
	require.Equal(t, Result{FirstID: 101, FirstOffset: 50, Count: 1}, begin(t, tb, 7, 1, 1, Duplicate))
	begin(t, tb, 7, 2, 2, Stored)
	begin(t, tb, 7, 2, 3, Stored)
	begin(t, tb, 7, 5, 5, OutOfOrder) // 4 missing
	begin(t, tb, 7, 3, 4, OutOfOrder) // stored and new together
	begin(t, tb, 8, 0, 0, Append)     // another producer, its own sequences
	begin(t, tb, 7, 4, 4, Append)
	for s := int64(5); s < 5+Window; s++ {
		begin(t, tb, 7, s, s, Append)
		tb.Done(7, s, Result{FirstID: s, Count: 1})
	}
	begin(t, tb, 7, 0, 0, Stored) // out of the window: stored, offsets unknown
	require.Equal(t, Result{FirstID: 5 + Window - 1, Count: 1}, begin(t, tb, 7, 5+Window-1, 5+Window-1, Duplicate))

	// A failed append keeps the producer. The newest put is taken back:
	// the next sequence is a gap, the retry is appended.
	begin(t, tb, 8, 1, 1, Append)
	tb.Fail(8, 1)
	begin(t, tb, 8, 2, 2, OutOfOrder)
	begin(t, tb, 8, 1, 1, Append)
	tb.Done(8, 1, Result{FirstID: 11, Count: 1})
	// An older one is marked failed while later puts are in flight: their
	// Done still lands, a retry from inside the failed put waits for its
	// start, and the start's retry (alone, then the rest) is appended.
	begin(t, tb, 8, 2, 4, Append)
	begin(t, tb, 8, 5, 5, Append)
	tb.Fail(8, 2)
	begin(t, tb, 8, 3, 3, InFlight)
	tb.Done(8, 5, Result{FirstID: 55, Count: 1})
	require.Equal(t, Result{FirstID: 55, Count: 1}, begin(t, tb, 8, 5, 5, Duplicate))
	begin(t, tb, 8, 2, 2, Append)
	tb.Done(8, 2, Result{FirstID: 56, Count: 1})
	begin(t, tb, 8, 3, 4, Append)
	tb.Done(8, 3, Result{FirstID: 57, Count: 2})
	require.Equal(t, Result{FirstID: 56, Count: 1}, begin(t, tb, 8, 2, 2, Duplicate))
	require.Equal(t, Result{FirstID: 57, Count: 2}, begin(t, tb, 8, 3, 4, Duplicate))
	begin(t, tb, 8, 6, 6, Append)
	// A failed put pushed out of the window by newer ones: its retry
	// could be taken for stored, so the producer is forgotten.
	begin(t, tb, 8, 7, 7, Append)
	tb.Fail(8, 7)
	begin(t, tb, 8, 8, 8, OutOfOrder) // 7 taken back
	begin(t, tb, 8, 7, 7, Append)
	begin(t, tb, 8, 8, 8, Append)
	tb.Fail(8, 7)
	for s := int64(9); tb.producers[8] != nil; s++ { // until a put pushes 7 out
		require.Less(t, s, int64(9+Window))
		begin(t, tb, 8, s, s, Append)
	}
	begin(t, tb, 8, 7, 7, UnknownProducer)
	begin(t, tb, 9, 0, 0, Append)

	// A put the slave failed (stored here, result unknown) is Stored.
	begin(t, tb, 9, 1, 1, Append)
	tb.Done(9, 1, Result{})
	begin(t, tb, 9, 1, 1, Stored)
}

// TestTableBounds: the least recently used producer is forgotten past
// MaxProducers, an idle one after IdleExpiry; a forgotten producer's puts
// are refused as UnknownProducer (at 0 too: it may be a retry of its
// first put), the last MaxProducers forgotten ones remembered so.
func TestTableBounds(t *testing.T) {
	tb := NewTable(Config{MaxProducers: 3, IdleExpiry: time.Minute})
	for id := int64(1); id <= 3; id++ {
		begin(t, tb, id, 0, 0, Append)
		tb.Done(id, 0, Result{Count: 1})
	}
	begin(t, tb, 1, 0, 0, Duplicate) // 1 is now the most recently used
	begin(t, tb, 4, 0, 0, Append)    // evicts 2
	require.Equal(t, 3, tb.Len())
	require.EqualValues(t, 1, tb.Evicted())
	begin(t, tb, 2, 1, 1, UnknownProducer) // forgotten: must start over
	begin(t, tb, 2, 0, 0, UnknownProducer) // at 0 too (a retry of its first put?)
	begin(t, tb, 5, 0, 0, Append)          // a new producer (evicts 3)
	begin(t, tb, 1, 0, 0, Duplicate)

	tb.Tick(t0.Add(30 * time.Second)) // the owner's clock: nobody idle long enough
	require.Equal(t, 3, tb.Len())
	require.Equal(t, t0.Add(30*time.Second), tb.Clock())
	v, _ := tb.Begin(6, 0, 0, t0.Add(2*time.Minute)) // everyone idle: all expire
	require.Equal(t, Append, v)
	v, _ = tb.Begin(1, 0, 0, t0.Add(2*time.Minute)) // expired: forgotten
	require.Equal(t, UnknownProducer, v)
	require.Equal(t, 1, tb.Len())
	tb.Tick(t0.Add(5 * time.Minute)) // Tick forgets idle producers too
	require.Zero(t, tb.Len())
	checkRecent(t, tb)

	// Reset forgets every producer, the recently used ones too.
	tb = NewTable(Config{})
	begin(t, tb, 1, 0, 0, Append)
	tb.Done(1, 0, Result{Count: 1})
	tb.Reset()
	checkRecent(t, tb)
	begin(t, tb, 1, 1, 1, UnknownProducer)

	// The forgotten ids are bounded (4 x MaxProducers, at least 1024):
	// the oldest ghost goes (a put of it at 0 is a first sight again).
	tb = NewTable(Config{MaxProducers: 2})
	for id := int64(10); id < 12+1024; id++ {
		begin(t, tb, id, 0, 0, Append) // from 12 on, evicts id-2
	}
	begin(t, tb, 10, 0, 0, UnknownProducer) // ghosts: 10 .. 1033
	begin(t, tb, 12+1024, 0, 0, Append)     // evicts 1034: 10 goes
	begin(t, tb, 11, 0, 0, UnknownProducer)
	begin(t, tb, 10, 0, 0, Append)
}

// TestTableExpiryOnce: Begin expires when its time moves, not again at
// the same time (nothing idle can appear at one time), except after a
// Rebuild, whose producers took its own, maybe older, time.
func TestTableExpiryOnce(t *testing.T) {
	tb := NewTable(Config{IdleExpiry: time.Minute})
	begin(t, tb, 1, 0, 0, Append)
	later := t0.Add(2 * time.Minute)
	v, _ := tb.Begin(2, 0, 0, later) // the time moved: 1 expires
	require.Equal(t, Append, v)
	require.Equal(t, 1, tb.Len())
	v, _ = tb.Begin(2, 1, 1, later) // the same time: 2 stays
	require.Equal(t, Append, v)
	require.Equal(t, 1, tb.Len())

	tb.Rebuild(t0, recs([]Record{{Producer: 3, Seq: 0, ID: 1, Offset: 0, Size: 10}})) // 3 took t0
	require.Equal(t, 2, tb.Len())
	v, _ = tb.Begin(2, 2, 2, later) // the same time as the last expiry, but after the rebuild: 3 expires
	require.Equal(t, Append, v)
	require.Equal(t, 1, tb.Len())
	v, _ = tb.Begin(3, 1, 1, later)
	require.Equal(t, UnknownProducer, v)
}

// recs feeds Rebuild from a slice.
func recs(rs []Record) func() (Record, bool) {
	return func() (Record, bool) {
		if len(rs) == 0 {
			return Record{}, false
		}
		r := rs[0]
		rs = rs[1:]
		return r, true
	}
}

// TestTableRebuild: a table rebuilt from the log's records knows each
// producer's last sequence, answers a retried mput (a run of consecutive
// sequences stored back to back) with its first record, and a retry from
// inside a merged run as Stored; a damaged tail (the records Rebuild
// never got) leaves the sequences after it new.
func TestTableRebuild(t *testing.T) {
	var rs []Record
	off, id := int64(0), int64(1000)
	add := func(p, seq int64) {
		rs = append(rs, Record{Producer: p, Seq: seq, ID: id, Offset: off, Size: 40})
		off += 40
		id++
	}
	add(1, 0)
	add(2, 0)
	add(1, 1) // producer 1: 0 and 1 apart, 2..4 an mput
	add(1, 2)
	add(1, 3)
	add(1, 4)
	add(2, 1)
	tb := NewTable(Config{})
	require.False(t, tb.Built())
	calls := 0
	scan := func() (func() (Record, bool), error) { calls++; return recs(rs), nil }
	require.NoError(t, tb.Build(t0, scan))
	require.NoError(t, tb.Build(t0, scan))
	require.Equal(t, 1, calls)
	require.True(t, tb.Built())
	require.Equal(t, 2, tb.Len())
	require.Equal(t, Result{FirstID: 1002, FirstOffset: 80, Count: 4}, begin(t, tb, 1, 1, 4, Duplicate))
	require.Equal(t, Result{FirstID: 1000, FirstOffset: 0, Count: 1}, begin(t, tb, 1, 0, 0, Duplicate))
	begin(t, tb, 1, 3, 4, Stored)
	require.Equal(t, Result{FirstID: 1002, FirstOffset: 80, Count: 2}, begin(t, tb, 1, 1, 2, Duplicate))
	begin(t, tb, 2, 1, 1, Duplicate)
	begin(t, tb, 1, 6, 6, OutOfOrder)
	begin(t, tb, 1, 5, 5, Append)

	// Damaged tail: recovery cut the log after producer 1's seq 2, so the
	// rebuilt table expects 3 next, and the retry of 3..4 is appended.
	tb = NewTable(Config{})
	tb.Rebuild(t0, recs(rs[:4]))
	begin(t, tb, 1, 3, 4, Append)

	// Reset (a failover made the log change under the table) unbuilds it.
	tb.Reset()
	require.False(t, tb.Built())
	require.Zero(t, tb.Len())

	// A rebuild keeps only MaxProducers, the most recently seen.
	tb = NewTable(Config{MaxProducers: 1})
	tb.Rebuild(t0, recs(rs))
	require.Equal(t, 1, tb.Len())
	begin(t, tb, 2, 1, 1, Duplicate)
	begin(t, tb, 1, 5, 5, UnknownProducer) // forgotten by the bound: must start over
	begin(t, tb, 1, 0, 0, UnknownProducer)
	begin(t, tb, 3, 0, 0, Append)
}

// TestTableRebuildGap: a put that failed before a restart leaves only a
// gap in the log (sequence 1 missing between 0 and 2). The rebuilt table
// does not take a retry of the gap for stored: the outcome is unknown
// (nothing is answered as stored without a record that shows it); the
// sequences it read records for are stored, in the window or not. Puts
// after the rebuild are judged as before.
func TestTableRebuildGap(t *testing.T) {
	var rs []Record
	off, id := int64(0), int64(1000)
	add := func(p, seq int64) {
		rs = append(rs, Record{Producer: p, Seq: seq, ID: id, Offset: off, Size: 40})
		off += 40
		id += 2 // not back to back in ids: each record its own run
	}
	add(1, 0)
	add(1, 2)
	for s := int64(3); s < 3+Window+2; s++ {
		add(1, s)
	}
	last := rs[len(rs)-1].Seq
	tb := NewTable(Config{})
	tb.Rebuild(t0, recs(rs))
	begin(t, tb, 1, 1, 1, UnknownProducer) // the gap: failed before the restart
	begin(t, tb, 1, 2, 2, Stored)          // read back, though out of the window kept
	begin(t, tb, 1, 0, 0, Stored)
	begin(t, tb, 1, 1, 2, UnknownProducer) // part gap
	begin(t, tb, 1, last, last, Duplicate)
	begin(t, tb, 1, last+1, last+1, Append)
	require.Equal(t, Result{FirstID: 5000, FirstOffset: 9000, Count: 1}, func() Result {
		tb.Done(1, last+1, Result{FirstID: 5000, FirstOffset: 9000, Count: 1})
		return begin(t, tb, 1, last+1, last+1, Duplicate)
	}())
}
