package broker

import (
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/metaq-go/metaq/core/budget"
	"github.com/metaq-go/metaq/core/filterset"
	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/core/idem"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/core/tx"
	"github.com/metaq-go/metaq/internal/localpipe"
	"github.com/metaq-go/metaq/sdk/protocol"
)

const (
	// maxPendingOut is how many reply bytes may wait for a slow client before
	// the connection stops reading requests.
	maxPendingOut = 1 << 20
	// maxConsecutiveErrors closes a connection that sends nothing but errors.
	maxConsecutiveErrors = 32
	// inlineWriteThreshold is how many queued reply bytes make the read loop
	// write them itself even though more requests are buffered.
	inlineWriteThreshold = 64 << 10
	// maxSpareOut is the largest reply buffer a connection keeps for reuse
	// once written; a larger one goes back to the allocator, so an idle
	// connection holds little.
	maxSpareOut = 64 << 10
	// largeOutRoom is the room lockOut keeps in a reply queue longer than
	// maxSpareOut (most replies fit; a larger one grows it by append).
	largeOutRoom = 16 << 10
	// pipelinedReadSize is the read buffer of a connection whose read filled
	// the decoder's first one (4 KiB): a producer with puts in flight. With
	// 1 KiB puts the first takes a read syscall per 3 or 4 puts; this one
	// takes what the socket holds, up to 64 KiB, in one.
	pipelinedReadSize = 64 << 10
	// maxGrownReads bounds the connections that hold a pipelinedReadSize
	// buffer at once (16 MiB); the others keep reading 4 KiB at a time.
	maxGrownReads = 256
)

// conn is one client connection. The read loop decodes and dispatches
// requests in order; replies are queued in out (under omu) and written by the
// flusher goroutine, or, for get, written directly under wmu so that a
// sendfile reply is not interleaved with queued ones.
type conn struct {
	b  *Broker
	nc net.Conn
	// local: an in-process connection of the HTTP data plane
	// (localConn), whose reads are copies from the HTTP handler's
	// buffers, not syscalls: it takes no pipelinedReadSize buffer (64 KiB
	// allocated and cleared for each produce request of over 4 KiB, 15%
	// of the bytes BenchmarkHTTPData's produce allocated). Its writes of
	// replies never wait (localpipe.go): tryWriteNow writes to it.
	local *localpipe.End
	// syncEpoch is the epoch a failover master bound this connection to
	// (failover.go, stats sync-epoch:<E>); 0 if none.
	syncEpoch atomic.Int64
	// syncGate refuses the syncs that follow a failed one (repl.SyncGate).
	syncGate repl.SyncGate

	wmu sync.Mutex // serializes socket writes
	// raw is the socket for tryWriteNow's non-blocking writes (nil: not
	// plain TCP).
	raw syscall.RawConn
	// send writes get replies' bytes (sendfile; core/store Sender);
	// under wmu.
	send store.Sender

	omu     sync.Mutex
	out     []byte
	spare   []byte
	kick    chan struct{}
	drained *sync.Cond
	dead    bool
	// dispatching is true while the read loop runs a request; replies
	// queued then are written by the read loop itself (under omu).
	dispatching bool
	pending     int // appends whose completion has not arrived (under omu)

	closeOnce sync.Once
	closed    chan struct{}

	// Authentication deadline and caps (connlimits.go): accepted is when
	// the connection was accepted; unauth is set while it counts as
	// unauthenticated (read loop after admit); authExpired is set once
	// auth_timeout passed, evicted once it was closed to make room,
	// handshook once its TLS handshake completed (at once for plaintext).
	accepted                        time.Time
	unauth                          bool
	authExpired, evicted, handshook atomic.Bool

	// bud is this connection's share of max_buffered_bytes (core/budget).
	bud    budget.Conn
	auth   security.ConnAuth // authentication (auth.go)
	groups groups.Session    // local group memberships (core/groups)
	// txs are the connection's transactions (core/tx, txglue.go).
	txs *tx.Session

	// idemWaiters are the read loop's idempotent puts' waiters (idem.go,
	// core/idem).
	idemWaiters idem.Waiters

	// probeTok is token+1 of the put being timed for
	// metaq_put_duration_seconds (0: none), probeStart when it was
	// appended (monoNow); set by the read loop, cleared by AppendDone.
	probeTok   atomic.Uint64
	probeStart atomic.Int64

	// outs are the ranges this connection's gets sent, by partition
	// (msgsout.go); getPC is the partition counters of the get being
	// served (filtered gets). Both owned by the read loop.
	outs  map[*store.Log]*outStream
	getPC *partition.Counters
	// subs are the filters this connection's consumers chose (filter
	// requests, consumerfilter.go). Owned by the read loop.
	subs filterset.ConnFilters

	entries []store.Entry
	// lone says nothing was read behind the request being dispatched
	// (read loop only): its put may be committed on this goroutine.
	lone bool
	filt filterset.Scratch // filtered gets (filter.go, core/filterset)
}

