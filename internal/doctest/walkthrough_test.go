package doctest_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metaq-go/metaq/internal/doctest"
	"github.com/metaq-go/metaq/internal/testsvc"
)

func TestMain(m *testing.M) { testsvc.Main(m) }

// The walkthroughs of the documentation that TestWalkthroughs runs, in
// order. Each uses the fixed ports its docs name (outside Linux's
// ephemeral range, so tests on free ports do not take them); a port in use
// fails the walkthrough before it starts.
var walkthroughs = []struct {
	name  string // the doctest marker's name
	file  string // where its blocks are
	ports []int  // the ports it uses
	zk    bool   // needs Debian's zookeeper package
}{
	{"tour", "README.md", []int{8123, 8120}, false},
	{"cluster", "README.md", []int{2181, 8123, 8124, 8120, 8121}, true},
	{"deploy", "examples/deploy/README.md", []int{2181, 8123, 8124, 8125, 8120, 8121, 8122}, true},
}

// standIns are the only commands of the walkthroughs that do not run as
// written, and why; every other command runs in bash exactly as the docs
// show it, in a scratch directory laid out like the repository (bin/ from
// this tree, copies of conf/ and examples/deploy/).
var standIns = map[string]standIn{
	"make run": {
		why: "builds bin/ (done once by the test) and runs the broker in the foreground: " +
			"runs the Makefile's command in a process group of its own until the ready line; Ctrl-C (SIGINT to the group) at the end",
		recipe: "$(BIN)/metaq-server --config $(CONFIG)", run: "bin/metaq-server --config conf/server.toml",
		ready: "metaq-server ready on",
	},
	"make cluster": {
		why: "builds bin/ (done once by the test) and runs cluster.sh in the foreground: " +
			"runs the Makefile's command in a process group of its own until it says ready; Ctrl-C (SIGINT to the group) at the end",
		recipe: "CONFIG=$(CONFIG) BIN=$(BIN) bash examples/deploy/cluster.sh", run: "CONFIG=conf/server.toml BIN=bin bash examples/deploy/cluster.sh",
		ready: "cluster: ready",
	},
	"make build":                             {why: "the test builds the binaries once, from this tree, into the scratch directory's bin/"},
	"apt-get install zookeeper":              {why: "installs packages: the test requires them; make test installs them with .ci/services.sh"},
	"bash .ci/services.sh install zookeeper": {why: "installs packages: the test requires them; make test runs .ci/services.sh install before the tests"},
}

type standIn struct {
	why    string
	recipe string // the Makefile's recipe it stands for ("" none)
	run    string // the recipe with the Makefile's defaults, run in the foreground ("" skip)
	ready  string // the foreground program has started once its output has this
}

// step says how the test checks one command, named as the docs write it:
// its Key and its Comment (doctest.Command). Every command with a comment
// has a step, so that no claim in a comment goes unreviewed.
type step struct {
	walk, key, comment string
	// check checks the claim (nil: the comment is prose, nothing to
	// check). out is what the command printed; for a foreground stand-in,
	// its output so far.
	check func(w *walk, out string) error
	// retry: the command observes a state that comes about by itself (a
	// server starting or stopping). It runs again, as a person would look
	// again, until it exits 0 and its check holds, for up to retryFor.
	retry bool
}

const (
	cmdTimeout   = 60 * time.Second // one command
	retryFor     = 90 * time.Second // a retried command, all runs (a ZooKeeper started as the docs do, and each zkCli.sh that looks, is a JVM: 30 s ran out once under make test's load)
	readyTimeout = 90 * time.Second // a foreground stand-in until ready
	stopTimeout  = 60 * time.Second // a foreground stand-in after Ctrl-C
)

