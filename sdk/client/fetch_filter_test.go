package client

import (
	"encoding/binary"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// filteringGet answers a get on l like a broker with a server-side filter
// that keeps records for which keep(body) holds: fvalue with the kept
// records and the next offset, or 301 when none is kept.
func filteringGet(w *fakeWriter, l *memLog, r *protocol.Request, keep func(string) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.Offset >= l.base+int64(len(l.data)) {
		w.result(protocol.StatusNotFound, "no data", r.Opaque)
		return
	}
	b := l.data[r.Offset-l.base:]
	it := message.NewIterator(b[:min(len(b), int(r.MaxSize))], r.Offset, 0)
	var body []byte
	for it.Next() {
		rec := it.Record()
		if keep(string(rec.Data)) {
			body = binary.BigEndian.AppendUint64(body, uint64(rec.Offset))
			body = message.AppendRecord(body, rec.ID, rec.Flag, rec.Data)
		}
	}
	if len(body) == 0 {
		w.result(protocol.StatusMoved, strconv.FormatInt(it.NextOffset(), 10), r.Opaque)
		return
	}
	w.write(append(protocol.AppendFValueHeader(nil, len(body), r.Opaque, it.NextOffset()), body...))
}

func TestConsumerFilteredReplies(t *testing.T) {
	b := newMemBroker("t", 1)
	offs := fill(b.parts[0], 200, 30)
	keep := func(body string) bool {
		n, _ := strconv.Atoi(string(trimZeros([]byte(body))))
		return n%5 == 0
	}
	var broken atomic.Bool
	b.hook = func(w *fakeWriter, r *protocol.Request) bool {
		if r.Op != protocol.OpGet {
			return false
		}
		if !broken.Swap(true) {
			// One malformed reply first (an entry whose offset is past its
			// next offset): the consumer backs off and repeats the get.
			body := binary.BigEndian.AppendUint64(nil, 999999)
			body = message.AppendRecord(body, 1, 0, []byte("x"))
			w.write(append(protocol.AppendFValueHeader(nil, len(body), r.Opaque, 10), body...))
			return true
		}
		filteringGet(w, b.parts[0], r, keep)
		return true
	}
	c := memConsumer(t, b, withMaxFetchSize(300))
	got := collect(t, c, 40)
	for i, m := range got {
		require.Equal(t, strconv.Itoa(i*5), string(trimZeros(m.Body)))
		require.Equal(t, offs[i*5], m.Offset, "each message carries its own offset")
	}
	require.Equal(t, offs[196], c.Position(0))
	// Reading on: nothing more is delivered, and the position moves past the
	// records the filter skipped (a 301), to the end.
	for m, err := range c.Messages(ctxT(t, 500*time.Millisecond)) {
		require.NoError(t, err)
		t.Fatalf("unexpected message %q at %d", m.Body, m.Offset)
	}
	require.Equal(t, b.parts[0].max(), c.Position(0))
}

func trimZeros(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}