func newConn(b *Broker, nc net.Conn) *conn {
	c := &conn{b: b, nc: nc, kick: make(chan struct{}, 1), closed: make(chan struct{}), accepted: time.Now()}
	c.drained = sync.NewCond(&c.omu)
	c.filt = b.filters.NewScratch()
	if tc, ok := nc.(*net.TCPConn); ok {
		c.raw, _ = tc.SyscallConn()
	}
	c.bud.Init(b.budget, b.requestTimeout(), c.closed)
	c.txs = b.txm.NewSession(c)
	return c
}

func (c *conn) close() {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.nc.Close()
		c.b.groups.Close(&c.groups) // membership is tied to the connection
		c.b.txm.CloseSession(c.txs) // so are local transactions
		c.omu.Lock()
		c.dead = true
		c.drained.Broadcast()
		c.omu.Unlock()
	})
}

func (c *conn) serve() {
	if !c.handshake() { // connlimits.go: TLS, within auth_timeout
		c.close()
		return
	}
	var fw sync.WaitGroup
	fw.Add(1)
	go func() { defer fw.Done(); c.flusher() }()
	cfg := c.b.config()
	maxBody := max(cfg.MaxMessageSize, cfg.MaxTransferSize)
	if c.b.slave != nil {
		maxBody += 64 << 10 // a txsync frame may hold one record of a message of max_message_size (core/tx/replslave.go)
	}
	idle := c.b.idleTimeout()
	if c.local != nil {
		idle = 0 // the HTTP data plane closes its idle in-process connections (core/httpapi datapool.go)
	}
	dr := &security.DeadlineReader{Conn: c.nc, Idle: idle, Request: c.b.requestTimeout(), Drain: &c.b.draining, Stop: &c.authExpired}
	dec := protocol.NewDecoder(dr, protocol.Limits{MaxLine: cfg.MaxLineLength, MaxBody: maxBody, Budget: &c.bud})
	grown := false // dec reads pipelinedReadSize at a time (growRead)
	// close first: the flusher exits only once the connection is closed.
	defer func() {
		c.close()
		fw.Wait()
		c.release(dec)
		c.closeOuts()
		if grown {
			c.b.grownReads.Add(-1)
		}
	}()

	var req protocol.Request
	errRun := 0
	for {
		if !c.waitOutRoom() || !c.bud.WaitRead() {
			return
		}
		err := dec.Decode(&req)
		if err != nil {
			var pe *protocol.Error
			if errors.As(err, &pe) {
				c.b.stats.protocolErrors.Add(1)
				if pe.Op == protocol.OpPut || pe.Op == protocol.OpMPut {
					c.b.stats.putFailed.Add(1)
				}
				c.reply(pe.Code, pe.Msg, pe.Opaque)
				errRun++
				if pe.Fatal || errRun >= maxConsecutiveErrors {
					c.waitPending() // answer the puts that came before
					c.flushAndClose()
					return
				}
				dr.FrameDone(dec.Buffered() > 0)
				continue
			}
			if errors.Is(err, io.EOF) {
				// The client half-closed: answer what it sent, then close.
				c.waitPending()
				c.flushAndClose()
				return
			}
			if c.authExpired.Load() {
				// auth_timeout passed (connlimits.go: expireAuth).
				c.reply(protocol.StatusUnauthorized, c.b.authTimeoutMsg(), 0)
				c.flushAndClose()
				return
			}
			if c.b.draining.Load() != 0 && errors.Is(err, os.ErrDeadlineExceeded) {
				// Shutdown: what was received has been dispatched;
				// answer the puts still waiting for their fsync, then close.
				c.waitPending()
				c.flushAndClose()
				return
			}
			if msg, ok := dr.TimedOut(err); ok {
				c.b.stats.timedOutConns.Add(1)
				c.b.logf("conn %s: %s, closing", c.nc.RemoteAddr(), msg)
				if dr.InFrame() {
					c.reply(protocol.StatusTimeout, msg, 0)
				}
				c.waitPending()
				c.flushAndClose()
				return
			}
			if errors.Is(err, budget.ErrWait) {
				c.b.logf("conn %s: %v, closing", c.nc.RemoteAddr(), err)
				c.reply(protocol.StatusBusy, err.Error(), 0)
				c.flushAndClose()
				return
			}
			if !errors.Is(err, net.ErrClosed) {
				c.b.logf("conn %s: read: %v", c.nc.RemoteAddr(), err)
			}
			return
		}
		errRun = 0
		dr.FrameDone(dec.Buffered() > 0)
		if !grown && c.local == nil && dr.Full() {
			grown = c.b.growRead(dec)
		}
		if req.Op == protocol.OpQuit {
			c.waitPending()
			c.flushAndClose()
			return
		}
		// A request with nothing read behind it may have its append
		// committed by this goroutine (appendEntries).
		c.lone = dec.Buffered() == 0 && !dr.Full()
		c.omu.Lock()
		c.dispatching = true
		c.omu.Unlock()
		c.dispatch(&req)
		c.omu.Lock()
		c.dispatching = false
		queued := len(c.out)
		c.omu.Unlock()
		if queued == 0 {
			continue
		}
		if (dec.Buffered() == 0 && !dr.Full()) || queued > inlineWriteThreshold {
			// Nothing more to read right now (or a lot to send): write the
			// replies from this goroutine rather than waking the flusher,
			// which saves a handoff on the request/reply path.
			if c.wmu.TryLock() {
				err := c.writeQueuedLocked()
				c.wmu.Unlock()
				if err != nil {
					return
				}
				continue
			}
		}
		c.wake()
	}
}

