// Package python holds the Go side of the Python client's tests
// (clients/python, package metaq): the golden bytes the Python encoder must
// match, and the test that runs the client's pytest suite against the
// real broker, so that `go test ./...` (and make test) runs it.
package python

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/doctest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
)

func TestMain(m *testing.M) { testsvc.Main(m) }

var update = flag.Bool("update", false, "rewrite testdata/golden.json from the Go encoder")

// goldenHeader is a header in golden.json: Value nil is a null value.
type goldenHeader struct {
	Key   string  `json:"key"`
	Value *string `json:"value_hex"`
}

// goldenMessage is one message, its fields and the bytes the Go SDK
// encodes for it: the properties block (with its length prefix) and the
// whole put body.
type goldenMessage struct {
	Name      string         `json:"name"`
	Key       *string        `json:"key_hex"`
	Timestamp *int64         `json:"timestamp"`
	Tags      []string       `json:"tags"`
	Headers   []goldenHeader `json:"headers"`
	Attribute *string        `json:"attribute"`
	Value     string         `json:"value_hex"`
	Flag      int32          `json:"flag"`
	Props     string         `json:"props_hex"`
	Data      string         `json:"data_hex"`
	Checksum  uint32         `json:"checksum"`
}

// goldenHash is selector.KeyIndex of a key among n partitions.
type goldenHash struct {
	Key   string `json:"key_hex"`
	N     int    `json:"n"`
	Index int    `json:"index"`
}

// goldenClusterKey is the (broker, partition) the Go SDK's cluster
// producer sends a key to with the default selector (HashByKey), the
// topic's masters having Counts partitions by broker id (its list: every
// broker's partitions sorted by (BrokerID, Partition), as
// cluster.TopicView.Partitions gives it).
type goldenClusterKey struct {
	Key       string         `json:"key_hex"`
	Counts    map[string]int `json:"counts"`
	Broker    int            `json:"broker"`
	Partition int32          `json:"partition"`
}

type golden struct {
	Note        string             `json:"note"`
	Messages    []goldenMessage    `json:"messages"`
	Hashes      []goldenHash       `json:"hashes"`
	ClusterKeys []goldenClusterKey `json:"cluster_keys"`
}

// clusterKey is goldenClusterKey's choice for key, made as the cluster
// producer makes it (client.selectOne over the view's sorted list).
func clusterKey(key []byte, counts map[int]int) (message.Partition, error) {
	var ps []message.Partition
	for b, n := range counts {
		for p := range n {
			ps = append(ps, message.Partition{BrokerID: b, Partition: int32(p)})
		}
	}
	slices.SortFunc(ps, func(a, b message.Partition) int {
		return cmp.Or(cmp.Compare(a.BrokerID, b.BrokerID), cmp.Compare(a.Partition, b.Partition))
	})
	i, err := selector.HashByKey().Select(context.Background(), "t", ps, &message.Message{Topic: "t", Key: key})
	if err != nil {
		return message.Partition{}, err
	}
	return ps[i], nil
}

func hexp(b []byte) *string { s := hex.EncodeToString(b); return &s }

// goldenMessages are the cases: each field alone, all together, lengths
// that take multi-byte varints, null, empty and repeated headers.
func goldenMessages() []message.Message {
	ts := func(ms int64) time.Time { return time.UnixMilli(ms) }
	return []message.Message{
		{Body: []byte("plain")},
		{Body: []byte("v"), Key: []byte("k1")},
		{Body: []byte("v"), Key: []byte{}},
		{Body: []byte("v"), Timestamp: ts(1700000000123)},
		{Body: []byte("v"), Timestamp: ts(-1)},
		{Body: []byte("v"), Tags: []string{"red", "blue"}},
		{Body: []byte("v"), Headers: message.Headers{{Key: "h", Value: []byte("v")}, {Key: "null"},
			{Key: "e", Value: []byte{}}, {Key: "", Value: []byte("empty key")}, {Key: "dup", Value: []byte("1")},
			{Key: "dup", Value: []byte("2")}}},
		{Body: []byte("payload"), Key: []byte("order-17"), Timestamp: ts(1234567890123), Tags: []string{"t1"},
			Headers: message.Headers{{Key: "trace", Value: []byte("abc")}}, Attribute: "attr", HasAttribute: true},
		{Body: []byte("x"), Key: bytes.Repeat([]byte("k"), 300),
			Headers: message.Headers{{Key: "big", Value: bytes.Repeat([]byte{0xff}, 200)}}},
		{Body: []byte("日本"), Key: []byte("日本"), Tags: []string{"ü"}},
		{Body: []byte{}, Attribute: "only-attr", HasAttribute: true},
	}
}