var steps = []step{
	// README.md, "A five-minute tour" and "HTTP: metrics, health, admin".
	{walk: "tour", key: "make run", comment: "... metaq-server ready on 127.0.0.1:8123 data data",
		check: lineEnds("metaq-server ready on 127.0.0.1:8123 data data")},
	{walk: "tour", key: "curl -s 127.0.0.1:8120/readyz", comment: `{"checks": [...], "status": "ready"}: 200, or 503 with the failing checks`,
		check: contains(`"status": "ready"`, `"checks": [`)},
	{walk: "tour", key: "bin/metaq topic alter orders --partitions 12", comment: "warns: keyed ordering changes",
		check: contains("WARNING: if messages are partitioned by key, the partition of a key changes")},
	{walk: "tour", key: "bin/metaq topic delete orders --yes", comment: "removes its data too",
		check: func(w *walk, out string) error {
			if err := contains("deleted topic orders and all its messages")(w, out); err != nil {
				return err
			}
			if m, _ := filepath.Glob(filepath.Join(w.dir, "data", "orders-*")); len(m) > 0 {
				return fmt.Errorf("partition directories left: %v", m)
			}
			return nil
		}},

	// README.md, "Cluster mode".
	{walk: "cluster", key: "bash .ci/services.sh install zookeeper", comment: "Debian's zookeeper package and its JRE, if missing"},
	{walk: "cluster", key: "make cluster", comment: "builds, starts ZooKeeper on 2181 and brokers 1 and 2 on 8123, 8124",
		check: listening(2181, 8123, 8124)},
	{walk: "cluster", key: "bin/metaq cluster --zk 127.0.0.1:2181", comment: "2 brokers, their topics",
		check: contains("brokers (/meta/brokers/ids): 2", "meta-test  1-m", "meta-test  2-m")},
	{walk: "cluster", key: "seq 1 100 | bin/metaq produce --zk 127.0.0.1:2181 --topic meta-test", comment: "through ZooKeeper",
		check: contains("sent 100 messages")},
	{walk: "cluster", key: "bin/metaq group describe g1 --zk 127.0.0.1:2181", comment: "offsets and lag per partition",
		check: contains("TOPIC      BROKER  PARTITION  COMMITTED  LOG_END  LAG", "meta-test  1       0", "meta-test  2       3")},

	// examples/deploy/README.md, "Three brokers on one ZooKeeper, from nothing".
	{walk: "deploy", key: "apt-get install zookeeper", comment: "ZooKeeper 3.8 and a JRE (or: bash .ci/services.sh install zookeeper)"},
	{walk: "deploy", key: "make build", comment: "bin/metaq-server, bin/metaq, bin/plugins/*"},
	{walk: "deploy", key: "/usr/share/zookeeper/bin/zkCli.sh -server 127.0.0.1:2181 ls /", comment: "[zookeeper] once it serves",
		check: hasLine("[zookeeper]"), retry: true},
	{walk: "deploy", key: "bin/metaq-server --check-config examples/deploy/three-brokers/server.toml",
		check: contains("configuration OK")},
	{walk: "deploy", key: "bin/metaq cluster --zk 127.0.0.1:2181", comment: "3 brokers, topic orders with 4 partitions on each",
		check: func(w *walk, out string) error {
			if err := contains("brokers (/meta/brokers/ids): 3", "orders  1-m     4", "orders  2-m     4", "orders  3-m     4")(w, out); err != nil {
				return err
			}
			// "Each logs `registry: broker N registered ...` and then
			// `metaq-server ready on ...`."
			for id := 1; id <= 3; id++ {
				b, _ := os.ReadFile(filepath.Join(w.dir, "data", fmt.Sprintf("broker-%d.log", id)))
				if err := inOrder(string(b), fmt.Sprintf("registry: broker %d registered", id), "metaq-server ready on"); err != nil {
					return fmt.Errorf("data/broker-%d.log: %v", id, err)
				}
			}
			return nil
		}, retry: true},
	{walk: "deploy", key: "/usr/share/zookeeper/bin/zkCli.sh -server 127.0.0.1:2181 ls /meta/brokers/ids", comment: "[1, 2, 3]",
		check: hasLine("[1, 2, 3]"), retry: true},
	{walk: "deploy", key: "seq 1 1000 | bin/metaq produce --zk 127.0.0.1:2181 --topic orders", check: contains("sent 1000 messages")},
	{walk: "deploy", key: "bin/metaq group describe billing --zk 127.0.0.1:2181",
		check: contains("group billing (cluster mode", "COMMITTED  LOG_END  LAG", "orders  3       3")},
	{walk: "deploy", key: "bin/metaq cluster --zk 127.0.0.1:2181", comment: "2 brokers",
		check: contains("brokers (/meta/brokers/ids): 2"), retry: true},
	{walk: "deploy", key: "tail -3 data/broker-2.log", comment: "unregistered ..., shutdown: stopped in ...",
		check: func(w *walk, out string) error {
			return inOrder(out, "registry: broker 2 unregistered", "shutdown: stopped in")
		}, retry: true},
	{walk: "deploy", key: "bin/metaq cluster --zk 127.0.0.1:2181", comment: "3 brokers again",
		check: func(w *walk, out string) error {
			if err := contains("brokers (/meta/brokers/ids): 3", "orders  2-m     4")(w, out); err != nil {
				return err
			}
			b, _ := os.ReadFile(filepath.Join(w.dir, "data", "broker-2.log"))
			return inOrder(string(b), "registry: broker 2 registered", "shutdown: stopped in",
				"registry: broker 2 registered", "metaq-server ready on 127.0.0.1:8124 data data/broker-2")
		}, retry: true},
	{walk: "deploy", key: "grep SIGHUP data/broker-1.log", check: contains("SIGHUP: reloaded examples/deploy/three-brokers/server.toml"), retry: true},
}

