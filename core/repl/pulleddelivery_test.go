package repl

import (
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// syncConn records how ApplySync answered syncs.
type syncConn struct {
	mu       sync.Mutex
	appended []int64 // ids whose syncs were appended here
	dups     []int64 // ids answered as the puller's copies
	pending  atomic.Int32
	failed   atomic.Bool // FailSyncs was called
	done     chan struct{}
}

func (c *syncConn) AppendDone(_ uint64, firstID, _ int64, err error) {
	c.mu.Lock()
	if err == nil {
		c.appended = append(c.appended, firstID)
	}
	c.mu.Unlock()
	c.pending.Add(-1)
	c.done <- struct{}{}
}

func (c *syncConn) SyncPending(n int) { c.pending.Add(int32(n)) }

func (c *syncConn) FailSyncs() { c.failed.Store(true) }

func (c *syncConn) SyncDup(_ int32, id int64, _ int32, err error) {
	c.mu.Lock()
	if err == nil {
		c.dups = append(c.dups, id)
	}
	c.mu.Unlock()
	c.pending.Add(-1)
	c.done <- struct{}{}
}

type testIDs struct{ n atomic.Int64 }

func (s *testIDs) Next(n int) int64 { return s.n.Add(int64(n)) - int64(n) + 1 }

// testDelivery is a delayed message's delivery (it carries a delivery
// header) with id.
func testDelivery(id int64) store.Entry {
	m := &message.Message{Body: []byte("due"), Headers: message.Headers{{Key: message.HeaderDelay, Value: []byte("300")}}}
	data := m.AppendData(nil)
	return store.Entry{ID: id, Flag: m.Flag(), CRC: message.Checksum(data), Data: data}
}

// pullRecords has s's puller take entries, one get reply of the master's,
// for rp and waits for its append: the round's result for rp, and the
// reply's body.
func pullRecords(t *testing.T, s *Slave, rp *replPart, entries ...store.Entry) (roundResult, []byte) {
	t.Helper()
	var body []byte
	for _, e := range entries {
		body = message.AppendRecordCRC(body, e.ID, e.Flag, e.CRC, e.Data)
	}
	wg := &roundWaiter{res: make([]roundResult, 1)}
	if _, err := s.apply(rp, &protocol.Request{Op: protocol.OpValue, Body: body}, nil, wg, 0); err != nil {
		t.Fatal(err)
	}
	wg.wait()
	return wg.res[0], body
}

// TestPulledDeliveryAboveLastID: a delivery of a delayed message (it keeps
// the id of its acceptance) that the puller copies before its sync
// arrives is a dup whatever the partition's last id was when the puller
// copied it. The puller noted only deliveries below the last id: one
// delivered to a partition whose last id was lower (no put to it since
// the delayed message was accepted, or the delivery first in the batch
// the puller copied) raised the last id to its own, its sync then
// counted as below it and not noted, and the slave appended it a second
// time (TestSyncPairDelayedDelivery's copies differed).
func TestPulledDeliveryAboveLastID(t *testing.T) {
	t.Parallel()
	plain := func(id int64) store.Entry {
		data := []byte("plain")
		return store.Entry{ID: id, CRC: message.Checksum(data), Data: data}
	}
	for _, tc := range []struct {
		name   string
		pulled []store.Entry // the puller's copy, in one get reply
		syncs  []store.Entry // then the syncs of the same records arrive
	}{
		{"a delivery alone", []store.Entry{testDelivery(5)}, []store.Entry{testDelivery(5)}},
		{"deliveries in rising ids", []store.Entry{testDelivery(3), testDelivery(5), testDelivery(7)}, []store.Entry{testDelivery(3), testDelivery(5), testDelivery(7)}},
		{"a delivery before a put", []store.Entry{testDelivery(5), plain(50)}, []store.Entry{testDelivery(5), plain(50)}},
		{"a put before a delivery", []store.Entry{plain(50), testDelivery(5)}, []store.Entry{plain(50), testDelivery(5)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := store.Open(t.TempDir(), store.Options{IDs: &testIDs{}})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			s := NewSlave(Config{MaxMessageSize: 1 << 20}, 1, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
			res, body := pullRecords(t, s, &replPart{topic: "t", l: l, fetch: 1 << 20}, tc.pulled...)
			if res.err != nil || res.n != len(tc.pulled) {
				t.Fatalf("the puller's append: %d records, %v", res.n, res.err)
			}
			c := &syncConn{done: make(chan struct{}, len(tc.syncs))}
			for i, e := range tc.syncs {
				if err := s.ApplySync(c, l, 0, []store.Entry{e}, int32(i), func() error { return nil }); err != nil {
					t.Fatal(err)
				}
			}
			for range tc.syncs {
				select {
				case <-c.done:
				case <-time.After(5 * time.Second):
					t.Fatal("a sync was not answered")
				}
			}
			if len(c.appended) > 0 || len(c.dups) != len(tc.syncs) {
				t.Fatalf("syncs of records the puller copied: %v appended again, %v answered as dups", c.appended, c.dups)
			}
			if want := int64(len(body)); l.MaxOffset() != want {
				t.Fatalf("the slave's log ends at %d, the master's at %d", l.MaxOffset(), want)
			}
		})
	}
}

// TestForgetFailedDeliveries: when a puller append that noted deliveries
// as copied fails once queued (a failed fsync), the round forgets them
// with the rest of its state: a sync of one of them is then not answered
// as the puller's copy (200 with the slave lacking it), and the
// deliveries noted before, whose append succeeded, stay noted.
func TestForgetFailedDeliveries(t *testing.T) {
	t.Parallel()
	l, err := store.Open(t.TempDir(), store.Options{IDs: &testIDs{}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := NewSlave(Config{MaxMessageSize: 1 << 20}, 1, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	rp := &replPart{topic: "t", l: l, fetch: 1 << 20}
	pull := func(ids ...int64) roundResult {
		t.Helper()
		var entries []store.Entry
		for _, id := range ids {
			entries = append(entries, testDelivery(id))
		}
		res, _ := pullRecords(t, s, rp, entries...)
		rp.next += res.bytes
		return res
	}
	pull(3)
	res := pull(5, 7)
	if got := res.noted; len(got) != 2 || got[0] != 5 || got[1] != 7 {
		t.Fatalf("noted %v, want [5 7]", got)
	}
	s.forgetFailed(rp, res.noted) // as round does when res.err is set
	sl := s.LogState(l)
	sl.Lock()
	defer sl.Unlock()
	if sl.TakePulledOld(5) || sl.TakePulledOld(7) {
		t.Fatal("a delivery of a failed append still counts as copied")
	}
	if !sl.TakePulledOld(3) {
		t.Fatal("a delivery of an append that succeeded was forgotten")
	}
}
