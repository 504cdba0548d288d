package groups

import (
	"testing"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

func TestPositions(t *testing.T) {
	check := func(topic string, p int32) string {
		switch {
		case topic != "t":
			return "unknown topic " + topic
		case p >= 2:
			return "out of range"
		}
		return ""
	}
	body := protocol.AppendOffsetLines(nil, []protocol.OffsetEntry{{Topic: "t", Partition: 1, Offset: 10, MsgID: 7}}, true)
	group, ps, err := Positions("commit", []byte("g"), body, true, 3, check)
	want := message.Position{Topic: "t", Partition: message.Partition{BrokerID: 3, Partition: 1}, Offset: 10, MsgID: 7}
	if err != nil || group != "g" || len(ps) != 1 || ps[0] != want {
		t.Fatalf("got %q %v %v", group, ps, err)
	}
	for _, c := range []struct {
		group string
		line  protocol.OffsetEntry
		msg   string
	}{
		{"g", protocol.OffsetEntry{Topic: "u", Partition: 0}, "commit: unknown topic u"},
		{"g", protocol.OffsetEntry{Topic: "t", Partition: 2}, "commit: out of range"},
	} {
		body := protocol.AppendOffsetLines(nil, []protocol.OffsetEntry{c.line}, true)
		_, _, err := Positions("commit", []byte(c.group), body, true, 3, check)
		if e, ok := err.(*Error); !ok || e.Kind != Invalid || e.Msg != c.msg {
			t.Errorf("%+v: got %v, want %q", c.line, err, c.msg)
		}
	}
	if _, _, err := Positions("fetch", []byte("bad group\n"), nil, false, 3, check); err == nil || err.(*Error).Kind != Invalid {
		t.Fatalf("bad group: %v", err)
	}
}