// TestWalkthroughs runs the README's five-minute tour (with its HTTP
// section), its cluster quickstart and examples/deploy's three-broker
// walkthrough, command by command as written, against binaries built from
// this tree, and checks every output the docs show and every claim of
// their comments (see steps). Afterwards nothing a walkthrough started may
// still run.
func TestWalkthroughs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts brokers and ZooKeeper on the docs' ports")
	}
	root := moduleRoot(t)
	blocks := map[string][]doctest.Block{}
	for _, w := range walkthroughs {
		if _, ok := blocks[w.file]; ok {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, w.file))
		if err != nil {
			t.Fatal(err)
		}
		if blocks[w.file], err = doctest.Parse(w.file, src); err != nil {
			t.Fatal(err)
		}
	}
	checkSteps(t, blocks)
	bins := buildBinaries(t)
	for _, w := range walkthroughs {
		t.Run(w.name, func(t *testing.T) {
			cmds := doctest.Walkthrough(blocks[w.file], w.name)
			runWalkthrough(t, root, bins, w.name, w.ports, w.zk, cmds)
		})
	}
}

// checkSteps checks the steps and stand-ins against the docs: every
// command with a comment has a step, every step and stand-in names a
// command that is there, and every shown protocol reply is consistent.
func checkSteps(t *testing.T, blocks map[string][]doctest.Block) {
	t.Helper()
	used := map[int]bool{}
	usedStandIn := map[string]bool{}
	for _, w := range walkthroughs {
		cmds := doctest.Walkthrough(blocks[w.file], w.name)
		if len(cmds) == 0 {
			t.Errorf("%s: no block marked <!-- doctest: %s -->", w.file, w.name)
		}
		for _, c := range cmds {
			if _, ok := standIns[c.Key]; ok {
				usedStandIn[c.Key] = true
			}
			if i := findStep(w.name, c); i >= 0 {
				used[i] = true
			} else if c.Comment != "" {
				t.Errorf("%s: %q says %q: add a step to walkthrough_test.go that checks it (or says it is prose)", c.Where(), c.Key, c.Comment)
			}
			if err := consistentReplies(c.Output); err != nil {
				t.Errorf("%s: the output shown for %q: %v", c.Where(), c.Key, err)
			}
		}
	}
	for i, s := range steps {
		if !used[i] {
			t.Errorf("walkthrough %s: no command %q with comment %q in the docs (changed? update the step)", s.walk, s.key, s.comment)
		}
	}
	for k := range standIns {
		if !usedStandIn[k] {
			t.Errorf("stand-in for %q: no such command in the walkthroughs", k)
		}
	}
}

