package protocol

import (
	"bytes"
	"errors"
	"testing"
)

// TestAppendSyncRoundTrip: what AppendSync writes, Decode reads back.
func TestAppendSyncRoundTrip(t *testing.T) {
	frame := AppendSync(nil, "t", 3, 1, 1234567890123, 42, 9, []byte("\x00\x00\x00\x01ahello"))
	d := NewDecoder(bytes.NewReader(frame), Limits{})
	var r Request
	if err := d.Decode(&r); err != nil {
		t.Fatal(err)
	}
	if r.Op != OpSync || string(r.Topic) != "t" || r.Partition != 3 || r.Flag != 1 || r.MsgID != 1234567890123 ||
		r.Checksum != 42 || r.Opaque != 9 || string(r.Body) != "\x00\x00\x00\x01ahello" {
		t.Fatalf("decoded %+v", r)
	}
}

// TestTxSyncFrames: a txsync frame round-trips; a bad kind or opaque is a
// 400 that keeps the framing; a bad length loses it.
func TestTxSyncFrames(t *testing.T) {
	frame := append(AppendTxSyncHeader(nil, TxSyncCommit, 5, 7), "hello"...)
	frame = append(frame, "txsync bogus 2 8\r\nxy"...)
	frame = append(frame, "txsync state 1 x\r\nz"...)
	frame = append(frame, AppendTxSyncHeader(nil, TxSyncState, 0, 9)...)
	d := NewDecoder(bytes.NewReader(frame), Limits{})
	var r Request
	if err := d.Decode(&r); err != nil || r.Op != OpTxSync || string(r.Item) != TxSyncCommit || r.Opaque != 7 || string(r.Body) != "hello" {
		t.Fatalf("decoded %+v, %v", r, err)
	}
	for _, want := range []int32{8, 0} {
		var pe *Error
		if err := d.Decode(&r); !errors.As(err, &pe) || pe.Fatal || pe.Opaque != want || pe.Code != StatusBadRequest {
			t.Fatalf("want a 400 for opaque %d, got %v", want, err)
		}
	}
	if err := d.Decode(&r); err != nil || r.Op != OpTxSync || string(r.Item) != TxSyncState || r.Opaque != 9 || len(r.Body) != 0 {
		t.Fatalf("decoded %+v, %v", r, err)
	}
	d = NewDecoder(bytes.NewReader([]byte("txsync commit -1 3\r\n")), Limits{})
	var pe *Error
	if err := d.Decode(&r); !errors.As(err, &pe) || !pe.Fatal {
		t.Fatalf("a bad length must lose framing: %v", err)
	}
}
