package protocol

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// TestFilterFrames: what AppendFilter writes, Decode reads back (the empty
// line after the body is skipped); a bad opaque or an empty group is a 400
// that keeps the framing; a bad length loses it.
func TestFilterFrames(t *testing.T) {
	frame := AppendFilter(nil, "t", "g", "TagA ||\r\nTagB", 5)
	frame = AppendFilter(frame, "t", "g", "", 6)
	frame = append(frame, "filter t g 1 x\r\nzfilter t  0 8\r\n"...)
	frame = AppendVersion(frame, 9)
	d := NewDecoder(bytes.NewReader(frame), Limits{})
	var r Request
	if err := d.Decode(&r); err != nil || r.Op != OpFilter || string(r.Topic) != "t" || string(r.Group) != "g" ||
		r.Opaque != 5 || string(r.Body) != " TagA ||  TagB " {
		t.Fatalf("decoded %+v, %v", r, err)
	}
	if err := d.Decode(&r); err != nil || r.Op != OpFilter || r.Opaque != 6 || len(r.Body) != 0 {
		t.Fatalf("decoded %+v, %v", r, err)
	}
	for _, want := range []int32{0, 8} {
		var pe *Error
		if err := d.Decode(&r); !errors.As(err, &pe) || pe.Fatal || pe.Opaque != want || pe.Code != StatusBadRequest {
			t.Fatalf("want a 400 for opaque %d, got %v", want, err)
		}
	}
	if err := d.Decode(&r); err != nil || r.Op != OpVersion || r.Opaque != 9 {
		t.Fatalf("framing lost: %+v, %v", r, err)
	}
	if err := d.Decode(&r); err != io.EOF {
		t.Fatalf("want EOF, got %v", err)
	}
	for _, bad := range []string{"filter t g x 1\r\n", "filter t g -1 1\r\n", "filter t g 1\r\n"} {
		var pe *Error
		if err := NewDecoder(bytes.NewReader([]byte(bad)), Limits{}).Decode(&r); !errors.As(err, &pe) || !pe.Fatal {
			t.Errorf("%q: want a fatal 400, got %v", bad, err)
		}
	}
}

// TestFilterOldDecoder: a decoder without the command (modelled by an
// unknown one of the same shape) answers it with its opaque and reads the
// body as one line with no opaque, staying in frame: the form's reason.
func TestFilterOldDecoder(t *testing.T) {
	frame := AppendFilter(nil, "t", "g", `quit || header("n") > 5`, 5)
	frame = append([]byte("filtre"), frame[len("filter"):]...)
	frame = AppendVersion(frame, 9)
	d := NewDecoder(bytes.NewReader(frame), Limits{})
	var r Request
	for _, want := range []int32{5, 0} {
		var pe *Error
		if err := d.Decode(&r); !errors.As(err, &pe) || pe.Fatal || pe.Opaque != want {
			t.Fatalf("want a 400 for opaque %d, got %v", want, err)
		}
	}
	if err := d.Decode(&r); err != nil || r.Op != OpVersion || r.Opaque != 9 {
		t.Fatalf("framing lost: %+v, %v", r, err)
	}
}
