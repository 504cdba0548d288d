package filters

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	filterpb "github.com/metaq-go/metaq/filters/proto"
	"github.com/metaq-go/metaq/plugins"
)

// The batch channel carries Accept calls between the host and a filter
// plugin process without gRPC. A gRPC call costs a dozen goroutine hand-offs
// and syscalls on both sides (HTTP/2 framing, the transport's reader and
// writer goroutines, flow control); on a small machine that is 150–250 µs,
// several times a whole in-process filtered get. A channel call costs about
// a socket round trip, and calls that overlap share syscalls.
//
// Set-up (OpenChannel, over the plugin's mTLS gRPC connection): the host
// listens on a unix socket in a fresh 0700 directory and sends its path and
// a random token; the plugin dials and writes "MQF1" and the token; the host
// checks the token, then closes the listener and removes the directory. The
// socket exists only for the hand-shake, and only this plugin (which learnt
// the token over mTLS) holds the connection. A plugin built before the
// channel answers Unimplemented, and the host stays on gRPC.
//
// All calls to a process share its one connection. Frames are a u32
// little-endian length and a payload:
//
//	request: u8 op (1 = accept), u32 call id, u64 timeout in ns (0: none),
//	         i32 partition, instance, topic, group (each u32 length + bytes),
//	         the records in the packed format (packed.go)
//	reply:   u32 call id, u8 code (0 = OK: u32 n + bitmap of n verdicts;
//	         otherwise a gRPC status code and the error message)
//
// Both sides avoid goroutine hand-offs and timers on the way of a call: each
// wakes a thread, which on a small virtual machine costs as much as the
// call. On the host, the caller writes its frame itself (or leaves it to a
// write in progress, which takes it along) and a waiting caller reads the
// replies itself (channel_host.go). On the plugin, the reading goroutine runs
// the calls it reads and hands reading over only when a call runs long
// (channel_plugin.go). Either side writes whatever frames are queued in one
// write and reads whatever has arrived in one read. Deadlines are enforced
// by a watcher ticking every few milliseconds while calls are pending.
//
// A call that times out is forgotten (its late reply is dropped); a
// transport error fails every pending call with plugins.ErrUnavailable, and
// the next call opens a new connection, using gRPC meanwhile.

const (
	chanMagic      = "MQF1"
	chanTokenSize  = 32
	chanSetup      = 5 * time.Second
	chanRetry      = 5 * time.Second
	chanMaxFrame   = 64 << 20 // as plugins.ServeOptions.MaxRecvMsgSize by default
	chanOpAccept   = 1
	chanReqFixed   = 1 + 4 + 8 + 4 + 3*4
	chanMaxOpenReq = 64
	// chanWriteTimeout bounds one write: a plugin that stops reading for
	// that long breaks the connection.
	chanWriteTimeout = 10 * time.Second
	chanReadBuf      = 256 << 10
)

// channel is the host side: the batch connection to one plugin process,
// opened on demand.
type channel struct {
	c   *grpcClient
	cur atomic.Pointer[muxConn]
	off atomic.Bool // no channel: the plugin has none, or the process is gone

	mu      sync.Mutex
	opening bool
	retryAt time.Time // after a failed set-up
}

func newChannel(c *grpcClient) *channel { return &channel{c: c} }

// get returns the open connection, or nil (after starting to open one)
// when there is none.
func (ch *channel) get() *muxConn {
	if m := ch.cur.Load(); m != nil && !m.broken.Load() {
		return m
	}
	if ch.off.Load() {
		return nil
	}
	ch.open()
	return nil
}

// shutdown closes the channel for good (the process is gone).
func (ch *channel) shutdown() {
	ch.off.Store(true)
	if m := ch.cur.Swap(nil); m != nil {
		m.fail(fmt.Errorf("%w: plugin process exited", plugins.ErrUnavailable))
	}
}

// open starts opening a connection in the background unless one is being
// opened, the channel is off, or a set-up failed recently.
func (ch *channel) open() {
	ch.mu.Lock()
	if ch.off.Load() || ch.opening || time.Now().Before(ch.retryAt) {
		ch.mu.Unlock()
		return
	}
	if m := ch.cur.Load(); m != nil && !m.broken.Load() {
		ch.mu.Unlock()
		return
	}
	ch.opening = true
	ch.mu.Unlock()
	go func() {
		conn, err := ch.dial()
		var old *muxConn
		ch.mu.Lock()
		ch.opening = false
		switch {
		case status.Code(err) == codes.Unimplemented:
			ch.off.Store(true) // a plugin built before the channel
		case err != nil:
			ch.retryAt = time.Now().Add(chanRetry)
		default:
			old = ch.cur.Swap(newMuxConn(conn))
		}
		ch.mu.Unlock()
		if old != nil {
			old.fail(fmt.Errorf("%w: batch channel replaced", plugins.ErrUnavailable)) // it was broken
		}
		if ch.off.Load() {
			ch.shutdown() // raced with the process exiting
		}
	}()
}

