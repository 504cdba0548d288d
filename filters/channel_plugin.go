package filters

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	filterpb "github.com/metaq-go/metaq/filters/proto"
)

// OpenChannel is the plugin side of the set-up: it dials the host's socket
// in.Conns times and serves each connection until the host closes it.
func (s *grpcServer) OpenChannel(ctx context.Context, in *filterpb.OpenChannelRequest) (*filterpb.OpenChannelResponse, error) {
	if in.GetNetwork() != "unix" || in.GetConns() <= 0 || in.GetConns() > chanMaxOpenReq || len(in.GetToken()) != chanTokenSize {
		return nil, status.Error(codes.InvalidArgument, "filters: bad channel request")
	}
	hello := append([]byte(chanMagic), in.GetToken()...)
	var d net.Dialer
	opened := int32(0)
	for range in.GetConns() {
		conn, err := d.DialContext(ctx, "unix", in.GetAddress())
		if err != nil {
			if opened == 0 {
				return nil, status.Error(codes.Unavailable, "filters: channel: "+err.Error())
			}
			break
		}
		if _, err := conn.Write(hello); err != nil {
			conn.Close()
			break
		}
		opened++
		go s.serveChannel(conn)
	}
	return &filterpb.OpenChannelResponse{Conns: opened}, nil
}

// serveChannel serves one batch connection until the host closes it.
func (s *grpcServer) serveChannel(conn net.Conn) {
	sc := &chanServer{s: s, conn: conn, names: make(map[string]string)}
	sc.fr.conn = conn
	sc.w = frameWriter{conn: conn, onErr: func(error) { conn.Close() }}
	chanWatch.add(sc)
	sc.serve()
}

// chanServer is the plugin side of one batch connection. One goroutine at
// a time reads (the reader) and runs the calls it reads itself, so a lone
// call costs no goroutine hand-off. A call still running after a few
// milliseconds loses the reader's role to a new goroutine (chanWatch), so
// a slow call does not hold up the calls behind it.
type chanServer struct {
	s     *grpcServer
	conn  net.Conn
	fr    frameReader
	w     frameWriter
	names map[string]string // instance, topic and group names (reader only)

	// inline is the number of the call the reader is running (0: none),
	// since the watcher's tick. Whoever swaps it to 0 first decides: the
	// reader stays the reader, or the watcher starts a new one.
	inline atomic.Uint64
	since  atomic.Uint64
	calls  uint64 // reader only
}

func (sc *chanServer) serve() {
	for {
		frame, err := sc.fr.next()
		if err != nil {
			sc.conn.Close()
			chanWatch.remove(sc)
			return
		}
		// Nothing parsed aliases frame (the reader reuses its buffer).
		recs := chanRecs.Get().(*[]Record)
		id, req, timeout, err := parseChanRequest(frame, *recs, sc.names)
		if err != nil {
			chanRecs.Put(recs)
			if len(frame) < 5 {
				sc.conn.Close() // no call id to answer
				continue        // the next read fails
			}
			sc.w.send(func(b []byte) []byte { return appendChanReply(b, id, nil, err) })
			continue
		}
		sc.calls++
		call := sc.calls
		sc.since.Store(chanWatch.started())
		sc.inline.Store(call)
		keep, err := sc.s.acceptChannel(req, timeout)
		if cap(req.Records) <= maxPooledRecs {
			*recs = req.Records[:0]
			chanRecs.Put(recs)
		}
		reply := func(b []byte) []byte { return appendChanReply(b, id, keep, err) }
		if sc.inline.CompareAndSwap(call, 0) {
			// Still the reader: answer with the next call's reply if that
			// call is already here, so that one write carries both.
			if sc.fr.hasFrame() {
				sc.w.queue(reply)
			} else {
				sc.w.send(reply)
			}
			continue
		}
		sc.w.send(reply) // another goroutine reads now
		return
	}
}

// handOff makes a new goroutine the reader if the reader has been running
// one call since before tick.
func (sc *chanServer) handOff(tick uint64) {
	call := sc.inline.Load()
	if call == 0 || sc.since.Load() >= tick {
		return
	}
	if sc.inline.CompareAndSwap(call, 0) {
		go func() {
			sc.w.flush() // replies queued behind the slow call
			sc.serve()
		}()
	}
}

