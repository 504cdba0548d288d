package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/admin"
)

// cliWithin runs the CLI like cli, failing the test if it has not
// returned within d (the hangs of issue 9 were commands that never did).
func cliWithin(t *testing.T, d time.Duration, stdin string, args ...string) result {
	t.Helper()
	done := make(chan result, 1)
	go func() { done <- cli(stdin, args...) }()
	select {
	case r := <-done:
		return r
	case <-time.After(d):
		t.Fatalf("%v: still running after %s", args, d)
		return result{}
	}
}

// TestCLIFramework: the cobra command tree: flags after arguments,
// --help on stdout with status 0, --version, suggestions, completion.
func TestCLIFramework(t *testing.T) {
	t.Parallel()
	r := cli("", "--version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "metaq "+version+" (") {
		t.Fatalf("--version: %+v", r)
	}
	for _, args := range [][]string{{"--help"}, {"consume", "--help"}, {"help", "group", "reset-offsets"}, {"bench", "durable", "--help"}} {
		r := cli("", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Usage:") || r.stderr != "" {
			t.Fatalf("%v: want usage on stdout and status 0: %+v", args, r)
		}
	}
	r = cli("", "consume", "--help")
	if !strings.Contains(r.stdout, "--from string") || !strings.Contains(r.stdout, "-f, --format") || !strings.Contains(r.stdout, "--addr") {
		t.Fatalf("consume --help lists its own and the global flags:\n%s", r.stdout)
	}
	for args, want := range map[string]string{
		"stast":          `unknown command "stast"; did you mean stats?`,
		"bench prodce":   `unknown command "prodce"; did you mean produce?`,
		"group descibe":  `unknown command "descibe"; did you mean describe?`,
		"consume --nope": "unknown flag: --nope",
		// A mistyped command followed by its flags (issue 23).
		"prodcue --topic x":                     `unknown command "prodcue"; did you mean produce?`,
		"--addr 127.0.0.1:1 stast --json":       `unknown command "stast"; did you mean stats?`,
		"group descibe --group g --topic t":     `unknown command "descibe"; did you mean describe?`,
		"--timeout 1s bench prodce --seconds 1": `unknown command "prodce"; did you mean produce?`,
		"group describe --nope":                 "unknown flag: --nope",
	} {
		r := cli("", strings.Fields(args)...)
		if r.code != 2 || !strings.Contains(r.stderr, want) || r.stdout != "" {
			t.Fatalf("%s: want status 2 and %q: %+v", args, want, r)
		}
	}
	if r := cli(""); r.code != 2 || !strings.Contains(r.stderr, "Usage:") {
		t.Fatalf("no command: %+v", r)
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		r := cli("", "completion", sh)
		if r.code != 0 || !strings.Contains(r.stdout, "metaq") || len(r.stdout) < 1000 {
			t.Fatalf("completion %s: %+v", sh, r)
		}
	}
	dir := t.TempDir()
	if r := cli("", "gen-man", dir); r.code != 0 {
		t.Fatalf("gen-man: %+v", r)
	}
	for _, p := range []string{"metaq.1", "metaq-consume.1", "metaq-group-reset-offsets.1", "metaq-bench-all.1"} {
		if _, err := exec.Command("test", "-s", filepath.Join(dir, p)).Output(); err != nil {
			t.Fatalf("man page %s missing", p)
		}
	}
}

// TestConsumeBugs covers the consume bugs of issue 9 against a real
// broker: global flags after an argument, stopping at the end when
// --from falls inside the last record, a local group member that
// commits, -f formats and string msgIds.
func TestConsumeBugs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and starts a broker")
	}
	addr, _ := testServer(t)
	a := "--addr=" + addr

	// Global flags after the subcommand's argument.
	r := cli("", "stats", "offsets", "--addr", addr)
	mustOK(t, r, "stats offsets --addr")
	if !strings.Contains(r.stdout, "meta-test part 0") {
		t.Fatalf("stats offsets: %q", r.stdout)
	}
	r = cli("", "stats", "--json", a)
	mustOK(t, r, "stats --json")
	var st []admin.StatsLine
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st) == 0 || !strings.Contains(r.stdout, `"name": "cmd_put"`) {
		t.Fatalf("stats --json: %v %s", err, r.stdout)
	}

	r = cli("a\nbb\nccc\n", a, "produce", "--topic", "meta-test", "--partition", "3", "--verbose")
	mustOK(t, r, "produce")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	last, err := strconv.ParseInt(strings.Fields(lines[2])[2], 10, 64)
	if err != nil {
		t.Fatal(err)
	}

	// --from inside the last record: nothing after it, and it stops.
	r = cliWithin(t, 60*time.Second, "", a, "consume", "--topic", "meta-test", "--partition", "3", "--from", strconv.FormatInt(last+3, 10), "-f", "%p %o %s\n")
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("--from inside the last record: %+v (%s)", r, lines)
	}
	// From a record start: that record and the rest.
	r = cliWithin(t, 60*time.Second, "", a, "consume", "--topic", "meta-test", "--partition", "3", "--from", strconv.FormatInt(last, 10))
	if r.code != 0 || r.stdout != "ccc\n" {
		t.Fatalf("--from the last record: %+v", r)
	}
	// A time: everything was stored after 2000.
	r = cliWithin(t, 60*time.Second, "", a, "consume", "--topic", "meta-test", "--partition", "3", "--from", "2000-01-01T00:00:00Z")
	if r.code != 0 || r.stdout != "a\nbb\nccc\n" {
		t.Fatalf("--from a time: %+v", r)
	}
	r = cliWithin(t, 60*time.Second, "", a, "consume", "--topic", "meta-test", "--partition", "3", "--from", "@"+strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10))
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("--from a future time: %+v", r)
	}

	// kcat formats; --count.
	r = cliWithin(t, 60*time.Second, "", a, "consume", "--topic", "meta-test", "--partition", "3", "-f", `%t/%p@%o %S:%s|%k|%a%%\n`, "--count", "2")
	want := "meta-test/3@" + strings.Fields(lines[0])[2] + " 1:a||%\nmeta-test/3@" + strings.Fields(lines[1])[2] + " 2:bb||%\n"
	if r.code != 0 || r.stdout != want {
		t.Fatalf("-f: got %q, want %q (%+v)", r.stdout, want, r)
	}
	if r := cli("", a, "consume", "--topic", "meta-test", "-f", "%q"); r.code != 2 || !strings.Contains(r.stderr, "unknown field") {
		t.Fatalf("-f %%q: %+v", r)
	}

	// --json: msgId is a string that round-trips exactly.
	r = cliWithin(t, 60*time.Second, "", a, "consume", "--topic", "meta-test", "--partition", "3", "--json")
	mustOK(t, r, "consume --json")
	for i, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if id, ok := m["msgId"].(string); !ok || id != strings.Fields(lines[i])[0] {
			t.Fatalf("msgId %#v, want the string %s", m["msgId"], strings.Fields(lines[i])[0])
		}
	}

	// A key given to produce reaches the broker: --json and -f show it.
	r = cli("keyed\n", a, "produce", "--topic", "meta-test", "--partition", "2", "--key", "user42")
	mustOK(t, r, "produce --key")
	r = cliWithin(t, 60*time.Second, "", a, "consume", "--topic", "meta-test", "--partition", "2", "--json")
	mustOK(t, r, "consume --json of a keyed message")
	if !strings.Contains(r.stdout, `"body":"keyed","encoding":"utf8","key":"user42"}`) {
		t.Fatalf("consume --json of a keyed message: %q", r.stdout)
	}
	r = cliWithin(t, 60*time.Second, "", a, "consume", "--topic", "meta-test", "--partition", "2", "-f", `%k|%K|%h|%s\n`)
	if r.code != 0 || !strings.HasSuffix(r.stdout, "user42|6||keyed\n") {
		t.Fatalf("-f %%k of a keyed message: %+v", r)
	}

	// --header, --tag and --timestamp reach the broker; -f and --json show
	// them, a binary header value in base64.
	r = cli("h1\nh2\n", a, "produce", "--topic", "meta-test", "--partition", "2", "--key", "k7", "--verbose",
		"--header", "trace=a=b", "--header", "empty=", "--header", "null", "--header", "bin=\xff\xfe", "--tag", "TagA", "--tag", "TagB",
		"--timestamp", "1700000000123")
	mustOK(t, r, "produce --header --tag --timestamp")
	hl := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(hl) != 2 {
		t.Fatalf("produce --verbose: %q", r.stdout)
	}
	from := strings.Fields(hl[0])[2]
	r = cliWithin(t, 60*time.Second, "", a, "consume", "--topic", "meta-test", "--partition", "2", "--from", from, "-f", `%k|%h|%T|%p|%o|%s\n`)
	want = "k7|trace=a=b,empty=,null,bin=\xff\xfe|1700000000123|2|" + from + "|h1\n" +
		"k7|trace=a=b,empty=,null,bin=\xff\xfe|1700000000123|2|" + strings.Fields(hl[1])[2] + "|h2\n"
	if r.code != 0 || r.stdout != want {
		t.Fatalf("-f of a message with headers: got %q, want %q (%+v)", r.stdout, want, r)
	}
	r = cliWithin(t, 60*time.Second, "", a, "consume", "--topic", "meta-test", "--partition", "2", "--from", from, "--count", "1", "--json")
	mustOK(t, r, "consume --json of a message with headers")
	for _, w := range []string{`"key":"k7"`, `"timestamp":1700000000123`, `"tags":["TagA","TagB"]`,
		`"headers":[{"key":"trace","value":"a=b"},{"key":"empty","value":""},{"key":"null","value":null},{"key":"bin","value":"//4=","encoding":"base64"}]`} {
		if !strings.Contains(r.stdout, w) {
			t.Fatalf("consume --json: %q lacks %s", r.stdout, w)
		}
	}
	// --timestamp now sends the time of the send.
	before := time.Now().UnixMilli()
	r = cli("n\n", a, "produce", "--topic", "meta-test", "--partition", "2", "--timestamp", "now", "--verbose")
	mustOK(t, r, "produce --timestamp now")
	r = cliWithin(t, 60*time.Second, "", a, "consume", "--topic", "meta-test", "--partition", "2", "--from", strings.Fields(r.stdout)[2], "--json")
	var tj struct{ Timestamp *int64 }
	if err := json.Unmarshal([]byte(r.stdout), &tj); err != nil || tj.Timestamp == nil || *tj.Timestamp < before || *tj.Timestamp > time.Now().UnixMilli() {
		t.Fatalf("--timestamp now: %v %q", err, r.stdout)
	}
	for _, bad := range [][]string{{"--header", "=v"}, {"--tag", "a b"}, {"--timestamp", "yesterday"}, {"--header", "\xffk=v"}} {
		if r := cli("x\n", append([]string{a, "produce", "--topic", "meta-test"}, bad...)...); r.code != 2 {
			t.Fatalf("produce %q: want a usage error, got %+v", bad, r)
		}
	}

	// A local group member: it reads, commits on exit, and the next
	// member resumes after what was printed.
	r = cliWithin(t, 60*time.Second, "", a, "consume", "--topic", "meta-test", "--partition", "3", "--group", "cli-g", "--count", "2")
	if r.code != 0 || r.stdout != "a\nbb\n" {
		t.Fatalf("group member: %+v", r)
	}
	r = cliWithin(t, 60*time.Second, "", a, "consume", "--topic", "meta-test", "--partition", "3", "--group", "cli-g", "--count", "1")
	if r.code != 0 || r.stdout != "ccc\n" {
		t.Fatalf("group member resumes: %+v", r)
	}
	r = cli("", a, "group", "describe", "cli-g", "--json")
	mustOK(t, r, "group describe")
	if !strings.Contains(r.stdout, `"group": "cli-g"`) {
		t.Fatalf("group describe: %s", r.stdout)
	}
	// Without --partition the member joins the group through the broker.
	r = cliWithin(t, 60*time.Second, "", a, "consume", "--topic", "meta-test", "--group", "cli-g2", "--count", "3", "--id", "m1")
	if r.code != 0 || len(strings.Split(strings.TrimSpace(r.stdout), "\n")) != 3 {
		t.Fatalf("group member of all partitions: %+v", r)
	}
	for _, args := range [][]string{
		{"consume", "--topic", "meta-test", "--group", "g", "--from", "1044"},
		{"consume", "--topic", "meta-test", "--broadcast"},
		{"consume", "--topic", "meta-test", "--json", "-f", "%s"},
	} {
		if r := cli("", append([]string{a}, args...)...); r.code != 2 {
			t.Fatalf("%v: want a usage error: %+v", args, r)
		}
	}
}

