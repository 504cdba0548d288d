package testsvc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaq-go/metaq/internal/faultnet"
)

// Where Debian's zookeeper package puts things.
const (
	// ZooKeeperJar is the server and client jar; its manifest's Class-Path
	// names the dependencies in /usr/share/java.
	ZooKeeperJar = "/usr/share/java/zookeeper.jar"
	// ZkCliPath is the command-line client.
	ZkCliPath = "/usr/share/zookeeper/bin/zkCli.sh"
)

// jvmFlags keep a small JVM quick to start on a loaded 2-core machine.
var jvmFlags = []string{"-Xms16m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-Djava.awt.headless=true"}

func probeZooKeeper() error {
	if _, err := exec.LookPath("java"); err != nil {
		return fmt.Errorf("no java on PATH (the zookeeper package needs a JRE): %w", err)
	}
	for _, p := range []string{ZooKeeperJar, ZkCliPath} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("zookeeper package not installed: %w", err)
		}
	}
	return nil
}

// ZooKeeperServer is a standalone ZooKeeper started by this package, on
// 127.0.0.1 with a scratch data directory and the admin server disabled.
type ZooKeeperServer struct {
	mu   sync.Mutex
	port int
	dir  string
	proc *proc
}

var sharedZK shared[ZooKeeperServer]

// ZooKeeper returns the connect string ("127.0.0.1:port") of the ZooKeeper
// shared by the test binary (see Main), starting it on first use. Tests
// that share it keep to their own paths. Without Main, t gets a server of
// its own.
func ZooKeeper(t testing.TB) string {
	t.Helper()
	return SharedZooKeeper(t).Addr()
}

// SharedZooKeeper returns the ZooKeeper shared by the test binary itself
// (see ZooKeeper). Tests must not stop it.
func SharedZooKeeper(t testing.TB) *ZooKeeperServer {
	t.Helper()
	if !sharing() {
		return NewZooKeeper(t)
	}
	return sharedZK.get(t, "ZooKeeper", startZooKeeper, (*ZooKeeperServer).close)
}

// NewZooKeeper starts a ZooKeeper of t's own, stopped and removed when t
// ends. A test may Stop, Kill and Start it again (same port, same data).
func NewZooKeeper(t testing.TB) *ZooKeeperServer {
	t.Helper()
	z, err := startZooKeeper()
	if err != nil {
		unavailable(t, "ZooKeeper", err)
	}
	t.Cleanup(z.close)
	return z
}

func startZooKeeper() (*ZooKeeperServer, error) {
	if err := ensureInstalled("zookeeper", probeZooKeeper); err != nil {
		return nil, err
	}
	dir, err := scratchDir("zk")
	if err != nil {
		return nil, err
	}
	z := &ZooKeeperServer{dir: dir}
	if err := StartOnFreePort(func(port int) error { z.port = port; return z.Start() }); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return z, nil
}

// Addr is the connect string, "127.0.0.1:port".
func (z *ZooKeeperServer) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(z.port))
}

// Start starts the server (again, after Stop or Kill: same port and data)
// and waits until it serves requests.
func (z *ZooKeeperServer) Start() error {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.proc != nil && !z.proc.exited() {
		return nil
	}
	data := filepath.Join(z.dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	// tickTime 500 ms: sessions of 1 s to 60 s (fault tests use short
	// ones). forceSync=no: the scratch data need not survive power loss.
	cfg := fmt.Sprintf(`tickTime=500
minSessionTimeout=1000
maxSessionTimeout=60000
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
admin.enableServer=false
maxClientCnxns=0
forceSync=no
4lw.commands.whitelist=ruok,srvr,stat,mntr,cons
`, data, z.port)
	cfgPath := filepath.Join(z.dir, "zoo.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	args := append(append([]string{}, jvmFlags...),
		"-Dzookeeper.admin.enableServer=false",
		"-Dzookeeper.log.dir="+z.dir,
		"-cp", ZooKeeperJar, "org.apache.zookeeper.server.ZooKeeperServerMain", cfgPath)
	p, err := startProc("zookeeper", exec.Command("java", args...), filepath.Join(z.dir, "server.log"))
	if err != nil {
		return err
	}
	if err := p.waitReady(func() error { return zkServing(z.Addr()) }); err != nil {
		p.kill()
		return err
	}
	z.proc = p
	return nil
}

// zkServing asks the server's srvr four-letter word whether it serves.
func zkServing(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("srvr")); err != nil {
		return err
	}
	var out bytes.Buffer
	_, _ = out.ReadFrom(c)
	if !strings.Contains(out.String(), "Mode: ") {
		return fmt.Errorf("srvr answered %q", out.String())
	}
	return nil
}

// Stop stops the server gracefully (SIGTERM), keeping its data.
func (z *ZooKeeperServer) Stop() {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.proc.stop()
}

// Kill kills the server (SIGKILL), keeping its data.
func (z *ZooKeeperServer) Kill() {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.proc.kill()
}

func (z *ZooKeeperServer) close() {
	z.Kill()
	os.RemoveAll(z.dir)
}

// ZkCli runs Debian's zkCli.sh against addr with args (for example "get",
// "/meta/consumers/g/offsets/t/0-1") and returns its standard output.
// zkCli.sh exits non-zero when the command fails (a missing node).
func ZkCli(t testing.TB, addr string, args ...string) (string, error) {
	t.Helper()
	stdout, _, err := runZkCli(t, addr, nil, args...)
	if err != nil {
		err = fmt.Errorf("zkCli.sh %s: %w", strings.Join(args, " "), err)
	}
	return stdout, err
}

