package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/sdk/admin"
)

// TestCLIMessageGet produces keyed messages with `metaq produce` and finds
// them with `metaq message get --key` and `--id` (text and --json)
// through a real broker's admin API, as docs/cli.md shows.
func TestCLIMessageGet(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.HTTP(), brokertest.Topics("meta-test"))
	r := cli("first\nsecond\n", "--addr", b.Addr(), "produce", "--topic", "meta-test", "--key", "order-42", "--header", "src=cli", "--verbose")
	mustOK(t, r, "produce with a key")
	lines := strings.Fields(strings.TrimSpace(r.stdout))
	if len(lines) != 6 {
		t.Fatalf("produce --verbose printed %q", r.stdout)
	}
	mustOK(t, cli("other\n", "--addr", b.Addr(), "produce", "--topic", "meta-test", "--key", "order-7"), "produce another key")
	at := []string{"--addr", b.Addr()}

	r = cli("", append(at, "message", "get", "--key", "order-42", "--topic", "meta-test")...)
	mustOK(t, r, "message get --key")
	if strings.Count(r.stdout, "topic meta-test partition ") != 2 || !strings.Contains(r.stdout, "  key: order-42\n") ||
		!strings.Contains(r.stdout, "  header src: cli\n") || !strings.Contains(r.stdout, "  body: first\n") ||
		!strings.Contains(r.stdout, "  body: second\n") || strings.Contains(r.stdout, "other") {
		t.Fatalf("message get --key printed %q", r.stdout)
	}

	msgID := lines[3] // the second message's "msgId partition offset"
	r = cli("", append(at, "message", "get", "--id", msgID, "--json")...)
	mustOK(t, r, "message get --id --json")
	var m admin.FoundMessage
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &m); err != nil {
		t.Fatalf("--json printed %q: %v", r.stdout, err)
	}
	if m.MsgID != msgID || m.Body != "second" || m.Key == nil || *m.Key != "order-42" || m.Topic != "meta-test" {
		t.Fatalf("--id found %+v", m)
	}

	r = cli("", append(at, "message", "get", "--key", "order-42", "--limit", "1")...)
	mustOK(t, r, "message get --limit 1")
	if !strings.Contains(r.stdout, "  body: second\n") || !strings.Contains(r.stderr, "the newest 1 are shown") {
		t.Fatalf("--limit 1: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if r := cli("", append(at, "message", "get", "--key", "nobody", "--topic", "meta-test")...); r.code != 1 ||
		!strings.Contains(r.stderr, `no message with key "nobody" in topic meta-test`) {
		t.Fatalf("a miss: exit %d stderr %q", r.code, r.stderr)
	}
	for _, bad := range [][]string{{"message", "get"}, {"message", "get", "--key", "a", "--id", "1"}, {"message", "get", "--id", "x"}, {"message", "get", "--key", "a", "--limit", "0"}} {
		if r := cli("", append(at, bad...)...); r.code != 2 {
			t.Fatalf("%v: exit %d stderr %q", bad, r.code, r.stderr)
		}
	}
	if r := cli("", append(at, "message", "get", "--key", "a", "--topic", "nope")...); r.code != 1 || !strings.Contains(r.stderr, "404") {
		t.Fatalf("unknown topic: exit %d stderr %q", r.code, r.stderr)
	}
}
