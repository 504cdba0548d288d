package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/admin"
)

// testServer starts the metaq-server binary (internal/brokertest) on a
// free 127.0.0.1 port with a temp data dir, builds cmd/metaq, and returns
// the broker's address and the CLI binary.
func testServer(t *testing.T) (addr, cli string) {
	t.Helper()
	srv := brokertest.StartServer(t, "--config", serverConfig(t), "--host", "127.0.0.1", "--port", "0", "--http-port", "0",
		"--data-dir", filepath.Join(t.TempDir(), "data"))
	return srv.Addr, testsvc.GoBuild(t, "github.com/metaq-go/metaq/cmd/metaq")
}

// testJournalFileSize is the test brokers' journal file size: 4 MiB, not
// the default 64 MiB. A broker pre-writes and fdatasyncs its journal file
// and two spares when it starts, and these tests commit far less than a
// file: at 64 MiB that fill was most of a start's CPU and disk time. 4 MiB
// still holds the largest record (max_message_size 1 MiB).
const testJournalFileSize = 4 << 20

// smallJournal gives an in-process broker testJournalFileSize.
func smallJournal() brokertest.Option {
	return brokertest.Edit(func(c *conf.Config) { c.JournalFileSize = testJournalFileSize })
}

// serverConfig writes the sample ../../conf/server.toml with
// journal_file_size = testJournalFileSize into t's temp directory and
// returns its path, for the metaq-server processes.
func serverConfig(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("../../conf/server.toml")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^journal_file_size = [0-9]+$`)
	if !re.Match(b) {
		t.Fatal("../../conf/server.toml sets no journal_file_size")
	}
	b = re.ReplaceAll(b, []byte("journal_file_size = "+strconv.Itoa(testJournalFileSize)))
	p := filepath.Join(t.TempDir(), "server.toml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

type result struct {
	code           int
	stdout, stderr string
}

// cli runs the CLI in-process (so -race covers it) with stdin.
func cli(stdin string, args ...string) result {
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errb)
	return result{code, out.String(), errb.String()}
}

func mustOK(t *testing.T, r result, what string) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", what, r.code, r.stdout, r.stderr)
	}
}

func TestCLI(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and starts a broker")
	}
	addr, bin := testServer(t)
	a := "--addr=" + addr

	t.Run("binary", func(t *testing.T) {
		out, err := exec.Command(bin, a, "version").Output()
		if err != nil || !strings.Contains(string(out), "metaq "+version) || !strings.Contains(string(out), "broker "+addr) {
			t.Fatalf("version: %v %q", err, out)
		}
		if err := exec.Command(bin, "nosuchcommand").Run(); err == nil {
			t.Fatal("unknown command: want a non-zero exit")
		}
	})

	t.Run("json", func(t *testing.T) {
		r := cli("", a, "version", "--json")
		mustOK(t, r, "version --json")
		var v jsonVersion
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.Version != version || v.BrokerAddr != addr ||
			v.BrokerVersion == "" || v.BrokerError != "" {
			t.Fatalf("version --json: %v %s", err, r.stdout)
		}
		r = cli("x\ny\n", a, "produce", "--topic", "meta-fast", "--json")
		mustOK(t, r, "produce --json")
		var res []map[string]any
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		for dec.More() {
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				t.Fatalf("produce --json: %v\n%s", err, r.stdout)
			}
			res = append(res, m)
		}
		if len(res) != 2 || res[0]["topic"] != "meta-fast" || res[1]["line"] != float64(2) {
			t.Fatalf("produce --json: %s", r.stdout)
		}
		if id, ok := res[0]["msgId"].(string); !ok || id == "" || strings.Trim(id, "0123456789") != "" {
			t.Fatalf("msgId not a decimal string: %s", r.stdout)
		}
		if r := cli("x\n", a, "produce", "--topic", "meta-fast", "--json", "--verbose"); r.code != 2 {
			t.Fatalf("--json --verbose: exit %d", r.code)
		}
	})

	var offsets []int64
	t.Run("produce", func(t *testing.T) {
		r := cli("first\nsecond\r\n\xff\xfe\nfourth\n", a, "produce", "--topic", "meta-test", "--partition", "1",
			"--attribute", "tag-a", "--verbose")
		mustOK(t, r, "produce")
		if !strings.Contains(r.stderr, "sent 4 messages") {
			t.Fatalf("stderr %q", r.stderr)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 4 {
			t.Fatalf("--verbose: want 4 lines, got %q", r.stdout)
		}
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) != 3 || f[1] != "1" {
				t.Fatalf("--verbose line %q: want msgId 1 offset", l)
			}
			off, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			offsets = append(offsets, off)
		}
		mustOK(t, cli("plain\n", a, "produce", "--topic", "meta-test", "--partition", "2"), "produce plain")
	})

	t.Run("consume-json", func(t *testing.T) {
		r := cli("", a, "consume", "--topic", "meta-test", "--partition", "1", "--json")
		mustOK(t, r, "consume")
		var got []jsonMessage
		for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			var m jsonMessage
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			got = append(got, m)
		}
		if len(got) != 4 {
			t.Fatalf("want 4 messages, got %d: %s", len(got), r.stdout)
		}
		want := []string{"first", "second", base64.StdEncoding.EncodeToString([]byte("\xff\xfe")), "fourth"}
		for i, m := range got {
			if m.Body != want[i] || m.Partition != 1 || m.Topic != "meta-test" || m.MsgID == "" || m.MsgID == "0" ||
				m.Attribute == nil || *m.Attribute != "tag-a" || m.Offset != offsets[i] {
				t.Fatalf("message %d: %+v", i, m)
			}
			if enc := map[bool]string{true: "base64", false: "utf8"}[i == 2]; m.Encoding != enc {
				t.Fatalf("message %d: encoding %q, want %q", i, m.Encoding, enc)
			}
		}
		// All partitions, plain bodies; stops by itself at the end.
		r = cli("", a, "consume", "--topic", "meta-test")
		mustOK(t, r, "consume all")
		if !strings.Contains(r.stdout, "plain\n") || !strings.Contains(r.stdout, "fourth\n") {
			t.Fatalf("consume all: %q", r.stdout)
		}
	})

	t.Run("consume-from", func(t *testing.T) {
		r := cli("", a, "consume", "--topic", "meta-test", "--partition", "1", "--from", strconv.FormatInt(offsets[1], 10))
		mustOK(t, r, "consume --from")
		if r.stdout != "second\n\xff\xfe\nfourth\n" {
			t.Fatalf("consume --from: %q", r.stdout)
		}
		r = cli("", a, "consume", "--topic", "meta-test", "--partition", "1", "--max", "1")
		if r.code != 0 || r.stdout != "first\n" {
			t.Fatalf("--max 1: %+v", r)
		}
		r = cli("", a, "consume", "--topic", "meta-test", "--from", "latest")
		if r.code != 0 || r.stdout != "" {
			t.Fatalf("--from latest: %+v", r)
		}
	})

	t.Run("stats", func(t *testing.T) {
		r := cli("", a, "stats")
		mustOK(t, r, "stats")
		if !strings.HasPrefix(r.stdout, "STATS\r\n") || !strings.Contains(r.stdout, "END") || !strings.Contains(r.stdout, "cmd_put") {
			t.Fatalf("stats: %q", r.stdout)
		}
		r = cli("", a, "stats", "topics")
		mustOK(t, r, "stats topics")
		if !strings.Contains(r.stdout, "meta-test partitions 4 message_count 5") {
			t.Fatalf("stats topics: %q", r.stdout)
		}
		// A topic the broker does not have is an error, not a reply
		// with result_code 1 and exit status 0 (issue 23).
		r = cli("", a, "stats", "nope")
		if r.code != 1 || !strings.Contains(r.stderr, "unknown topic") || !strings.Contains(r.stderr, "nope") || r.stdout != "" {
			t.Fatalf("stats nope: want exit 1 naming the unknown topic: %+v", r)
		}
		r = cli("", a, "stats", "meta-test")
		mustOK(t, r, "stats meta-test")
	})

	t.Run("topics", func(t *testing.T) {
		r := cli("", a, "topics", "--json")
		mustOK(t, r, "topics --json")
		var ts []admin.Topic
		if err := json.Unmarshal([]byte(r.stdout), &ts); err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, tp := range ts {
			if tp.Name == "meta-test" {
				found = true
				if tp.Partitions != 4 || tp.MessageCount != 5 || len(tp.Offsets) != 4 || tp.Offsets[1].Max <= tp.Offsets[1].Min || tp.Offsets[1].Messages < 0 {
					t.Fatalf("meta-test: %+v", tp)
				}
			}
		}
		if !found {
			t.Fatalf("no meta-test in %s", r.stdout)
		}
		r = cli("", a, "topics")
		mustOK(t, r, "topics")
		if !regexp.MustCompile(`(?m)^meta-test\s+4\s+5\s`).MatchString(r.stdout) {
			t.Fatalf("topics table: %q", r.stdout)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, args := range [][]string{
			{a, "produce", "--topic", "no-such-topic"},
			{a, "consume", "--topic", "no-such-topic"},
		} {
			r := cli("x\n", args...)
			if r.code != 1 || !strings.Contains(r.stderr, "unknown topic") || r.stdout != "" {
				t.Fatalf("%v: %+v", args, r)
			}
		}
		r := cli("", a, "produce", "--topic", "meta-test", "--partition", "9")
		if r.code != 2 || !strings.Contains(r.stderr, "out of range") {
			t.Fatalf("bad partition: %+v", r)
		}
		r = cli("", a, "produce")
		if r.code != 2 {
			t.Fatalf("missing --topic: %+v", r)
		}
		// A line over --max-size names the line, the limit and the flag;
		// one within it but over the broker's max_message_size names that
		// (issue 23: a 3 MB line used to fail with "token too long").
		r = cli(strings.Repeat("a", 3<<20)+"\n", a, "produce", "--topic", "meta-test")
		if r.code != 1 || !strings.Contains(r.stderr, "line 1 is longer than 2097152 bytes") || !strings.Contains(r.stderr, "--max-size") {
			t.Fatalf("3 MiB line: %+v", r)
		}
		r = cli(strings.Repeat("a", 3<<19)+"\n", a, "produce", "--topic", "meta-test")
		if r.code != 1 || !strings.Contains(r.stderr, "exceeds max_message_size 1048576") {
			t.Fatalf("1.5 MiB line: %+v", r)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		down := ln.Addr().String()
		ln.Close()
		for _, args := range [][]string{{"stats"}, {"topics"}, {"produce", "--topic", "meta-test"}, {"consume", "--topic", "meta-test"}} {
			r := cli("x\n", append([]string{"--addr", down, "--timeout", "2s"}, args...)...)
			if r.code != 1 || !strings.Contains(r.stderr, "cannot reach the broker") {
				t.Fatalf("broker down, %v: %+v", args, r)
			}
		}
	})

	t.Run("bench", func(t *testing.T) {
		r := cli("", a, "bench", "produce", "--messages", "2000", "--producers", "2")
		mustOK(t, r, "bench produce")
		for _, re := range []string{`(?m)^bench produce: topic=meta-test size=1024 producers=2 batch=1 `,
			`(?m)^msgs=2000 errors=0 elapsed=[0-9.]+s msgs/s=[0-9]+ MB/s=[0-9.]+$`,
			`(?m)^latency per request: p50=\S+ p99=\S+ p99\.9=\S+ requests=2000$`} {
			if !regexp.MustCompile(re).MatchString(r.stdout) {
				t.Fatalf("bench produce output %q does not match %s", r.stdout, re)
			}
		}
		r = cli("", a, "bench", "produce", "--messages", "1000", "--batch", "100", "--producers", "1", "--topic", "meta-fast", "--size", "100")
		mustOK(t, r, "bench produce mput")
		if !strings.Contains(r.stdout, "msgs=1000 errors=0") || !strings.Contains(r.stdout, "requests=10\n") {
			t.Fatalf("bench produce mput: %q", r.stdout)
		}
		r = cli("", a, "bench", "produce", "--messages", "50", "--sync", "--producers", "1")
		mustOK(t, r, "bench produce --sync")
		// Idempotence off and on alternated (mputs of 4: each entry its own
		// sequence), and the ratio.
		r = cli("", a, "bench", "produce", "--messages", "400", "--batch", "4", "--producers", "2", "--ab", "1")
		mustOK(t, r, "bench produce --ab")
		for _, re := range []string{`(?m)^round 1 idempotence=false msgs/s=[0-9]+ `, `(?m)^round 1 idempotence=true msgs/s=[0-9]+ `,
			`(?m)^idempotence on/off \(medians of 1 rounds\): msgs/s [0-9.]+x, broker CPU per message ([0-9.]+x|\?)$`,
			`(?m)^  .*client CPU/msg=[0-9.]+µs`, `(?m)^  client CPU per message: off [0-9.]+µs, on [0-9.]+µs, on/off ([0-9.]+x|\?)$`} {
			if !regexp.MustCompile(re).MatchString(r.stdout) {
				t.Fatalf("bench produce --ab output %q does not match %s", r.stdout, re)
			}
		}
		r = cli("", a, "bench", "consume", "--messages", "2000", "--size", "512")
		mustOK(t, r, "bench consume")
		if !regexp.MustCompile(`(?m)^msgs=2000 elapsed=[0-9.]+s msgs/s=[0-9]+ MB/s=[0-9.]+ gets=[0-9]+$`).MatchString(r.stdout) ||
			!strings.Contains(r.stdout, "filled=2000") {
			t.Fatalf("bench consume: %q", r.stdout)
		}
		// The records are there now: no refill.
		r = cli("", a, "bench", "consume", "--messages", "2000", "--size", "512")
		if r.code != 0 || !strings.Contains(r.stdout, "filled=0") {
			t.Fatalf("bench consume again: %+v", r)
		}
		r = cli("", a, "bench", "rtt", "--n", "200")
		mustOK(t, r, "bench rtt")
		if !regexp.MustCompile(`(?m)^loopback echo rtt: n=200 p50=\S+ p99=\S+\nbroker version rtt: n=200 p50=\S+ p99=\S+ addr=`).MatchString(r.stdout) {
			t.Fatalf("bench rtt: %q", r.stdout)
		}
		dir := t.TempDir()
		for _, batch := range []string{"256", "1"} {
			r = cli("", "bench", "raw", "--dir", dir, "--seconds", "0.2", "--batch", batch)
			mustOK(t, r, "bench raw")
			if !regexp.MustCompile(`^bench raw: dir=\S+ size=1024 batch=` + batch + ` records=[0-9]+ fdatasyncs=[0-9]+ elapsed=[0-9.]+s records/s=[0-9]+ MB/s=[0-9.]+\n$`).MatchString(r.stdout) {
				t.Fatalf("bench raw: %q", r.stdout)
			}
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Fatalf("bench raw left %d files", len(ents))
		}
		// bench durable starts its own brokers: tiny sizes, every row.
		r = cli("", "bench", "durable", "--server", brokertest.ServerBinary(t), "--data-dir", dir,
			"--seconds", "0.2", "--partitions", "1,8", "--sync-n", "20", "--restart-partitions", "8", "--restart-mb", "2", "--restart-mb-large", "4", "--warmup", "100")
		mustOK(t, r, "bench durable")
		for _, re := range []string{
			`(?m)^1 raw append 1 KiB, fdatasync/256 +[0-9.]+ MB/s`,
			`(?m)^6 durable 1 KiB put, 4x64 in flight, 1 partition +\S+ rec/s .* +\S+ rec/s \(1\) +[0-9.]+x +>= 0.8x of \(1\) +(yes|no)$`,
			`(?m)^6 durable 1 KiB put, 4x64 in flight, 8 partitions +\S+ rec/s `,
			`(?m)^6 durable 1 KiB put, 4x64 in flight, 8 partitions .*\n  info: same load, ack after write\(\), no fsync +\S+ rec/s; broker CPU/put [0-9.]+µs \(durable [0-9.]+µs\) +durable / this +[0-9.]+x `,
			`(?m)^7 sync durable put p50 \(100 B\), 1 partition +p50 \S+ .*raw write\+fdatasync p50 \S+ +[0-9.]+x +<= 260µs +(yes|no)$`,
			`(?m)^7 sync durable put p50 \(100 B\), 512 partitions +p50 `,
			`(?m)^7 sync durable put p50 \(100 B\), 512 partitions +p50 \S+ \(p99 \S+\), broker CPU/put ([0-9.]+µs|\?) `,
			`(?m)^8 restart after kill -9, 8 partitions, 2 MB +\S+ to ready +\S+ empty \(same run\) +[0-9.]+x `,
			`(?m)^8 restart after kill -9, 8 partitions, 4 MB +\S+ to ready +\S+ at 2 MB \(same run\) `,
			`(?m)^8 restart after kill -9, 8 partitions, 2 MB .*\n  info: its journal recovery +([0-9]+ journal records after the last checkpoint, ([0-9]+ replayed into the segments, in \S+|all in place already)|nothing to replay) +- `,
			`(?m)^  info: broker with 8 partitions, idle after restart +RSS [0-9]+ MB, [0-9]+ goroutines`,
			// The tail figures after the table: client and broker lines per row 6 point and row 7 figure.
			`(?m)^TAIL \(client: exact from samples; broker: .*bucket-resolution estimates`,
			`(?m)^6 durable 1 KiB put, 4x64 in flight, 8 partitions\n  client put p50 \S+ p99 \S+ p99\.9 \S+ p99\.99 \S+ max \S+; p99\.9/p50 [0-9.]+; bound \S+ \((8 x p50|1\.5 x raw fdatasync p99\.9 \+ p50); raw fdatasync p99\.9 \S+, .*\) met (yes|no)\n  broker journal fdatasync n=[1-9][0-9]* sum .*; checkpoint fsync n=.*; segment fsync n=.*; put n=[1-9]`,
			`(?m)^7 sync durable put p50 \(100 B\), 512 partitions\n  client put p50 .*raw write\+fdatasync of 100 B, 20 in this run\) met (yes|no)\n  broker journal fdatasync n=[1-9]`,
		} {
			if !regexp.MustCompile(re).MatchString(r.stdout) {
				t.Fatalf("bench durable output %q does not match %s", r.stdout, re)
			}
		}
		for _, d := range []string{"durable", "restart"} { // the brokers' data (configs and broker.log stay)
			if _, err := os.Stat(filepath.Join(dir, d)); !os.IsNotExist(err) {
				t.Fatalf("bench durable left %s in its data dir (%v)", d, err)
			}
		}
		// The same tail figures in JSON, on a short run of rows 6 and 7.
		r = cli("", "bench", "durable", "--server", brokertest.ServerBinary(t), "--data-dir", dir, "--json",
			"--seconds", "0.2", "--partitions", "1", "--sync-n", "20", "--restart-mb", "0", "--warmup", "0", "--ceiling=false")
		mustOK(t, r, "bench durable --json")
		var out struct{ Results []benchRow }
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("bench durable --json: %v\n%s", err, r.stdout)
		}
		tails := 0
		for _, row := range out.Results {
			if !strings.HasPrefix(row.Name, "6 ") && !strings.HasPrefix(row.Name, "7 ") {
				continue
			}
			tails++
			tl := row.Tail
			if tl == nil {
				t.Fatalf("bench durable --json: row %q has no tail", row.Name)
			}
			c := tl.Client
			if c.N <= 0 || c.P50 <= 0 || c.P50 > c.P99 || c.P99 > c.P999 || c.P999 > c.P9999 || c.P9999 > c.Max ||
				tl.P999OverP50 < 1 || tl.Bound < 8*c.P50 || tl.BoundBy == "" || tl.Raw.N <= 0 || tl.Raw.P50 > tl.Raw.Max || tl.Broker == nil {
				t.Fatalf("bench durable --json: row %q tail %+v", row.Name, tl)
			}
			for _, k := range []string{"journal_fsync", "put"} {
				h := tl.Broker.Series[k]
				if h.Count <= 0 || h.SumS <= 0 || h.P50S <= 0 || h.P50S > h.P99S || h.P99S > h.P999S || h.P999S > h.P9999S {
					t.Fatalf("bench durable --json: row %q broker %s %+v", row.Name, k, h)
				}
			}
			if _, ok := tl.Broker.Series["checkpoint_fsync"]; !ok || tl.Broker.BytesPerFsync <= 0 {
				t.Fatalf("bench durable --json: row %q broker %+v", row.Name, tl.Broker)
			}
		}
		if tails != 3 {
			t.Fatalf("bench durable --json: %d rows with tails, want 3:\n%s", tails, r.stdout)
		}
	})
}

// TestMain lets `bench rtt` re-run the test binary as its echo server, as it
// re-runs the metaq binary outside tests.
func TestMain(m *testing.M) {
	if os.Getenv(echoServerEnv) == "1" {
		os.Exit(echoServerMain())
	}
	// One ZooKeeper for the tests that keep to a root of their own.
	os.Exit(testsvc.Run(m))
}