// growRead gives dec a read buffer of pipelinedReadSize, unless
// maxGrownReads connections have one; it reports whether it did. The
// caller gives the place back (grownReads) when the connection ends.
func (b *Broker) growRead(dec *protocol.Decoder) bool {
	if b.grownReads.Add(1) > maxGrownReads {
		b.grownReads.Add(-1)
		return false
	}
	dec.Grow(pipelinedReadSize)
	return true
}

// release frees what the connection still holds once its read loop and
// flusher are done: the decoder's body buffer, unwritten replies (their
// budget) and the segment read handle, so that a segment deleted by
// retention gives its disk space back now rather than at GC.
func (c *conn) release(dec *protocol.Decoder) {
	dec.Release()
	c.omu.Lock()
	n := cap(c.out)
	c.out, c.spare = nil, nil
	c.omu.Unlock()
	c.bud.Shrink(n)
	c.wmu.Lock()
	c.send.Close()
	c.wmu.Unlock()
}

// flushAndClose writes what is queued (best effort, bounded) and closes.
func (c *conn) flushAndClose() {
	c.wmu.Lock()
	c.writeQueuedLocked()
	c.wmu.Unlock()
	c.close()
}

// waitPending waits (bounded) until every append this connection made has
// its completion queued, so that a client that half-closes or quits still
// gets its put replies.
func (c *conn) waitPending() {
	deadline := time.Now().Add(c.b.opts.WriteTimeout)
	c.omu.Lock()
	defer c.omu.Unlock()
	for c.pending > 0 && !c.dead && time.Now().Before(deadline) {
		c.omu.Unlock()
		time.Sleep(time.Millisecond)
		c.omu.Lock()
	}
}

// addPending counts an append whose completion will come later.
func (c *conn) addPending(n int) {
	c.omu.Lock()
	c.pending += n
	c.omu.Unlock()
}

