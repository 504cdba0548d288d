// Package budget bounds the memory a broker holds for its clients across
// every connection (max_buffered_bytes): partly received request bodies
// and queued replies. The broker's connections each hold a Conn, their
// decoder's protocol.Budget. Nothing here allocates on a request's path.
package budget

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// SmallHolding is how much a connection may hold (partial body plus queued
// replies) and still count as small: small holders draw on the reserve when
// the shared part of the budget is spent, so that well-behaved clients,
// which hold a request or two at a time, keep being served while the
// connections that hold the most wait.
const SmallHolding = 64 << 10

// Budget bounds the memory held for clients across every connection
// (max_buffered_bytes): partly received bodies and queued replies. A quarter
// of it is a reserve that only small holders may use. A connection that
// wants more than the budget allows waits (it stops reading) until others
// free memory, its request deadline passes, or it is closed. Replies that
// store completions queue are counted but never wait (they must not block
// the store), so the read loop checks the budget before it reads the next
// request instead.
type Budget struct {
	limit  atomic.Int64 // everything
	shared atomic.Int64 // what large holders may fill
	used   atomic.Int64

	mu      sync.Mutex
	freed   chan struct{} // closed and replaced when memory is freed, if someone waits
	waiters atomic.Int32  // connections waiting on freed
}

// New returns a Budget of limit bytes.
func New(limit int64) *Budget {
	bg := &Budget{freed: make(chan struct{})}
	bg.SetLimit(limit)
	return bg
}

// SetLimit changes max_buffered_bytes (Reload). Lowering it takes effect
// as memory is freed: nothing held is taken back.
func (bg *Budget) SetLimit(limit int64) {
	bg.shared.Store(limit - limit/4)
	bg.limit.Store(limit)
	bg.mu.Lock()
	if bg.waiters.Load() > 0 { // more room: wake the waiters
		close(bg.freed)
		bg.freed = make(chan struct{})
	}
	bg.mu.Unlock()
}

// ErrWait is returned when a connection waited for buffer memory
// longer than its request timeout.
var ErrWait = errors.New("waited too long for buffer memory (max_buffered_bytes)")

// fits reports whether a connection holding held bytes may add n.
func (bg *Budget) fits(held, n int64) bool {
	room := bg.shared.Load()
	if held+n <= SmallHolding {
		room = bg.limit.Load()
	}
	return bg.used.Load()+n <= room
}

// acquire adds n bytes for a connection holding held bytes, waiting while
// they do not fit. It gives up with ErrWait after wait, or with
// ErrClosed when closed is closed.
func (bg *Budget) acquire(held, n int64, wait time.Duration, closed <-chan struct{}) error {
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
			return ErrClosed
		case <-timer.C:
			return ErrWait
		}
	}
}

// wait returns true if cond holds; otherwise a channel closed once memory
// is freed. The waiter is counted before cond is checked, so a release
// that cond misses sees the waiter and closes the channel.
func (bg *Budget) wait(cond func() bool) (<-chan struct{}, bool) {
	bg.mu.Lock()
	defer bg.mu.Unlock()
	bg.waiters.Add(1)
	if cond() {
		bg.waiters.Add(-1)
		return nil, true
	}
	return bg.freed, false
}

// Used is the bytes held now.
func (bg *Budget) Used() int64 { return bg.used.Load() }

// Limit is max_buffered_bytes.
func (bg *Budget) Limit() int64 { return bg.limit.Load() }

// force adds n bytes without waiting (replies queued by store completions).
func (bg *Budget) force(n int64) { bg.used.Add(n) }

// release frees n bytes and wakes the connections waiting for memory.
func (bg *Budget) release(n int64) {
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

// ErrClosed is returned when the connection closed while it waited.
var ErrClosed = errors.New("connection closed")

// Conn is one connection's share: it implements protocol.Budget for
// the connection's decoder and counts its queued replies.
type Conn struct {
	bg     *Budget
	held   atomic.Int64
	wait   time.Duration
	closed <-chan struct{}
}

// Init sets the connection's budget up: bg is the broker's, wait the
// longest a Grow waits (request_timeout), closed closed when the connection
// closes.
func (cb *Conn) Init(bg *Budget, wait time.Duration, closed <-chan struct{}) {
	cb.bg, cb.wait, cb.closed = bg, wait, closed
}

// Grow implements protocol.Budget: it may block (backpressure).
func (cb *Conn) Grow(n int) error {
	if err := cb.bg.acquire(cb.held.Load(), int64(n), cb.wait, cb.closed); err != nil {
		return err
	}
	cb.held.Add(int64(n))
	return nil
}

// Shrink implements protocol.Budget.
func (cb *Conn) Shrink(n int) {
	cb.held.Add(-int64(n))
	cb.bg.release(int64(n))
}

// Queued counts n reply bytes queued (never waits).
func (cb *Conn) Queued(n int) {
	cb.held.Add(int64(n))
	cb.bg.force(int64(n))
}

// MayRead reports whether the connection may read its next request: not
// while the budget is spent and it is one of the large holders.
func (cb *Conn) MayRead() bool {
	held := cb.held.Load()
	return held <= SmallHolding || cb.bg.used.Load() <= cb.bg.shared.Load()
}

// WaitRead blocks until MayRead (true) or the connection closes (false).
// It needs no deadline: what a large holder holds is its queued replies,
// which drain as the client reads or are dropped when a write times out.
func (cb *Conn) WaitRead() bool {
	for !cb.MayRead() {
		freed, ok := cb.bg.wait(cb.MayRead)
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
