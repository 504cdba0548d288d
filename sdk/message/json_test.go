package message

import (
	"encoding/json"
	"testing"
	"time"
)

// TestJSONContent holds the JSON of a message's content (metaq consume
// --json, GET /api/v1/messages) to its bytes: text or base64, nulls, and
// the properties left out when absent.
func TestJSONContent(t *testing.T) {
	m := Message{Body: []byte{0xff, 0}, HasAttribute: true, Attribute: "a", Key: []byte{0xfe},
		Timestamp: time.UnixMilli(1700000000123), Tags: []string{"x"},
		Headers: Headers{{Key: "n"}, {Key: "t", Value: []byte("v")}, {Key: "b", Value: []byte{0x80}}}}
	b, err := json.Marshal(NewJSONContent(&m))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"attribute":"a","body":"/wA=","encoding":"base64","key":"/g==","keyEncoding":"base64","timestamp":1700000000123,` +
		`"tags":["x"],"headers":[{"key":"n","value":null},{"key":"t","value":"v"},{"key":"b","value":"gA==","encoding":"base64"}]}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	m = Message{Body: []byte("hi")}
	if b, _ = json.Marshal(NewJSONContent(&m)); string(b) != `{"attribute":null,"body":"hi","encoding":"utf8"}` {
		t.Fatalf("plain: %s", b)
	}
}
