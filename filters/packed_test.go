package filters

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
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

func TestPackedRoundTrip(t *testing.T) {
	t.Parallel()
	for _, recs := range [][]Record{nil, {}, packedSample(), packedSample()[2:3]} {
		b := appendPacked([]byte("prefix"), recs)
		if !bytes.HasPrefix(b, []byte("prefix")) || len(b)-len("prefix") != packedSize(recs) {
			t.Fatalf("appendPacked: %d bytes after the prefix, packedSize %d", len(b)-len("prefix"), packedSize(recs))
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
	b := appendPacked(nil, recs)
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
	got, err = decodePacked(appendPacked(nil, short), got, false)
	if err != nil || !reflect.DeepEqual(got, short) {
		t.Fatalf("reused slice: %+v, %v", got, err)
	}
}

func TestPackedMalformed(t *testing.T) {
	t.Parallel()
	good := appendPacked(nil, packedSample())
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
		"reserved bytes": func(b []byte) []byte { b[hdr(1, 36)] = 1; return b },
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
	f.Add(appendPacked(nil, packedSample()))
	f.Add(appendPacked(nil, nil))
	f.Add(appendPacked(nil, packedSample()[2:3]))
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
		if again := appendPacked(nil, recs); !bytes.Equal(again, b) {
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
	return appendPacked(w, req.Records)
}

// FuzzParseChanRequest checks that the plugin side of the batch channel
// never panics on a request frame, that a frame it accepts encodes back to
// the same bytes, and that nothing it returns aliases the frame (which the
// channel reuses). The seeds run as a normal test.
func FuzzParseChanRequest(f *testing.F) {
	f.Add(encodeChanRequest(7, 1e9, &AcceptRequest{Instance: "t/g", Topic: "t", Group: "g", Partition: 3, Records: packedSample()}))
	f.Add(encodeChanRequest(1, 0, &AcceptRequest{}))
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