// dial has the plugin connect to a fresh socket and returns the connection.
func (ch *channel) dial() (net.Conn, error) {
	dir, err := os.MkdirTemp("", "metaq-filter-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	addr := filepath.Join(dir, "c")
	l, err := net.Listen("unix", addr)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	token := make([]byte, chanTokenSize)
	rand.Read(token)
	ctx, cancel := context.WithTimeout(context.Background(), chanSetup)
	defer cancel()
	dl, _ := ctx.Deadline()
	l.(*net.UnixListener).SetDeadline(dl)
	accepted := make(chan net.Conn, 1)
	go func() {
		defer close(accepted)
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.SetReadDeadline(dl)
			hello := make([]byte, len(chanMagic)+chanTokenSize)
			if _, err := io.ReadFull(conn, hello); err != nil ||
				string(hello[:len(chanMagic)]) != chanMagic ||
				subtle.ConstantTimeCompare(hello[len(chanMagic):], token) != 1 {
				conn.Close()
				continue
			}
			conn.SetReadDeadline(time.Time{})
			accepted <- conn
			return
		}
	}()
	resp, err := ch.c.client.OpenChannel(ctx, &filterpb.OpenChannelRequest{
		Network: "unix", Address: addr, Token: token, Conns: 1,
	})
	if err == nil && resp.GetConns() < 1 {
		err = errors.New("filters: plugin opened no batch connection")
	}
	if err != nil {
		l.Close()
		if conn, ok := <-accepted; ok {
			conn.Close()
		}
		return nil, err
	}
	conn, ok := <-accepted
	if !ok {
		return nil, errors.New("filters: plugin's batch connection did not arrive")
	}
	return conn, nil
}

// longAgo is a deadline in the past: it interrupts a blocked read.
var longAgo = time.Unix(1, 0)

// frameReader reads length-prefixed frames. Unlike bufio with io.ReadFull,
// a read interrupted by a deadline keeps the partial frame for the next
// call, so the connection survives one reader giving up.
type frameReader struct {
	conn net.Conn
	buf  []byte
	r, w int // unread data is buf[r:w]
}

// next returns the next frame's payload, which is valid until the next
// call. A frame longer than chanMaxFrame is an error.
func (fr *frameReader) next() ([]byte, error) {
	for {
		if f, err := fr.buffered(); f != nil || err != nil {
			return f, err
		}
		if fr.r > 0 && fr.r == fr.w {
			fr.r, fr.w = 0, 0
		}
		need := chanReadBuf
		if fr.w-fr.r >= 4 {
			need = max(need, 4+int(binary.LittleEndian.Uint32(fr.buf[fr.r:])))
		}
		if len(fr.buf)-fr.r < need {
			nb := fr.buf
			if len(nb) < need {
				nb = make([]byte, need)
			}
			fr.w = copy(nb, fr.buf[fr.r:fr.w])
			fr.r, fr.buf = 0, nb
		}
		n, err := fr.conn.Read(fr.buf[fr.w:])
		fr.w += n
		if err != nil {
			if f, ferr := fr.buffered(); f != nil || ferr != nil {
				return f, ferr
			}
			return nil, err
		}
	}
}

// buffered returns the next frame if it is complete in the buffer.
func (fr *frameReader) buffered() ([]byte, error) {
	if fr.w-fr.r < 4 {
		return nil, nil
	}
	n := binary.LittleEndian.Uint32(fr.buf[fr.r:])
	if n > chanMaxFrame {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	if fr.w-fr.r < 4+int(n) {
		return nil, nil
	}
	f := fr.buf[fr.r+4 : fr.r+4+int(n)]
	fr.r += 4 + int(n)
	if len(fr.buf) > 2*chanReadBuf && fr.r == fr.w {
		fr.buf, fr.r, fr.w = nil, 0, 0 // after a huge frame; f stays valid
	}
	return f, nil
}

// hasFrame reports whether a whole frame is already buffered.
func (fr *frameReader) hasFrame() bool {
	if fr.w-fr.r < 4 {
		return false
	}
	return fr.w-fr.r >= 4+int(binary.LittleEndian.Uint32(fr.buf[fr.r:]))
}

// frameWriter writes frames from many goroutines with as few writes as
// possible: a goroutine that finds a write in progress appends its frame
// and returns; the writing goroutine writes it with the next batch.
type frameWriter struct {
	conn  net.Conn
	onErr func(error)

	mu      sync.Mutex
	buf     []byte // frames waiting for the next write
	spare   []byte
	writing bool
	since   time.Time // when the write in progress started
	err     error
}

// writingSince returns when the write in progress started; zero if none.
func (w *frameWriter) writingSince() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.writing {
		return time.Time{}
	}
	return w.since
}

// send appends a frame (built by appendFrame) and makes sure it is written.
// A failed write is reported to onErr, once.
func (w *frameWriter) send(appendFrame func([]byte) []byte) {
	w.mu.Lock()
	if w.err != nil {
		w.mu.Unlock()
		return
	}
	w.buf = appendFrame(w.buf)
	if w.writing {
		w.mu.Unlock()
		return
	}
	w.writing = true
	for len(w.buf) > 0 {
		out := w.buf
		w.buf = w.spare[:0]
		w.since = time.Now()
		w.mu.Unlock()
		_, err := w.conn.Write(out)
		w.mu.Lock()
		if cap(out) <= maxPooledBuf {
			w.spare = out[:0]
		} else {
			w.spare = nil
		}
		if err != nil {
			w.err, w.writing, w.buf = err, false, nil
			w.mu.Unlock()
			if w.onErr != nil {
				w.onErr(fmt.Errorf("%w: batch channel: %v", plugins.ErrUnavailable, err))
			}
			return
		}
	}
	w.writing = false
	w.mu.Unlock()
}

// queue appends a frame for the next write without writing.
func (w *frameWriter) queue(appendFrame func([]byte) []byte) {
	w.mu.Lock()
	if w.err == nil {
		w.buf = appendFrame(w.buf)
	}
	w.mu.Unlock()
}

// flush writes the queued frames.
func (w *frameWriter) flush() { w.send(func(b []byte) []byte { return b }) }

func appendString32(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}