func findStep(walk string, c doctest.Command) int {
	for i, s := range steps {
		if s.walk == walk && s.key == c.Key && s.comment == c.Comment {
			return i
		}
	}
	return -1
}

var replyRE = regexp.MustCompile(`^result ([0-9]+) ([0-9]+) ([0-9]+)$`)

// consistentReplies checks a shown wire-protocol reply: the length in
// "result <code> <length> <opaque>" is that of the body shown after it
// (lines joined with \r\n), unless the body is elided with "...".
func consistentReplies(out []string) error {
	for i, l := range out {
		m := replyRE.FindStringSubmatch(l)
		if m == nil || i+1 >= len(out) {
			continue
		}
		body := out[i+1:]
		for j, b := range body {
			if replyRE.MatchString(b) {
				body = body[:j]
				break
			}
		}
		if len(body) == 0 || strings.Contains(strings.Join(body, "\n"), "...") {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		if got := len(strings.Join(body, "\r\n")); got != n {
			return fmt.Errorf("%q announces %d bytes, the body shown after it has %d", l, n, got)
		}
	}
	return nil
}

// TestStandInsFollowMakefile: the stand-ins for make run and make cluster
// run what the Makefile's targets run.
func TestStandInsFollowMakefile(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(moduleRoot(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for cmd, s := range standIns {
		if s.recipe == "" {
			continue
		}
		target := strings.TrimPrefix(cmd, "make ")
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(target) + `:.*\n((?:\t.*\n)+)`).FindSubmatch(mk)
		if m == nil {
			t.Errorf("Makefile: no target %s", target)
			continue
		}
		if recipe := strings.TrimSpace(string(m[1])); recipe != s.recipe {
			t.Errorf("Makefile: %s runs %q; the test's stand-in runs %q (update standIns)", target, recipe, s.recipe)
		}
	}
	for _, v := range []string{"BIN       := bin", "CONFIG    ?= conf/server.toml"} {
		if !bytes.Contains(mk, []byte("\n"+v+"\n")) {
			t.Errorf("Makefile: no line %q, which the stand-ins assume", v)
		}
	}
}

// walk is one walkthrough being run.
type walk struct {
	t     *testing.T
	name  string
	dir   string // the scratch repository the commands run in
	out   string // where command outputs and logs go
	shell *doctest.Shell
	fg    []*foreground // foreground stand-ins, in start order
}

// foreground is a program the docs run in the foreground of a terminal
// (make run, make cluster), run by the test in a process group of its own.
type foreground struct {
	key  string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func (f *foreground) output() string { b, _ := os.ReadFile(f.log); return string(b) }

func runWalkthrough(t *testing.T, root string, bins map[string]string, name string, ports []int, zk bool, cmds []doctest.Command) {
	testsvc.Tools(t)
	if zk {
		testsvc.ZooKeeperPackage(t)
	}
	for _, p := range ports {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p), time.Second); err == nil {
			c.Close()
			t.Fatalf("port %d is in use: the %s walkthrough needs ports %v free on 127.0.0.1 (a broker from make run or make cluster still running?)", p, name, ports)
		}
	}
	w := &walk{t: t, name: name, dir: scratchRepo(t, root, bins), out: t.TempDir()}
	if _, err := os.Stat("/tmp/zk"); errors.Is(err, os.ErrNotExist) {
		t.Cleanup(func() { os.RemoveAll("/tmp/zk") }) // the deploy walkthrough's ZooKeeper data, if its clean-up did not run
	}
	env := []string{"HOME=" + filepath.Join(w.dir, ".home"), "LANG=C.UTF-8"}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		// Not passed: settings that would change what the commands do
		// (METAQ_ADDR and the like; a proxy for curl's local requests).
		if k != "HOME" && k != "LANG" && !strings.HasPrefix(k, "METAQ_") && !strings.HasPrefix(k, "LC_") &&
			!strings.HasSuffix(strings.ToLower(k), "_proxy") {
			env = append(env, kv)
		}
	}
	if err := os.MkdirAll(filepath.Join(w.dir, ".home"), 0o755); err != nil {
		t.Fatal(err)
	}
	sh, err := doctest.StartShell(w.dir, w.out, env)
	if err != nil {
		t.Fatal(err)
	}
	w.shell = sh
	t.Cleanup(func() {
		if _, err := sh.Close(5 * time.Second); err != nil {
			t.Error(err)
		}
		for _, f := range w.fg {
			if err := doctest.StopGroup(f.cmd.Process.Pid, 5*time.Second); err != nil {
				t.Error(err)
			}
			<-f.done
		}
		if t.Failed() {
			for _, f := range w.fg {
				t.Logf("%s printed:\n%s", f.key, tail(f.output(), 4000))
			}
			logs, _ := filepath.Glob(filepath.Join(w.dir, "data", "*.log"))
			more, _ := filepath.Glob(filepath.Join(w.dir, ".cluster", "*.log"))
			for _, l := range append(logs, more...) {
				b, _ := os.ReadFile(l)
				t.Logf("%s:\n%s", strings.TrimPrefix(l, w.dir+"/"), tail(string(b), 3000))
			}
		}
	})

	start := time.Now()
	for _, c := range cmds {
		w.run(c)
	}
	// Ctrl-C in the terminals of the foreground programs, last started
	// first: each stops cleanly, with everything it started.
	for i := len(w.fg) - 1; i >= 0; i-- {
		w.interrupt(w.fg[i])
	}
	// Nothing a command started is still running (the deploy walkthrough
	// stops its brokers and ZooKeeper in its last step).
	if !waitFor(20*time.Second, func() bool { return len(sh.Procs()) == 0 }) {
		t.Errorf("still running after the walkthrough: %v", sh.Procs())
	}
	t.Logf("%s: %d commands in %v", name, len(cmds), time.Since(start).Round(10*time.Millisecond))
}

