package registry

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
)

// swallowProxy listens on a free 127.0.0.1 port in front of a ZooKeeper:
// the first connection is accepted and read from but never answered (a
// ZooKeeper still starting did that: it took the client's connect request
// and never replied), later ones are forwarded.
type swallowProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	n      int
	wg     sync.WaitGroup
}

func startSwallowProxy(t *testing.T, target string) *swallowProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &swallowProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *swallowProxy) addr() string { return p.ln.Addr().String() }

func (p *swallowProxy) accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func (p *swallowProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *swallowProxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(down)
		p.mu.Lock()
		p.n++
		first := p.n == 1
		p.mu.Unlock()
		if first {
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				_, _ = io.Copy(io.Discard, down) // read, never answer
			}()
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			down.Close()
			continue
		}
		p.track(up)
		p.wg.Add(2)
		go p.pipe(up, down)
		go p.pipe(down, up)
	}
}

func (p *swallowProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

func (p *swallowProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestStuckHandshakeReconnects: a ZooKeeper that accepts the connection
// and never answers the connect request does not hold the registry for
// go-zookeeper's 10 x recvTimeout (recvTimeout = SessionTimeout*2/3: 13.3 s
// here, 200 s at a 30 s session): the handshake gives up after about
// recvTimeout, the client reconnects (after its 1 s pause once every
// server was tried) and the broker registers.
func TestStuckHandshakeReconnects(t *testing.T) {
	t.Parallel()
	p := startSwallowProxy(t, testsvc.ZooKeeper(t))
	lb := &logBuf{}
	lb.dumpOnFailure(t)
	opts := testOpts(p.addr(), "/stuckhandshake", 1, lb)
	opts.SessionTimeout = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	r, err := Open(ctx, opts)
	require.NoError(t, err)
	defer r.Close()
	require.NoError(t, r.Wait(ctx))
	took := time.Since(start)
	t.Logf("registered after %v (%d connections)", took, p.accepted())
	require.GreaterOrEqual(t, p.accepted(), 2, "the first connection was swallowed")
	// About recvTimeout (1.33 s) + 1 s + the registration; well under the
	// 10 x recvTimeout (13.3 s) go-zookeeper waits on its own.
	require.Less(t, took, 4*opts.SessionTimeout)
}