// waitOutRoom blocks while too many reply bytes wait for the client.
func (c *conn) waitOutRoom() bool {
	c.omu.Lock()
	defer c.omu.Unlock()
	for len(c.out) > maxPendingOut && !c.dead {
		c.drained.Wait()
	}
	return !c.dead
}

// lockOut locks the reply queue and returns it for appending; unlockOut
// stores it back and wakes the flusher. Neither blocks on the network, so
// store completions may queue replies. ok is false on a closed connection.
func (c *conn) lockOut() (buf []byte, ok bool) {
	c.omu.Lock()
	if c.dead {
		c.omu.Unlock()
		return nil, false
	}
	if n := len(c.out); n >= maxSpareOut && cap(c.out)-n < largeOutRoom {
		// A long queue (a client that does not read) grows by doubling
		// here rather than by append's 1.25 steps: each step leaves the
		// old array to the garbage collector, and 1.25 steps leave four
		// times the final size behind where doubling leaves one.
		nb := make([]byte, n, 2*cap(c.out))
		copy(nb, c.out)
		c.bud.Queued(cap(nb) - cap(c.out))
		c.out = nb
	}
	return c.out, true
}

func (c *conn) unlockOut(buf []byte) {
	// The budget counts the queue's capacity: that is what it holds.
	c.bud.Queued(cap(buf) - cap(c.out))
	c.out = buf
	inline := c.dispatching
	// Nothing else in flight: the client waits for this reply alone, so
	// write it now rather than wake the flusher (one wake-up less on a
	// synchronous put). With more in flight the flusher writes, in
	// batches, and the completer stays free for the next round.
	direct := !inline && c.pending == 0
	c.omu.Unlock()
	if inline || direct && c.tryWriteNow() {
		return
	}
	c.wake()
}

// directWriteMax is the most tryWriteNow writes from a completing
// goroutine; more is left to the flusher.
const directWriteMax = 64 << 10

// tryWriteNow writes the queued replies from the calling goroutine (a
// store completion) when no other write is under way, with one
// non-blocking write: a reply then costs no wake-up of the flusher. It
// reports false when something is left for the flusher (the socket's
// buffer was full, or another goroutine is writing, or the connection is
// not plain TCP or in-process). It never blocks, so a client that does
// not read cannot stall the completer.
func (c *conn) tryWriteNow() bool {
	if c.raw == nil && c.local == nil || !c.wmu.TryLock() {
		return false
	}
	defer c.wmu.Unlock()
	c.omu.Lock()
	if len(c.out) == 0 {
		c.omu.Unlock()
		return true
	}
	if c.dead || len(c.out) > directWriteMax {
		c.omu.Unlock()
		return false
	}
	buf := c.out
	if c.local != nil { // copied to the HTTP handler's end, never waits (directWriteMax is localpipe.CopyMax)
		n, err := c.local.Write(buf)
		if err == nil && n == len(buf) {
			c.out = buf[:0]
			c.drained.Broadcast()
			c.omu.Unlock()
			return true
		}
		c.omu.Unlock()
		return false
	}
	var n int
	var werr error
	err := c.raw.Write(func(fd uintptr) bool {
		n, werr = syscall.Write(int(fd), buf)
		return true // one attempt: never wait for the socket
	})
	if err == nil && werr == nil && n == len(buf) {
		c.out = buf[:0]
		c.drained.Broadcast()
		c.omu.Unlock()
		return true
	}
	if n > 0 {
		c.out = append(buf[:0], buf[n:]...)
		c.drained.Broadcast()
	}
	c.omu.Unlock()
	return false
}

// wake asks the flusher goroutine to write what is queued.
func (c *conn) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *conn) reply(code int, body string, opaque int32) {
	if b, ok := c.lockOut(); ok {
		c.unlockOut(protocol.AppendResult(b, code, body, opaque))
	}
}

func (c *conn) replyBytes(code int, body []byte, opaque int32) {
	if b, ok := c.lockOut(); ok {
		b = protocol.AppendResultHeader(b, code, len(body), opaque)
		c.unlockOut(append(b, body...))
	}
}

func (c *conn) flusher() {
	for {
		select {
		case <-c.closed:
			return
		case <-c.kick:
		}
		c.wmu.Lock()
		err := c.writeQueuedLocked()
		c.wmu.Unlock()
		if err != nil {
			c.close()
			return
		}
	}
}

