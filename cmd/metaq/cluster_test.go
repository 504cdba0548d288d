package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/cluster"
)

// startZKServer starts the metaq-server binary with the sample config, --zk
// and --broker-id, waits until it is registered, and returns its address.
func startZKServer(t *testing.T, zkAddr string, id int) string {
	t.Helper()
	registered := make(chan struct{}, 1)
	s, err := brokertest.Launch(brokertest.ServerBinary(t), func(line string) {
		if strings.Contains(line, "registry: broker "+strconv.Itoa(id)+" registered as") {
			select {
			case registered <- struct{}{}:
			default:
			}
		}
	}, "--config", serverConfig(t), "--host", "127.0.0.1", "--port", "0", "--http-port", "0",
		"--data-dir", filepath.Join(t.TempDir(), "data"), "--zk", zkAddr, "--broker-id", strconv.Itoa(id))
	if s != nil {
		t.Cleanup(s.Kill)
	}
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-registered:
	case <-time.After(10 * time.Second):
		t.Fatalf("broker not registered within 10s:\n%s", s.Logs.Tail(4<<10))
	}
	return s.Addr
}

// TestClusterCommand runs two broker processes registered in a real
// ZooKeeper through --zk and --broker-id, and reads them with `metaq cluster`.
func TestClusterCommand(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and starts brokers")
	}
	// A ZooKeeper of its own: metaq-server registers under the default
	// root, /meta, as TestConsumeZK's does.
	zkAddr := testsvc.NewZooKeeper(t).Addr()
	a1 := startZKServer(t, zkAddr, 1)
	a2 := startZKServer(t, zkAddr, 2)

	r := cli("", "cluster", "--zk", zkAddr)
	mustOK(t, r, "cluster")
	for _, re := range []string{
		`brokers \(` + zkpath.BrokerIDs(zkpath.DefaultRoot) + `\): 2\n`,
		`\n1 +meta://` + regexp.QuoteMeta(a1) + ` +-\n`,
		`\n2 +meta://` + regexp.QuoteMeta(a2) + ` +-\n`,
		`topics: 2\n`,
		`\nmeta-fast +1-m +8 +yes +yes\nmeta-fast +2-m +8 +yes +yes\nmeta-test +1-m +4 +yes +yes\nmeta-test +2-m +4 +yes +yes\n`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Fatalf("output does not match %q:\n%s", re, r.stdout)
		}
	}
	t.Logf("metaq cluster:\n%s", r.stdout)

	r = cli("", "cluster", "--zk", zkAddr, "--json")
	mustOK(t, r, "cluster --json")
	var cl cluster.Layout
	if err := json.Unmarshal([]byte(r.stdout), &cl); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if len(cl.Brokers) != 2 || cl.Brokers[0].Master != "meta://"+a1 || cl.Brokers[1].Master != "meta://"+a2 {
		t.Fatalf("brokers: %+v", cl.Brokers)
	}
	if len(cl.Topics) != 2 || cl.Topics[1].Name != "meta-test" || len(cl.Topics[1].Brokers) != 2 ||
		cl.Topics[1].Brokers[0] != (cluster.TopicPartition{Broker: "1-m", BrokerID: 1, NumParts: 4, Publish: true, Subscribe: true}) {
		t.Fatalf("topics: %+v", cl.Topics)
	}

	// A consumer-group member over both brokers: 10 messages on each.
	var in strings.Builder
	for i := range 10 {
		in.WriteString("m" + strconv.Itoa(i) + "\n")
	}
	mustOK(t, cli(in.String(), "--addr="+a1, "produce", "--topic", "meta-test"), "produce 1")
	mustOK(t, cli(in.String(), "--addr="+a2, "produce", "--topic", "meta-test"), "produce 2")
	r = cli("", "consume", "--zk", zkAddr, "--topic", "meta-test", "--group", "cg", "--id", "x", "--json", "--max", "20")
	mustOK(t, r, "consume --zk")
	perBroker := map[int]int{}
	for line := range strings.SplitSeq(strings.TrimSpace(r.stdout), "\n") {
		var m struct {
			Broker int    `json:"broker"`
			Body   string `json:"body"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		perBroker[m.Broker]++
	}
	if perBroker[1] != 10 || perBroker[2] != 10 {
		t.Fatalf("consume --zk per broker: %v\n%s", perBroker, r.stdout)
	}
	// It committed on exit and left the group.
	r = cli("", "group", "describe", "cg", "--zk", zkAddr, "--topic", "meta-test")
	mustOK(t, r, "group describe")
	if strings.Contains(r.stdout, "cg_x") || !regexp.MustCompile(`meta-test +2 +\d+ +\d+ +\d+ +0 +0 +-`).MatchString(r.stdout) {
		t.Fatalf("group describe after consume --zk:\n%s", r.stdout)
	}
	t.Logf("metaq group describe:\n%s", r.stdout)

	// An empty root, and no ZooKeeper.
	r = cli("", "cluster", "--zk", zkAddr, "--root", "/nothing-here")
	mustOK(t, r, "cluster empty root")
	if !strings.Contains(r.stdout, "brokers ("+zkpath.BrokerIDs("/nothing-here")+"): 0") || !strings.Contains(r.stdout, "topics: 0") {
		t.Fatalf("empty root:\n%s", r.stdout)
	}
	port, _ := freePort()
	r = cli("", "--timeout", "1s", "cluster", "--zk", "127.0.0.1:"+strconv.Itoa(port))
	if r.code != 1 || !strings.Contains(r.stderr, "cannot reach ZooKeeper") {
		t.Fatalf("no ZooKeeper: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := cli("", "cluster", "--root", "meta"); r.code != 2 {
		t.Fatalf("bad root: exit %d", r.code)
	}
}

// TestPrintClusterTLS: the MASTER_TLS column (ids/<id>/master_tls) shows
// only when a broker registered one; a TLS-only broker's master is
// metaqs://.
func TestPrintClusterTLS(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	printCluster(&env{stdout: &out}, &cluster.Layout{Root: "/meta", Brokers: []cluster.BrokerInfo{
		{ID: 1, Master: "meta://h:8123", MasterTLS: "metaqs://h:8443"},
		{ID: 2, Master: "metaqs://h2:8443"},
	}}, nil)
	for _, re := range []string{
		`\nID +MASTER +MASTER_TLS +SLAVES\n`,
		`\n1 +meta://h:8123 +metaqs://h:8443 +-\n`,
		`\n2 +metaqs://h2:8443 +- +-\n`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Fatalf("output does not match %q:\n%s", re, out.String())
		}
	}
}