// chanWatchTick is the period of the watcher: a call that has run for one
// to two ticks hands the reader's role over.
const chanWatchTick = 2 * time.Millisecond

// chanWatch is the plugin process's watcher of channel calls: it hands the
// reader's role on from slow calls and ends the contexts of calls past
// their deadline. It ticks while calls come in and parks after a quiet
// second with no context to watch.
var chanWatch = &chanWatcher{conns: make(map[*chanServer]struct{}), ctxs: make(map[*chanCtx]struct{}),
	kick: make(chan struct{}, 1)}

type chanWatcher struct {
	once   sync.Once
	tick   atomic.Uint64
	calls  atomic.Uint64
	parked atomic.Bool
	kick   chan struct{}

	mu    sync.Mutex
	conns map[*chanServer]struct{}
	ctxs  map[*chanCtx]struct{} // contexts whose Done was asked for
}

func (cw *chanWatcher) add(sc *chanServer) {
	cw.start()
	cw.mu.Lock()
	cw.conns[sc] = struct{}{}
	cw.mu.Unlock()
}

func (cw *chanWatcher) start() { cw.once.Do(func() { go cw.run() }) }

func (cw *chanWatcher) remove(sc *chanServer) {
	cw.mu.Lock()
	delete(cw.conns, sc)
	cw.mu.Unlock()
}

// started records a call starting and returns the current tick.
func (cw *chanWatcher) started() uint64 {
	cw.calls.Add(1)
	cw.unpark()
	return cw.tick.Load()
}

func (cw *chanWatcher) unpark() {
	if cw.parked.Load() && cw.parked.CompareAndSwap(true, false) {
		select {
		case cw.kick <- struct{}{}:
		default:
		}
	}
}

func (cw *chanWatcher) run() {
	var last uint64
	quiet := 0
	for {
		time.Sleep(chanWatchTick)
		t := cw.tick.Add(1)
		now := time.Now()
		var expired []*chanCtx
		cw.mu.Lock()
		for sc := range cw.conns {
			sc.handOff(t - 1)
		}
		for cc := range cw.ctxs {
			if !now.Before(cc.deadline) {
				delete(cw.ctxs, cc)
				expired = append(expired, cc)
			}
		}
		watching := len(cw.ctxs) > 0
		cw.mu.Unlock()
		for _, cc := range expired {
			cc.expire()
		}
		if n := cw.calls.Load(); n != last || watching {
			last, quiet = n, 0
			continue
		}
		if quiet++; quiet < int(time.Second/chanWatchTick) {
			continue
		}
		// Quiet: park until a call starts. A running call keeps its tick
		// (the reader stored it before), so it is checked on waking.
		cw.parked.Store(true)
		if cw.calls.Load() == last {
			<-cw.kick
		} else if !cw.parked.CompareAndSwap(true, false) {
			<-cw.kick // a call started and is kicking
		}
		quiet = 0
	}
}

// chanRecs recycles the record slices of plugin-side channel calls.
var chanRecs = sync.Pool{New: func() any { return new([]Record) }}

// maxPooledRecs is the largest record slice kept for reuse.
const maxPooledRecs = 4096

// appendChanReply appends the reply frame of call id.
func appendChanReply(b []byte, id uint32, keep []bool, err error) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, id)
	if err != nil {
		st, _ := status.FromError(err)
		b = append(b, byte(st.Code()))
		b = append(b, st.Message()...)
	} else {
		b = append(b, byte(codes.OK))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(keep)))
		b = appendBitmap(b, keep)
	}
	binary.LittleEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// acceptChannel runs the filter on one channel request. A panic becomes an
// Internal error, as for gRPC calls, so the process survives it.
func (s *grpcServer) acceptChannel(req *AcceptRequest, timeout time.Duration) (keep []bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			if s.logf != nil {
				s.logf("panic in plugin call (batch channel): %v", r)
			}
			keep, err = nil, status.Errorf(codes.Internal, "plugin panic: %v", r)
		}
	}()
	ctx := context.Background()
	if timeout > 0 {
		cc := &chanCtx{deadline: time.Now().Add(timeout)}
		defer cc.release()
		ctx = cc
	}
	return s.accept(ctx, req)
}

