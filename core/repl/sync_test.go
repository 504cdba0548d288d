package repl

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// waiter records the outcomes of shipped syncs and frames.
type waiter struct {
	mu   sync.Mutex
	errs []error
	n    chan struct{}
}

func newWaiter() *waiter { return &waiter{n: make(chan struct{}, 16)} }

func (w *waiter) SlaveDone(err error) {
	w.mu.Lock()
	w.errs = append(w.errs, err)
	w.mu.Unlock()
	w.n <- struct{}{}
}

func (w *waiter) wait(t *testing.T, n int) []error {
	t.Helper()
	for range n {
		select {
		case <-w.n:
		case <-time.After(5 * time.Second):
			t.Fatal("no outcome")
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]error(nil), w.errs...)
}

// fakeSlave answers each request on nc with code, and returns what it got.
func fakeSlave(t *testing.T, nc net.Conn, code int) <-chan protocol.Request {
	got := make(chan protocol.Request, 16)
	go func() {
		dec := protocol.NewDecoder(nc, protocol.Limits{})
		defer dec.Release()
		for {
			var r protocol.Request
			if err := dec.Decode(&r); err != nil {
				close(got)
				return
			}
			r.Body = append([]byte(nil), r.Body...)
			r.Topic = append([]byte(nil), r.Topic...)
			got <- r
			if _, err := nc.Write(protocol.AppendResult(nil, code, "x", r.Opaque)); err != nil {
				return
			}
		}
	}()
	return got
}

