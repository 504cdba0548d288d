package client

import (
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// fakeBroker is a scriptable server built on sdk/protocol, for testing the
// connection layer and the consumer's reply handling without core.
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

func (w *fakeWriter) value(data []byte, opaque int32) {
	w.write(append(protocol.AppendValueHeader(nil, len(data), opaque), data...))
}

// close drops the connection.
func (w *fakeWriter) close() { _ = w.c.Close() }

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
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				return
			}
			return
		}
		f.handle(w, &r)
	}
}

// dropConns closes every open client connection.
func (f *fakeBroker) dropConns() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		_ = c.Close()
	}
}

func (f *fakeBroker) close() {
	_ = f.ln.Close()
	f.dropConns()
	f.wg.Wait()
}

// memLog is an in-memory partition for the fake: records appended with
// message.AppendRecord, readable from min.
type memLog struct {
	mu   sync.Mutex
	base int64 // offset of data[0]; gets below it get a 301
	data []byte
	id   int64
}

func (l *memLog) append(m *message.Message) (id, off int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.id++
	off = l.base + int64(len(l.data))
	l.data = message.AppendRecord(l.data, l.id, m.Flag(), m.AppendData(nil))
	return l.id, off
}

// get returns the reply to a get at offset for maxSize bytes.
func (l *memLog) get(w *fakeWriter, offset int64, maxSize int, opaque int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case offset < l.base:
		w.result(protocol.StatusMoved, strconv.FormatInt(l.base, 10), opaque)
	case offset >= l.base+int64(len(l.data)):
		w.result(protocol.StatusNotFound, "Could not find message at position "+strconv.FormatInt(offset, 10), opaque)
	default:
		b := l.data[offset-l.base:]
		w.value(b[:min(len(b), maxSize)], opaque)
	}
}

func (l *memLog) max() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.base + int64(len(l.data))
}

// memBroker is a fake that implements put, mput, get, offset and stats
// topics for one topic over memLogs.
type memBroker struct {
	topic string
	parts []*memLog
	// hook, if set, may answer a request itself by returning true.
	hook func(w *fakeWriter, r *protocol.Request) bool
	gets struct {
		sync.Mutex
		n int
	}
}

func newMemBroker(topic string, n int) *memBroker {
	b := &memBroker{topic: topic}
	for range n {
		b.parts = append(b.parts, &memLog{})
	}
	return b
}

func (b *memBroker) getCount() int {
	b.gets.Lock()
	defer b.gets.Unlock()
	return b.gets.n
}

func (b *memBroker) handle(w *fakeWriter, r *protocol.Request) {
	if b.hook != nil && b.hook(w, r) {
		return
	}
	var l *memLog
	if r.Op == protocol.OpPut || r.Op == protocol.OpMPut || r.Op == protocol.OpGet || r.Op == protocol.OpOffset {
		if string(r.Topic) != b.topic || r.Partition < 0 || int(r.Partition) >= len(b.parts) {
			w.result(protocol.StatusInternalError, protocol.WithCause(protocol.CausePartitionOutOfRange, strconv.Itoa(int(r.Partition))), r.Opaque)
			return
		}
		l = b.parts[r.Partition]
	}
	switch r.Op {
	case protocol.OpPut:
		attr, has, body, _ := message.SplitData(r.Flag, r.Body)
		id, off := l.append(&message.Message{Body: body, Attribute: attr, HasAttribute: has})
		w.result(protocol.StatusOK, string(protocol.AppendPutResultBody(nil, id, r.Partition, off)), r.Opaque)
	case protocol.OpMPut:
		body := r.Body
		var firstID, firstOff int64
		for i := 0; len(body) > 0; i++ {
			var e protocol.MPutEntry
			e, body = protocol.NextMPutEntry(body)
			attr, has, pl, _ := message.SplitData(e.Flag, e.Data)
			id, off := l.append(&message.Message{Body: pl, Attribute: attr, HasAttribute: has})
			if i == 0 {
				firstID, firstOff = id, off
			}
		}
		res := protocol.AppendPutResultBody(nil, firstID, r.Partition, firstOff)
		res = append(append(res, ' '), strconv.Itoa(r.Count)...)
		w.result(protocol.StatusOK, string(res), r.Opaque)
	case protocol.OpGet:
		b.gets.Lock()
		b.gets.n++
		b.gets.Unlock()
		l.get(w, r.Offset, int(r.MaxSize), r.Opaque)
	case protocol.OpOffset:
		off := r.Offset
		if mx := l.max(); off > mx {
			off = mx
		}
		if off < l.base {
			off = l.base
		}
		w.result(protocol.StatusOK, strconv.FormatInt(off, 10), r.Opaque)
	case protocol.OpStats:
		w.result(protocol.StatusOK, "STATS\r\n"+b.topic+" partitions "+strconv.Itoa(len(b.parts))+
			" message_count 0 message_bytes 0 accept_publish true accept_subscribe true\r\nEND\r\n", r.Opaque)
	default:
		w.result(protocol.StatusBadRequest, "unsupported", r.Opaque)
	}
}