// parseChanRequest decodes a request frame into a request whose records
// reuse recs. Nothing in the request aliases frame: instance, topic and
// group come from names (a per-connection intern table), attributes and
// bodies are copies. It never panics; a malformed frame is an
// InvalidArgument error (with the call id when the frame has one).
func parseChanRequest(frame []byte, recs []Record, names map[string]string) (id uint32, req *AcceptRequest, timeout time.Duration, err error) {
	bad := func(what string) error {
		return status.Error(codes.InvalidArgument, "filters: malformed batch channel request: "+what)
	}
	if len(frame) >= 5 {
		id = binary.LittleEndian.Uint32(frame[1:])
	}
	if len(frame) < chanReqFixed {
		return id, nil, 0, bad("short")
	}
	if frame[0] != chanOpAccept {
		return id, nil, 0, bad(fmt.Sprintf("op %d", frame[0]))
	}
	t := binary.LittleEndian.Uint64(frame[5:])
	if t > uint64(1<<62) {
		return id, nil, 0, bad("timeout")
	}
	req = &AcceptRequest{Partition: int32(binary.LittleEndian.Uint32(frame[13:]))}
	rest := frame[17:]
	var ok bool
	if req.Instance, rest, ok = cutString32(rest, names); !ok {
		return id, nil, 0, bad("instance")
	}
	if req.Topic, rest, ok = cutString32(rest, names); !ok {
		return id, nil, 0, bad("topic")
	}
	if req.Group, rest, ok = cutString32(rest, names); !ok {
		return id, nil, 0, bad("group")
	}
	if req.Records, err = decodePacked(rest, recs, false); err != nil {
		return id, nil, 0, bad(err.Error())
	}
	if err = fillProps(req.Records); err != nil {
		return id, nil, 0, bad(err.Error())
	}
	return id, req, time.Duration(t), nil
}

// maxNames bounds a connection's intern table of instance, topic and
// group names.
const maxNames = 1024

// cutString32 reads a u32-length-prefixed string, interned in names (a
// connection's calls name few instances, topics and groups).
func cutString32(b []byte, names map[string]string) (s string, rest []byte, ok bool) {
	if len(b) < 4 {
		return "", nil, false
	}
	l := uint64(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if l > uint64(len(b)) {
		return "", nil, false
	}
	v := b[:l]
	s, ok = names[string(v)]
	if !ok {
		if len(names) >= maxNames {
			clear(names)
		}
		s = string(v)
		names[s] = s
	}
	return s, b[l:], true
}

// chanCtx is the context of a channel call with a deadline. It arms no
// timer (which costs a wake-up of the runtime's poller thread per call):
// Err compares the clock, and Done, for a filter that asks for it,
// registers with chanWatch, which closes it within a tick of the deadline.
type chanCtx struct {
	deadline time.Time

	mu   sync.Mutex
	done chan struct{}
	err  error
}

var _ context.Context = (*chanCtx)(nil)

func (c *chanCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *chanCtx) Value(any) any               { return nil }

func (c *chanCtx) Done() <-chan struct{} {
	c.mu.Lock()
	if c.done != nil {
		defer c.mu.Unlock()
		return c.done
	}
	done := make(chan struct{})
	c.done = done
	expired := c.err != nil
	if expired {
		close(done)
	}
	c.mu.Unlock()
	if !expired {
		chanWatch.start()
		chanWatch.mu.Lock()
		chanWatch.ctxs[c] = struct{}{}
		chanWatch.mu.Unlock()
		chanWatch.unpark()
	}
	return done
}

func (c *chanCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil && !time.Now().Before(c.deadline) {
		c.expireLocked()
	}
	return c.err
}

func (c *chanCtx) String() string { return "filters.chanCtx" }

// expire ends the context (chanWatch).
func (c *chanCtx) expire() {
	c.mu.Lock()
	c.expireLocked()
	c.mu.Unlock()
}

func (c *chanCtx) expireLocked() {
	if c.err != nil {
		return
	}
	c.err = context.DeadlineExceeded
	if c.done != nil {
		close(c.done)
	}
}

// release stops watching the context once its call has returned.
func (c *chanCtx) release() {
	c.mu.Lock()
	watched := c.done != nil
	c.mu.Unlock()
	if watched {
		chanWatch.mu.Lock()
		delete(chanWatch.ctxs, c)
		chanWatch.mu.Unlock()
	}
}
