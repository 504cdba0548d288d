package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
)

// Lifecycle of the real metaq-server binary: SIGTERM is a graceful stop
// (under load, and while ZooKeeper is unreachable at start), SIGHUP a
// reload that drops no connection, --check-config, and the log format.

// stopWithin sends sig to p and waits at most d for it to exit; it returns
// how long that took. The exit must be clean (code 0).
func stopWithin(t *testing.T, p *brokertest.Server, sig os.Signal, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	require.NoError(t, p.Cmd.Process.Signal(sig))
	select {
	case <-p.Exited:
	case <-time.After(d):
		t.Fatalf("metaq-server did not exit within %v of %v", d, sig)
	}
	took := time.Since(start)
	require.NoError(t, p.Err, "exit after %v", sig)
	return took
}

// TestServerSIGTERMUnderLoad stops one broker of a two-broker cluster with
// SIGTERM while producers send through ZooKeeper: it exits 0 within 10 s,
// its ephemeral znodes are gone when it has exited (not a session timeout
// later), and every acknowledged message is found after a restart.
func TestServerSIGTERMUnderLoad(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterSpec{Brokers: 2, SessionTimeout: 8 * time.Second})
	p := c.newProducer(t)
	l := startClusterLoad(t, p, clusterTopic, 6)
	l.waitCount(t, 1, 100, 20*time.Second)
	l.waitCount(t, 2, 100, 20*time.Second)

	b := c.broker(1)
	b.mu.Lock()
	proc := b.proc
	b.mu.Unlock()
	took := stopWithin(t, proc, syscall.SIGTERM, 10*time.Second)
	t.Logf("broker 1 stopped %v after SIGTERM", took)
	// Unregistered before exiting: well within the 8 s session timeout.
	c.waitUnregistered(t, 1, time.Second)
	require.True(t, b.logContains("unregistered from ZooKeeper"), "log:\n%s", b.logs(4<<10))

	// The load goes on on broker 2.
	n2 := l.count(2)
	l.waitCount(t, 2, n2+20, 10*time.Second)
	l.halt()
	acks, errs := l.snapshot()
	t.Logf("%d sends acknowledged, %d failed", len(acks), len(errs))

	b.restart(t)
	checked := c.verifyAcked(t, acks)
	require.Greater(t, checked[1], 100, "acknowledged messages checked on broker 1")
}