// writeQueuedLocked writes everything queued; the caller holds wmu.
func (c *conn) writeQueuedLocked() error {
	for {
		c.omu.Lock()
		if len(c.out) == 0 {
			c.omu.Unlock()
			return nil
		}
		buf := c.takeOutLocked()
		c.omu.Unlock()
		n := cap(buf)
		err := c.writeBuf(buf)
		c.bud.Shrink(n)
		if err != nil {
			return err
		}
	}
}

// takeOutLocked takes the queued replies, leaving the spare buffer in their
// place, and wakes a read loop waiting for room. The caller holds omu and
// frees the taken buffer's capacity from the budget once it is written.
func (c *conn) takeOutLocked() []byte {
	buf := c.out
	c.out = c.spare[:0]
	c.spare = nil
	c.bud.Queued(cap(c.out))
	c.drained.Broadcast()
	return buf
}

// writeBuf writes buf to the socket and keeps it as the spare reply buffer.
// The caller holds wmu.
func (c *conn) writeBuf(buf []byte) error {
	c.nc.SetWriteDeadline(time.Now().Add(c.b.opts.WriteTimeout))
	_, err := c.nc.Write(buf)
	c.omu.Lock()
	if c.spare == nil && cap(buf) <= maxSpareOut {
		c.spare = buf[:0]
	}
	c.omu.Unlock()
	return err
}

// sendValue writes a value reply from the store view: header then file
// bytes with sendfile (io.Copy from *os.File to *net.TCPConn).
func (c *conn) sendValue(v store.View, opaque int32) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	// The header goes out in the same write as what is queued, and the file
	// bytes right after it while wmu is held: replies that store
	// completions queue meanwhile wait in c.out and cannot land between.
	c.omu.Lock()
	queued := c.takeOutLocked()
	n := cap(queued)
	buf := protocol.AppendValueHeader(queued, v.Len, opaque)
	c.omu.Unlock()
	if v.Mem != nil && security.HeldOf(c.nc) == nil {
		// In memory (a journaled segment's tail): header and bytes in
		// one write.
		buf = append(buf, v.Mem...)
		err := c.writeBuf(buf)
		c.bud.Shrink(n)
		return err
	}
	if err := c.writeBuf(buf); err != nil {
		c.bud.Shrink(n)
		return err
	}
	c.bud.Shrink(n)
	c.nc.SetWriteDeadline(time.Now().Add(c.b.opts.WriteTimeout))
	if h := security.HeldOf(c.nc); h != nil {
		h.HoldWrites()
		err := c.send.Send(c.nc, v, &copyBufs) // no sendfile through TLS
		if rerr := h.Release(); err == nil {
			err = rerr
		}
		return err
	}
	return c.send.Send(c.nc, v, nil)
}

// AppendDone implements store.Waiter: it queues the put reply.
// token = opaque | partition << 32 | count << 48 (count 0: single put).
func (c *conn) AppendDone(token uint64, firstID, firstOffset int64, err error) {
	opaque := int32(uint32(token))
	partition := int32(uint16(token >> 32))
	count := int(token >> 48)
	if c.probeTok.Load() == token+1 {
		if err == nil {
			c.b.metrics.put.Observe(float64(monoNow()-c.probeStart.Load()) / 1e9)
		}
		c.probeTok.Store(0)
	}
	c.addPending(-1)
	if err != nil {
		c.b.stats.putFailed.Add(1)
		c.b.disks.WakeOn(err)
		c.b.errorf("append: %v", err)
		c.reply(protocol.StatusInternalError, "append failed: "+err.Error(), opaque)
		return
	}
	if f := c.b.fo; f != nil && !f.MayAck() { // core/repl: fenced, or no lease
		c.b.stats.putFailed.Add(1)
		c.replyErr(f.Refusal(), opaque)
		return
	}
	var body [64]byte
	bb := protocol.AppendPutResultBody(body[:0], firstID, partition, firstOffset)
	if count > 0 {
		bb = append(bb, ' ')
		bb = strconv.AppendInt(bb, int64(count), 10)
	}
	c.replyBytes(protocol.StatusOK, bb, opaque)
}
