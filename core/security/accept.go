package security

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/metaq-go/metaq/conf"
)

// Listen binds the protocol ports of c for the broker's Start: port
// (plaintext; none when port = 0 with TLS on, meaning TLS only) and, with
// TLS on (tlsOn: [tls] is configured), tls_port. On error neither is
// left open.
func Listen(c *conf.Config, tlsOn bool) (ln, tln net.Listener, err error) {
	if c.Port != 0 || !tlsOn {
		if ln, err = net.Listen("tcp", c.Addr()); err != nil {
			return nil, nil, fmt.Errorf("listen: %w", err)
		}
	}
	if tlsOn {
		if tln, err = net.Listen("tcp", net.JoinHostPort(c.Host, strconv.Itoa(c.TLSPort))); err != nil {
			if ln != nil {
				ln.Close()
			}
			return nil, nil, fmt.Errorf("listen tls: %w", err)
		}
	}
	return ln, tln, nil
}

// Acceptor accepts a listener's connections for the broker's accept loop
// (core/broker broker.go), backing off from errors that pass rather than
// stop accepting: out of file descriptors or memory, an aborted
// connection, a timeout. The delay doubles from 5 ms up to a second and
// starts again after a connection is accepted.
type Acceptor struct {
	Listener net.Listener
	// Done is closed when the broker closes; Closed reports it (set
	// first).
	Done   <-chan struct{}
	Closed func() bool
	// Warnf logs each error backed off from.
	Warnf func(format string, args ...any)
	delay time.Duration
}

// Accept returns the next connection. It returns nil and nil when the
// broker closed (the loop ends quietly), nil and the error when accepting
// cannot go on (the loop logs it and ends).
func (a *Acceptor) Accept() (net.Conn, error) {
	for {
		nc, err := a.Listener.Accept()
		if err == nil {
			a.delay = 0
			return nc, nil
		}
		if a.Closed() {
			return nil, nil
		}
		var ne net.Error
		if !(errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || isTemporary(err)) {
			return nil, err
		}
		a.delay = min(max(2*a.delay, 5*time.Millisecond), time.Second)
		a.Warnf("accept: %v; retrying in %v", err, a.delay)
		select {
		case <-time.After(a.delay):
		case <-a.Done:
			return nil, nil
		}
	}
}

// isTemporary reports accept errors to back off from rather than stop
// accepting: out of file descriptors or memory, or an aborted connection.
func isTemporary(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.EAGAIN, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