// TestServerSIGTERMZooKeeperDown sends SIGTERM to a broker that waits for
// an unreachable ZooKeeper at start-up (connection_timeout 30 s): it still
// exits 0 within 10 s, and a message acknowledged meanwhile is on disk.
func TestServerSIGTERMZooKeeperDown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadZK := ln.Addr().String()
	ln.Close()
	config := filepath.Join(dir, "server.toml")
	require.NoError(t, os.WriteFile(config, []byte(brokerConfig(data, "", `[[topic]]
name = "t"

[zookeeper]
connect = "`+deadZK+`"
connection_timeout = 30000
`)), 0o644))

	cmd := exec.Command(brokertest.ServerBinary(t), "--config", config)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill() })
	listening := make(chan string, 1)
	var logs strings.Builder
	var logsMu sync.Mutex
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		re := regexp.MustCompile(`listening on (\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logsMu.Lock()
			logs.WriteString(sc.Text() + "\n")
			logsMu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				listening <- m[1]
			}
		}
	}()
	var addr string
	select {
	case addr = <-listening:
	case <-time.After(20 * time.Second):
		t.Fatal("metaq-server did not start listening")
	}
	cl := dial(t, addr)
	_, off := mustPut(t, cl, "t", 0, []byte("acked while ZooKeeper is down"))

	start := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	exited := make(chan error, 1)
	go func() { <-scanned; exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		logsMu.Lock()
		out := logs.String()
		logsMu.Unlock()
		require.NoError(t, err, "exit code; log:\n%s", out)
		require.Contains(t, out, "during start-up, shutting down")
		require.NotContains(t, out, "metaq-server ready on")
	case <-time.After(10 * time.Second):
		t.Fatal("metaq-server did not exit within 10 s of SIGTERM while waiting for ZooKeeper")
	}
	t.Logf("exited %v after SIGTERM", time.Since(start))

	// The message is there (local mode restart on the same data).
	local := filepath.Join(dir, "local.toml")
	require.NoError(t, os.WriteFile(local, []byte(brokerConfig(data, "", "[[topic]]\nname = \"t\"\n")), 0o644))
	s := startServer(t, local, data)
	recs, _, err := readPartition(dial(t, s.Addr), "t", 0, 1<<20)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, off, recs[0].Offset)
	require.Equal(t, "acked while ZooKeeper is down", string(recs[0].Data))
}

// reloadConfig renders the server.toml of TestServerSIGHUPReload.
func reloadConfig(data, users, extra string) string {
	return brokerConfig(data, "log_level = \"info\"\nmax_connections = 100\n"+extra+`
[auth]
enabled = true
failure_delay = 10
`+users, `[[topic]]
name = "t"

[[topic]]
name = "u"
`)
}

func userTable(name, hash string, publish ...string) string {
	q := make([]string, len(publish))
	for i, p := range publish {
		q[i] = strconv.Quote(p)
	}
	return fmt.Sprintf("\n[[auth.user]]\nname = %q\npassword_hash = %q\npublish = [%s]\nsubscribe = [\"*\"]\n", name, hash, strings.Join(q, ", "))
}

// TestServerSIGHUPReload reloads the real metaq-server with SIGHUP while
// connections put without pause: no connection is dropped and no put
// fails; a user's changed ACL applies to its open connection, a new user
// can log in, a topic's accept_publish applies, and what needs a restart
// (port, a new topic) is logged as such. A bad file is rejected with a
// log line and the running configuration stays.
func TestServerSIGHUPReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	require.NoError(t, err)
	h := string(hash)
	config := filepath.Join(dir, "server.toml")
	write := func(s string) { require.NoError(t, os.WriteFile(config, []byte(s), 0o600)) }
	write(reloadConfig(data, userTable("alice", h, "t", "u")+userTable("bob", h, "t"), ""))
	s := startServer(t, config, data)
	hup := func(want string) {
		t.Helper()
		n := strings.Count(s.Logs.String(), "SIGHUP:")
		require.NoError(t, s.Cmd.Process.Signal(syscall.SIGHUP))
		require.Eventually(t, func() bool {
			l := s.Logs.String()
			return strings.Count(l, "SIGHUP:") > n && strings.Contains(l, want)
		}, 10*time.Second, 10*time.Millisecond, "log:\n%s", s.Logs.Tail(4<<10))
	}

	// The load: alice's connections put to t without pause.
	var puts, fails atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		c := dial(t, s.Addr)
		ok(t)(c.auth("alice", "pw"))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r, err := c.put("t", -1, []byte("load-"+strconv.Itoa(i)))
				if err == nil && r.Code != 200 {
					err = fmt.Errorf("put: %v", r)
				}
				if err != nil {
					fails.Add(1)
					firstErr.CompareAndSwap(nil, err)
					return
				}
				puts.Add(1)
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	waitPuts := func(n int64) {
		t.Helper()
		target := puts.Load() + n
		require.Eventually(t, func() bool { return puts.Load() >= target || fails.Load() > 0 }, 10*time.Second, 5*time.Millisecond)
	}
	waitPuts(50)

	bob := dial(t, s.Addr)
	ok(t)(bob.auth("bob", "pw"))
	ok(t)(bob.put("t", 0, []byte("bob may")))
	ok(t)(bob.put("t", 0, []byte("bob may")))
	r, err := bob.put("u", 0, []byte("not yet"))
	require.NoError(t, err)
	require.Equal(t, 403, r.Code, "%v", r)

	// Reload: bob loses t and gains u, carol is new; num_partitions (a
	// restart setting) changes and a topic is added. The --port flag still
	// overrides the file's port, so it is no change.
	write(reloadConfig(data, userTable("alice", h, "t", "u")+userTable("bob", h, "u")+userTable("carol", h, "t")+"admin = true\n",
		"num_partitions = 3\n") + "\n[[topic]]\nname = \"new-topic\"\n")
	hup("SIGHUP: reloaded")
	logs := s.Logs.String()
	require.Contains(t, logs, "auth users added: carol")
	require.Contains(t, logs, "auth users changed: bob")
	require.Contains(t, logs, "needs a restart, not applied: num_partitions 1 -> 3")
	require.Contains(t, logs, "topic new-topic is new: it needs the admin API or a restart")

	r, err = bob.put("t", 0, []byte("no longer"))
	require.NoError(t, err)
	require.Equal(t, 403, r.Code, "bob's open connection after the reload: %v", r)
	ok(t)(bob.put("u", 0, []byte("now allowed")))
	carol := dial(t, s.Addr)
	ok(t)(carol.auth("carol", "pw"))
	ok(t)(carol.put("t", 0, []byte("carol")))
	// stats config is the running configuration, redacted: the new users,
	// the restart setting as it runs (not the file's 3), no hash.
	body := string(ok(t)(carol.stats("config")).Body)
	require.Contains(t, body, `name = "carol"`)
	require.Contains(t, body, `password_hash = "<redacted>"`)
	require.NotContains(t, body, h)
	require.Contains(t, body, "num_partitions = 1\n")
	require.NotContains(t, body, "new-topic")
	require.NotContains(t, body, "STATS")
	waitPuts(50)

	// A topic setting that applies live.
	write(reloadConfig(data, userTable("alice", h, "t", "u")+userTable("bob", h, "u")+userTable("carol", h, "t")+"admin = true\n", "") +
		"accept_publish = false\n")
	// accept_publish after [[topic]] u belongs to u.
	hup("topic u accept_publish (unset) -> false")
	r, err = bob.put("u", 0, []byte("refused"))
	require.NoError(t, err)
	require.NotEqual(t, 200, r.Code, "put to u with accept_publish = false: %v", r)
	waitPuts(50)

	// A bad file: rejected, nothing changes.
	write("port = \"not a number\"\n[[topic]]\nname = \"t\"\n")
	hup("rejected; the running configuration stays")
	require.Contains(t, s.Logs.String(), "port: must be an integer")
	ok(t)(carol.put("t", 0, []byte("still carol")))
	waitPuts(50)

	close(stop)
	wg.Wait()
	stop = make(chan struct{})
	require.Zero(t, fails.Load(), "puts failed during reloads: %v", firstErr.Load())
	t.Logf("%d puts during 3 reloads, none failed", puts.Load())
	stopWithin(t, s, syscall.SIGTERM, 10*time.Second)
}

// TestServerCheckConfig runs metaq-server --check-config on a good file, a
// file with mistakes and a file naming a plugin binary that is not there.
func TestServerCheckConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := brokertest.ServerBinary(t)
	run := func(toml string, args ...string) (string, int) {
		t.Helper()
		f := filepath.Join(dir, "check.toml")
		require.NoError(t, os.WriteFile(f, []byte(toml), 0o644))
		out, err := exec.Command(bin, append([]string{"--check-config", f}, args...)...).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return string(out), code
	}
	out, code := run("[[topic]]\nname = \"t\"\n")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "configuration OK")
	// The data directory is not created: nothing is opened.
	require.NoDirExists(t, filepath.Join(dir, "data"))

	out, code = run("port = 70000\nlog_format = \"xml\"\n[[topic]]\nname = \"t\"\nnum_partitons = 2\n")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "port: must be between 0 and 65535")
	require.Contains(t, out, `log_format: must be "text" or "json"`)
	require.Contains(t, out, `did you mean "num_partitions"?`)

	// Flags apply as at start.
	out, code = run("[[topic]]\nname = \"t\"\n", "--broker-id", "5000")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "broker_id")

	out, code = run("[[topic]]\nname = \"t\"\n[[topic.filter]]\ngroup = \"g\"\nfilter = \"expr\"\n[topic.filter.config]\nexpr = 'size > \"big\"'\n")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, `topic t group g: filter expr:`)
	require.Contains(t, out, "size compares with an integer")

	// The deploy examples are good files.
	root, err := moduleRoot()
	require.NoError(t, err)
	for _, f := range []string{"examples/deploy/server.toml", "conf/server.toml"} {
		out, err := exec.Command(bin, "--check-config", filepath.Join(root, f)).CombinedOutput()
		require.NoError(t, err, "%s: %s", f, out)
	}

	// Topic names ZooKeeper and the file system refuse ("." and ".."), in
	// server.toml and in the data directory's topics.toml.
	out, code = run("[[topic]]\nname = \".\"\n[[topic]]\nname = \"..\"\n")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, `topic[0].name: invalid topic name ".": reserved`)
	require.Contains(t, out, `topic[1].name: invalid topic name "..": reserved`)
	data := filepath.Join(dir, "dotdata")
	require.NoError(t, os.MkdirAll(data, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(data, "topics.toml"), []byte("[[topic]]\nname = \"..\"\n"), 0o644))
	out, code = run(fmt.Sprintf("data_dir = %q\n[[topic]]\nname = \"t\"\n", data))
	require.Equal(t, 1, code, out)
	require.Contains(t, out, `topics.toml: topic[0].name: invalid topic name "..": reserved`)

	out, code = run(fmt.Sprintf("plugin_dir = %q\noffset_store = \"nosuch\"\n[[plugin]]\nkind = \"offsetstore\"\nname = \"nosuch\"\n[[topic]]\nname = \"t\"\n", dir))
	require.Equal(t, 1, code, out)
	require.Contains(t, out, `plugin[0] offsetstore "nosuch": binary `+filepath.Join(dir, "nosuch"))
}

// TestServerLogFormat checks the broker's log in both formats: a debug
// line is hidden at info and shown at debug, JSON lines parse, and no
// line carries two time stamps.
func TestServerLogFormat(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stamp := regexp.MustCompile(`\d{4}[-/]\d\d[-/]\d\d[T ]\d\d:\d\d:\d\d`)
	for _, tc := range []struct{ format, level string }{{"text", "info"}, {"text", "debug"}, {"json", "info"}, {"json", "debug"}} {
		t.Run(tc.format+"-"+tc.level, func(t *testing.T) {
			data := filepath.Join(dir, tc.format+tc.level)
			config := filepath.Join(dir, tc.format+tc.level+".toml")
			require.NoError(t, os.WriteFile(config, []byte(brokerConfig(data,
				fmt.Sprintf("log_format = %q\nlog_level = %q\n", tc.format, tc.level), "[[topic]]\nname = \"t\"\n")), 0o644))
			s := startServer(t, config, data)
			c := dial(t, s.Addr)
			ok(t)(c.stats(""))
			c.close()
			if tc.level == "debug" {
				require.Eventually(t, func() bool { return strings.Contains(s.Logs.String(), "connection closed") }, 5*time.Second, 5*time.Millisecond)
			}
			stopWithin(t, s, syscall.SIGTERM, 10*time.Second)
			lines := strings.Split(strings.TrimSpace(s.Logs.String()), "\n")
			require.NotEmpty(t, lines)
			debug := 0
			for _, line := range lines {
				require.LessOrEqual(t, len(stamp.FindAllString(line, -1)), 1, "two time stamps: %s", line)
				if tc.format == "json" {
					var rec map[string]any
					require.NoError(t, json.Unmarshal([]byte(line), &rec), "not JSON: %s", line)
					require.Contains(t, rec, "time")
					require.Contains(t, rec, "msg")
					if rec["level"] == "DEBUG" {
						debug++
					}
				} else {
					require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO |WARN |ERROR) `, line)
					if strings.Contains(line, " DEBUG ") {
						debug++
					}
				}
			}
			if tc.level == "info" {
				require.Zero(t, debug, "debug lines at log_level info:\n%s", s.Logs.String())
				require.NotContains(t, s.Logs.String(), "connection opened")
			} else {
				require.NotZero(t, debug, "no debug line at log_level debug:\n%s", s.Logs.String())
			}
		})
	}
}