// TestConsumeZK: consume --zk needs a group, and names a topic that no
// broker registered instead of waiting for it.
func TestConsumeZK(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and starts a broker")
	}
	// A ZooKeeper of its own: metaq-server registers under the default
	// root, /meta, as TestClusterCommand's does.
	zkAddr := testsvc.NewZooKeeper(t).Addr()
	addr := startZKServer(t, zkAddr, 1)

	r := cli("", "consume", "--zk", zkAddr, "--topic", "meta-test")
	if r.code != 2 || !strings.Contains(r.stderr, "--zk needs --group") {
		t.Fatalf("--zk without --group: %+v", r)
	}
	r = cliWithin(t, 30*time.Second, "", "consume", "--zk", zkAddr, "--topic", "nope", "--group", "g")
	if r.code != 1 || !strings.Contains(r.stderr, `unknown topic "nope"`) {
		t.Fatalf("--zk --topic nope: %+v", r)
	}
	r = cliWithin(t, 30*time.Second, "x\n", "produce", "--zk", zkAddr, "--topic", "nope")
	if r.code != 1 || !strings.Contains(r.stderr, `unknown topic "nope"`) {
		t.Fatalf("produce --zk --topic nope: %+v", r)
	}
	// produce --zk, then a broadcast member reads it.
	r = cliWithin(t, 60*time.Second, "z1\nz2\n", "produce", "--zk", zkAddr, "--topic", "meta-test", "--attribute", "at")
	mustOK(t, r, "produce --zk")
	r = cliWithin(t, 60*time.Second, "", "consume", "--zk", zkAddr, "--topic", "meta-test", "--group", "zg", "--broadcast",
		"--count", "2", "-f", "%b %a %s\n")
	mustOK(t, r, "consume --zk --broadcast")
	got := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(got) != 2 || !strings.HasPrefix(got[0], "1 at z") || !strings.HasPrefix(got[1], "1 at z") {
		t.Fatalf("consume --zk --broadcast: %q", r.stdout)
	}
	_ = addr
}