// replServer starts the metaq-server binary with config as broker id
// (slave < 0: its master, else slave N of it) and returns its address.
func replServer(t *testing.T, config string, id, slave int) string {
	t.Helper()
	s, err := brokertest.Launch(brokertest.ServerBinary(t), nil, "--config", config, "--host", "127.0.0.1", "--port", "0",
		"--http-port", "0", "--data-dir", filepath.Join(t.TempDir(), "data"), "--broker-id", strconv.Itoa(id), "--slave-id", strconv.Itoa(slave))
	if s != nil {
		t.Cleanup(s.Kill)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s.Addr
}

// TestClusterReplication: `metaq cluster` against real brokers in a real
// ZooKeeper: broker 5 a sync master with failover = true and its slave 1,
// broker 6 an async master and its slave 1. The table and --json show,
// per broker id, the master and the slave, whether each says slave, its
// failover role, the epoch, the in-sync state and the slave's lag in bytes
// and ms, from the brokers' stats.
func TestClusterReplication(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and starts brokers")
	}
	zkAddr := testsvc.ZooKeeper(t)
	root := "/cluster-repl-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	dir := t.TempDir()
	config := func(name, keys string) string {
		p := filepath.Join(dir, name)
		text := `host = "127.0.0.1"
port = 8123
http_port = 0
data_dir = "data"
num_partitions = 2
` + keys + `
[[topic]]
name = "rt"

[zookeeper]
connect = "` + zkAddr + `"
root = "` + root + `"
session_timeout = 4000
`
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	syncConf := config("sync.toml", "replication = \"sync\"\nfailover = true\n")
	asyncConf := config("async.toml", "")
	m5 := replServer(t, syncConf, 5, -1)
	s5 := replServer(t, syncConf, 5, 1)
	m6 := replServer(t, asyncConf, 6, -1)
	s6 := replServer(t, asyncConf, 6, 1)
	var in strings.Builder
	for i := range 20 {
		in.WriteString("m" + strconv.Itoa(i) + "\n")
	}
	mustOK(t, cli(in.String(), "--addr="+m6, "produce", "--topic", "rt"), "produce 6")

	// The sync slave joins (the master names it in sync) and the async
	// one catches up, within 20 s.
	var out clusterJSON
	var r result
	deadline := time.Now().Add(20 * time.Second)
	for {
		r = cli("", "cluster", "--zk", zkAddr, "--root", root, "--json")
		mustOK(t, r, "cluster --json")
		out = clusterJSON{}
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("%v\n%s", err, r.stdout)
		}
		done := len(out.Replication) == 4
		for _, m := range out.Replication {
			done = done && m.Error == "" && (m.InSync == "s1" || m.InSync == "yes" || m.InSync == "async") &&
				(m.LagBytes == nil || *m.LagBytes == 0 && *m.Connected)
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster --json: not all in sync within 20 s:\n%s", r.stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("metaq cluster --json (replication):\n%s", r.stdout)
	if len(out.Brokers) != 2 || out.Brokers[0].Master != "meta://"+m5 || out.Brokers[0].Slaves["slave1"] != "meta://"+s5 {
		t.Fatalf("brokers: %+v", out.Brokers)
	}
	i64 := func(v int64) *int64 { return &v }
	yes := true
	want := []replMember{
		{ID: 5, Member: "master", Addr: "meta://" + m5, Role: "master", Failover: true, Epoch: 1, Replication: "sync", InSync: "s1"},
		{ID: 5, Member: "slave1", Addr: "meta://" + s5, Slave: true, Role: "slave", Failover: true, Epoch: 1, InSync: "yes", LagBytes: i64(0), LagMs: i64(0), Connected: &yes},
		{ID: 6, Member: "master", Addr: "meta://" + m6, Role: "master", Replication: "async", InSync: "async"},
		{ID: 6, Member: "slave1", Addr: "meta://" + s6, Slave: true, Role: "slave", InSync: "async", LagBytes: i64(0), LagMs: i64(0), Connected: &yes},
	}
	got, _ := json.Marshal(out.Replication)
	exp, _ := json.Marshal(want)
	if string(got) != string(exp) {
		t.Fatalf("replication:\n got %s\nwant %s", got, exp)
	}

	r = cli("", "cluster", "--zk", zkAddr, "--root", root)
	mustOK(t, r, "cluster")
	t.Logf("metaq cluster:\n%s", r.stdout)
	for _, re := range []string{
		`\nreplication: 4 members\n`,
		`\nID +MEMBER +ADDRESS +SLAVE +ROLE +EPOCH +IN_SYNC +LAG_BYTES +LAG_MS\n`,
		`\n5 +master +meta://` + regexp.QuoteMeta(m5) + ` +no +master +1 +s1 +- +-\n`,
		`\n5 +slave1 +meta://` + regexp.QuoteMeta(s5) + ` +yes +slave +1 +yes +0 +0\n`,
		`\n6 +master +meta://` + regexp.QuoteMeta(m6) + ` +no +master +- +async +- +-\n`,
		`\n6 +slave1 +meta://` + regexp.QuoteMeta(s6) + ` +yes +slave +- +async +0 +0\n`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Fatalf("output does not match %q:\n%s", re, r.stdout)
		}
	}

	// `stats` on a slave: slave true, its epoch and its lag.
	r = cli("", "--addr="+s5, "stats")
	mustOK(t, r, "stats on the slave")
	for _, re := range []string{`\bslave true\b`, `\bepoch 1\b`, `\bfailover_role slave\b`, `\bslave_lag_bytes \d+`, `\bslave_lag_ms \d+`} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Fatalf("stats on the slave does not match %q:\n%s", re, r.stdout)
		}
	}
	r = cli("", "--addr="+s6, "stats")
	mustOK(t, r, "stats on the async slave")
	for _, re := range []string{`\bslave true\b`, `\bepoch 0\b`, `\bslave_lag_bytes \d+`, `\bslave_lag_ms \d+`} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Fatalf("stats on the async slave does not match %q:\n%s", re, r.stdout)
		}
	}
}
