package security

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fakeListener returns its errors in turn, then connections.
type fakeListener struct {
	net.Listener
	errs []error
}

func (l *fakeListener) Accept() (net.Conn, error) {
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		return nil, err
	}
	c, _ := net.Pipe()
	return c, nil
}

// TestAcceptor: errors that pass are backed off from (doubling from
// 5 ms), a connection resets the delay, another error stops the loop, and
// a closed broker stops it quietly.
func TestAcceptor(t *testing.T) {
	t.Parallel()
	var warned []string
	ln := &fakeListener{errs: []error{fmt.Errorf("accept: %w", syscall.EMFILE), syscall.ECONNABORTED}}
	a := Acceptor{Listener: ln, Done: make(chan struct{}), Closed: func() bool { return false },
		Warnf: func(f string, args ...any) { warned = append(warned, fmt.Sprintf(f, args...)) }}
	start := time.Now()
	nc, err := a.Accept()
	if nc == nil || err != nil {
		t.Fatalf("after two temporary errors: %v, %v", nc, err)
	}
	nc.Close()
	if len(warned) != 2 || time.Since(start) < 15*time.Millisecond || a.delay != 0 {
		t.Fatalf("warned %q in %v, delay %v", warned, time.Since(start), a.delay)
	}
	if warned[1] != "accept: software caused connection abort; retrying in 10ms" {
		t.Fatalf("second warning %q", warned[1])
	}

	stop := errors.New("use of closed network connection")
	ln.errs = []error{stop}
	if nc, err := a.Accept(); nc != nil || err != stop {
		t.Fatalf("a permanent error: %v, %v", nc, err)
	}

	var closed atomic.Bool
	closed.Store(true)
	a.Closed = closed.Load
	ln.errs = []error{stop}
	if nc, err := a.Accept(); nc != nil || err != nil {
		t.Fatalf("closed broker: %v, %v", nc, err)
	}

	done := make(chan struct{})
	close(done)
	a = Acceptor{Listener: ln, Done: done, Closed: func() bool { return false }, Warnf: func(string, ...any) {}}
	ln.errs = []error{syscall.ENFILE}
	if nc, err := a.Accept(); nc != nil || err != nil {
		t.Fatalf("done while backing off: %v, %v", nc, err)
	}
}
