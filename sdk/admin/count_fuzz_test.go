package admin

import "testing"

// FuzzParseCountReply: a `stats count:` reply parses without panicking,
// and an accepted count is never negative.
func FuzzParseCountReply(f *testing.F) {
	f.Add("STATS\r\nt part 0 from 5 to 900 messages 12 exact true\r\nEND\r\n", "t")
	f.Add("STATS\r\nt part 0 from 5 to 900 messages 12 exact false\r\nEND\r\n", "t")
	f.Add("STATS\r\nresult 1\r\nEND\r\n", "count:t:0:5")
	f.Add("STATS\r\nt part 0 from 5 to 900 messages -3 exact true\r\nEND\r\n", "t")
	f.Fuzz(func(t *testing.T, body, topic string) {
		if n, ok := parseCountReply(body, topic); ok && n < 0 {
			t.Fatalf("%q: count %d", body, n)
		}
	})
}
