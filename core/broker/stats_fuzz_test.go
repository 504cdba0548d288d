package broker

import (
	"strconv"
	"testing"

	"github.com/metaq-go/metaq/core/groups"
)

// FuzzParseCountItem: the argument of `stats count:` (groups.ParseCountItem)
// parses without panicking, and what it accepts formats back to itself.
func FuzzParseCountItem(f *testing.F) {
	for _, s := range []string{"t:0:0", "orders:3:123456", "a:b:c:1:2", ":1:2", "t:-1:0", "t:1:-5", "t::", "", "t:99999999999:1", "t:1:9223372036854775807"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, arg string) {
		topic, p, from, err := groups.ParseCountItem(arg)
		if err != nil {
			return
		}
		if topic == "" || p < 0 || from < 0 {
			t.Fatalf("%q: accepted topic %q partition %d offset %d", arg, topic, p, from)
		}
		again := topic + ":" + strconv.Itoa(p) + ":" + strconv.FormatInt(from, 10)
		t2, p2, f2, err := groups.ParseCountItem(again)
		if err != nil || t2 != topic || p2 != p || f2 != from {
			t.Fatalf("%q -> %q: %q %d %d %v", arg, again, t2, p2, f2, err)
		}
	})
}
