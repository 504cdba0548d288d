package protocol

import (
	"bytes"
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
