package filters

import (
	"context"
	"testing"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
)

// propsRecs is mkRecs with properties on some records: every third one
// matches PropsCheckFilter, the others that have properties miss one part.
func propsRecs(t *testing.T, n int) ([]Record, []bool) {
	t.Helper()
	recs := mkRecs(1, n)
	want := make([]bool, n)
	for i := range recs {
		m := &message.Message{Key: []byte("k"), Tags: []string{"TagB", "TagA"}, Timestamp: time.UnixMilli(1700000000123),
			Headers: message.Headers{{Key: "region", Value: []byte("us")}, {Key: "region", Value: []byte("eu")}}}
		switch i % 6 {
		case 0, 3:
			want[i] = true
		case 1:
			m.Headers = m.Headers[:1]
		case 2:
			m.Key = nil
		case 4:
			m.Tags = nil
		case 5:
			recs[i].MsgID = int64(2 * i) // no properties, an even MsgID: kept
			want[i] = true
			continue
		}
		recs[i].Properties = m.AppendProperties(nil)[4:]
		recs[i].Flag |= message.FlagHasProperties
	}
	return recs, want
}

// TestPluginProperties checks that a plugin that asks for properties gets
// them decoded into Record.Key, CreateTime, Tags and Headers over every
// transport (the batch channel, packed gRPC, gRPC columns), and that one
// that does not ask gets none.
func TestPluginProperties(t *testing.T) {
	t.Parallel()
	for _, which := range []string{"props", "oldpackedprops", "oldprops", "noprops"} {
		t.Run(which, func(t *testing.T) {
			t.Parallel()
			p := launch(t, which)
			in, err := Open(context.Background(), OpenOptions{Name: which, Topic: "t", Group: "g", Launched: p})
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			c := clientOf(t, p)
			if got := c.wantsProps("t/g"); got != (which != "noprops") {
				t.Fatalf("wantsProps = %v", got)
			}
			recs, want := propsRecs(t, 60)
			if which == "noprops" {
				for i := range want {
					want[i] = true
				}
			}
			for i := range 20 {
				keep, err := in.Accept(context.Background(), 0, recs)
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				for j := range want {
					if keep[j] != want[j] {
						t.Fatalf("call %d: record %d kept %v, want %v", i, j, keep[j], want[j])
					}
				}
				time.Sleep(time.Millisecond)
			}
			if which == "props" && c.ch.cur.Load() == nil {
				t.Error("no batch channel after 20 calls")
			}
		})
	}
}
