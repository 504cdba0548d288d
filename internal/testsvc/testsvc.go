// Package testsvc (test helpers, not API) starts the real servers that integration tests talk to:
// ZooKeeper (Debian's zookeeper package) and MariaDB (Debian's
// mariadb-server). Each server runs as a child of the test binary on a free
// 127.0.0.1 port with a scratch data directory, and is stopped when the
// test (or, for the shared servers, the test binary) ends.
//
// Missing packages are installed once per machine through .ci/services.sh
// (apt-get, serialised by a lock file); `make test` runs that script before
// the tests so the install is not paid inside a test's timeout.
//
// In CI (CI=true) a server that cannot be installed or started fails the
// test. Elsewhere it is installed too when possible (root); only when it
// cannot be is the test skipped, with the reason.
//
// Typical use, one server of each kind per test binary:
//
//	func TestMain(m *testing.M) { testsvc.Main(m) }
//
//	func TestX(t *testing.T) {
//		connect := testsvc.ZooKeeper(t) // "127.0.0.1:port"
//		dsn := testsvc.MariaDB(t)       // a fresh database on the shared server
//	}
//
// Without testsvc.Main the shared helpers fall back to one server per test.
// NewZooKeeper and NewMariaDB give a test its own server, which it may stop
// and restart (fault tests).
package testsvc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Bounds on the slow steps.
const (
	// InstallTimeout bounds installing the packages (apt-get update and
	// install) through .ci/services.sh.
	InstallTimeout = 15 * time.Minute
	// StartTimeout bounds one server start, from exec to ready.
	StartTimeout = 60 * time.Second
	// StopTimeout is how long a server gets to exit after SIGTERM before
	// it is killed.
	StopTimeout = 10 * time.Second
)

var (
	mainMu     sync.Mutex
	mainActive bool
	shutdowns  []func() // shared servers, stopped by Main
)

// Main runs the tests of a package whose tests share servers, then stops
// those servers and exits: call it from TestMain.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit, for a TestMain with more to do after the
// tests: it runs them with the servers shared, stops those servers and
// returns m.Run's exit code.
func Run(m *testing.M) int {
	mainMu.Lock()
	mainActive = true
	mainMu.Unlock()
	code := m.Run()
	StopShared()
	return code
}

// StopShared stops the servers the shared helpers started. Main calls it;
// call it yourself from a TestMain that does not use Main (after m.Run).
func StopShared() {
	mainMu.Lock()
	fns := shutdowns
	shutdowns = nil
	mainMu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// sharing reports whether shared servers are stopped by Main.
func sharing() bool {
	mainMu.Lock()
	defer mainMu.Unlock()
	return mainActive
}

func onShutdown(fn func()) {
	mainMu.Lock()
	shutdowns = append(shutdowns, fn)
	mainMu.Unlock()
}

// InCI reports whether the tests run in CI (CI is set and not "false"/"0").
func InCI() bool {
	v := strings.ToLower(strings.TrimSpace(os.Getenv("CI")))
	return v != "" && v != "false" && v != "0"
}

// unavailable ends t because a server is missing: a failure in CI, a skip
// (with the reason) elsewhere.
func unavailable(t testing.TB, what string, err error) {
	t.Helper()
	if InCI() {
		t.Fatalf("testsvc: %s is required in CI: %v", what, err)
	}
	t.Skipf("testsvc: %s unavailable (set CI=true to make this a failure): %v", what, err)
}

var installMu sync.Mutex

// ensureInstalled installs service (an argument of .ci/services.sh) unless
// probe finds it already.
func ensureInstalled(service string, probe func() error) error {
	installMu.Lock()
	defer installMu.Unlock()
	if probe() == nil {
		return nil
	}
	script, err := servicesScript()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), InstallTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script, "install", service)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("install %s with %s: %v\n%s", service, script, err, tail(out.Bytes(), 4000))
	}
	if err := probe(); err != nil {
		return fmt.Errorf("installed %s, but: %w", service, err)
	}
	return nil
}

