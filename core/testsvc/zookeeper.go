package testsvc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
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

var (
	sharedZKMu  sync.Mutex
	sharedZK    *ZooKeeperServer
	sharedZKErr error
)

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
	sharedZKMu.Lock()
	if sharedZK == nil && sharedZKErr == nil {
		sharedZK, sharedZKErr = startZooKeeper()
		if sharedZKErr == nil {
			onShutdown(sharedZK.close)
		}
	}
	z, err := sharedZK, sharedZKErr
	sharedZKMu.Unlock()
	if err != nil {
		unavailable(t, "ZooKeeper", err)
	}
	return z
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
	// A free port can be taken between the check and the bind: retry.
	for attempt := 0; ; attempt++ {
		if z.port, err = freePort(); err == nil {
			err = z.Start()
		}
		if err == nil {
			return z, nil
		}
		if attempt == 2 || !strings.Contains(err.Error(), "Address already in use") {
			os.RemoveAll(dir)
			return nil, err
		}
	}
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
	if err := ensureInstalled("zookeeper", probeZooKeeper); err != nil {
		unavailable(t, "zkCli.sh", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ZkCliPath, append([]string{"-server", addr}, args...)...)
	cmd.Env = append(os.Environ(), "CLIENT_JVMFLAGS="+strings.Join(jvmFlags, " "), "ZOO_LOG_DIR="+os.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("zkCli.sh %s: %w\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, tail(stdout.Bytes(), 2000), tail(stderr.Bytes(), 2000))
	}
	return stdout.String(), err
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
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "", l == "WATCHER::", strings.HasPrefix(l, "Connecting to "),
			strings.HasPrefix(l, "WatchedEvent "), strings.HasPrefix(l, "SLF4J:"):
			continue
		}
		lines = append(lines, l)
	}
	if len(lines) == 0 {
		return nil, errors.New("zkCli.sh printed no data line")
	}
	return lines, nil
}
