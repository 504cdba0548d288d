package filters

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
)

// packedSample is a batch with every kind of record: attributes present,
// empty and absent; bodies present, empty and absent.
func packedSample() []Record {
	return []Record{
		{Offset: 0, MsgID: 1, Flag: 1, Attribute: "red", HasAttribute: true, Size: 10, Body: []byte("abc")},
		{Offset: 30, MsgID: 2, Flag: 1, Attribute: "", HasAttribute: true, Size: 4, Body: []byte{}},
		{Offset: 54, MsgID: 3, Size: 5},
		{Offset: 79, MsgID: -4, Flag: -7, Attribute: "eu-west", HasAttribute: true, Size: 1 << 40, Body: []byte("zz")},
		{Offset: 1 << 50, MsgID: 5, Size: 0, Body: []byte("x")},
	}
}

// propsSample is packedSample with properties blocks on some records: a
// full one, a key alone, none.
func propsSample(tb testing.TB) []Record {
	tb.Helper()
	block := func(m *message.Message) []byte {
		b := m.AppendProperties(nil)
		return b[4:]
	}
	recs := packedSample()
	recs[0].Properties = block(&message.Message{Key: []byte("k1"), Timestamp: time.UnixMilli(1700000000123),
		Tags: []string{"TagA", "TagB"}, Headers: message.Headers{{Key: "region", Value: []byte("eu")}, {Key: "n", Value: nil}}})
	recs[2].Properties = block(&message.Message{Key: []byte{}})
	recs[4].Properties = block(&message.Message{Headers: message.Headers{{Key: "region", Value: []byte("us")}}})
	return recs
}

// TestPackedProperties checks the properties blocks' round trip, that a
// batch packed without them is byte for byte the format before them (the
// length field zero), and the decoded fields a plugin sees.
func TestPackedProperties(t *testing.T) {
	t.Parallel()
	recs := propsSample(t)
	without := appendPacked(nil, recs, false)
	for i := range recs {
		if v := binary.LittleEndian.Uint32(without[packedPrefix+i*packedHeaderSize+36:]); v != 0 {
			t.Fatalf("record %d: properties length %d in a batch without properties", i, v)
		}
	}
	if !bytes.Equal(without, appendPacked(nil, packedSample(), false)) {
		t.Fatal("a batch without properties differs from one of records that have none")
	}
	b := appendPacked(nil, recs, true)
	if len(b) != packedSize(recs, true) {
		t.Fatalf("%d bytes, packedSize %d", len(b), packedSize(recs, true))
	}
	got, err := decodePacked(b, nil, false)
	if err != nil || !reflect.DeepEqual(got, recs) {
		t.Fatalf("decode = %+v, %v; want %+v", got, err, recs)
	}
	if err := fillProps(got); err != nil {
		t.Fatal(err)
	}
	r := got[0]
	if string(r.Key) != "k1" || r.CreateTime.UnixMilli() != 1700000000123 || !reflect.DeepEqual(r.Tags, []string{"TagA", "TagB"}) ||
		len(r.Headers) != 2 || string(r.Headers[0].Value) != "eu" || r.Headers[1].Value != nil {
		t.Fatalf("record 0: %+v", r)
	}
	if got[2].Key == nil || len(got[2].Key) != 0 || got[1].Key != nil || !got[1].CreateTime.IsZero() {
		t.Fatalf("records 1, 2: %+v %+v", got[1], got[2])
	}
	// Reused for a batch without properties, the fields are cleared.
	got, err = decodePacked(without, got, false)
	if err == nil {
		err = fillProps(got)
	}
	if err != nil || got[0].Key != nil || got[0].Tags != nil || got[0].Headers != nil || !got[0].CreateTime.IsZero() || got[0].Properties != nil {
		t.Fatalf("reused: %+v, %v", got[0], err)
	}
	// The gRPC columns carry the same fields.
	col, err := propsColumn(recs)
	if err != nil {
		t.Fatal(err)
	}
	fromCol := packedSample()
	propsFromColumn(fromCol, col)
	for i := range fromCol {
		fromCol[i].Properties = recs[i].Properties
	}
	want, _ := decodePacked(b, nil, false)
	if err := fillProps(want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromCol, want) {
		t.Fatalf("columns: %+v\nwant %+v", fromCol, want)
	}
}

