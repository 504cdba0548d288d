package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/doctest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/admin"
)

// TestCLIMessageGet produces keyed messages with `metaq produce` and finds
// them with `metaq message get --key` and `--id` (text and --json)
// through a real broker's admin API (TestCLIMessageGetDocs runs docs/cli.md's example).
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

// TestCLIMessageGetDocs runs the `metaq message get` example of
// docs/cli.md as written, with metaq built from this tree on PATH and
// METAQ_ADDR naming a broker with the topic meta-test, and compares the
// output the docs show (digits aside: msgIds, times, offsets).
func TestCLIMessageGetDocs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the CLI and runs it")
	}
	cmds := docWalkthrough(t, "docs/cli.md", "message")
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.HTTP(), brokertest.Topics("meta-test"))
	bin := testsvc.GoBuild(t, "github.com/metaq-go/metaq/cmd/metaq")
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(dir, "bin", "metaq")); err != nil {
		t.Fatal(err)
	}
	sh, err := doctest.StartShell(dir, t.TempDir(), []string{"PATH=" + filepath.Join(dir, "bin") + ":" + os.Getenv("PATH"), "HOME=" + dir, "METAQ_ADDR=" + b.Addr(), "LC_ALL=C"})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close(5 * time.Second)
	compared := runWalkthrough(t, sh, cmds, time.Minute)
	if compared < 4 {
		t.Fatalf("the docs show the output of %d commands, want produce, cat, message get --key and --id", compared)
	}
}