// TestMakeCluster runs what `make cluster` runs (examples/deploy/cluster.sh)
// on free ports, in its one-shot mode: a real ZooKeeper and two brokers
// start, register, and stop again gracefully.
func TestMakeCluster(t *testing.T) {
	t.Parallel()
	testsvc.ZooKeeper(t) // the zookeeper package must be installed (fails in CI, else skips)
	bin := brokertest.ServerBinary(t)
	root, err := moduleRoot()
	require.NoError(t, err)
	var ports []string
	for _, p := range testsvc.StablePorts(t, 3) { // free until the script binds them (ZooKeeper takes seconds)
		ports = append(ports, strconv.Itoa(p))
	}
	dir := t.TempDir()
	cmd := exec.Command("bash", "examples/deploy/cluster.sh")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CLUSTER_ONESHOT=1", "CLUSTER_DIR="+dir, "BIN="+filepath.Dir(bin),
		"ZK_PORT="+ports[0], "PORT1="+ports[1], "PORT2="+ports[2], "HTTP1=0", "HTTP2=0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out logBuf
	cmd.Stdout, cmd.Stderr = &out, &out
	// Started here, not in the goroutine that waits: the kill below reads
	// cmd.Process.
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "%s", out.String())
		require.Contains(t, out.String(), "cluster: ready")
		require.Contains(t, out.String(), "cluster: stopped")
		for id := 1; id <= 2; id++ {
			log, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("broker-%d.log", id)))
			require.NoError(t, err)
			require.Contains(t, string(log), fmt.Sprintf("registry: broker %d registered", id))
			require.Contains(t, string(log), fmt.Sprintf("registry: broker %d unregistered from ZooKeeper", id))
			require.Contains(t, string(log), "shutdown: stopped in")
		}
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("cluster.sh did not finish within 90 s:\n%s", out.String())
	}
}