func buildGolden() golden {
	g := golden{Note: "written by clients/python/python_test.go (go test ./clients/python -run TestGolden -update): " +
		"the Go SDK's bytes for these messages, and its partitions for keys (one broker: hashes; several: cluster_keys); " +
		"clients/python/tests/test_golden.py checks the Python client against them"}
	for i, m := range goldenMessages() {
		gm := goldenMessage{Name: "case" + string(rune('A'+i)), Tags: m.Tags, Value: hex.EncodeToString(m.Body),
			Flag: m.Flag(), Props: hex.EncodeToString(m.AppendProperties(nil)), Data: hex.EncodeToString(m.AppendData(nil))}
		gm.Checksum = message.Checksum(m.AppendData(nil))
		if m.Key != nil {
			gm.Key = hexp(m.Key)
		}
		if !m.Timestamp.IsZero() {
			ms := m.Timestamp.UnixMilli()
			gm.Timestamp = &ms
		}
		if m.HasAttribute {
			a := m.Attribute
			gm.Attribute = &a
		}
		for _, h := range m.Headers {
			gh := goldenHeader{Key: h.Key}
			if h.Value != nil {
				gh.Value = hexp(h.Value)
			}
			gm.Headers = append(gm.Headers, gh)
		}
		g.Messages = append(g.Messages, gm)
	}
	for _, k := range []string{"a", "k1", "order-17", "日本", "user:12345", string(bytes.Repeat([]byte{0xff}, 33))} {
		for _, n := range []int{1, 3, 4, 7, 64, 1000} {
			g.Hashes = append(g.Hashes, goldenHash{Key: hex.EncodeToString([]byte(k)), N: n,
				Index: selector.KeyIndex([]byte(k), n)})
		}
	}
	for _, counts := range []map[int]int{{0: 4}, {1: 4, 2: 4}, {1: 4, 2: 2, 5: 3}, {3: 1, 7: 16, 12: 8}, {1: 1, 2: 1, 3: 1, 4: 1, 5: 1}} {
		sc := map[string]int{}
		for b, n := range counts {
			sc[strconv.Itoa(b)] = n
		}
		for _, k := range []string{"a", "k1", "order-17", "日本", "user:12345", "user:12346", "user:12347", string(bytes.Repeat([]byte{0xff}, 33))} {
			p, err := clusterKey([]byte(k), counts)
			if err != nil {
				panic(err)
			}
			g.ClusterKeys = append(g.ClusterKeys, goldenClusterKey{Key: hex.EncodeToString([]byte(k)), Counts: sc, Broker: p.BrokerID, Partition: p.Partition})
		}
	}
	return g
}

