// Package localpipe is the in-process connection of the broker's HTTP
// data plane (core/broker's localConn, core/httpapi's data connections).
package localpipe

import (
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// A localPipe is the in-process connection of the HTTP data plane
// (core/broker's localConn): net.Pipe's ends, but a write of up to CopyMax bytes
// is copied into the other end's queue and returns at once, where
// net.Pipe's waits for a read to take it. So a put's reply is written to
// the HTTP handler straight from the store's completion (tryWriteNow),
// as a socket's is, and not handed to the connection's flusher first,
// and the handler writes its request without a goroutine of its own: a
// produce crosses as few goroutines as a native mput. A larger write (a
// get's reply of up to max_transfer_size) is lent to the reader and
// waits until it is read, as net.Pipe's does, so it is copied once and
// not held twice.
//
// Reads and timeouts behave as net.Pipe's: a read waits for bytes, the
// other end's close or the deadline (os.ErrDeadlineExceeded); what was
// written before a close is read before io.EOF.

// CopyMax is the largest write a localPipe copies rather than lends.
const CopyMax = 64 << 10

// pipeQueue is one direction of a localPipe: what was written to it and
// not yet read, in order, under the pipe's mu.
type pipeQueue struct {
	chunks []pipeChunk
	own    []byte        // the copies' storage, reused once all is read
	read   int64         // bytes read so far
	queued int64         // bytes queued so far
	data   chan struct{} // 1: something was queued (wakes the reader)
	taken  chan struct{} // 1: something was read (wakes a lender)
}

// pipeChunk is a write's bytes not yet read: a copy in own, or the
// writer's buffer, lent (at: its first byte's place in the queue).
type pipeChunk struct {
	b    []byte
	lent bool
	at   int64
}

// dropLent removes the lent chunks that drop reports, counted as read
// (so that later chunks keep their places). The caller holds the pipe's
// mu.
func (q *pipeQueue) dropLent(drop func(pipeChunk) bool) {
	q.chunks = slices.DeleteFunc(q.chunks, func(c pipeChunk) bool {
		if c.lent && drop(c) {
			q.read += int64(len(c.b))
			return true
		}
		return false
	})
}

type localPipe struct {
	// remote is the HTTP client's address (SetRemote), the broker end's
	// RemoteAddr.
	remote atomic.Pointer[string]
	mu     sync.Mutex
	q      [2]pipeQueue // q[i]: written by end i^1, read by end i
	closed [2]chan struct{}
	once   [2]sync.Once
}

// End is one end of a localPipe.
type End struct {
	p    *localPipe
	i    int        // this end: reads q[i], writes q[i^1]
	wrMu sync.Mutex // one write at a time
	rdl  pipeDeadline
	wdl  pipeDeadline
}

// New returns the two ends of a new localPipe.
func New() (*End, *End) {
	p := &localPipe{}
	for i := range p.q {
		p.q[i].data = make(chan struct{}, 1)
		p.q[i].taken = make(chan struct{}, 1)
		p.closed[i] = make(chan struct{})
	}
	a := &End{p: p, i: 0, rdl: makePipeDeadline(), wdl: makePipeDeadline()}
	b := &End{p: p, i: 1, rdl: makePipeDeadline(), wdl: makePipeDeadline()}
	return a, b
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func isClosedChan(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Read reads what the other end wrote.
func (e *End) Read(b []byte) (int, error) {
	p, q := e.p, &e.p.q[e.i]
	for {
		p.mu.Lock()
		switch {
		case isClosedChan(p.closed[e.i]):
			p.mu.Unlock()
			return 0, io.ErrClosedPipe
		case len(q.chunks) > 0:
			n := 0
			for n < len(b) && len(q.chunks) > 0 {
				k := copy(b[n:], q.chunks[0].b)
				n += k
				if q.chunks[0].b = q.chunks[0].b[k:]; len(q.chunks[0].b) == 0 {
					q.chunks[0] = pipeChunk{}
					q.chunks = q.chunks[1:]
				}
			}
			q.read += int64(n)
			if len(q.chunks) == 0 {
				q.chunks, q.own = q.chunks[:0], q.own[:0]
			}
			p.mu.Unlock()
			signal(q.taken)
			return n, nil
		case isClosedChan(p.closed[e.i^1]):
			p.mu.Unlock()
			return 0, io.EOF
		case isClosedChan(e.rdl.wait()):
			p.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		p.mu.Unlock()
		if len(b) == 0 {
			return 0, nil
		}
		select {
		case <-q.data:
		case <-p.closed[e.i]:
		case <-p.closed[e.i^1]:
		case <-e.rdl.wait():
		}
	}
}

// Write writes b to the other end: a copy of it up to CopyMax
// bytes, else b itself, lent until it is read.
func (e *End) Write(b []byte) (int, error) {
	e.wrMu.Lock()
	defer e.wrMu.Unlock()
	q, err := e.lockOpen()
	if err != nil {
		return 0, err
	}
	p := e.p
	if len(b) <= CopyMax {
		at := len(q.own)
		q.own = append(q.own, b...)
		q.chunks = append(q.chunks, pipeChunk{b: q.own[at:len(q.own):len(q.own)], at: q.queued})
		q.queued += int64(len(b))
		p.mu.Unlock()
		signal(q.data)
		return len(b), nil
	}
	start := q.lend(b)
	end := q.queued
	p.mu.Unlock()
	signal(q.data)
	for {
		select {
		case <-q.taken:
		case <-p.closed[0]:
		case <-p.closed[1]:
		case <-e.wdl.wait():
		}
		p.mu.Lock()
		if q.read >= end {
			p.mu.Unlock()
			return len(b), nil
		}
		if err := e.writeErrLocked(); err != nil {
			// Take back what is left of b: nothing reads it after this.
			n := int(max(q.read-start, 0))
			q.dropLent(func(c pipeChunk) bool { return c.at == start })
			p.mu.Unlock()
			return n, err
		}
		p.mu.Unlock()
	}
}

// lockOpen takes the pipe's lock for a write and returns the other end's
// queue, or, unlocked, why a write cannot go on.
func (e *End) lockOpen() (*pipeQueue, error) {
	e.p.mu.Lock()
	if err := e.writeErrLocked(); err != nil {
		e.p.mu.Unlock()
		return nil, err
	}
	return &e.p.q[e.i^1], nil
}

// lend queues b, not copied, under the pipe's lock, and returns the
// position it starts at.
func (q *pipeQueue) lend(b []byte) int64 {
	at := q.queued
	q.chunks = append(q.chunks, pipeChunk{b: b, lent: true, at: at})
	q.queued += int64(len(b))
	return at
}

// writeErrLocked is why a write cannot go on, if it cannot.
func (e *End) writeErrLocked() error {
	switch {
	case isClosedChan(e.p.closed[e.i]), isClosedChan(e.p.closed[e.i^1]):
		return io.ErrClosedPipe
	case isClosedChan(e.wdl.wait()):
		return os.ErrDeadlineExceeded
	}
	return nil
}

// WriteLent queues bufs for the other end without copying them and
// without waiting: the caller leaves them untouched until the other end
// has read them (its reply to the request they hold has come) or this
// end is closed, which drops what is unread.
func (e *End) WriteLent(bufs [][]byte) error {
	e.wrMu.Lock()
	defer e.wrMu.Unlock()
	q, err := e.lockOpen()
	if err != nil {
		return err
	}
	for _, b := range bufs {
		if len(b) > 0 {
			q.lend(b)
		}
	}
	e.p.mu.Unlock()
	signal(q.data)
	return nil
}

// Close closes this end: the other end reads what was copied to it, then
// io.EOF; buffers this end lent and were not read are dropped.
func (e *End) Close() error {
	p := e.p
	p.once[e.i].Do(func() {
		p.mu.Lock()
		q := &p.q[e.i^1]
		q.dropLent(func(pipeChunk) bool { return true })
		close(p.closed[e.i])
		p.mu.Unlock()
	})
	return nil
}

// Closed reports whether either end was closed.
func (e *End) Closed() bool {
	return isClosedChan(e.p.closed[0]) || isClosedChan(e.p.closed[1])
}

// SetRemote sets the address the broker's end reports as its
// RemoteAddr (pipeConn).
func (e *End) SetRemote(remote string) {
	if r := e.p.remote.Load(); r == nil || *r != remote { // a kept connection's client is mostly the same
		e.p.remote.Store(&remote)
	}
}

// Remote returns the address SetRemote last set ("" before any).
func (e *End) Remote() string {
	if r := e.p.remote.Load(); r != nil {
		return *r
	}
	return ""
}

func (e *End) LocalAddr() net.Addr  { return pipeAddr{} }
func (e *End) RemoteAddr() net.Addr { return pipeAddr{} }

func (e *End) SetDeadline(t time.Time) error {
	e.rdl.set(t)
	e.wdl.set(t)
	return nil
}

func (e *End) SetReadDeadline(t time.Time) error {
	e.rdl.set(t)
	return nil
}

func (e *End) SetWriteDeadline(t time.Time) error {
	e.wdl.set(t)
	return nil
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// pipeDeadline is a deadline whose channel closes when it passes (as
// net.Pipe's).
type pipeDeadline struct {
	mu     sync.Mutex
	timer  *time.Timer
	cancel chan struct{}
}

func makePipeDeadline() pipeDeadline { return pipeDeadline{cancel: make(chan struct{})} }

// set sets the deadline; the zero time clears it.
func (d *pipeDeadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	stopped := d.timer != nil && d.timer.Stop()
	if d.timer != nil && !stopped {
		<-d.cancel // the timer fired: wait until it closed cancel
	}
	tm := d.timer
	d.timer = nil // unless reused below
	closed := isClosedChan(d.cancel)
	if t.IsZero() {
		if closed {
			d.cancel = make(chan struct{})
		}
		return
	}
	if dur := time.Until(t); dur > 0 {
		if stopped { // the same cancel, still open: its timer again (a deadline set per request)
			tm.Reset(dur)
			d.timer = tm
			return
		}
		if closed {
			d.cancel = make(chan struct{})
		}
		cancel := d.cancel
		d.timer = time.AfterFunc(dur, func() { close(cancel) })
		return
	}
	if !closed {
		close(d.cancel)
	}
}

// wait returns a channel closed once the deadline passes.
func (d *pipeDeadline) wait() chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cancel
}
