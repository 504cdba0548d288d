package idem

// Done hears of a put's outcome: the local append's (store.Waiter's
// AppendDone), and, for a sync-replicated put stored here, the slave's
// failure (SyncFailed; core/repl's PutDone).
type Done interface {
	AppendDone(token uint64, firstID, firstOffset int64, err error)
	SyncFailed(token uint64, err error)
}

// Waiter is an idempotent put's waiter (a store.Waiter and a Done): it
// tells its table the outcome of the put its ticket is for, then next.
// Exactly one of AppendDone, SyncFailed and Failed ends its use.
type Waiter struct {
	next  Done
	t     *Table
	tk    Ticket
	count int
}

// waiterSlab is how many Waiters Waiters takes from one allocation.
const waiterSlab = 64

// Waiters hands out Waiters, a slab at a time; it belongs to one
// goroutine (a connection's read loop). Waiters are not reused: a slab is
// garbage once the last of its puts completed. A sync.Pool did reuse
// them, but its waiters went back to the pool on the store's completer
// and were taken out on the read loop, so nearly every Get took one from
// another P (getSlow) and both sides missed the cache on it.
type Waiters struct{ slab []Waiter }

// New returns a waiter telling t the outcome of ticket tk (a put of
// count messages), then next.
func (s *Waiters) New(next Done, t *Table, tk Ticket, count int) *Waiter {
	if len(s.slab) == 0 {
		s.slab = make([]Waiter, waiterSlab)
	}
	w := &s.slab[0]
	s.slab = s.slab[1:]
	w.next, w.t, w.tk, w.count = next, t, tk, count
	return w
}

// release ends a waiter's use: its table and producer are dropped, so
// that a slab kept by a slower put of it holds no forgotten producer.
func (w *Waiter) release() Done {
	next := w.next
	w.next, w.t, w.tk = nil, nil, Ticket{}
	return next
}

// AppendDone finishes the ticket with the put's result (stored when err
// is nil), then tells next.
func (w *Waiter) AppendDone(token uint64, firstID, firstOffset int64, err error) {
	w.t.Finish(w.tk, Result{FirstID: firstID, FirstOffset: firstOffset, Count: w.count}, err == nil)
	w.release().AppendDone(token, firstID, firstOffset, err)
}

// SyncFailed: stored here, the slave failed it; a retry is answered as
// stored, its offsets unknown (the slave catches up by the master's log).
func (w *Waiter) SyncFailed(token uint64, err error) {
	w.t.Finish(w.tk, Result{}, true)
	w.release().SyncFailed(token, err)
}

// Failed is the waiter's put refused before the store took it; next is
// not told (the caller answers the put).
func (w *Waiter) Failed() {
	w.t.Finish(w.tk, Result{}, false)
	w.release()
}
