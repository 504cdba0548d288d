package filters

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/metaq-go/metaq/plugins"
)

// muxConn is the host side of one batch connection. There is no reader
// goroutine: a waiting caller reads the socket itself (the reader), hands
// the replies it finds to their callers, and once it has its own, passes
// the reader's role to another waiting caller. A lone caller thus writes its
// request and reads its reply like a plain blocking call, and hand-offs
// (which wake a goroutine, often a thread) happen only between calls that
// overlap.
//
// Calls carry a deadline but no timer: arming a timer per call costs a
// wake-up of the runtime's poller thread, as much as the call. hostWatch
// ends the calls whose deadline has passed (a waiting caller is told, a
// reading one has its read interrupted) and breaks a connection whose write
// is stuck.
type muxConn struct {
	conn   net.Conn
	broken atomic.Bool
	w      frameWriter
	fr     frameReader // used by the reader only

	mu          sync.Mutex
	calls       map[uint32]*muxCall // calls without a reply yet
	nextID      uint32
	reader      uint32 // id of the reading call; 0: none
	interrupted bool   // hostWatch set a past read deadline
	watched     bool   // in hostWatch
	err         error  // set once broken
}

// Call states (under muxConn.mu).
const (
	callWaiting = iota
	callLead    // made the reader by the previous one
	callDone    // keep or err is set
)

// muxCall is one pending call.
type muxCall struct {
	wake     chan struct{} // capacity 1: "your state changed"
	state    int
	waiting  bool // its caller is in wait (only such a call is made the reader)
	deadline time.Time
	keep     []bool
	err      error // a status error or a transport error
}

var muxCalls = sync.Pool{New: func() any { return &muxCall{wake: make(chan struct{}, 1)} }}

func (cl *muxCall) notify() {
	select {
	case cl.wake <- struct{}{}:
	default:
	}
}

func newMuxConn(conn net.Conn) *muxConn {
	m := &muxConn{conn: conn, calls: make(map[uint32]*muxCall)}
	m.w.conn = conn
	m.w.onErr = m.fail
	m.fr.conn = conn
	return m
}

// acceptFunc waits for the reply of a call that has been sent; with
// discard, it gives the call up instead. It is called once.
type acceptFunc func(discard bool) (*AcceptResponse, error)

func acceptDone(resp *AcceptResponse, err error) acceptFunc {
	return func(bool) (*AcceptResponse, error) { return resp, err }
}

var errDiscarded = fmt.Errorf("filter plugin: %w", context.Canceled)

// start sends one Accept call, due by deadline (zero: none), and returns
// the function that waits for its reply. The request is encoded before
// start returns; with hold it is only queued, for the next write or flush.
// ctx can cancel the wait (its deadline is not used).
func (m *muxConn) start(ctx context.Context, deadline time.Time, c *grpcClient, req *AcceptRequest, hold bool) acceptFunc {
	var timeout time.Duration
	if !deadline.IsZero() {
		if timeout = time.Until(deadline); timeout <= 0 {
			return acceptDone(nil, fmt.Errorf("filter plugin: %w", context.DeadlineExceeded))
		}
	}
	cl := muxCalls.Get().(*muxCall)
	select {
	case <-cl.wake: // a stale notification from its previous use
	default:
	}
	cl.state, cl.waiting, cl.deadline, cl.keep, cl.err = callWaiting, false, deadline, nil, nil
	m.mu.Lock()
	if m.err != nil {
		err := m.err
		m.mu.Unlock()
		muxCalls.Put(cl)
		return acceptDone(nil, err)
	}
	m.nextID++
	if m.nextID == 0 {
		m.nextID++ // 0 means no reader
	}
	id := m.nextID
	m.calls[id] = cl
	watch := !m.watched && !deadline.IsZero()
	m.watched = m.watched || watch
	m.mu.Unlock()
	if watch {
		hostWatch.add(m)
	}

	n := len(req.Records)
	props := c.wantsProps(req.Instance)
	send := m.w.send
	if hold {
		send = m.w.queue
	}
	send(func(w []byte) []byte {
		start := len(w)
		w = append(w, 0, 0, 0, 0, chanOpAccept)
		w = binary.LittleEndian.AppendUint32(w, id)
		w = binary.LittleEndian.AppendUint64(w, uint64(timeout))
		w = binary.LittleEndian.AppendUint32(w, uint32(req.Partition))
		w = appendString32(w, req.Instance)
		w = appendString32(w, req.Topic)
		w = appendString32(w, req.Group)
		w = appendPacked(w, req.Records, props)
		binary.LittleEndian.PutUint32(w[start:], uint32(len(w)-start-4))
		return w
	})

	return func(discard bool) (*AcceptResponse, error) {
		keep, err := m.wait(ctx, id, cl, discard)
		muxCalls.Put(cl)
		if err != nil {
			if st, ok := status.FromError(err); ok {
				return nil, c.fromStatus(ctx, st.Err())
			}
			return nil, err
		}
		if len(keep) != n {
			return nil, fmt.Errorf("%w: %d for %d records", ErrBadResponse, len(keep), n)
		}
		return &AcceptResponse{Keep: keep}, nil
	}
}