// TestMakeClusterBrokerDies runs `make cluster`'s script as a person
// would try failures: kill -9 one broker. ZooKeeper and the other broker
// keep running, the script prints the command that restarts the dead one,
// that command works, and SIGTERM (Ctrl-C) then stops everything,
// including the restarted broker (issue 23: the script used to stop
// everything when one process exited).
func TestMakeClusterBrokerDies(t *testing.T) {
	t.Parallel()
	testsvc.ZooKeeper(t)
	bin := brokertest.ServerBinary(t)
	root, err := moduleRoot()
	require.NoError(t, err)
	// Ports no bind to port 0 or connect of another test can take while
	// their process is down (testsvc.StablePorts): ZooKeeper takes seconds
	// to start, and broker 2 is restarted on its port. A port from a listen
	// on :0 can be handed out again meanwhile, and the restarted broker
	// then exits: address already in use.
	var ports []string
	for _, p := range testsvc.StablePorts(t, 3) {
		ports = append(ports, strconv.Itoa(p))
	}
	dir := t.TempDir()
	cmd := exec.Command("bash", "examples/deploy/cluster.sh")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CLUSTER_DIR="+dir, "BIN="+filepath.Dir(bin),
		"ZK_PORT="+ports[0], "PORT1="+ports[1], "PORT2="+ports[2], "HTTP1=0", "HTTP2=0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out logBuf
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		for _, f := range []string{"broker-1.pid", "broker-2.pid", "zookeeper.pid"} {
			if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	})
	wait := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(d); !cond(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(end) {
				logs := ""
				for _, f := range []string{"broker-1.log", "broker-2.log"} {
					if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
						logs += "\n--- " + f + " (last 3000 bytes):\n" + string(b[max(0, len(b)-3000):])
					}
				}
				t.Fatalf("not within %v: %s\n%s%s", d, what, out.String(), logs)
			}
		}
	}
	wait("cluster: ready", 90*time.Second, func() bool { return strings.Contains(out.String(), "cluster: ready") })
	pidOf := func(name string) int {
		b, err := os.ReadFile(filepath.Join(dir, name+".pid"))
		require.NoError(t, err)
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		require.NoError(t, err)
		return pid
	}
	alive := func(pid int) bool { return syscall.Kill(pid, 0) == nil }
	b2 := pidOf("broker-2")
	require.NoError(t, syscall.Kill(b2, syscall.SIGKILL))
	wait("the script reports broker 2", 20*time.Second, func() bool { return strings.Contains(out.String(), "cluster: broker 2 exited") })
	time.Sleep(500 * time.Millisecond)
	require.True(t, alive(pidOf("broker-1")), "broker 1 stopped with broker 2:\n%s", out.String())
	require.True(t, alive(pidOf("zookeeper")), "ZooKeeper stopped with broker 2:\n%s", out.String())
	select {
	case err := <-exited:
		t.Fatalf("the script exited (%v) when broker 2 died:\n%s", err, out.String())
	default:
	}
	c := dial(t, "127.0.0.1:"+ports[1])
	mustPut(t, c, "meta-test", 0, []byte("still serving"))
	c.close()

	// The printed restart command, run as printed.
	m := regexp.MustCompile(`(?m)^  (\S+/metaq-server .* & echo \$! > \S+broker-2\.pid)$`).FindStringSubmatch(out.String())
	require.NotNil(t, m, "no restart command in:\n%s", out.String())
	restart := exec.Command("bash", "-c", m[1])
	restart.Dir = root
	require.NoError(t, restart.Run())
	wait("broker 2 serves again", 30*time.Second, func() bool {
		c, err := dialClient("127.0.0.1:" + ports[2])
		if err != nil {
			return false
		}
		defer c.close()
		r, err := c.put("meta-test", 0, []byte("back"))
		return err == nil && r.Code == 200
	})
	b2 = pidOf("broker-2")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, "%s", out.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("the script did not stop within 60 s of SIGTERM:\n%s", out.String())
	}
	require.Contains(t, out.String(), "cluster: stopped")
	wait("every process stopped", 15*time.Second, func() bool {
		return !alive(b2) && !alive(pidOf("broker-1")) && !alive(pidOf("zookeeper"))
	})
}

