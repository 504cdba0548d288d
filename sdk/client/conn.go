package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/internal/backoff"
	"github.com/metaq-go/metaq/internal/tlsio"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// call is one request waiting for its reply. Exactly one party completes
// it: whoever removes it from the wire's pending map.
type call struct {
	opaque   int32
	deadline time.Time // zero: none (the waiter watches its own context)
	// done receives once when the call completes (sync waiters).
	done chan struct{}
	// cb, if set, is run instead of signalling done (async calls). It runs
	// on the connection's reader goroutine and must not block.
	cb func(*call)

	code int    // reply code (200 for a value reply)
	body []byte // reply body, copied into the call's own buffer
	err  error  // transport error; nil when a reply arrived
	stop func() bool
	// borrowed: body is the caller's buffer and must not go back to the pool.
	borrowed bool
	// filtered: the reply was an fvalue (a filtered get); next is its next
	// offset and body holds [int64 BE offset][record] entries.
	filtered bool
	next     int64
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func getCall() *call { return callPool.Get().(*call) }

func putCall(c *call) {
	if cap(c.body) > 64<<10 || c.borrowed {
		c.body = nil
	}
	c.cb, c.err, c.stop, c.deadline, c.code, c.borrowed = nil, nil, nil, time.Time{}, 0, false
	c.filtered, c.next = false, 0
	c.body = c.body[:0]
	callPool.Put(c)
}

func (c *call) complete() {
	if c.stop != nil {
		c.stop()
	}
	if c.cb != nil {
		c.cb(c)
		return
	}
	c.done <- struct{}{}
}

// wire is one TCP connection with a coalescing writer goroutine and a reader
// goroutine that dispatches replies by opaque.
type wire struct {
	cn   *conn
	nc   net.Conn
	kick chan struct{} // wakes the writer
	dead chan struct{} // closed when the wire has failed

	mu      sync.Mutex
	pending map[int32]*call
	wbuf    []byte // frames not yet handed to the writer
	err     error  // why the wire failed; non-nil once dead is closed
	// filters are the consumer filters the broker has registered on this
	// connection (fetch.go), by topic and group.
	filters map[filterKey]string
}

// filterKey is a (topic, group) a consumer filter is registered for.
type filterKey struct{ topic, group string }

// hasFilter reports whether expr is registered on w for topic and group.
func (w *wire) hasFilter(k filterKey, expr string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	got, ok := w.filters[k]
	return ok && got == expr
}

// setFilter notes that expr is registered on w for topic and group.
func (w *wire) setFilter(k filterKey, expr string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.filters == nil {
		w.filters = make(map[filterKey]string)
	}
	w.filters[k] = expr
}

func newWire(cn *conn, nc net.Conn) *wire {
	w := &wire{cn: cn, nc: nc, kick: make(chan struct{}, 1), dead: make(chan struct{}),
		pending: make(map[int32]*call)}
	go w.writeLoop()
	go w.readLoop()
	go w.sweepLoop()
	return w
}

func (w *wire) broken() bool {
	select {
	case <-w.dead:
		return true
	default:
		return false
	}
}

// send registers c under a fresh opaque and queues the frame that encode
// appends. It fails only if the wire is already dead.
func (w *wire) send(c *call, encode func(dst []byte, opaque int32) []byte) error {
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	op := w.cn.nextOpaque()
	for w.pending[op] != nil {
		op = w.cn.nextOpaque()
	}
	c.opaque = op
	w.pending[op] = c
	w.wbuf = encode(w.wbuf, op)
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return nil
}

// forget removes c if it is still pending and reports whether it did; if it
// did not, the reader owns c and is completing it.
func (w *wire) forget(c *call) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending[c.opaque] == c {
		delete(w.pending, c.opaque)
		return true
	}
	return false
}

func (w *wire) take(opaque int32) *call {
	w.mu.Lock()
	c := w.pending[opaque]
	if c != nil {
		delete(w.pending, opaque)
	}
	w.mu.Unlock()
	return c
}

