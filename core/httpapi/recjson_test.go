package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
)

// consumedRecordOf is ConsumedRecord as encoding/json would fill it: the
// reference appendRecordJSON is compared with.
func consumedRecordOf(topic string, p int32, f string, rec *message.Record) (map[string]any, bool) {
	m, err := rec.Message(topic, p)
	if err != nil {
		return nil, false
	}
	c := map[string]any{"topic": topic, "partition": p, "offset": rec.Offset, "msg_id": rec.ID, "timestamp": m.Time().UnixMilli()}
	field := func(b []byte) (any, bool) {
		switch f {
		case formatJSON:
			var v any
			if json.Unmarshal(b, &v) != nil {
				return nil, false
			}
			return v, true
		case formatText:
			return string(b), true
		}
		return base64.StdEncoding.EncodeToString(b), true
	}
	var ok bool
	if m.Key != nil {
		if c["key"], ok = field(m.Key); !ok {
			return nil, false
		}
	}
	if c["value"], ok = field(m.Body); !ok {
		return nil, false
	}
	if len(m.Headers) > 0 {
		var hs []any
		for _, h := range m.Headers {
			var v any
			if h.Value != nil {
				v = string(h.Value)
			}
			hs = append(hs, map[string]any{"key": h.Key, "value": v})
		}
		c["headers"] = hs
	}
	if len(m.Tags) > 0 {
		var ts []any
		for _, t := range m.Tags {
			ts = append(ts, t)
		}
		c["tags"] = ts
	}
	if m.HasAttribute {
		c["attribute"] = m.Attribute
	}
	js, _ := json.Marshal(c) // through JSON: numbers as float64, strings as encoding/json makes them
	var out map[string]any
	json.Unmarshal(js, &out)
	return out, true
}

func checkRecordJSON(t *testing.T, m *message.Message, f string) {
	t.Helper()
	data := m.AppendData(nil)
	raw := message.AppendRecord(nil, 12345, m.Flag(), data)
	rec, _, err := message.ParseRecord(raw, 0)
	if err != nil {
		return
	}
	rec.Offset = 77
	want, ok := consumedRecordOf("t", 1, f, &rec)
	got, err := appendRecordJSON(nil, "t", 1, f, &rec)
	if !ok {
		if err == nil && f != formatText {
			t.Fatalf("format %s: %q accepted", f, got)
		}
		return
	}
	if err != nil {
		if f == formatText { // invalid UTF-8 is refused, not replaced
			return
		}
		t.Fatalf("format %s: %v", f, err)
	}
	var have map[string]any
	if err := json.Unmarshal(got, &have); err != nil {
		t.Fatalf("format %s: %q is not JSON: %v", f, got, err)
	}
	if !reflect.DeepEqual(have, want) {
		t.Fatalf("format %s:\n got %v\nwant %v", f, have, want)
	}
}

// TestRecordJSON checks appendRecordJSON against encoding/json.
func TestRecordJSON(t *testing.T) {
	ms := []*message.Message{
		{Body: []byte(`{"a": [1, 2], "b": "x\ny"}`), Key: []byte(`"k"`), Tags: []string{"t1", "t2"}, Timestamp: time.UnixMilli(1700000000000),
			Headers: message.Headers{{Key: "h\"1", Value: []byte("v\x00\u2028<>&\xff")}, {Key: "h2"}}},
		{Body: []byte("plain text \t\r\n \"quoted\" \\ é ☃"), HasAttribute: true, Attribute: "attr"},
		{Body: []byte{0xff, 0, 1, 2}},
		{Body: nil, Key: []byte{}},
	}
	for _, m := range ms {
		for _, f := range []string{formatJSON, formatText, formatBinary} {
			checkRecordJSON(t, m, f)
		}
	}
}

// FuzzRecordJSON: whatever the body, key and header bytes, the JSON
// written is valid and says what encoding/json would.
func FuzzRecordJSON(f *testing.F) {
	f.Add([]byte(`{"a":1}`), []byte("k"), "h", []byte("v"))
	f.Add([]byte("\xff\xfe"), []byte{}, "\x00", []byte("\u2029"))
	f.Add([]byte(" [ 1 , 2 ] "), []byte(nil), "é", []byte(nil))
	f.Fuzz(func(t *testing.T, body, key []byte, hk string, hv []byte) {
		m := &message.Message{Body: body, Key: key, Headers: message.Headers{{Key: hk, Value: hv}}}
		if m.CheckProperties() != nil {
			return
		}
		for _, fm := range []string{formatJSON, formatText, formatBinary} {
			checkRecordJSON(t, m, fm)
		}
	})
}
