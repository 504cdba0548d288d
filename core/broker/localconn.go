package broker

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/budget"
	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/internal/localpipe"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The HTTP data plane (core/httpapi data.go: MetaQ's /put, /get and
// /offset, the JSON records API, the event streams) reaches the broker
// through in-process connections: one end of a localpipe is served as a
// client connection is, already authenticated as the HTTP request's
// user, so every request takes the wire's own path (ACLs, properties
// checks, filters, the memory budget, group commit and sync
// replication) and nothing of it is written twice.

// pipeConn is the broker's end of a local connection: its remote
// address is the HTTP client's, for the logs (that of the request using
// it: the produce handler keeps its connections for the next request).
type pipeConn struct {
	*localpipe.End
}

func (p pipeConn) RemoteAddr() net.Addr { return httpAddr(p.Remote()) }

// httpAddr is an HTTP client's address as a local connection's remote
// address.
type httpAddr string

func (a httpAddr) Network() string { return "http" }
func (a httpAddr) String() string  { return string(a) }

// localConn opens an in-process connection for remote (an HTTP client's
// "ip:port") authenticated as u (nil with [auth] off). The caller closes
// the returned end; the broker's end then closes too. It counts among the
// broker's connections (stats, drain at shutdown) but not against
// max_connections: http_max_connections bounds the HTTP requests.
func (b *Broker) localConn(u *conf.User, remote string) (net.Conn, error) {
	cli, srv := localpipe.New()
	cli.SetRemote(remote)
	c := newConn(b, pipeConn{srv})
	c.local = srv
	c.handshook.Store(true)
	c.auth.CertChecked = true
	if u != nil {
		c.auth.Login(u, b.config())
	}
	b.connsMu.Lock()
	if b.closed.Load() {
		b.connsMu.Unlock()
		cli.Close()
		srv.Close()
		return nil, errBrokerClosed
	}
	b.conns[c] = struct{}{}
	b.wg.Add(1)
	b.connsMu.Unlock()
	b.stats.connections.Add(1)
	go func() {
		defer b.wg.Done()
		c.serve()
		b.connsMu.Lock()
		delete(b.conns, c)
		b.connsMu.Unlock()
		b.stats.connections.Add(-1)
	}()
	return cli, nil
}

// DataConn opens an in-process connection for the HTTP data plane.
func (h httpBackend) DataConn(u *conf.User, remote string) (net.Conn, error) {
	return h.b.localConn(u, remote)
}

// Partitions is the number of partitions of topic (0: not open here).
func (h httpBackend) Partitions(topic string) int {
	b := h.b
	t := b.topics.Get(topic)
	if t == nil {
		return 0
	}
	return len(t.parts)
}

// A produce request of the HTTP data plane needs no connection of its
// own: its mputs are dispatched on the HTTP handler's goroutine through
// a putSession, a broker connection with no read loop, flusher or pipe
// (the request's frames are decoded from the handler's buffers, and the
// replies the put path queues are handed back to the handler when they
// are all in). The frames take the connection's own path: the decoder's
// limits and memory budget, dispatch (ACLs, properties checks, group
// commit, sync replication, idempotence) and the replies' bytes.

// putSession is the broker's end of an HTTP produce handler's puts
// (httpapi.PutSession): one handler uses it at a time.
type putSession struct {
	c   *conn
	nc  *sessionNC
	dec *protocol.Decoder
	in  framesReader
	// sent is the frames answered or dispatched in this round trip (each
	// gets one reply); got the replies queued (under c.omu); ready is
	// signalled when one is queued.
	sent  int
	got   int
	ready chan struct{}
	// broken: the frames could not be read (a fatal error): closed once
	// the replies of what came before it are in.
	broken    bool
	closeOnce sync.Once
}

// sessionNC is a putSession's connection: nothing is read or written
// on it (conn's nc is only logged, deadlined and closed).
type sessionNC struct {
	remote atomic.Pointer[string]
}

func (s *sessionNC) Read([]byte) (int, error)         { return 0, io.EOF }
func (s *sessionNC) Write([]byte) (int, error)        { return 0, net.ErrClosed }
func (s *sessionNC) Close() error                     { return nil }
func (s *sessionNC) LocalAddr() net.Addr              { return httpAddr("local") }
func (s *sessionNC) RemoteAddr() net.Addr             { return httpAddr(*s.remote.Load()) }
func (s *sessionNC) SetDeadline(time.Time) error      { return nil }
func (s *sessionNC) SetReadDeadline(time.Time) error  { return nil }
func (s *sessionNC) SetWriteDeadline(time.Time) error { return nil }

// framesReader reads a round trip's frames from the handler's buffers.
type framesReader struct {
	bufs [][]byte
}

func (r *framesReader) Read(p []byte) (int, error) {
	for len(r.bufs) > 0 && len(r.bufs[0]) == 0 {
		r.bufs = r.bufs[1:]
	}
	if len(r.bufs) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.bufs[0])
	r.bufs[0] = r.bufs[0][n:]
	return n, nil
}

