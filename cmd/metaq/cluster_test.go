package main

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaq-go/metaq/core/testsvc"
	"github.com/metaq-go/metaq/sdk/cluster"
)

// startZKServer starts the metaq-server binary in bin with the sample
// config, --zk and --broker-id, and returns its address.
func startZKServer(t *testing.T, bin, zkAddr string, id int) string {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "metaq-server"), "--config", "../../conf/server.toml",
		"--port", strconv.Itoa(port), "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--zk", zkAddr, "--broker-id", strconv.Itoa(id))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan string, 1)
	registered := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := readyRE.FindStringSubmatch(sc.Text()); m != nil {
				ready <- m[1]
			}
			if strings.Contains(sc.Text(), "registry: broker "+strconv.Itoa(id)+" registered as") {
				registered <- struct{}{}
			}
		}
	}()
	var addr string
	select {
	case addr = <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("broker not ready within 30s")
	}
	select {
	case <-registered:
	case <-time.After(10 * time.Second):
		t.Fatal("broker not registered within 10s")
	}
	return addr
}

// TestClusterCommand runs two broker processes registered in a real
// ZooKeeper through --zk and --broker-id, and reads them with `metaq cluster`.
func TestClusterCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts brokers")
	}
	zkAddr := testsvc.ZooKeeper(t)
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "../metaq-server")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	a1 := startZKServer(t, bin, zkAddr, 1)
	a2 := startZKServer(t, bin, zkAddr, 2)

	r := cli("", "cluster", "--zk", zkAddr)
	mustOK(t, r, "cluster")
	for _, re := range []string{
		`brokers \(/meta/brokers/ids\): 2\n`,
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
	if strings.Contains(r.stdout, "cg_x") || !regexp.MustCompile(`meta-test +2 +\d+ +\d+ +\d+ +0 +-`).MatchString(r.stdout) {
		t.Fatalf("group describe after consume --zk:\n%s", r.stdout)
	}
	t.Logf("metaq group describe:\n%s", r.stdout)

	// An empty root, and no ZooKeeper.
	r = cli("", "cluster", "--zk", zkAddr, "--root", "/nothing-here")
	mustOK(t, r, "cluster empty root")
	if !strings.Contains(r.stdout, "brokers (/nothing-here/brokers/ids): 0") || !strings.Contains(r.stdout, "topics: 0") {
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