func TestPackedRoundTrip(t *testing.T) {
	t.Parallel()
	for _, recs := range [][]Record{nil, {}, packedSample(), packedSample()[2:3]} {
		b := appendPacked([]byte("prefix"), recs, false)
		if !bytes.HasPrefix(b, []byte("prefix")) || len(b)-len("prefix") != packedSize(recs, false) {
			t.Fatalf("appendPacked: %d bytes after the prefix, packedSize %d", len(b)-len("prefix"), packedSize(recs, false))
		}
		b = b[len("prefix"):]
		for _, alias := range []bool{true, false} {
			got, err := decodePacked(b, make([]Record, 7), alias)
			if err != nil {
				t.Fatalf("decode (alias %v): %v", alias, err)
			}
			if len(recs) == 0 && len(got) == 0 {
				continue
			}
			if !reflect.DeepEqual(got, recs) {
				t.Fatalf("decode (alias %v) = %+v, want %+v", alias, got, recs)
			}
			for i := range got {
				if (got[i].Body == nil) != (recs[i].Body == nil) {
					t.Fatalf("record %d: body nil = %v, want %v", i, got[i].Body == nil, recs[i].Body == nil)
				}
			}
		}
	}
}

// TestPackedCopies checks that without alias nothing decoded points into
// the buffer, which the batch channel reuses for the next call.
func TestPackedCopies(t *testing.T) {
	t.Parallel()
	recs := packedSample()
	b := appendPacked(nil, recs, false)
	got, err := decodePacked(b, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0xee
	}
	if !reflect.DeepEqual(got, recs) {
		t.Fatalf("after overwriting the buffer: %+v, want %+v", got, recs)
	}
	// Reusing the record slice clears what a shorter batch leaves behind.
	short := []Record{{Offset: 9, MsgID: 9, Size: 1}}
	got, err = decodePacked(appendPacked(nil, short, false), got, false)
	if err != nil || !reflect.DeepEqual(got, short) {
		t.Fatalf("reused slice: %+v, %v", got, err)
	}
}

func TestPackedMalformed(t *testing.T) {
	t.Parallel()
	good := appendPacked(nil, propsSample(t), true)
	hdr := func(i, field int) int { return packedPrefix + i*packedHeaderSize + field }
	mutate := map[string]func(b []byte) []byte{
		"empty":          func(b []byte) []byte { return nil },
		"format":         func(b []byte) []byte { b[0] = 2; return b },
		"count too big":  func(b []byte) []byte { binary.LittleEndian.PutUint32(b[1:], 1<<31); return b },
		"count small":    func(b []byte) []byte { binary.LittleEndian.PutUint32(b[1:], 4); return b },
		"truncated":      func(b []byte) []byte { return b[:len(b)-1] },
		"trailing":       func(b []byte) []byte { return append(b, 0) },
		"attr len -2":    func(b []byte) []byte { binary.LittleEndian.PutUint32(b[hdr(0, 28):], 0xfffffffe); return b },
		"attr too long":  func(b []byte) []byte { binary.LittleEndian.PutUint32(b[hdr(0, 28):], 4); return b },
		"body too long":  func(b []byte) []byte { binary.LittleEndian.PutUint32(b[hdr(0, 32):], 1<<30); return b },
		"props too long": func(b []byte) []byte { b[hdr(1, 36)]++; return b },
		"props len < 0":  func(b []byte) []byte { binary.LittleEndian.PutUint32(b[hdr(0, 36):], 0xffffffff); return b },
	}
	for name, f := range mutate {
		b := f(bytes.Clone(good))
		if _, err := decodePacked(b, nil, true); !errors.Is(err, errPacked) {
			t.Errorf("%s: err = %v, want errPacked", name, err)
		}
	}
}

