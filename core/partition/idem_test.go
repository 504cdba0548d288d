package partition

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/metaq-go/metaq/core/idem"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
)

// TestBeginIdem: a partition's table rebuilt from its log's tail (the
// records of idempotent producers, a plain one skipped): a retry of a
// stored put gets its first copy's result, a new sequence a ticket, its
// copy in flight, a gap and an unknown producer their *idem.RefusedError
// with the reply's text; the rebuild runs once.
func TestBeginIdem(t *testing.T) {
	l, err := store.Open(filepath.Join(t.TempDir(), "t-0"), store.Options{IDs: store.NewIDWorker(1, time.Now), MaxSegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	put := func(m message.Message) (int64, int64) {
		d := m.AppendData(nil)
		id, off, err := l.AppendSync([]store.Entry{{Flag: m.Flag(), Data: d, CRC: message.Checksum(d)}})
		if err != nil {
			t.Fatal(err)
		}
		return id, off
	}
	id0, off0 := put(message.Message{Body: []byte("a"), ProducerID: 7, ProducerSeq: 0})
	put(message.Message{Body: []byte("plain")})
	put(message.Message{Body: []byte("b"), ProducerID: 7, ProducerSeq: 1})
	recs, from, err := ScanProducers(l, 1<<20)
	if err != nil || from != 0 || len(recs) != 2 || recs[0].ID != id0 || recs[0].Offset != off0 || recs[1].Seq != 1 {
		t.Fatalf("%+v %d %v", recs, from, err)
	}

	tab := idem.NewTable(idem.Config{MaxProducers: 16, IdleExpiry: time.Hour, RebuildBytes: 1 << 20})
	logs := 0
	logf := func(string, ...any) { logs++ }
	_, res, err := BeginIdem(tab, l, 7, 0, 0, logf)
	if err != nil || res.Count == 0 || res.FirstID != id0 || res.FirstOffset != off0 || logs != 1 {
		t.Fatalf("%+v %v %d", res, err, logs)
	}
	tk, res, err := BeginIdem(tab, l, 7, 2, 3, logf)
	if err != nil || res.Count != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	var ie *idem.RefusedError
	if _, _, err := BeginIdem(tab, l, 7, 2, 3, logf); !errors.As(err, &ie) || ie.Verdict != idem.InFlight ||
		ie.Msg != "producer 7 sequences 2..3 are being stored by an earlier copy of this put; retry" {
		t.Fatalf("%v", err)
	}
	tab.Finish(tk, idem.Result{FirstID: 99, FirstOffset: 1000, Count: 2}, true)
	if _, _, err := BeginIdem(tab, l, 7, 9, 9, logf); !errors.As(err, &ie) || ie.Verdict != idem.OutOfOrder ||
		ie.Msg != "producer 7 sequences 9..9: the broker expects the producer's next sequence, not a gap or a part of a stored put" {
		t.Fatalf("%v", err)
	}
	if _, _, err := BeginIdem(tab, l, 8, 3, 3, logf); !errors.As(err, &ie) || ie.Verdict != idem.UnknownProducer {
		t.Fatalf("%v", err)
	}
	if logs != 1 {
		t.Fatalf("rebuilt %d times", logs)
	}
}

// TestIdemTables: a table is made once per key with the configured
// bounds under the tables' budget, reset when the failover epoch changed
// since its last use, and released by Forget.
func TestIdemTables(t *testing.T) {
	l, err := store.Open(filepath.Join(t.TempDir(), "t-0"), store.Options{IDs: store.NewIDWorker(1, time.Now)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	epoch, confs := int64(1), 0
	ts := NewIdemTables(func() idem.Config {
		confs++
		return idem.Config{MaxProducers: 4, IdleExpiry: time.Hour, RebuildBytes: 1 << 20}
	}, func() int64 { return 1 << 20 }, func() (int64, bool) { return epoch, true })
	type delayKey struct{ l *store.Log }
	ip := ts.Part(l, l)
	if ip.Log() != l || ts.Part(l, l) != ip || ts.Part(delayKey{l}, l) == ip || confs != 2 {
		t.Fatalf("parts: %d configs", confs)
	}
	tab := ts.Table(ip)
	if c := tab.Config(); c.MaxProducers != 4 || c.Budget != ts.Budget() {
		t.Fatalf("%+v", c)
	}
	if err := tab.Build(time.Now(), func() (func() (idem.Record, bool), error) { return idem.Feed(nil), nil }); err != nil {
		t.Fatal(err)
	}
	if !ts.Table(ip).Built() {
		t.Fatal("reset in the same epoch")
	}
	epoch = 2
	if ts.Table(ip).Built() {
		t.Fatal("not reset in a new epoch")
	}
	ts.Tick(time.Now())
	ts.Forget(l, delayKey{l})
	if ts.Part(l, l) == ip || confs != 3 {
		t.Fatal("not forgotten")
	}
}
