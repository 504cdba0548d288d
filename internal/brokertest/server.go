package brokertest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/metaq-go/metaq/internal/testsvc"
)

// ServerPackage is the import path of the metaq-server command.
const ServerPackage = "github.com/metaq-go/metaq/cmd/metaq-server"

// readyTimeout bounds the wait for a server's ready line; exitTimeout the
// wait for it to exit after a signal.
const (
	readyTimeout = 30 * time.Second
	exitTimeout  = 20 * time.Second
)

// ReadyLine matches the line metaq-server logs once it serves: group 1 is
// the address, group 2 the data directory.
var ReadyLine = regexp.MustCompile(`metaq-server ready on (\S+) data (.*)$`)

// ServerBinary builds cmd/metaq-server (once per test binary under
// testsvc.Main) and returns its path.
func ServerBinary(tb testing.TB) string {
	tb.Helper()
	return testsvc.GoBuild(tb, ServerPackage)
}

// Server is a running metaq-server process.
type Server struct {
	// Cmd is the process.
	Cmd *exec.Cmd
	// Addr is the address from its ready line.
	Addr string
	// Logs is its standard error.
	Logs *Logs
	// Exited is closed once the process has exited and Err is set.
	Exited chan struct{}
	// Err is Wait's result, valid after Exited is closed.
	Err error

	lines func(string) // each log line, from the reading goroutine
}

// Launch starts bin with args and waits for its ready line. The process
// is killed if the test binary dies (a timed-out run must not leave
// brokers behind, or registered in ZooKeeper). On error the process is
// returned too when it was started, for its logs. onLine, if not nil, sees
// every log line as it is read.
func Launch(bin string, onLine func(string), args ...string) (*Server, error) {
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{Cmd: cmd, Logs: &Logs{}, Exited: make(chan struct{}), lines: onLine}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.Logs.Logf("%s", line)
			if s.lines != nil {
				s.lines(line)
			}
			if m := ReadyLine.FindStringSubmatch(line); m != nil {
				select {
				case ready <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, stderr)
		s.Err = cmd.Wait()
		close(s.Exited)
	}()
	select {
	case s.Addr = <-ready:
		return s, nil
	case <-s.Exited:
		return s, fmt.Errorf("metaq-server exited before it was ready (%v):\n%s", s.Err, s.Logs.Tail(4<<10))
	case <-time.After(readyTimeout):
		s.Kill()
		return s, fmt.Errorf("metaq-server not ready after %v:\n%s", readyTimeout, s.Logs.Tail(4<<10))
	}
}

// StartServer builds metaq-server, runs it with args and waits until it is
// ready; it is killed when tb ends, and its log printed if tb failed.
func StartServer(tb testing.TB, args ...string) *Server {
	tb.Helper()
	s, err := Launch(ServerBinary(tb), nil, args...)
	if s != nil {
		tb.Cleanup(func() {
			s.Kill()
			if tb.Failed() {
				tb.Logf("metaq-server log:\n%s", s.Logs.Tail(8<<10))
			}
		})
	}
	if err != nil {
		tb.Fatalf("brokertest: %v", err)
	}
	return s
}

// Stop stops the process cleanly (SIGINT: the broker flushes, writes a
// final journal checkpoint and exits 0) and waits for it, bounded; it
// fails tb if the exit is not clean.
func (s *Server) Stop(tb testing.TB) {
	tb.Helper()
	if err := s.Cmd.Process.Signal(os.Interrupt); err != nil {
		tb.Fatalf("brokertest: SIGINT: %v", err)
	}
	select {
	case <-s.Exited:
		if s.Err != nil {
			tb.Fatalf("brokertest: metaq-server clean shutdown: %v", s.Err)
		}
	case <-time.After(exitTimeout):
		tb.Fatalf("brokertest: metaq-server did not exit within %v of SIGINT", exitTimeout)
	}
}

// Kill SIGKILLs the process and waits (bounded) for it to be reaped.
func (s *Server) Kill() {
	select {
	case <-s.Exited:
		return
	default:
	}
	s.Cmd.Process.Kill()
	select {
	case <-s.Exited:
	case <-time.After(exitTimeout):
	}
}
