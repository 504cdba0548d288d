package client

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The tests of this file talk to a hostile or broken peer posing as a
// broker: replies that no real metaq-go broker sends, so the real broker
// (internal/brokertest) cannot produce them. Everything a real broker does
// is tested against a real one, through a faulty network (faultyNet) where
// needed.

// fakeBroker is a scriptable peer built on sdk/protocol, for the replies
// no real broker sends: floods of empty or garbage lines, and malformed
// fvalue bodies. Do not use it for anything the real broker does.
type fakeBroker struct {
	ln     net.Listener
	handle func(w *fakeWriter, r *protocol.Request)

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// fakeWriter writes replies on one connection; safe for concurrent use.
type fakeWriter struct {
	mu sync.Mutex
	c  net.Conn
}

func (w *fakeWriter) write(b []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = w.c.Write(b)
}

func (w *fakeWriter) result(code int, body string, opaque int32) {
	w.write(protocol.AppendResult(nil, code, body, opaque))
}

func startFake(t testing.TB, handle func(w *fakeWriter, r *protocol.Request)) *fakeBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeBroker{ln: ln, handle: handle, conns: make(map[net.Conn]struct{})}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

func (f *fakeBroker) addr() string { return f.ln.Addr().String() }

func (f *fakeBroker) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns[c] = struct{}{}
		f.mu.Unlock()
		f.wg.Add(1)
		go f.serve(c)
	}
}

func (f *fakeBroker) serve(c net.Conn) {
	defer f.wg.Done()
	defer func() {
		_ = c.Close()
		f.mu.Lock()
		delete(f.conns, c)
		f.mu.Unlock()
	}()
	w := &fakeWriter{c: c}
	dec := protocol.NewDecoder(c, protocol.Limits{MaxBody: 8 << 20})
	var r protocol.Request
	for {
		if err := dec.Decode(&r); err != nil {
			var pe *protocol.Error
			if errors.As(err, &pe) && !pe.Fatal {
				w.result(pe.Code, pe.Msg, pe.Opaque)
				continue
			}
			return // EOF, the connection closed, or lost framing
		}
		f.handle(w, &r)
	}
}

func (f *fakeBroker) close() {
	_ = f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// statsReply answers `stats topics` (any stats request) for topic with n
// partitions, as a real broker would, and reports whether r was one.
func statsReply(w *fakeWriter, r *protocol.Request, topic string, n int) bool {
	if r.Op != protocol.OpStats {
		return false
	}
	w.result(protocol.StatusOK, fmt.Sprintf("STATS\r\n%s partitions %d message_count 0 message_bytes 0 accept_publish true accept_subscribe true\r\nEND\r\n", topic, n), r.Opaque)
	return true
}

// TestHostileBrokerFlood: a "broker" that answers with 8 MiB of newlines
// (the stack overflow of issue 7, seen from the client side) or of " \r\n"
// makes the call fail with a clear error; the client does not crash. No
// real broker sends anything but well-formed replies, so this needs the
// hostile peer.
func TestHostileBrokerFlood(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, unit, msg string }{
		{"newlines", "\n", "too many empty lines"},
		{"crlf", "\r\n", "too many empty lines"},
		{"space crlf", " \r\n", `unknown command ""`},
		{"NULs", "\x00", "header line too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flood := bytes.Repeat([]byte(tc.unit), 8<<20/len(tc.unit))
			f := startFake(t, func(w *fakeWriter, r *protocol.Request) {
				w.write(flood)
				w.result(protocol.StatusOK, "STATS\r\nEND\r\n", r.Opaque)
			})
			cn := newConn(f.addr(), defaultConnOptions())
			defer cn.close()
			_, err := stats(ctxT(t, 10*time.Second), cn, "")
			require.ErrorIs(t, err, ErrConnectionLost)
			var pe *protocol.Error
			require.True(t, errors.As(err, &pe), "%v", err)
			require.Contains(t, pe.Msg, tc.msg)
		})
	}
}

// fvalue writes an fvalue reply of recs (offset, data) and the next offset.
func fvalue(w *fakeWriter, opaque int32, next int64, recs ...struct {
	off  int64
	data string
}) {
	var body []byte
	for i, r := range recs {
		body = binary.BigEndian.AppendUint64(body, uint64(r.off))
		body = message.AppendRecord(body, int64(i+1), 0, []byte(r.data))
	}
	w.write(append(protocol.AppendFValueHeader(nil, len(body), opaque, next), body...))
}

// TestConsumerBrokenFilteredReply: a filtered reply (fvalue) whose entry
// lies past the reply's own next offset is broken: the consumer delivers
// nothing of it, backs off and repeats the get, and delivers the sound
// reply that comes next. The real broker builds each fvalue from the
// records it scanned (their offsets are below the next offset it sends),
// so only a broken peer sends this one.
func TestConsumerBrokenFilteredReply(t *testing.T) {
	t.Parallel()
	type rec = struct {
		off  int64
		data string
	}
	var gets atomic.Int32
	f := startFake(t, func(w *fakeWriter, r *protocol.Request) {
		if statsReply(w, r, "t", 1) {
			return
		}
		if r.Op != protocol.OpGet {
			w.result(protocol.StatusBadRequest, "unexpected "+r.Op.String(), r.Opaque)
			return
		}
		switch n := gets.Add(1); {
		case n == 1:
			fvalue(w, r.Opaque, 10, rec{999999, "broken"})
		case r.Offset == 0:
			fvalue(w, r.Opaque, 100, rec{0, "a"}, rec{40, "b"})
		default:
			w.result(protocol.StatusNotFound, "no data", r.Opaque)
		}
	})
	c := consumerAt(t, f.addr())
	got := collect(t, c, 2)
	require.Equal(t, "a", string(got[0].Body))
	require.Equal(t, int64(0), got[0].Offset)
	require.Equal(t, "b", string(got[1].Body))
	require.Equal(t, int64(40), got[1].Offset)
	require.GreaterOrEqual(t, gets.Load(), int32(2), "the get was repeated")
}