// run runs one command of the docs and checks it.
func (w *walk) run(c doctest.Command) {
	t := w.t
	t.Helper()
	var st *step
	if i := findStep(w.name, c); i >= 0 {
		st = &steps[i]
	}
	if s, ok := standIns[c.Key]; ok {
		if s.run == "" {
			t.Logf("%s: %s: not run (%s)", c.Where(), c.Key, s.why)
			return
		}
		f := w.startForeground(c, s)
		if st != nil && st.check != nil {
			if err := st.check(w, f.output()); err != nil {
				t.Fatalf("%s: %s: the docs say %q, but: %v", c.Where(), c.Key, c.Comment, err)
			}
		}
		return
	}
	deadline := time.Now().Add(retryFor)
	for attempt := 1; ; attempt++ {
		r, err := w.shell.Run(c.Text, cmdTimeout)
		if err != nil {
			t.Fatalf("%s: %s: %v", c.Where(), c.Text, err)
		}
		err = w.judge(c, st, r)
		if err == nil {
			t.Logf("%s: %s (%v%s)", c.Where(), c.Key, r.Elapsed.Round(time.Millisecond), again(attempt))
			return
		}
		if st == nil || !st.retry || time.Now().After(deadline) {
			t.Fatalf("%s: %s\n%v", c.Where(), c.Text, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func again(attempt int) string {
	if attempt == 1 {
		return ""
	}
	return fmt.Sprintf(", run %d times", attempt)
}

// judge checks one run of a command: exit status 0, the shown output, the
// step's claim.
func (w *walk) judge(c doctest.Command, st *step, r doctest.Result) error {
	if r.Exit != 0 {
		return fmt.Errorf("exit status %d; output:\n%s", r.Exit, tail(r.Output, 3000))
	}
	if c.Output != nil {
		if err := doctest.Match(c.Output, r.Output); err != nil {
			return err
		}
	}
	if st != nil && st.check != nil {
		if err := st.check(w, r.Output); err != nil {
			claim := c.Comment
			if claim == "" {
				claim = "(no comment)"
			}
			return fmt.Errorf("the docs say %q, but: %v\noutput:\n%s", claim, err, tail(r.Output, 3000))
		}
	}
	return nil
}

// startForeground starts a stand-in's program in a process group of its
// own (a terminal's foreground job) and waits until it is ready.
func (w *walk) startForeground(c doctest.Command, s standIn) *foreground {
	t := w.t
	t.Helper()
	f := &foreground{key: c.Key, log: filepath.Join(w.out, strings.ReplaceAll(c.Key, " ", "-")+".log"), done: make(chan struct{})}
	lf, err := os.Create(f.log)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	f.cmd = exec.Command("bash", "-c", s.run)
	f.cmd.Dir = w.dir
	f.cmd.Env = w.shellEnv()
	f.cmd.Stdin = nil
	f.cmd.Stdout, f.cmd.Stderr = lf, lf
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { f.err = f.cmd.Wait(); close(f.done) }()
	w.fg = append(w.fg, f)
	ok := waitFor(readyTimeout, func() bool {
		select {
		case <-f.done:
			return true
		default:
		}
		return strings.Contains(f.output(), s.ready)
	})
	select {
	case <-f.done:
		t.Fatalf("%s: %s (stand-in: %s) exited (%v) before %q:\n%s", c.Where(), c.Key, s.run, f.err, s.ready, tail(f.output(), 4000))
	default:
	}
	if !ok {
		t.Fatalf("%s: %s (stand-in: %s): no %q within %v:\n%s", c.Where(), c.Key, s.run, s.ready, readyTimeout, tail(f.output(), 4000))
	}
	t.Logf("%s: %s: started %q in the foreground", c.Where(), c.Key, s.run)
	return f
}

func (w *walk) shellEnv() []string { return w.shell.Env() }

// interrupt is Ctrl-C in f's terminal: SIGINT to its process group. It
// must exit 0 within stopTimeout with nothing of its group left.
func (w *walk) interrupt(f *foreground) {
	t := w.t
	t.Helper()
	pgid := f.cmd.Process.Pid
	if err := syscall.Kill(-pgid, syscall.SIGINT); err != nil {
		t.Errorf("%s: SIGINT: %v", f.key, err)
		return
	}
	select {
	case <-f.done:
	case <-time.After(stopTimeout):
		t.Errorf("%s: still running %v after Ctrl-C:\n%s", f.key, stopTimeout, tail(f.output(), 4000))
		return
	}
	if f.err != nil {
		t.Errorf("%s: exit after Ctrl-C: %v\n%s", f.key, f.err, tail(f.output(), 4000))
	}
	if !doctest.WaitGroupGone(pgid, 20*time.Second) {
		t.Errorf("%s: still running 20 s after it exited on Ctrl-C: %v", f.key, doctest.GroupProcs(pgid))
	}
	t.Logf("%s: stopped by Ctrl-C", f.key)
}

// buildBinaries builds what the walkthroughs run (bin/metaq-server,
// bin/metaq, bin/plugins/metaq-offsetstore-zk) from this tree, once.
func buildBinaries(t *testing.T) map[string]string {
	t.Helper()
	return map[string]string{
		"metaq-server":                 testsvc.GoBuild(t, "github.com/metaq-go/metaq/cmd/metaq-server"),
		"metaq":                        testsvc.GoBuild(t, "github.com/metaq-go/metaq/cmd/metaq"),
		"plugins/metaq-offsetstore-zk": testsvc.GoBuild(t, "github.com/metaq-go/metaq/cmd/metaq-offsetstore-zk"),
	}
}

// scratchRepo makes a directory that looks like the repository's root to
// the docs' commands: bin/ with the built binaries, copies of conf/ and
// examples/deploy/ (so that nothing a walkthrough writes lands in the
// repository).
func scratchRepo(t *testing.T, root string, bins map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range bins {
		dst := filepath.Join(dir, "bin", name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(src, dst); err != nil {
			if err := copyFile(src, dst, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, d := range []string{"conf", "examples/deploy"} {
		if err := copyTree(filepath.Join(root, d), filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
		if err := smallJournals(filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// testJournalFileSize is the journal file size of the copied server
// configurations: 4 MiB instead of 64 MiB. Every broker the walkthroughs
// start pre-writes and fdatasyncs its journal file and two spares, and
// they commit far less than one file: at 64 MiB that fill was most of a
// start's CPU and disk time. It changes no command and no output.
const testJournalFileSize = 4 << 20

var journalFileSizeKey = regexp.MustCompile(`(?m)^journal_file_size = [0-9]+$`)

// smallJournals sets journal_file_size = testJournalFileSize in the
// *.toml files under dir: in place where a file sets it, as the first key
// where it does not.
func smallJournals(dir string) error {
	line := "journal_file_size = " + strconv.Itoa(testJournalFileSize)
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".toml") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if journalFileSizeKey.Match(b) {
			b = journalFileSizeKey.ReplaceAll(b, []byte(line))
		} else {
			b = append([]byte(line+"\n"), b...)
		}
		return os.WriteFile(p, b, 0o644)
	})
}

func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return copyFile(p, to, info.Mode().Perm())
	})
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("go.mod not found above the working directory")
		}
		dir = up
	}
}

// Checks of claims.

func contains(parts ...string) func(*walk, string) error {
	return func(_ *walk, out string) error {
		for _, p := range parts {
			if !strings.Contains(out, p) {
				return fmt.Errorf("no %q in the output", p)
			}
		}
		return nil
	}
}

// hasLine: a line of the output is s (blanks aside).
func hasLine(s string) func(*walk, string) error {
	return func(_ *walk, out string) error {
		for _, l := range strings.Split(out, "\n") {
			if strings.TrimSpace(l) == s {
				return nil
			}
		}
		return fmt.Errorf("no line %q in the output", s)
	}
}

// lineEnds: a line of the output ends with s.
func lineEnds(s string) func(*walk, string) error {
	return func(_ *walk, out string) error {
		for _, l := range strings.Split(out, "\n") {
			if strings.HasSuffix(strings.TrimRight(l, " \r"), s) {
				return nil
			}
		}
		return fmt.Errorf("no line ending in %q in the output", s)
	}
}

// listening: each port accepts connections on 127.0.0.1.
func listening(ports ...int) func(*walk, string) error {
	return func(_ *walk, _ string) error {
		for _, p := range ports {
			c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p), 2*time.Second)
			if err != nil {
				return fmt.Errorf("nothing listens on 127.0.0.1:%d: %v", p, err)
			}
			c.Close()
		}
		return nil
	}
}

// inOrder: the parts appear in s in this order.
func inOrder(s string, parts ...string) error {
	at := 0
	for _, p := range parts {
		i := strings.Index(s[at:], p)
		if i < 0 {
			if at == 0 {
				return fmt.Errorf("no %q", p)
			}
			return fmt.Errorf("no %q after %q", p, parts[0])
		}
		at += i + len(p)
	}
	return nil
}

func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
