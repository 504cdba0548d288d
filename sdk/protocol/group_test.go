package protocol

import (
	"bytes"
	"errors"
	"testing"
)

func TestGroupRequestsRoundTrip(t *testing.T) {
	var buf []byte
	buf = AppendJoin(buf, "g1", "t1", "c-1", "default", 7)
	buf = AppendHeartbeat(buf, "g1", "t1", "c-1", 42, 8)
	buf = AppendLeave(buf, "g1", "t1", "c-1", 9)
	d := NewDecoder(bytes.NewReader(buf), Limits{})
	var r Request
	if err := d.Decode(&r); err != nil || r.Op != OpJoin || string(r.Group) != "g1" || string(r.Topic) != "t1" ||
		string(r.Member) != "c-1" || string(r.Strategy) != "default" || r.Opaque != 7 {
		t.Fatalf("join: %v %+v", err, r)
	}
	if err := d.Decode(&r); err != nil || r.Op != OpHeartbeat || string(r.Member) != "c-1" || r.Generation != 42 || r.Opaque != 8 {
		t.Fatalf("heartbeat: %v %+v", err, r)
	}
	if err := d.Decode(&r); err != nil || r.Op != OpLeave || string(r.Group) != "g1" || string(r.Member) != "c-1" || r.Opaque != 9 {
		t.Fatalf("leave: %v %+v", err, r)
	}
}

func TestGroupRequestsBad(t *testing.T) {
	for _, in := range []string{
		"join g t c 1\r\n",          // no strategy
		"join g t  default 1\r\n",   // empty member
		"heartbeat g t c x 3\r\n",   // bad generation
		"heartbeat g t c -1 3\r\n",  // negative generation
		"leave g t c\r\n",           // no opaque... 4 tokens
		"leave g t c 1 2\r\n",       // too many
		"join g t c default zz\r\n", // bad opaque
	} {
		d := NewDecoder(bytes.NewReader([]byte(in+"version 5\r\n")), Limits{})
		var r Request
		err := d.Decode(&r)
		var pe *Error
		if !errors.As(err, &pe) || pe.Fatal || pe.Code != StatusBadRequest {
			t.Fatalf("%q: want non-fatal 400, got %v", in, err)
		}
		if err := d.Decode(&r); err != nil || r.Op != OpVersion || r.Opaque != 5 {
			t.Fatalf("%q: framing lost: %v %+v", in, err, r)
		}
	}
}

func TestGroupViewRoundTrip(t *testing.T) {
	for _, c := range []struct {
		gen   int64
		parts []int32
		want  string
	}{{3, []int32{0, 1, 5}, "3 0,1,5"}, {0, nil, "0 "}, {9, []int32{12}, "9 12"}} {
		b := AppendGroupView(nil, c.gen, c.parts)
		if string(b) != c.want {
			t.Fatalf("got %q want %q", b, c.want)
		}
		g, ps, err := ParseGroupView(b)
		if err != nil || g != c.gen || len(ps) != len(c.parts) {
			t.Fatalf("parse %q: %d %v %v", b, g, ps, err)
		}
		for i := range ps {
			if ps[i] != c.parts[i] {
				t.Fatalf("parse %q: %v", b, ps)
			}
		}
	}
	for _, bad := range []string{"", "x 1", "1 a", "1 1,,2", "-1 1", "1"} {
		if _, _, err := ParseGroupView([]byte(bad)); err == nil {
			t.Fatalf("%q: want error", bad)
		}
	}
}
