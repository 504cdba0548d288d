package timer

import (
	"errors"
	"testing"
	"time"

	"github.com/metaq-go/metaq/core/idem"
	"github.com/metaq-go/metaq/sdk/message"
)

// TestCheck: max_delay and max_message_size with the timer header, as
// *RefusedError; the record a put becomes.
func TestCheck(t *testing.T) {
	lim := Limits{MaxDelay: 60_000, MaxMessageSize: 100}
	now := int64(1_000_000)
	if err := Check("t", 10, message.Delivery{Delay: 60_000}, now, lim); err != nil {
		t.Fatal(err)
	}
	var re *RefusedError
	err := Check("t", 10, message.Delivery{Delay: 61_000}, now, lim)
	if !errors.As(err, &re) || re.Msg != "delayed message: delivery in 1m1s exceeds max_delay 1m0s" {
		t.Fatalf("%v", err)
	}
	size := 100 - MessageHeaderSize("t")
	if err := Check("t", size, message.Delivery{}, now, lim); err != nil {
		t.Fatal(err)
	}
	err = Check("t", size+1, message.Delivery{}, now, lim)
	if !errors.As(err, &re) || re.Msg != "delayed message of 81 bytes: with its timer header (20 bytes) it exceeds max_message_size 100" {
		t.Fatalf("%v", err)
	}
	rec, err := Parse(PutRecord("t", 3, 5, []byte("x"), message.Delivery{IsAt: true, At: now - 5}, 0, now))
	if err != nil || rec.Kind != KindMessage || rec.Msg.Due != now || rec.Msg.Topic != "t" || rec.Msg.Partition != 3 ||
		rec.Msg.Flag != 5 || string(rec.Msg.Data) != "x" {
		t.Fatalf("%+v %v", rec, err)
	}
	if rec, err := Parse(PutRecord("t", 3, 0, nil, message.Delivery{}, 42, now)); err != nil || rec.Kind != KindCancel || rec.Cancel != 42 {
		t.Fatalf("%+v %v", rec, err)
	}
	if !DueOnArrival(message.Delivery{}, now) || DueOnArrival(message.Delivery{Delay: 1}, now) ||
		!DueOnArrival(message.Delivery{IsAt: true, At: now}, now) {
		t.Fatal("DueOnArrival")
	}
	for p := range int32(8) {
		if tp := PartitionOf("topic", p, 4); tp != (PartitionOf("topic", 0, 4)+p)%4 {
			t.Fatalf("partition %d -> %d", p, tp)
		}
	}
	if !MayCopy("g", "g", false, nil) || MayCopy("h", "g", false, nil) || MayCopy("g", "g", true, func() bool { return false }) {
		t.Fatal("MayCopy")
	}
}

// TestBeginIdem: a delayed-put table rebuilt from its timer partition's
// message records for its target: a retry of a stored put gets its msgId,
// a new sequence a ticket, a gap, a stored sequence and an unknown
// producer their *idem.RefusedError.
func TestBeginIdem(t *testing.T) {
	tl := openTestLog(t, t.TempDir())
	defer tl.l.Close()
	put := func(topic string, p int32, seq int64) int64 {
		m := message.Message{Body: []byte("x"), ProducerID: 7, ProducerSeq: seq}
		id, _ := tl.put(AppendMessage(nil, &Message{Due: 1, Topic: topic, Partition: p, Flag: m.Flag(), Data: m.AppendData(nil)}))
		return id
	}
	id0 := put("t", 1, 0)
	put("t", 2, 5) // another target: not in t-1's table
	id1 := put("t", 1, 1)
	recs, err := ScanProducers(tl.l, "t", 1, 1<<20)
	if err != nil || len(recs) != 2 || recs[0].ID != id0 || recs[1].ID != id1 || recs[1].Seq != 1 {
		t.Fatalf("%+v %v", recs, err)
	}
	tab := idem.NewTable(idem.Config{MaxProducers: 16, IdleExpiry: time.Hour, RebuildBytes: 1 << 20})
	logs := 0
	logf := func(string, ...any) { logs++ }
	_, res, err := BeginIdem(tab, tl.l, "t", 1, 7, 1, logf)
	if err != nil || res != (idem.Result{FirstID: id1, FirstOffset: -1, Count: 1}) || logs != 1 {
		t.Fatalf("%+v %v %d", res, err, logs)
	}
	tk, res, err := BeginIdem(tab, tl.l, "t", 1, 7, 2, logf)
	if err != nil || res.Count != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	var ie *idem.RefusedError
	if _, _, err := BeginIdem(tab, tl.l, "t", 1, 7, 2, logf); !errors.As(err, &ie) || ie.Verdict != idem.InFlight {
		t.Fatalf("%v", err)
	}
	tab.Finish(tk, idem.Result{FirstID: 99, FirstOffset: -1, Count: 1}, true)
	if _, _, err := BeginIdem(tab, tl.l, "t", 1, 7, 9, logf); !errors.As(err, &ie) || ie.Verdict != idem.OutOfOrder ||
		ie.Msg != "delayed message of producer 7 sequence 9: the broker expects the producer's next sequence, not a gap" {
		t.Fatalf("%v", err)
	}
	if _, _, err := BeginIdem(tab, tl.l, "t", 1, 8, 3, logf); !errors.As(err, &ie) || ie.Verdict != idem.UnknownProducer {
		t.Fatalf("%v", err)
	}
	if logs != 1 {
		t.Fatalf("rebuilt %d times", logs)
	}
}

// TestAccept: a delayed put's record, a cancel's, an idempotent cancel
// and a put past max_delay refused; in a transaction a cancel refused
// and a delivery checked as a put is.
func TestAccept(t *testing.T) {
	lim := Limits{MaxDelay: 60_000, MaxMessageSize: 100}
	now := int64(1_000_000)
	d := message.Delivery{Delay: 5_000}
	rec, err := Accept("t", 2, 0, []byte("x"), d, 0, true, now, lim)
	if err != nil || string(rec) != string(PutRecord("t", 2, 0, []byte("x"), d, 0, now)) {
		t.Fatalf("put: %q, %v", rec, err)
	}
	rec, err = Accept("t", 2, 0, nil, message.Delivery{}, 77, false, now, lim)
	if err != nil || string(rec) != string(AppendCancel(nil, 77)) {
		t.Fatalf("cancel: %q, %v", rec, err)
	}
	if _, err := Accept("t", 2, 0, nil, message.Delivery{}, 77, true, now, lim); err != ErrIdempotentCancel {
		t.Fatalf("idempotent cancel: %v", err)
	}
	far := message.Delivery{Delay: 61_000}
	if _, err := Accept("t", 2, 0, []byte("x"), far, 0, false, now, lim); err == nil || err.Error() != Check("t", 1, far, now, lim).Error() {
		t.Fatalf("past max_delay: %v", err)
	}
	if err := CheckInTx("t", 1, message.Delivery{}, 77, now, lim); err != ErrCancelInTx {
		t.Fatalf("cancel in a transaction: %v", err)
	}
	if err := CheckInTx("t", 1, d, 0, now, lim); err != nil {
		t.Fatal(err)
	}
	if err := CheckInTx("t", 1, far, 0, now, lim); err == nil {
		t.Fatal("a transactional put past max_delay taken")
	}
}