func testMaster(timeout time.Duration) *SyncMaster {
	return NewSyncMaster(Config{SyncTimeout: timeout}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// TestLinkShipsAndCounts: syncs and extension frames are shipped whole, in
// order, each answered through its waiter, and counted apart.
func TestLinkShipsAndCounts(t *testing.T) {
	sm := testMaster(5 * time.Second)
	mc, sc := net.Pipe()
	got := fakeSlave(t, sc, protocol.StatusOK)
	lk := sm.newLink(mc, "slave:1", false)
	sm.link.Store(lk)
	defer lk.Fail(errors.New("done"))

	w := newWaiter()
	data := []byte("hello")
	lk.Ship("t", 2, -1, []store.Entry{{ID: 7, CRC: message.Checksum(data), Data: data}, {ID: 8, Data: data}}, w)
	lk.ShipFrames([]Frame{{Kind: protocol.TxSyncPuts, Body: []byte("records")}}, w)
	for _, err := range w.wait(t, 3) {
		if err != nil {
			t.Fatalf("outcome: %v", err)
		}
	}
	r := <-got
	if r.Op != protocol.OpSync || string(r.Topic) != "t" || r.Partition != 2 || r.MsgID != 7 || string(r.Body) != "hello" {
		t.Fatalf("first frame: %+v", r)
	}
	if r = <-got; r.MsgID != 8 {
		t.Fatalf("second frame: %+v", r)
	}
	if r = <-got; r.Op != protocol.OpTxSync || string(r.Body) != "records" {
		t.Fatalf("third frame: %+v", r)
	}
	st := sm.Status()
	if st.Slave != "slave:1" || st.Shipped != 2 || st.ExtShipped != 1 {
		t.Fatalf("status %+v", st)
	}
}

// TestLinkFailures: a slave's error fails that sync (SlaveFailed); a sync
// unanswered within sync_timeout fails the link, and every pending sync,
// with "Slave is disconnected" (Disconnected); a dead link fails what is
// shipped on it at once.
func TestLinkFailures(t *testing.T) {
	sm := testMaster(5 * time.Second)
	mc, sc := net.Pipe()
	fakeSlave(t, sc, protocol.StatusInternalError)
	lk := sm.newLink(mc, "slave:1", false)
	w := newWaiter()
	lk.Ship("t", 0, -1, []store.Entry{{ID: 1, Data: []byte("a")}}, w)
	var e *Error
	if errs := w.wait(t, 1); !errors.As(errs[0], &e) || e.Kind != SlaveFailed {
		t.Fatalf("want SlaveFailed, got %v", errs[0])
	}
	lk.Fail(errors.New("done"))

	sm = testMaster(50 * time.Millisecond)
	mc, sc = net.Pipe()
	go io.Copy(io.Discard, sc) // reads, never answers
	lk = sm.newLink(mc, "slave:2", false)
	sm.link.Store(lk)
	w = newWaiter()
	lk.Ship("t", 0, -1, []store.Entry{{ID: 1, Data: []byte("a")}}, w)
	errs := w.wait(t, 1)
	if !errors.As(errs[0], &e) || e.Kind != Disconnected || e.Msg[:len("Slave is disconnected")] != "Slave is disconnected" {
		t.Fatalf("want Disconnected, got %v", errs[0])
	}
	if !lk.Dead() || sm.Link() != nil {
		t.Fatal("the link is not dead")
	}
	lk.ShipFrames([]Frame{{Kind: protocol.TxSyncPuts}}, w)
	if errs := w.wait(t, 1); errs[1] != errs[0] {
		t.Fatalf("shipped on a dead link: %v", errs[1])
	}
	sc.Close()
}

// TestRefuseTexts: the refusals keep MetaQ's exact wording.
func TestRefuseTexts(t *testing.T) {
	sm := testMaster(time.Second)
	if got := sm.Refuse("puts").Msg; got != "Slave is disconnected " {
		t.Fatalf("puts: %q", got)
	}
	if got := sm.Refuse("transactions").Msg; got != "Slave is disconnected" {
		t.Fatalf("transactions: %q", got)
	}
	sm.SetDegrade(true)
	if got := sm.Refuse("puts").Msg; got != "Slave is disconnected (unnaming the in-sync slave in ZooKeeper before storing puts on the master alone)" {
		t.Fatalf("degrade: %q", got)
	}
	if st := sm.Status(); st.Refused != 3 {
		t.Fatalf("refused %d", st.Refused)
	}
}

// TestSlaveLogPresent: how much of a replicated batch a slave has already.
func TestSlaveLogPresent(t *testing.T) {
	rec := int64(message.HeaderSize + 3)
	entries := []store.Entry{{ID: 1, Data: []byte("abc")}, {ID: 2, Data: []byte("def")}}
	sl := &SlaveLog{end: 100}
	if _, err := sl.Present(101, entries); err == nil {
		t.Fatal("a gap is not an error")
	}
	if k, err := sl.Present(100, entries); err != nil || k != 0 {
		t.Fatalf("none present: %d %v", k, err)
	}
	if k, err := sl.Present(100-rec, entries); err != nil || k != 1 {
		t.Fatalf("one present: %d %v", k, err)
	}
	if _, err := sl.Present(100-rec/2, entries); err == nil {
		t.Fatal("an end inside a record is not an error")
	}
	sl.Appended(entries)
	if sl.End() != 100+2*rec || sl.LastID() != 2 {
		t.Fatalf("after Appended: end %d last id %d", sl.End(), sl.LastID())
	}
}

// TestLinkDivergedOffset: a slave that answers a sync 200 at another
// offset than the master's has diverged: the sync fails (SlaveFailed,
// naming both offsets) and so does the link; the same offset, -1 (the
// puller had copied it) and a master offset not known pass.
func TestLinkDivergedOffset(t *testing.T) {
	slave := func(nc net.Conn, shift int64) {
		dec := protocol.NewDecoder(nc, protocol.Limits{})
		defer dec.Release()
		off := int64(1000)
		for {
			var r protocol.Request
			if err := dec.Decode(&r); err != nil {
				return
			}
			at := off + shift
			if r.MsgID == 3 {
				at = -1
			}
			body := protocol.AppendPutResultBody(nil, r.MsgID, r.Partition, at)
			off += int64(message.HeaderSize + len(r.Body))
			if _, err := nc.Write(protocol.AppendResult(nil, protocol.StatusOK, string(body), r.Opaque)); err != nil {
				return
			}
		}
	}
	entries := []store.Entry{{ID: 1, Data: []byte("a")}, {ID: 2, Data: []byte("bb")}, {ID: 3, Data: []byte("c")}}

	sm := testMaster(5 * time.Second)
	mc, sc := net.Pipe()
	go slave(sc, 0)
	lk := sm.newLink(mc, "slave:1", false)
	w := newWaiter()
	lk.Ship("t", 0, 1000, entries, w)
	lk.Ship("t", 0, -1, entries[:1], w)
	for _, err := range w.wait(t, 4) {
		if err != nil {
			t.Fatalf("same offsets: %v", err)
		}
	}
	if lk.Dead() {
		t.Fatal("the link died")
	}
	lk.Fail(errors.New("done"))

	sm = testMaster(5 * time.Second)
	mc, sc = net.Pipe()
	go slave(sc, -int64(message.HeaderSize+1)) // one record short
	lk = sm.newLink(mc, "slave:2", false)
	w = newWaiter()
	lk.Ship("t", 0, 1000, entries[:1], w)
	var e *Error
	if errs := w.wait(t, 1); !errors.As(errs[0], &e) || e.Kind != SlaveFailed ||
		e.Msg != "slave stored the sync at offset 979, the master at 1000 (the copies diverged)" {
		t.Fatalf("want SlaveFailed naming the offsets, got %v", errs[0])
	}
	if !lk.Dead() {
		t.Fatal("the link outlived a diverged slave")
	}
}