// TestServerSIGHUPClusterTopic turns a topic's accept_publish off and on
// again with SIGHUP in cluster mode: its topics-pub znode goes and comes
// back, topics-sub stays, and the broker stays registered.
func TestServerSIGHUPClusterTopic(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterSpec{Brokers: 1})
	b := c.broker(1)
	orig, err := os.ReadFile(c.ConfigPath)
	require.NoError(t, err)
	const header = "name = \"meta-test\"\n"
	require.Contains(t, string(orig), header)
	pub := zkpath.TopicsPub.Node(c.Root, clusterTopic, zkpath.MasterName(1))
	sub := zkpath.TopicsSub.Node(c.Root, clusterTopic, zkpath.MasterName(1))
	exists := func(p string) bool {
		ok, _, err := c.zk.Exists(p)
		require.NoError(t, err)
		return ok
	}
	require.True(t, exists(pub))

	hup := func(text, want string) {
		t.Helper()
		require.NoError(t, os.WriteFile(c.ConfigPath, []byte(text), 0o644))
		b.mu.Lock()
		p := b.proc
		b.mu.Unlock()
		require.NoError(t, p.Cmd.Process.Signal(syscall.SIGHUP))
		require.Eventually(t, func() bool { return b.logContains(want) }, 10*time.Second, 10*time.Millisecond, "log:\n%s", b.logs(4<<10))
	}
	hup(strings.Replace(string(orig), header, header+"accept_publish = false\n", 1), "applied: topic meta-test accept_publish (unset) -> false")
	require.Eventually(t, func() bool { return !exists(pub) }, 10*time.Second, 10*time.Millisecond, "%s still there", pub)
	require.True(t, exists(sub))
	hup(string(orig), "applied: topic meta-test accept_publish false -> (unset)")
	require.Eventually(t, func() bool { return exists(pub) }, 10*time.Second, 10*time.Millisecond, "%s not back", pub)
	_, err = c.registration(1)
	require.NoError(t, err, "broker 1 fully registered after the reloads")
}