// wait returns call id's reply, reading the socket itself when nobody else
// does. A cancelled ctx or discard gives the call up.
func (m *muxConn) wait(ctx context.Context, id uint32, cl *muxCall, discard bool) ([]bool, error) {
	m.mu.Lock()
	cl.waiting = true
	for {
		switch {
		case cl.state == callDone:
			m.mu.Unlock()
			return cl.keep, cl.err
		case discard && cl.state == callWaiting:
			delete(m.calls, id)
			m.mu.Unlock()
			return nil, errDiscarded
		case ctx.Err() != nil && cl.state == callWaiting:
			delete(m.calls, id)
			m.mu.Unlock()
			return nil, fmt.Errorf("filter plugin: %w", ctx.Err())
		case cl.state == callLead || m.reader == 0:
			cl.state = callWaiting
			m.reader = id
			if m.interrupted {
				m.interrupted = false
				m.conn.SetReadDeadline(time.Time{})
			}
			m.mu.Unlock()
			m.read(ctx, id, cl)
			m.mu.Lock()
			continue
		}
		m.mu.Unlock()
		select {
		case <-cl.wake:
		case <-ctx.Done():
		}
		m.mu.Lock()
	}
}

// read is the reader's loop: it delivers replies until its own call (id)
// has one, it is given up or the connection fails, then passes the role
// on. The caller holds the role (m.reader) and not m.mu.
func (m *muxConn) read(ctx context.Context, id uint32, cl *muxCall) {
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { m.interrupt(id) })
		defer stop()
	}
	for {
		frame, err := m.fr.next()
		m.mu.Lock()
		switch {
		case err == nil:
			m.deliver(frame)
		case errors.Is(err, os.ErrDeadlineExceeded) && m.err == nil:
			// Interrupted (a partial frame stays buffered for the next
			// reader). By hostWatch for this reader's deadline, which ended
			// the call, or by its context; or too late, for a previous reader.
			if m.interrupted {
				m.interrupted = false
				m.conn.SetReadDeadline(time.Time{})
			}
			if cl.state == callWaiting && ctx.Err() != nil {
				delete(m.calls, id)
				cl.state, cl.err = callDone, fmt.Errorf("filter plugin: %w", ctx.Err())
			}
		default:
			m.mu.Unlock()
			m.fail(fmt.Errorf("%w: batch channel: %v", plugins.ErrUnavailable, err))
			m.mu.Lock()
		}
		if cl.state == callDone || m.err != nil {
			break
		}
		m.mu.Unlock()
	}
	// Hand over the replies already read, without another read.
	for m.err == nil {
		f, err := m.fr.buffered()
		if f == nil || err != nil {
			break
		}
		m.deliver(f)
	}
	// Pass the role to a caller still waiting, if any.
	m.reader = 0
	if m.err == nil {
		for oid, o := range m.calls {
			if o.state == callWaiting && o.waiting {
				o.state = callLead
				m.reader = oid
				o.notify()
				break
			}
		}
	}
	m.mu.Unlock()
}