func TestBitmap(t *testing.T) {
	t.Parallel()
	for n := range 20 {
		keep := make([]bool, n)
		for i := range keep {
			keep[i] = (i*7)%3 == 0
		}
		bm := appendBitmap([]byte{0xff}, keep)[1:]
		if len(bm) != bitmapSize(n) {
			t.Fatalf("n %d: %d bytes", n, len(bm))
		}
		got, err := decodeBitmap(bm, n)
		if err != nil || !reflect.DeepEqual(got, keep) {
			t.Fatalf("n %d: %v, %v; want %v", n, got, err, keep)
		}
	}
	if _, err := decodeBitmap([]byte{0x01}, 2); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		bm []byte
		n  int
	}{{nil, 1}, {[]byte{1}, 0}, {[]byte{0x04}, 2}, {[]byte{0, 0}, 8}, {nil, -1}} {
		if _, err := decodeBitmap(c.bm, c.n); !errors.Is(err, errPacked) {
			t.Errorf("decodeBitmap(%x, %d): err = %v, want errPacked", c.bm, c.n, err)
		}
	}
}

// FuzzDecodePacked checks that decodePacked never panics, that what it
// accepts encodes back to the same bytes, and that copying and aliasing
// decode alike. The seeds run as a normal test.
func FuzzDecodePacked(f *testing.F) {
	f.Add(appendPacked(nil, packedSample(), false))
	f.Add(appendPacked(nil, nil, false))
	f.Add(appendPacked(nil, packedSample()[2:3], false))
	f.Add(appendPacked(nil, propsSample(f), true))
	f.Add([]byte{packedFormat, 1, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := decodePacked(b, nil, true)
		if err != nil {
			if !errors.Is(err, errPacked) {
				t.Fatalf("error %v does not wrap errPacked", err)
			}
			return
		}
		if again := appendPacked(nil, recs, true); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded %x, decoded from %x", again, b)
		}
		copied, err := decodePacked(b, nil, false)
		if err != nil || !reflect.DeepEqual(copied, recs) {
			t.Fatalf("copying decode: %+v, %v; aliasing: %+v", copied, err, recs)
		}
	})
}

// encodeChanRequest is the host's request frame (without its length).
func encodeChanRequest(id uint32, timeout uint64, req *AcceptRequest) []byte {
	w := append([]byte{}, chanOpAccept)
	w = binary.LittleEndian.AppendUint32(w, id)
	w = binary.LittleEndian.AppendUint64(w, timeout)
	w = binary.LittleEndian.AppendUint32(w, uint32(req.Partition))
	w = appendString32(w, req.Instance)
	w = appendString32(w, req.Topic)
	w = appendString32(w, req.Group)
	return appendPacked(w, req.Records, true)
}

// FuzzParseChanRequest checks that the plugin side of the batch channel
// never panics on a request frame, that a frame it accepts encodes back to
// the same bytes, and that nothing it returns aliases the frame (which the
// channel reuses). The seeds run as a normal test.
func FuzzParseChanRequest(f *testing.F) {
	f.Add(encodeChanRequest(7, 1e9, &AcceptRequest{Instance: "t/g", Topic: "t", Group: "g", Partition: 3, Records: packedSample()}))
	f.Add(encodeChanRequest(1, 0, &AcceptRequest{}))
	f.Add(encodeChanRequest(8, 1e9, &AcceptRequest{Instance: "t/g", Topic: "t", Group: "g", Records: propsSample(f)}))
	f.Add(encodeChanRequest(2, 1<<63, &AcceptRequest{Instance: "x"}))
	f.Add([]byte{chanOpAccept, 1, 0, 0, 0})
	f.Add([]byte{9, 9, 9, 9, 9, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, req, timeout, err := parseChanRequest(b, nil, map[string]string{})
		if len(b) >= 5 && id != binary.LittleEndian.Uint32(b[1:]) {
			t.Fatalf("call id %d, frame says %d", id, binary.LittleEndian.Uint32(b[1:]))
		}
		if err != nil {
			return
		}
		if timeout < 0 {
			t.Fatalf("negative timeout %v", timeout)
		}
		again := encodeChanRequest(id, uint64(timeout), req)
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoded %x, parsed from %x", again, b)
		}
		clear(b)
		if after := encodeChanRequest(id, uint64(timeout), req); !bytes.Equal(after, again) {
			t.Fatal("the request changed when the frame was overwritten")
		}
	})
}