// left is how many bytes are unread.
func (r *framesReader) left() int {
	n := 0
	for _, b := range r.bufs {
		n += len(b)
	}
	return n
}

// putSession opens a put session for remote authenticated as u (nil with
// [auth] off). It counts among the broker's connections as localConn's
// do; the caller closes it.
func (b *Broker) putSession(u *conf.User, remote string) (*putSession, error) {
	nc := &sessionNC{}
	nc.remote.Store(&remote)
	c := newConn(b, nc)
	c.handshook.Store(true)
	c.auth.CertChecked = true
	if u != nil {
		c.auth.Login(u, b.config())
	}
	s := &putSession{c: c, nc: nc, ready: make(chan struct{}, 1)}
	c.session = s
	cfg := b.config()
	maxBody := max(cfg.MaxMessageSize, cfg.MaxTransferSize)
	s.dec = protocol.NewDecoder(&s.in, protocol.Limits{MaxLine: cfg.MaxLineLength, MaxBody: maxBody, Budget: &c.bud})
	b.connsMu.Lock()
	if b.closed.Load() {
		b.connsMu.Unlock()
		return nil, errBrokerClosed
	}
	b.conns[c] = struct{}{}
	b.wg.Add(1)
	b.connsMu.Unlock()
	b.stats.connections.Add(1)
	return s, nil
}

// queued counts a reply queued on s's connection (conn.unlockOut, under
// c.omu) and wakes the round trip waiting for it.
func (s *putSession) queued() {
	s.got++
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// RoundTrip implements httpapi.PutSession.
func (s *putSession) RoundTrip(dst []byte, req [][]byte, done <-chan struct{}, deadline time.Time) ([]byte, error) {
	c := s.c
	c.omu.Lock()
	dead := c.dead
	s.sent, s.got = 0, 0
	c.omu.Unlock()
	if dead || s.broken {
		return dst, net.ErrClosed
	}
	s.in.bufs = req
	var r protocol.Request
	for !s.broken {
		if !c.waitOutRoom() || !c.bud.WaitRead() {
			s.in.bufs = nil
			return dst, net.ErrClosed
		}
		err := s.dec.Decode(&r)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			s.sent++
			s.broken = true
			var pe *protocol.Error
			switch {
			case errors.As(err, &pe):
				c.b.stats.protocolErrors.Add(1)
				if pe.Op == protocol.OpPut || pe.Op == protocol.OpMPut {
					c.b.stats.putFailed.Add(1)
				}
				c.reply(pe.Code, pe.Msg, pe.Opaque)
				s.broken = pe.Fatal
			case errors.Is(err, budget.ErrWait):
				c.reply(protocol.StatusBusy, err.Error(), 0)
			default: // a frame cut short
				c.reply(protocol.StatusBadRequest, "put session: "+err.Error(), 0)
			}
			continue
		}
		s.sent++
		if r.Op != protocol.OpPut && r.Op != protocol.OpMPut {
			c.reply(protocol.StatusBadRequest, "unexpected "+r.Op.String()+" frame in a put session", r.Opaque)
			continue
		}
		c.lone = s.dec.Buffered() == 0 && s.in.left() == 0
		c.omu.Lock()
		c.dispatching = true
		c.omu.Unlock()
		c.dispatch(&r)
		c.omu.Lock()
		c.dispatching = false
		c.omu.Unlock()
	}
	s.in.bufs = nil
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		c.omu.Lock()
		if s.got >= s.sent || c.dead {
			dead := c.dead && s.got < s.sent
			dst = append(dst, c.out...)
			c.out = c.out[:0]
			c.drained.Broadcast()
			c.omu.Unlock()
			if s.broken {
				c.close()
			}
			if dead {
				return dst, net.ErrClosed
			}
			return dst, nil
		}
		c.omu.Unlock()
		if timer == nil {
			timer = time.NewTimer(time.Until(deadline))
		}
		select {
		case <-s.ready:
		case <-c.closed:
		case <-done:
			return dst, context.Canceled
		case <-timer.C:
			return dst, os.ErrDeadlineExceeded
		}
	}
}

// SetRemote implements httpapi.PutSession.
func (s *putSession) SetRemote(remote string) { s.nc.remote.Store(&remote) }

// Closed implements httpapi.PutSession: the broker closed it.
func (s *putSession) Closed() bool {
	select {
	case <-s.c.closed:
		return true
	default:
		return false
	}
}

// Close implements httpapi.PutSession.
func (s *putSession) Close() error {
	s.closeOnce.Do(func() {
		c, b := s.c, s.c.b
		c.close()
		c.release(s.dec)
		c.closeOuts()
		b.connsMu.Lock()
		delete(b.conns, c)
		b.connsMu.Unlock()
		b.stats.connections.Add(-1)
		b.wg.Done()
	})
	return nil
}

// DataPuts opens a put session for the HTTP data plane's produce.
func (h httpBackend) DataPuts(u *conf.User, remote string) (httpapi.PutSession, error) {
	return h.b.putSession(u, remote)
}