// interrupt ends the read of reader id, if it is still reading.
func (m *muxConn) interrupt(id uint32) {
	m.mu.Lock()
	if m.reader == id && m.err == nil {
		m.interrupted = true
		m.conn.SetReadDeadline(longAgo)
	}
	m.mu.Unlock()
}

// deliver hands a reply frame to its call (under m.mu). A reply to a call
// that gave up is dropped.
func (m *muxConn) deliver(r []byte) {
	if len(r) < 5 {
		return
	}
	id := binary.LittleEndian.Uint32(r)
	cl := m.calls[id]
	if cl == nil {
		return
	}
	delete(m.calls, id)
	if code := codes.Code(r[4]); code != codes.OK {
		cl.err = status.Error(code, string(r[5:]))
	} else if len(r) < 9 {
		cl.err = fmt.Errorf("%w: short batch channel reply", ErrBadResponse)
	} else if cl.keep, cl.err = decodeBitmap(r[9:], int(binary.LittleEndian.Uint32(r[5:]))); cl.err != nil {
		cl.err = fmt.Errorf("%w: %v", ErrBadResponse, cl.err)
	}
	cl.state = callDone
	cl.notify()
}

// expire ends the calls due before now and reports whether calls are left;
// a write in progress for longer than chanWriteTimeout breaks the
// connection (hostWatch).
func (m *muxConn) expire(now time.Time) bool {
	if since := m.w.writingSince(); !since.IsZero() && now.Sub(since) > chanWriteTimeout {
		m.fail(fmt.Errorf("%w: batch channel: a write has been stuck for %v", plugins.ErrUnavailable, now.Sub(since)))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		m.watched = false // fail ended every call
		return false
	}
	for id, cl := range m.calls {
		if cl.state != callWaiting || cl.deadline.IsZero() || now.Before(cl.deadline) {
			continue
		}
		delete(m.calls, id)
		cl.state, cl.err = callDone, fmt.Errorf("filter plugin: %w", context.DeadlineExceeded)
		if id != m.reader {
			cl.notify()
		} else if !m.interrupted {
			// Its reader sees the call ended when the read returns.
			m.interrupted = true
			m.conn.SetReadDeadline(longAgo)
		}
	}
	if len(m.calls) == 0 {
		m.watched = false
		return false
	}
	return true
}

// fail breaks the connection: every pending call fails with err.
func (m *muxConn) fail(err error) {
	m.broken.Store(true)
	m.mu.Lock()
	if m.err == nil {
		m.err = err
	}
	for id, cl := range m.calls {
		delete(m.calls, id)
		cl.state, cl.err = callDone, err
		cl.notify()
	}
	m.mu.Unlock()
	m.conn.Close()
}

// hostWatchTick is how often hostWatch looks at the pending calls: a call
// ends at most that long after its deadline.
const hostWatchTick = 5 * time.Millisecond

// hostWatch ends the host's channel calls that are past their deadline. It
// ticks while some connection has calls with a deadline, and parks
// otherwise.
var hostWatch = &connWatcher{conns: make(map[*muxConn]struct{}), kick: make(chan struct{}, 1)}

type connWatcher struct {
	once sync.Once
	kick chan struct{}

	mu    sync.Mutex
	conns map[*muxConn]struct{}
}

// add has m looked at until it has no calls left (m.watched is set).
func (w *connWatcher) add(m *muxConn) {
	w.once.Do(func() { go w.run() })
	w.mu.Lock()
	w.conns[m] = struct{}{}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *connWatcher) run() {
	for {
		w.mu.Lock()
		idle := len(w.conns) == 0
		w.mu.Unlock()
		if idle {
			<-w.kick
			continue
		}
		time.Sleep(hostWatchTick)
		now := time.Now()
		w.mu.Lock()
		conns := make([]*muxConn, 0, len(w.conns))
		for m := range w.conns {
			conns = append(conns, m)
		}
		w.mu.Unlock()
		for _, m := range conns {
			if !m.expire(now) {
				// m.watched was cleared under m.mu; a call added since sets
				// it again and re-adds m, after this delete.
				w.mu.Lock()
				m.mu.Lock()
				if !m.watched {
					delete(w.conns, m)
				}
				m.mu.Unlock()
				w.mu.Unlock()
			}
		}
	}
}