// TestGolden checks testdata/golden.json against the Go encoder (the
// Python test checks its encoder against the same file).
func TestGolden(t *testing.T) {
	want, err := json.MarshalIndent(buildGolden(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	path := filepath.Join("testdata", "golden.json")
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the Go encoder's bytes; rerun with -update if the format changed on purpose", path)
	}
}

// pytestEnv is the environment of the pytest run: the binaries, the TLS
// files (a CA, the broker's certificate, a client certificate with CN
// "bob"), and no bytecode written into the source tree.
func pytestEnv(t *testing.T) []string {
	certs := testsvc.NewCerts(t)
	cert, key, _ := certs.Server(t, "broker")
	ccert, ckey := certs.Client(t, "client", "bob")
	env := append(os.Environ(),
		"METAQ_TEST_CLIENT_CERT_FILE="+ccert, "METAQ_TEST_CLIENT_KEY_FILE="+ckey,
		"METAQ_SERVER_BIN="+brokertest.ServerBinary(t),
		"METAQ_BIN="+testsvc.GoBuild(t, "github.com/metaq-go/metaq/cmd/metaq"),
		"METAQ_TEST_CERT_FILE="+cert, "METAQ_TEST_KEY_FILE="+key, "METAQ_TEST_CA_FILE="+certs.CAFile,
		"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	return env
}

// TestPytest runs the Python client's tests (clients/python/tests) with
// Debian's pytest against the real metaq-server; a missing pytest fails in
// CI (testsvc.Python).
func TestPytest(t *testing.T) {
	py := testsvc.Python(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	args := []string{"-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", filepath.Join(t.TempDir(), "pytest"), "tests"}
	if testing.Verbose() {
		args = append(args, "-v")
	}
	cmd := exec.CommandContext(ctx, py, args...)
	cmd.Env = pytestEnv(t)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil || testing.Verbose() {
		t.Logf("%s %s:\n%s", py, strings.Join(args, " "), out.String())
	}
	if err != nil {
		t.Fatalf("pytest: %v", err)
	}
	if !strings.Contains(out.String(), " passed") || strings.Contains(out.String(), " skipped") {
		t.Fatalf("pytest ran no tests or skipped some:\n%s", out.String())
	}
}

// copyTree copies the regular files under src to dst, leaving out what a
// build or a test run leaves behind.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			switch d.Name() {
			case "build", "__pycache__", ".pytest_cache", "metaq.egg-info":
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDocPython runs the commands of docs/python.md (the doctest
// "python" blocks) as written, in a scratch copy of clients/python and
// examples/python, against a broker on a free port ($METAQ_ADDR): pip
// installs the package offline (into a target directory, PIP_TARGET, on
// PYTHONPATH, so the example and the benchmark import the installed
// package, not the source tree), then the quickstart and the benchmark
// run.
func TestDocPython(t *testing.T) {
	py := testsvc.Python(t)
	if out, err := exec.Command(py, "-m", "pip", "--version").CombinedOutput(); err != nil {
		if testsvc.InCI() {
			t.Fatalf("pip is required in CI (Debian package python3-pip): %v: %s", err, out)
		}
		t.Skipf("no pip for %s (Debian package python3-pip): %v", py, err)
	}
	src, err := os.ReadFile("../../docs/python.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := doctest.Parse("docs/python.md", src)
	if err != nil {
		t.Fatal(err)
	}
	cmds := doctest.Walkthrough(blocks, "python")
	if len(cmds) < 3 {
		t.Fatalf("docs/python.md: %d commands in the python walkthrough, want the install, the quickstart and the benchmark", len(cmds))
	}
	dir := t.TempDir()
	copyTree(t, ".", filepath.Join(dir, "clients", "python"))
	copyTree(t, "../../examples/python", filepath.Join(dir, "examples", "python"))
	// python3 on the shell's PATH is the one with pytest (Debian's).
	binDir := filepath.Join(dir, ".bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(py, filepath.Join(binDir, "python3")); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "server.toml")
	toml := "broker_id = 0\nhost = \"127.0.0.1\"\nport = 0\nhttp_port = 0\ndata_dir = \"" + filepath.Join(dir, "data") +
		"\"\nnum_partitions = 4\njournal_file_size = 4194304\n[[topic]]\nname = \"meta-test\"\n"
	if err := os.WriteFile(cfg, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := brokertest.StartServer(t, "--config", cfg)
	site := filepath.Join(dir, "site")
	env := append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"),
		"METAQ_ADDR="+srv.Addr, "PIP_TARGET="+site, "PYTHONPATH="+site, "PIP_NO_INDEX=1", "PIP_NO_CACHE_DIR=1",
		"PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_ROOT_USER_ACTION=ignore", "PYTHONDONTWRITEBYTECODE=1")
	outDir := t.TempDir()
	sh, err := doctest.StartShell(dir, outDir, env)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close(5 * time.Second)
	want := map[string]string{
		"python3 -m pip install":             "Successfully installed metaq",
		"python3 examples/python/quickstart": "read 103 messages back",
		"python3 -m metaq.bench":             "batched / sync",
	}
	for _, c := range cmds {
		r, err := sh.Run(c.Text, 3*time.Minute)
		if err != nil || r.Exit != 0 {
			t.Fatalf("%s: %s: exit %d, %v:\n%s", c.Where(), c.Text, r.Exit, err, r.Output)
		}
		for prefix, w := range want {
			if strings.HasPrefix(c.Key, prefix) {
				if !strings.Contains(r.Output, w) {
					t.Errorf("%s: %s: output lacks %q:\n%s", c.Where(), c.Text, w, r.Output)
				}
				delete(want, prefix)
			}
		}
		t.Logf("%s: %s (%v)\n%s", c.Where(), c.Text, r.Elapsed.Round(time.Millisecond), r.Output)
	}
	if len(want) > 0 {
		t.Errorf("docs/python.md no longer runs %v", want)
	}
	if _, err := os.Stat(filepath.Join(site, "metaq", "producer.py")); err != nil {
		t.Errorf("pip did not install the package into %s: %v", site, err)
	}
}
