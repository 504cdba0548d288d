package broker

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// smallHolding is how much a connection may hold (partial body plus queued
// replies) and still count as small: small holders draw on the reserve when
// the shared part of the budget is spent, so that well-behaved clients,
// which hold a request or two at a time, keep being served while the
// connections that hold the most wait.
const smallHolding = 64 << 10

// budget bounds the memory held for clients across every connection
// (max_buffered_bytes): partly received bodies and queued replies. A quarter
// of it is a reserve that only small holders may use. A connection that
// wants more than the budget allows waits (it stops reading) until others
// free memory, its request deadline passes, or it is closed. Replies that
// store completions queue are counted but never wait (they must not block
// the store), so the read loop checks the budget before it reads the next
// request instead.
type budget struct {
	limit  atomic.Int64 // everything
	shared atomic.Int64 // what large holders may fill
	used   atomic.Int64

	mu      sync.Mutex
	freed   chan struct{} // closed and replaced when memory is freed, if someone waits
	waiters atomic.Int32  // connections waiting on freed
}

func newBudget(limit int64) *budget {
	bg := &budget{freed: make(chan struct{})}
	bg.setLimit(limit)
	return bg
}

// setLimit changes max_buffered_bytes (Reload). Lowering it takes effect
// as memory is freed: nothing held is taken back.
func (bg *budget) setLimit(limit int64) {
	bg.shared.Store(limit - limit/4)
	bg.limit.Store(limit)
	bg.mu.Lock()
	if bg.waiters.Load() > 0 { // more room: wake the waiters
		close(bg.freed)
		bg.freed = make(chan struct{})
	}
	bg.mu.Unlock()
}

// errBudgetWait is returned when a connection waited for buffer memory
// longer than its request timeout.
var errBudgetWait = errors.New("waited too long for buffer memory (max_buffered_bytes)")

// fits reports whether a connection holding held bytes may add n.
func (bg *budget) fits(held, n int64) bool {
	room := bg.shared.Load()
	if held+n <= smallHolding {
		room = bg.limit.Load()
	}
	return bg.used.Load()+n <= room
}

// acquire adds n bytes for a connection holding held bytes, waiting while
// they do not fit. It gives up with errBudgetWait after wait, or with
// errConnClosed when closed is closed.
func (bg *budget) acquire(held, n int64, wait time.Duration, closed <-chan struct{}) error {
	if bg.fits(held, n) {
		bg.used.Add(n)
		return nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		freed, ok := bg.wait(func() bool { return bg.fits(held, n) })
		if ok {
			bg.used.Add(n)
			return nil
		}
		select {
		case <-freed:
		case <-closed:
			return errConnClosed
		case <-timer.C:
			return errBudgetWait
		}
	}
}

// wait returns true if cond holds; otherwise a channel closed once memory
// is freed. The waiter is counted before cond is checked, so a release
// that cond misses sees the waiter and closes the channel.
func (bg *budget) wait(cond func() bool) (<-chan struct{}, bool) {
	bg.mu.Lock()
	defer bg.mu.Unlock()
	bg.waiters.Add(1)
	if cond() {
		bg.waiters.Add(-1)
		return nil, true
	}
	return bg.freed, false
}

// force adds n bytes without waiting (replies queued by store completions).
func (bg *budget) force(n int64) { bg.used.Add(n) }

// release frees n bytes and wakes the connections waiting for memory.
func (bg *budget) release(n int64) {
	if n <= 0 {
		return
	}
	bg.used.Add(-n)
	if bg.waiters.Load() == 0 {
		return
	}
	bg.mu.Lock()
	close(bg.freed)
	bg.freed = make(chan struct{})
	bg.waiters.Store(0) // every waiter wakes and counts itself again
	bg.mu.Unlock()
}

var errConnClosed = errors.New("connection closed")

// connBudget is one connection's share: it implements protocol.Budget for
// the connection's decoder and counts its queued replies.
type connBudget struct {
	bg     *budget
	held   atomic.Int64
	wait   time.Duration
	closed <-chan struct{}
}

// Grow implements protocol.Budget: it may block (backpressure).
func (cb *connBudget) Grow(n int) error {
	if err := cb.bg.acquire(cb.held.Load(), int64(n), cb.wait, cb.closed); err != nil {
		return err
	}
	cb.held.Add(int64(n))
	return nil
}

// Shrink implements protocol.Budget.
func (cb *connBudget) Shrink(n int) {
	cb.held.Add(-int64(n))
	cb.bg.release(int64(n))
}

// queued counts n reply bytes queued (never waits).
func (cb *connBudget) queued(n int) {
	cb.held.Add(int64(n))
	cb.bg.force(int64(n))
}

// mayRead reports whether the connection may read its next request: not
// while the budget is spent and it is one of the large holders.
func (cb *connBudget) mayRead() bool {
	held := cb.held.Load()
	return held <= smallHolding || cb.bg.used.Load() <= cb.bg.shared.Load()
}

// waitRead blocks until mayRead (true) or the connection closes (false).
// It needs no deadline: what a large holder holds is its queued replies,
// which drain as the client reads or are dropped when a write times out.
func (cb *connBudget) waitRead() bool {
	for !cb.mayRead() {
		freed, ok := cb.bg.wait(cb.mayRead)
		if ok {
			return true
		}
		select {
		case <-freed:
		case <-cb.closed:
			return false
		}
	}
	return true
}
