package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/metaq-go/metaq/core/broker"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
)

// tailMsg is a shipped message as `metaq consume -f '%h\t%s\n'` prints it.
type tailMsg struct{ file, host, body string }

// consumeTail reads every message of topic from the broker at addr; the
// bodies must be single lines.
func consumeTail(t *testing.T, addr, topic string) []tailMsg {
	t.Helper()
	r := cli("", "--addr", addr, "consume", "--topic", topic, "-f", `%h\t%s\n`)
	mustOK(t, r, "consume")
	var out []tailMsg
	for _, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		if line == "" {
			continue
		}
		h, body, _ := strings.Cut(line, "\t")
		var m tailMsg
		for _, kv := range strings.Split(h, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "file":
				m.file = v
			case "host":
				m.host = v
			}
		}
		m.body = body
		out = append(out, m)
	}
	return out
}

// bodies returns the sorted bodies of msgs.
func bodies(msgs []tailMsg) []string {
	var b []string
	for _, m := range msgs {
		b = append(b, m.body)
	}
	sort.Strings(b)
	return b
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func numbered(prefix string, from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "%s%06d\n", prefix, i)
	}
	return b.String()
}

// TestTailOnce: `metaq tail --once` in-process (under -race) on plain
// files and globs over many files, with multi-line records, a restart
// that ships only what is new, the state file's checks and the usage
// errors.
func TestTailOnce(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.Topics("logs", "multi", "other", "rot"))
	a := "--addr=" + b.Addr()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")

	// One named file and a glob over 12 more, some appearing between runs.
	if err := os.Mkdir(filepath.Join(dir, "svc"), 0o755); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(dir, "app.log")
	appendFile(t, app, numbered("app-", 0, 500)+"last-no-newline")
	for i := 0; i < 8; i++ {
		appendFile(t, filepath.Join(dir, "svc", fmt.Sprintf("s%02d.log", i)), numbered(fmt.Sprintf("s%02d-", i), 0, 50))
	}
	if err := os.WriteFile(filepath.Join(dir, "svc", "ignored.txt"), []byte("not a log\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) result {
		t.Helper()
		args = append([]string{a, "tail", "--topic", "logs", "--state", state, "--host", "h1", "--once", "--batch", "64"}, args...)
		r := cliWithin(t, time.Minute, "", args...)
		// The runs share this process, where other tests start brokers:
		// a child forked before the previous run closed its lock file
		// holds the lock's file description until it execs (the
		// descriptor is close-on-exec, not close-on-fork), so the lock
		// can outlive that run by a moment. Ask again for at most 5 s.
		for i := 0; i < 100 && r.code != 0 && strings.Contains(r.stderr, "is in use by another metaq tail"); i++ {
			time.Sleep(50 * time.Millisecond)
			r = cliWithin(t, time.Minute, "", args...)
		}
		return r
	}
	r := run(app, filepath.Join(dir, "svc", "*.log"))
	mustOK(t, r, "tail --once")
	if !strings.Contains(r.stderr, "shipped 901 records") {
		t.Fatalf("first run: %s", r.stderr)
	}
	got := consumeTail(t, b.Addr(), "logs")
	want := strings.Split(numbered("app-", 0, 500)+"last-no-newline", "\n")
	for i := 0; i < 8; i++ {
		want = append(want, strings.Split(strings.TrimSuffix(numbered(fmt.Sprintf("s%02d-", i), 0, 50), "\n"), "\n")...)
	}
	sort.Strings(want)
	if g := bodies(got); strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Fatalf("shipped %d messages, want %d", len(g), len(want))
	}
	for _, m := range got {
		if m.host != "h1" || !strings.HasPrefix(m.body, strings.TrimSuffix(filepath.Base(m.file), ".log")) && !strings.HasPrefix(m.body, "last") {
			t.Fatalf("message %+v: wrong headers", m)
		}
	}

	// Again: nothing new. Then new lines, a new file in the glob.
	r = run(app, filepath.Join(dir, "svc", "*.log"))
	mustOK(t, r, "tail --once again")
	if !strings.Contains(r.stderr, "shipped 0 records") {
		t.Fatalf("second run: %s", r.stderr)
	}
	appendFile(t, app, "\n"+numbered("more-", 0, 10))
	for i := 8; i < 12; i++ {
		appendFile(t, filepath.Join(dir, "svc", fmt.Sprintf("s%02d.log", i)), numbered(fmt.Sprintf("s%02d-", i), 0, 5))
	}
	r = run(app, filepath.Join(dir, "svc", "*.log"))
	mustOK(t, r, "tail --once third")
	if !strings.Contains(r.stderr, "shipped 31 records") { // "" (the line end of last-no-newline), 10 more-, 4 x 5
		t.Fatalf("third run: %s", r.stderr)
	}
	if n := len(consumeTail(t, b.Addr(), "logs")); n != 901+31 {
		t.Fatalf("%d messages in all, want %d", n, 901+31)
	}

	// Multi-line records with a start pattern, keyed by file.
	ml := filepath.Join(dir, "java.log")
	appendFile(t, ml, "2026-12-07 one\n\tat a\n\tat b\n2026-12-07 two\n2026-12-07 three\ncaused by x\n\tat c\n")
	mustOK(t, cliWithin(t, time.Minute, "", a, "tail", "--topic", "multi", "--state", filepath.Join(dir, "mstate"), "--once",
		"--start-pattern", `^\d{4}-\d\d-\d\d `, "--key-from", "file", ml), "tail multi-line")
	r = cli("", a, "consume", "--topic", "multi", "-f", `%k|%s~`)
	mustOK(t, r, "consume multi")
	recs := strings.Split(strings.TrimSuffix(r.stdout, "~"), "~")
	sort.Strings(recs)
	wantRecs := []string{ml + "|2026-12-07 one\n\tat a\n\tat b", ml + "|2026-12-07 three\ncaused by x\n\tat c", ml + "|2026-12-07 two"}
	if strings.Join(recs, "~") != strings.Join(wantRecs, "~") {
		t.Fatalf("multi-line records:\n%q\nwant\n%q", recs, wantRecs)
	}

	// The state file: another topic's is refused, and replaced with
	// --reset-state (the files shipped again from their start, to this
	// topic); a corrupt one is refused, and replaced only with
	// --reset-state.
	r = cli("", a, "tail", "--topic", "other", "--state", state, "--once", app)
	if r.code != 1 || !strings.Contains(r.stderr, "belongs to topic logs") || !strings.Contains(r.stderr, "--reset-state") {
		t.Fatalf("other topic's state: %+v", r)
	}
	r = cli("", a, "tail", "--topic", "other", "--state", state, "--once", "--reset-state", app)
	mustOK(t, r, "--reset-state over another topic's state")
	if !strings.Contains(r.stderr, "belongs to topic logs, not other; starting over (--reset-state)") || !strings.Contains(r.stderr, "shipped 511 records") {
		t.Fatalf("--reset-state over another topic's state: %s", r.stderr)
	}
	r = cli("", a, "tail", "--topic", "other", "--state", state, "--once", app)
	mustOK(t, r, "the replaced state")
	if !strings.Contains(r.stderr, "shipped 0 records") {
		t.Fatalf("the replaced state file: %s", r.stderr)
	}
	bad := filepath.Join(dir, "bad.state")
	if err := os.WriteFile(bad, []byte(`{"version":1,"files":[{"path":"rel","offset":1}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r = cli("", a, "tail", "--topic", "other", "--state", bad, "--once", app)
	if r.code != 1 || !strings.Contains(r.stderr, "corrupt") || !strings.Contains(r.stderr, "--reset-state") {
		t.Fatalf("corrupt state: %+v", r)
	}
	r = cli("", a, "tail", "--topic", "other", "--state", bad, "--once", "--reset-state", app)
	mustOK(t, r, "--reset-state")
	if !strings.Contains(r.stderr, "starting over") || !strings.Contains(r.stderr, "shipped 511 records") {
		t.Fatalf("--reset-state: %s", r.stderr)
	}

	// --help, and usage errors and clear failures.
	if r := cli("", "tail", "--help"); r.code != 0 || !strings.Contains(r.stdout, "Usage:") || !strings.Contains(r.stdout, "--start-pattern string") ||
		!strings.Contains(r.stdout, "Delivery is at least once") {
		t.Fatalf("tail --help: %+v", r)
	}
	for args, want := range map[string]string{
		"--topic logs":                        "name at least one file or glob",
		"--topic logs x[":                     `bad glob "x["`,
		"--topic logs --key-from nobody x":    "--key-from: want file, host or none",
		"--topic logs --start-pattern ( x":    "--start-pattern",
		"x":                                   "--topic is required",
		"--topic logs --max-record 5000000 x": "--max-record must be between",
		"--topic logs --batch-bytes 0 x":      "--batch-bytes must be between",
	} {
		r := cli("", append([]string{a, "tail", "--state", filepath.Join(dir, "u.state")}, strings.Fields(args)...)...)
		if r.code != 2 || !strings.Contains(r.stderr, want) {
			t.Errorf("tail %s: exit %d, stderr %q; want 2 and %q", args, r.code, r.stderr, want)
		}
	}
	r = cli("", a, "tail", "--topic", "nosuch", "--state", filepath.Join(dir, "n.state"), "--once", app)
	if r.code != 1 || !strings.Contains(r.stderr, `unknown topic "nosuch"`) {
		t.Fatalf("unknown topic: %+v", r)
	}
	if os.Geteuid() != 0 { // root reads anything
		noread := filepath.Join(dir, "noread.log")
		if err := os.WriteFile(noread, []byte("x\n"), 0o200); err != nil {
			t.Fatal(err)
		}
		r = cli("", a, "tail", "--topic", "other", "--state", filepath.Join(dir, "r.state"), "--once", noread)
		if r.code != 1 || !strings.Contains(r.stderr, "cannot read "+noread) {
			t.Fatalf("an unreadable file: %+v", r)
		}
	}
	// A record over --max-record: cut, reported once.
	long := filepath.Join(dir, "long.log")
	appendFile(t, long, strings.Repeat("y", 1000)+"\nshort\n")
	r = cli("", a, "tail", "--topic", "other", "--state", filepath.Join(dir, "l.state"), "--once", "--max-record", "300", long)
	if r.code != 0 || strings.Count(r.stderr, "longer than --max-record 300 bytes") != 1 || !strings.Contains(r.stderr, "shipped 5 records (1005 bytes)") {
		t.Fatalf("a long record: %+v", r)
	}
	// A glob over a logrotate directory with compress: the text files are
	// shipped, the compressed ones (by name, or by their first bytes)
	// skipped with a warning each.
	rot := filepath.Join(dir, "rot")
	if err := os.Mkdir(rot, 0o755); err != nil {
		t.Fatal(err)
	}
	appendFile(t, filepath.Join(rot, "app.log"), "now-1\nnow-2\n")
	appendFile(t, filepath.Join(rot, "app.log.1"), "old-1\n")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte("older-1\nolder-2\n"))
	_ = zw.Close()
	appendFile(t, filepath.Join(rot, "app.log.2.gz"), gz.String())
	appendFile(t, filepath.Join(rot, "app.log.3"), gz.String()) // compressed, without .gz
	r = cli("", a, "tail", "--topic", "rot", "--state", filepath.Join(dir, "rot.state"), "--once", filepath.Join(rot, "app.log*"))
	if r.code != 0 || !strings.Contains(r.stderr, "shipped 3 records (15 bytes) from 2 file(s)") ||
		!strings.Contains(r.stderr, filepath.Join(rot, "app.log.2.gz")+" is compressed (.gz): skipped") ||
		!strings.Contains(r.stderr, filepath.Join(rot, "app.log.3")+" is compressed (gzip data): skipped") {
		t.Fatalf("a glob over compressed rotations: %+v", r)
	}
	if g := bodies(consumeTail(t, b.Addr(), "rot")); strings.Join(g, " ") != "now-1 now-2 old-1" {
		t.Fatalf("a glob over compressed rotations shipped %q", g)
	}

	// Long lines with a small --batch-bytes: several batches, nothing lost
	// (TestTailBatchBytes checks each batch's bytes).
	longLines := filepath.Join(dir, "longlines.log")
	for i := 0; i < 12; i++ {
		appendFile(t, longLines, fmt.Sprintf("%02d%s\n", i, strings.Repeat("z", 300<<10)))
	}
	r = cli("", a, "tail", "--topic", "other", "--state", filepath.Join(dir, "ll.state"), "--once", "--batch-bytes", "1048576", longLines)
	if r.code != 0 || !strings.Contains(r.stderr, fmt.Sprintf("shipped 12 records (%d bytes)", 12*(2+300<<10))) {
		t.Fatalf("long lines with --batch-bytes: %+v", r)
	}
	if err := os.Mkdir(filepath.Join(dir, "adir.log"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = cli("", a, "tail", "--topic", "other", "--state", filepath.Join(dir, "d.state"), "--once", filepath.Join(dir, "adir.log"))
	if r.code != 0 || !strings.Contains(r.stderr, "is not a regular file; skipped") {
		t.Fatalf("a directory: %+v", r)
	}
}

// TestTailZooKeeper: with --zk the shipper finds the brokers in ZooKeeper
// (MetaQ's layout under --root); a topic no broker publishes there is an
// error.
func TestTailZooKeeper(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs ZooKeeper")
	}
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/tail-test-%d", time.Now().UnixNano())
	b1 := groupBroker(t, 1, zkAddr, root)
	b2 := groupBroker(t, 2, zkAddr, root)
	for _, b := range []*broker.Broker{b1, b2} {
		deadline := time.Now().Add(10 * time.Second)
		for !b.Registered() {
			if time.Now().After(deadline) {
				t.Fatal("broker not registered")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	dir := t.TempDir()
	app := filepath.Join(dir, "app.log")
	appendFile(t, app, numbered("z-", 0, 300))
	r := cliWithin(t, time.Minute, "", "tail", "--zk", zkAddr, "--root", root, "--topic", "gt", "--state", filepath.Join(dir, "state"), "--once", app)
	mustOK(t, r, "tail --zk")
	got := append(consumeTail(t, b1.Addr(), "gt"), consumeTail(t, b2.Addr(), "gt")...)
	if n := len(lineCounts(got)); n != 300 || len(got) != 300 {
		t.Fatalf("%d messages, %d distinct lines; want 300", len(got), n)
	}
	if len(consumeTail(t, b1.Addr(), "gt")) == 0 || len(consumeTail(t, b2.Addr(), "gt")) == 0 {
		t.Fatal("want messages on both brokers")
	}
	r = cli("", "tail", "--zk", zkAddr, "--root", root, "--topic", "nosuch", "--state", filepath.Join(dir, "n.state"), "--once", app)
	if r.code != 1 || !strings.Contains(r.stderr, `unknown topic "nosuch": no broker registered it in ZooKeeper`) {
		t.Fatalf("unknown topic with --zk: %+v", r)
	}
}