// fail marks the wire dead, closes the socket and fails every pending call.
func (w *wire) fail(cause error) {
	w.mu.Lock()
	if w.err != nil {
		w.mu.Unlock()
		return
	}
	if errors.Is(cause, ErrClosed) {
		w.err = ErrClosed
	} else {
		w.err = fmt.Errorf("%w: %s: %w", ErrConnectionLost, w.cn.addr, cause)
	}
	pend := w.pending
	w.pending = nil
	w.mu.Unlock()
	close(w.dead)
	_ = w.nc.Close()
	for _, c := range pend {
		c.err = w.err
		c.complete()
	}
}

func (w *wire) writeLoop() {
	var out []byte
	for {
		select {
		case <-w.kick:
		case <-w.dead:
			return
		}
		w.mu.Lock()
		out, w.wbuf = w.wbuf, out[:0]
		w.mu.Unlock()
		if len(out) == 0 {
			continue
		}
		if d := w.cn.opts.writeTimeout; d > 0 {
			_ = w.nc.SetWriteDeadline(time.Now().Add(d))
		}
		if _, err := w.nc.Write(out); err != nil {
			w.fail(err)
			return
		}
		if cap(out) > 8<<20 {
			out = nil // don't pin a huge buffer after a burst
		}
	}
}

func (w *wire) readLoop() {
	dec := protocol.NewDecoder(w.nc, protocol.Limits{MaxBody: w.cn.opts.maxReply})
	var r protocol.Request
	for {
		err := dec.Decode(&r)
		if err != nil {
			var pe *protocol.Error
			if errors.As(err, &pe) && !pe.Fatal && (r.Op == protocol.OpResult || r.Op == protocol.OpValue || r.Op == protocol.OpFValue) {
				// An oversized reply was skipped: fail just that call.
				if c := w.take(pe.Opaque); c != nil {
					c.err = fmt.Errorf("metaq: reply from %s: %w", w.cn.addr, err)
					c.complete()
				}
				continue
			}
			w.fail(err)
			return
		}
		if r.Op != protocol.OpResult && r.Op != protocol.OpValue && r.Op != protocol.OpFValue {
			w.fail(fmt.Errorf("unexpected %s frame from broker", r.Op))
			return
		}
		c := w.take(r.Opaque)
		if c == nil {
			continue // abandoned by its caller
		}
		c.code = r.Code
		c.body = append(c.body[:0], r.Body...)
		c.filtered, c.next = r.Op == protocol.OpFValue, r.Offset
		c.complete()
	}
}

// sweepLoop fails calls whose deadline has passed (async calls; sync
// callers also watch their own context).
func (w *wire) sweepLoop() {
	t := time.NewTicker(w.cn.opts.sweepInterval)
	defer t.Stop()
	var expired []*call
	for {
		select {
		case <-w.dead:
			return
		case now := <-t.C:
			w.mu.Lock()
			for op, c := range w.pending {
				if !c.deadline.IsZero() && now.After(c.deadline) {
					delete(w.pending, op)
					expired = append(expired, c)
				}
			}
			w.mu.Unlock()
			for i, c := range expired {
				c.err = fmt.Errorf("%w: no reply from %s by the deadline", ErrTimeout, w.cn.addr)
				c.complete()
				expired[i] = nil
			}
			expired = expired[:0]
		}
	}
}

// connOptions are the options every client type shares.
type connOptions struct {
	dialTimeout    time.Duration
	writeTimeout   time.Duration
	requestTimeout time.Duration // used for sweeper error text and admin calls
	backoffMin     time.Duration
	backoffMax     time.Duration
	maxReply       int
	sweepInterval  time.Duration
	dial           func(ctx context.Context, network, addr string) (net.Conn, error)
	// tls, if set, makes connections TLS (withTLS).
	tls *tls.Config
	// saslUser and saslPassword, if saslUser is set, authenticate each
	// connection (withSASLPlain).
	saslUser, saslPassword string
	// logger, if set, hears once per outage that the broker cannot be
	// reached (warn) and that it is reachable again (info).
	logger *slog.Logger
}

func defaultConnOptions() connOptions {
	return connOptions{
		dialTimeout:    3 * time.Second,
		writeTimeout:   10 * time.Second,
		requestTimeout: 10 * time.Second,
		backoffMin:     50 * time.Millisecond,
		backoffMax:     2 * time.Second,
		maxReply:       defaultMaxFetchSizeLimit + 64<<10,
		sweepInterval:  20 * time.Millisecond,
	}
}

