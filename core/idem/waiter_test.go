package idem

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// doneRec records what a Waiter told next.
type doneRec struct{ calls []string }

func (d *doneRec) AppendDone(token uint64, id, off int64, err error) {
	d.calls = append(d.calls, "append")
}

func (d *doneRec) SyncFailed(token uint64, err error) { d.calls = append(d.calls, "syncfailed") }

// TestWaiter: a Waiter finishes its ticket with the put's result (an
// mput's count), a failed append as not stored, a slave's failure as
// stored, tells next except for a put refused before the store (Failed),
// and Waiters hands out waiters past one slab.
func TestWaiter(t *testing.T) {
	tb := NewTable(Config{})
	var ws Waiters
	var next doneRec
	start := func(id, first, last int64) Ticket {
		t.Helper()
		v, _, tk := tb.Start(id, first, last, t0)
		require.Equal(t, Append, v)
		return tk
	}
	verdict := func(id int64) Verdict {
		v, _ := tb.Begin(id, 0, 0, t0)
		return v
	}
	ws.New(&next, tb, start(7, 0, 2), 3).AppendDone(0, 100, 50, nil)
	require.Equal(t, Result{FirstID: 100, FirstOffset: 50, Count: 3}, begin(t, tb, 7, 0, 2, Duplicate))
	ws.New(&next, tb, start(8, 0, 0), 1).AppendDone(0, 0, 0, errors.New("disk"))
	require.NotContains(t, []Verdict{Duplicate, Stored, InFlight}, verdict(8), "a failed append counts as stored")
	ws.New(&next, tb, start(9, 0, 0), 1).Failed()
	require.NotContains(t, []Verdict{Duplicate, Stored, InFlight}, verdict(9), "a refused put counts as stored")
	ws.New(&next, tb, start(10, 0, 0), 1).SyncFailed(0, errors.New("slave"))
	require.Contains(t, []Verdict{Duplicate, Stored}, verdict(10), "a put the slave failed is stored here")
	require.Equal(t, []string{"append", "append", "syncfailed"}, next.calls)
	for id := int64(100); id < 100+2*waiterSlab; id++ {
		w := ws.New(&next, tb, start(id, 0, 0), 1)
		w.AppendDone(0, id, 0, nil)
		require.Nil(t, w.t, "a finished waiter keeps its table")
	}
}