// ZkCliScript runs zkCli.sh once against addr with commands on its standard
// input (one JVM start for all of them) and returns the lines it printed
// without its connection chatter (see zkCliLines): the output of the
// commands, in order. A failing command, such as a get of a missing node,
// prints nothing there; its error goes to stderr, which is logged when no
// line is left or t has failed.
func ZkCliScript(t testing.TB, addr string, commands ...string) ([]string, error) {
	t.Helper()
	lines, _, exitErr, err := ZkCliSession(t, addr, commands...)
	if err == nil && exitErr != nil {
		err = fmt.Errorf("zkCli.sh: %w", exitErr)
	}
	if err != nil {
		return nil, err
	}
	return lines, nil
}

// ZkCliSession runs zkCli.sh once against addr with commands on its
// standard input, like ZkCliScript, for scripts where commands are meant to
// fail: it returns the lines the commands printed (see zkCliLines), what
// zkCli.sh wrote to stderr (a failing command's message, such as
// "Node does not exist: /x" or "Insufficient permission : /x", one line
// each) and exitErr, non-nil when zkCli.sh exited non-zero, which it does
// when the last command failed. err is for zkCli.sh not running at all.
func ZkCliSession(t testing.TB, addr string, commands ...string) (lines []string, stderr string, exitErr, err error) {
	t.Helper()
	stdin := strings.NewReader(strings.Join(append(commands, "quit"), "\n") + "\n")
	stdout, stderr, runErr := runZkCli(t, addr, stdin)
	var ee *exec.ExitError
	switch {
	case runErr == nil:
	case errors.As(runErr, &ee) && ee.Exited():
		exitErr = runErr
	default:
		return nil, stderr, nil, fmt.Errorf("zkCli.sh: %w", runErr)
	}
	lines = zkCliLines(stdout)
	if t.Failed() || len(lines) == 0 {
		t.Logf("zkCli.sh stderr:\n%s", stderr)
	}
	return lines, stderr, exitErr, nil
}

// runZkCli runs zkCli.sh -server addr args with stdin (nil for none),
// installing the zookeeper package first if needed. When it fails, the
// error carries the end of its output.
func runZkCli(t testing.TB, addr string, stdin io.Reader, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	if err := ensureInstalled("zookeeper", probeZooKeeper); err != nil {
		unavailable(t, "zkCli.sh", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ZkCliPath, append([]string{"-server", addr}, args...)...)
	cmd.Env = append(os.Environ(), "CLIENT_JVMFLAGS="+strings.Join(jvmFlags, " "), "ZOO_LOG_DIR="+os.TempDir())
	cmd.Stdin = stdin
	var outb, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outb, &errb
	if err := cmd.Run(); err != nil {
		return outb.String(), errb.String(), fmt.Errorf("%w\nstdout:\n%s\nstderr:\n%s", err, tail(outb.Bytes(), 2000), tail(errb.Bytes(), 2000))
	}
	return outb.String(), errb.String(), nil
}

// zkCliLines returns the non-empty lines of zkCli.sh's output that are not
// its connection chatter, trimmed.
func zkCliLines(out string) []string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "", l == "WATCHER::", l == "Welcome to ZooKeeper!", l == "JLine support is disabled",
			strings.HasPrefix(l, "Connecting to "), strings.HasPrefix(l, "WatchedEvent "), strings.HasPrefix(l, "SLF4J:"):
			continue
		}
		lines = append(lines, l)
	}
	return lines
}

// ZkCliGet reads a znode's data with `zkCli.sh get path`. zkCli prints
// the data as a line among its connection chatter; ZkCliGet returns the
// lines that are not that chatter (one line for single-line data).
func ZkCliGet(t testing.TB, addr, path string) ([]string, error) {
	t.Helper()
	out, err := ZkCli(t, addr, "get", path)
	if err != nil {
		return nil, err
	}
	lines := zkCliLines(out)
	if len(lines) == 0 {
		return nil, errors.New("zkCli.sh printed no data line")
	}
	return lines, nil
}

// StuckHandshake is the shared ZooKeeper (ZooKeeper) behind a proxy whose
// first connection is accepted and never answered, as a ZooKeeper still
// starting once did: the client's connect request gets no reply. A client
// must give the handshake up after about its recvTimeout (session*2/3)
// and reconnect. Call the returned check with the time the client took
// to get a session: it requires a second connection and, well under
// go-zookeeper's own 10 x recvTimeout, less than 4 x session.
func StuckHandshake(t testing.TB) (addr string, check func(took, session time.Duration)) {
	t.Helper()
	p, err := faultnet.Start(ZooKeeper(t))
	if err != nil {
		t.Fatalf("proxy to ZooKeeper: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	p.Swallow(1)
	return p.Addr(), func(took, session time.Duration) {
		t.Helper()
		t.Logf("session after %v (%d connections)", took, p.Accepts())
		if p.Accepts() < 2 {
			t.Fatalf("%d connections: the first one was swallowed, so the client must have made another", p.Accepts())
		}
		// About recvTimeout + go-zookeeper's 1 s pause once every server was tried.
		if took >= 4*session {
			t.Fatalf("session after %v, not within 4 x the %v session", took, session)
		}
	}
}