// checkAddr rejects an address that can never be dialed.
func checkAddr(addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("metaq: bad broker address %q: %w", addr, err)
	}
	return nil
}

// conn is a broker address with at most one live wire; a call after the
// wire failed redials, with exponential backoff between failed dials.
type conn struct {
	addr   string
	opts   connOptions
	opaque atomic.Uint32

	mu       sync.Mutex
	w        *wire
	dialing  chan struct{} // closed when the dial in progress ends
	closed   bool
	failures int
	nextDial time.Time
	lastErr  error
}

func newConn(addr string, opts connOptions) *conn {
	return &conn{addr: addr, opts: opts}
}

func (cn *conn) nextOpaque() int32 {
	return int32(cn.opaque.Add(1) & 0x7FFFFFFF)
}

// live returns the current wire if it is healthy, without dialing.
func (cn *conn) live() *wire {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.closed || cn.w == nil || cn.w.broken() {
		return nil
	}
	return cn.w
}

// get returns the live wire, dialing if needed.
func (cn *conn) get(ctx context.Context) (*wire, error) {
	for {
		cn.mu.Lock()
		if cn.closed {
			cn.mu.Unlock()
			return nil, ErrClosed
		}
		if cn.w != nil && !cn.w.broken() {
			w := cn.w
			cn.mu.Unlock()
			return w, nil
		}
		if ch := cn.dialing; ch != nil {
			cn.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, cn.ctxErr(ctx)
			}
		}
		ch := make(chan struct{})
		cn.dialing = ch
		wait := time.Until(cn.nextDial)
		cn.mu.Unlock()

		w, err := cn.dial(ctx, wait)
		cn.mu.Lock()
		cn.dialing = nil
		close(ch)
		if err == nil {
			if cn.failures > 0 && cn.opts.logger != nil {
				cn.opts.logger.Info("metaq: broker reachable again", "addr", cn.addr, "failed_dials", cn.failures)
			}
			cn.failures = 0
			cn.lastErr = nil
			if cn.closed {
				cn.mu.Unlock()
				w.fail(ErrClosed)
				return nil, ErrClosed
			}
			cn.w = w
			cn.mu.Unlock()
			return w, nil
		}
		if ctx.Err() == nil {
			cn.failures++
			cn.lastErr = err
			if cn.failures == 1 && cn.opts.logger != nil {
				cn.opts.logger.Warn("metaq: cannot reach broker; redialing with backoff", "addr", cn.addr, "err", err)
			}
			cn.nextDial = time.Now().Add(backoff.Policy{Min: cn.opts.backoffMin, Max: cn.opts.backoffMax, Jitter: redialJitter}.Delay(cn.failures))
		}
		cn.mu.Unlock()
		if ae := (*AuthError)(nil); errors.As(err, &ae) {
			return nil, err // the same credentials will not do better
		}
		if ctx.Err() != nil {
			return nil, cn.ctxErr(ctx)
		}
	}
}

func (cn *conn) dial(ctx context.Context, wait time.Duration) (*wire, error) {
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	dctx, cancel := context.WithTimeout(ctx, cn.opts.dialTimeout)
	defer cancel()
	var nc net.Conn
	var err error
	if cn.opts.dial != nil {
		nc, err = cn.opts.dial(dctx, "tcp", cn.addr)
	} else {
		var d net.Dialer
		nc, err = d.DialContext(dctx, "tcp", cn.addr)
	}
	if err != nil {
		return nil, err
	}
	if cn.opts.tls != nil {
		cfg := cn.opts.tls
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(cn.addr)
		}
		tc := tls.Client(tlsio.BufferReads(nc), cfg)
		if err := tc.HandshakeContext(dctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("metaq: tls handshake with %s: %w", cn.addr, err)
		}
		nc = tc
	}
	w := newWire(cn, nc)
	if cn.opts.saslUser != "" {
		if err := cn.authenticate(ctx, w); err != nil {
			w.fail(err)
			return nil, err
		}
	}
	return w, nil
}