// damageWords are what an operator greps a broker's log for after a
// restart: none may appear after a clean stop.
var damageWords = regexp.MustCompile(`(?i)torn|stale|damaged|corrupt|quarantin|refus|mismatch|bad record`)

// TestCleanRestartLogsNoDamage: a restart after a clean stop logs nothing
// that reads as damage, and a restart after kill -9 says what recovery did
// in one journal line (issue 23: a clean restart used to log "torn or
// stale").
func TestCleanRestartLogsNoDamage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	config := filepath.Join(dir, "server.toml")
	require.NoError(t, os.WriteFile(config, []byte(`
[[topic]]
name = "clean"
num_partitions = 8
`), 0o644))
	data := filepath.Join(dir, "data")
	put := func(s *brokertest.Server, n int) {
		c := dial(t, s.Addr)
		defer c.close()
		for i := 0; i < n; i++ {
			mustPut(t, c, "clean", int32(i%8), []byte(fmt.Sprintf("m%d", i)))
		}
	}
	s := startServer(t, config, data)
	put(s, 200)
	s.Stop(t)
	for round := 0; round < 2; round++ {
		s = startServer(t, config, data)
		put(s, 50)
		logs := s.Logs.String()
		if m := damageWords.FindString(logs); m != "" {
			t.Fatalf("restart %d after a clean stop logs %q:\n%s", round+1, m, logs)
		}
		require.Contains(t, logs, "no damage;")
		s.Stop(t)
	}
	s = startServer(t, config, data)
	put(s, 50)
	s.Kill()
	s = startServer(t, config, data)
	logs := s.Logs.String()
	require.Regexp(t, `journal .*: \d+ records from \d+ to \d+, no damage; replaying \d+ data records from the checkpoint at \d+`, logs)
	s.Stop(t)
}