// servicesScript finds .ci/services.sh in the module root above the
// working directory (go test runs in the package directory).
func servicesScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, ".ci", "services.sh")
		if _, err := os.Stat(p); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				return p, nil
			}
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no .ci/services.sh in any parent of the working directory")
		}
		dir = up
	}
}

// freePort returns a port on 127.0.0.1 that was free a moment ago, one
// of StablePorts: a server started on it (ZooKeeper, MariaDB take
// seconds), or stopped and started again on it (NewZooKeeper), does not
// find it taken by a bind to port 0 or a connect of another test.
func freePort() (int, error) {
	ports, err := stablePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// StartOnFreePort calls start with a port of 127.0.0.1 that was free a
// moment ago. A free port can be taken between the check and the bind, so
// when start fails with "address already in use" (in any case) it is called
// again with another port, three times at most. It returns start's last
// error.
func StartOnFreePort(start func(port int) error) error {
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err == nil {
			err = start(port)
		}
		if err == nil || attempt == 2 || !strings.Contains(strings.ToLower(err.Error()), "address already in use") {
			return err
		}
	}
}

// shared is a server shared by the test binary: started on first use,
// stopped by Main.
type shared[S any] struct {
	mu  sync.Mutex
	srv *S
	err error // the first start's error, returned from then on
}

// get returns the server, starting it with start on first use (and
// registering stop for Main). If it cannot be started, t ends as
// unavailable says.
func (sh *shared[S]) get(t testing.TB, what string, start func() (*S, error), stop func(*S)) *S {
	t.Helper()
	sh.mu.Lock()
	if sh.srv == nil && sh.err == nil {
		sh.srv, sh.err = start()
		if sh.err == nil {
			srv := sh.srv
			onShutdown(func() { stop(srv) })
		}
	}
	srv, err := sh.srv, sh.err
	sh.mu.Unlock()
	if err != nil {
		unavailable(t, what, err)
	}
	return srv
}

// proc is a server process started by this package.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string // file holding the process's stdout and stderr
	done chan struct{}
	err  error // Wait's result, set before done closes
}

// startProc starts cmd with its output in logFile. The process gets its
// own process group and SIGKILL when the test binary dies (Pdeathsig), so
// a crashed or timed-out test run leaves no server behind.
func startProc(name string, cmd *exec.Cmd, logFile string) (*proc, error) {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logFile, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, waits up to StopTimeout, then
// kills it.
func (p *proc) stop() {
	if p == nil || p.exited() {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(StopTimeout):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
}

// kill kills the process group at once (SIGKILL) and waits for it.
func (p *proc) kill() {
	if p == nil || p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// logTail is the end of the process's output, for error messages.
func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.log)
	return tail(b, 3000)
}

// waitReady polls ready every 100 ms until it succeeds, the process exits,
// or StartTimeout passes.
func (p *proc) waitReady(ready func() error) error {
	deadline := time.Now().Add(StartTimeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited during startup (%v):\n%s", p.name, p.err, p.logTail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %v\n%s", p.name, StartTimeout, err, p.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// scratchDir makes a fresh directory for a server's data, outside any
// test's TempDir so that a server running as another user (mysql) can
// reach it. It records the test binary's pid, and first removes the
// directories of test binaries that died without cleaning up (kill -9).
func scratchDir(prefix string) (string, error) {
	sweepScratch()
	dir, err := os.MkdirTemp("", "metaq-"+prefix+"-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// ownerFile holds the pid of the test binary that owns a scratch dir.
const ownerFile = "owner.pid"

var sweepOnce sync.Once

// sweepScratch removes scratch directories whose owner process is gone.
func sweepScratch() {
	sweepOnce.Do(func() {
		for _, pattern := range []string{"metaq-zk-*", "metaq-mariadb-*"} {
			dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), pattern))
			for _, d := range dirs {
				b, err := os.ReadFile(filepath.Join(d, ownerFile))
				if err != nil {
					continue // not ours, or still being set up
				}
				pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
				if err != nil || pid <= 0 || pid == os.Getpid() {
					continue
				}
				if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
					os.RemoveAll(d)
				}
			}
		}
	})
}