// authenticate sends `auth PLAIN` on a new wire and waits for the reply,
// at most the request timeout (the broker delays a refusal).
func (cn *conn) authenticate(ctx context.Context, w *wire) error {
	actx, cancel := context.WithTimeout(ctx, cn.opts.requestTimeout)
	defer cancel()
	c := getCall()
	user, password := cn.opts.saslUser, cn.opts.saslPassword
	if err := w.send(c, func(dst []byte, opaque int32) []byte {
		return protocol.AppendAuthPlain(dst, user, password, opaque)
	}); err != nil {
		putCall(c)
		return err
	}
	select {
	case <-c.done:
	case <-actx.Done():
		if w.forget(c) {
			putCall(c)
			return fmt.Errorf("metaq: authenticate as %q with %s: %w", user, cn.addr, actx.Err())
		}
		<-c.done
	}
	defer putCall(c)
	switch {
	case c.err != nil:
		return c.err
	case c.code == protocol.StatusUnauthorized:
		return &AuthError{Addr: cn.addr, User: user, Msg: string(c.body)}
	case c.code != protocol.StatusOK:
		return fmt.Errorf("metaq: authenticate as %q with %s: %w", user, cn.addr, resultError(c.code, c.body))
	}
	return nil
}

func (cn *conn) ctxErr(ctx context.Context) error {
	cn.mu.Lock()
	last := cn.lastErr
	cn.mu.Unlock()
	if last != nil {
		return fmt.Errorf("metaq: connect %s: %w (last error: %v)", cn.addr, ctx.Err(), last)
	}
	return ctx.Err()
}

// close fails every call in flight with ErrClosed; later calls get ErrClosed.
func (cn *conn) close() {
	cn.mu.Lock()
	cn.closed = true
	w := cn.w
	cn.w = nil
	cn.mu.Unlock()
	if w != nil {
		w.fail(ErrClosed)
	}
}

// roundTrip sends one request and waits for its reply, bounded by ctx. The
// returned call must be released with putCall.
func (cn *conn) roundTrip(ctx context.Context, encode func(dst []byte, opaque int32) []byte) (*call, error) {
	return cn.roundTripBuf(ctx, nil, encode)
}

// roundTripBuf is roundTrip with the caller's buffer for the reply body
// (appended to buf[:0]); the caller may take c.body back before putCall.
func (cn *conn) roundTripBuf(ctx context.Context, buf []byte, encode func(dst []byte, opaque int32) []byte) (*call, error) {
	w, err := cn.get(ctx)
	if err != nil {
		return nil, err
	}
	return w.roundTripBuf(ctx, buf, encode)
}

// roundTripBuf is conn.roundTripBuf on this wire only: it never redials
// (a local transaction lives in one connection).
func (w *wire) roundTripBuf(ctx context.Context, buf []byte, encode func(dst []byte, opaque int32) []byte) (*call, error) {
	c := getCall()
	if buf != nil {
		c.body, c.borrowed = buf[:0], true
	}
	if err := w.send(c, encode); err != nil {
		putCall(c)
		return nil, err
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		if w.forget(c) {
			putCall(c)
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
			}
			return nil, ctx.Err()
		}
		<-c.done // the reader is completing it right now
	}
	if c.err != nil {
		err := c.err
		putCall(c)
		return nil, err
	}
	return c, nil
}

// sendAsync sends one request and runs cb on the reader goroutine when the
// reply arrives, the deadline passes, ctx is cancelled or the wire fails.
// cb owns the call and must release it with putCall.
func (cn *conn) sendAsync(ctx context.Context, deadline time.Time, encode func(dst []byte, opaque int32) []byte, cb func(*call)) {
	err := ctx.Err()
	w := cn.live()
	if w == nil && err == nil {
		gctx := ctx
		if !deadline.IsZero() {
			var cancel context.CancelFunc
			gctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
		w, err = cn.get(gctx)
	}
	c := getCall()
	c.cb = cb
	if err != nil {
		c.err = err
		cb(c)
		return
	}
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	c.deadline = deadline
	if ctx.Done() != nil {
		// Cancellation without a deadline: watch the context. Registered
		// before send so that the reply cannot race ahead of c.stop.
		c.stop = context.AfterFunc(ctx, func() {
			if w.forget(c) {
				c.err = ctx.Err()
				c.stop = nil
				c.complete()
			}
		})
	}
	if err := w.send(c, encode); err != nil {
		if c.stop != nil {
			c.stop()
			c.stop = nil
		}
		c.err = err
		cb(c)
	}
}

// redialJitter is the largest fraction of a redial delay removed at random.
const redialJitter = 0.25
