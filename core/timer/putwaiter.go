package timer

import "github.com/metaq-go/metaq/core/idem"

// PutWaiter answers a delayed put once its timer record is stored (or
// not): it counts a delayed message accepted (Service.Accepted), tells an
// idempotent delayed put's table the outcome (BeginIdem's ticket), and
// tells next with the put's own token, its msgId and offset -1 (the
// message is not in its partition yet). Exactly one of AppendDone,
// SyncFailed and Failed ends its use.
type PutWaiter struct {
	next   idem.Done
	s      *Service
	token  uint64
	cancel bool
	// it and tk: an idempotent delayed put's table and ticket.
	it *idem.Table
	tk idem.Ticket
}

// NewPutWaiter returns the waiter of a delayed put (a cancel when cancel
// is set) answered to next with token.
func (s *Service) NewPutWaiter(next idem.Done, token uint64, cancel bool) *PutWaiter {
	return &PutWaiter{next: next, s: s, token: token, cancel: cancel}
}

// Idem makes w finish ticket tk of table t (BeginIdem's) when the timer
// record is stored or not.
func (w *PutWaiter) Idem(t *idem.Table, tk idem.Ticket) { w.it, w.tk = t, tk }

// finish tells an idempotent delayed put's table its outcome: stored
// (ok) with msgId id, or not.
func (w *PutWaiter) finish(id int64, ok bool) {
	if w.it != nil {
		w.it.Finish(w.tk, idem.Result{FirstID: id, FirstOffset: -1, Count: 1}, ok)
		w.it, w.tk = nil, idem.Ticket{}
	}
}

// Failed is the put refused before the store took it; next is not told
// (the caller answers the put).
func (w *PutWaiter) Failed() { w.finish(0, false) }

// AppendDone implements store.Waiter.
func (w *PutWaiter) AppendDone(_ uint64, id, _ int64, err error) {
	if err == nil && !w.cancel {
		w.s.Accepted.Add(1)
	}
	w.finish(id, err == nil)
	w.next.AppendDone(w.token, id, -1, err)
}

// SyncFailed: held here, the slave failed it; a retry is answered as
// stored, its msgId unknown (as an idem.Waiter's).
func (w *PutWaiter) SyncFailed(_ uint64, err error) {
	w.finish(0, true)
	w.next.SyncFailed(w.token, err)
}
