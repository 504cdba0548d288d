package client

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// faultyNet is a TCP proxy between the client and a real broker: a faulty
// network, not a fake broker. Every reply the client reads was written by
// the real broker; the proxy only decides whether and when the broker gets
// the client's requests. It forwards them frame by frame (it decodes them
// to find the boundaries and to count them), and on demand holds them back
// (a network that stops delivering: the requests wait in the proxy, so no
// reply comes) or cuts every connection (a network that drops them).
type faultyNet struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	hold  func(*protocol.Request) bool // nil: forward everything
	links map[*proxyLink]struct{}
	dials int
	ops   map[protocol.Op]int // frames seen, by op
	done  bool                // closed: new connections are dropped
	deaf  bool                // the broker's replies are dropped (deafen)
	wg    sync.WaitGroup
}

// proxyLink is one client connection and its connection to the broker.
type proxyLink struct {
	client, broker net.Conn
	once           sync.Once
	// mu serializes the writes to the broker and guards queue: the frames
	// held, in order.
	mu    sync.Mutex
	queue [][]byte
}

// startFaultyNet listens on a free 127.0.0.1 port and forwards every
// connection to target; it is closed when t ends.
func startFaultyNet(t testing.TB, target string) *faultyNet {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &faultyNet{ln: ln, target: target, links: make(map[*proxyLink]struct{}), ops: make(map[protocol.Op]int)}
	n.wg.Add(1)
	go n.accept()
	t.Cleanup(n.close)
	return n
}

func (n *faultyNet) addr() string { return n.ln.Addr().String() }

func (n *faultyNet) accept() {
	defer n.wg.Done()
	for {
		c, err := n.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.DialTimeout("tcp", n.target, 5*time.Second)
		if err != nil {
			c.Close() // the far end is unreachable
			continue
		}
		l := &proxyLink{client: c, broker: b}
		n.mu.Lock()
		if n.done {
			n.mu.Unlock()
			c.Close()
			b.Close()
			return
		}
		n.links[l] = struct{}{}
		n.dials++
		n.mu.Unlock()
		n.wg.Add(2)
		go n.up(l)
		go n.down(l)
	}
}

// up forwards the client's requests, one whole frame at a time, holding
// those the hold predicate picks (and every frame behind them).
func (n *faultyNet) up(l *proxyLink) {
	defer n.wg.Done()
	defer n.drop(l)
	rec := &frameRecorder{r: l.client}
	dec := protocol.NewDecoder(rec, protocol.Limits{MaxBody: 64 << 20})
	var req protocol.Request
	for {
		if err := dec.Decode(&req); err != nil {
			return
		}
		frame := rec.take(dec.Buffered())
		l.mu.Lock()
		n.mu.Lock()
		n.ops[req.Op]++
		hold := n.hold != nil && n.hold(&req)
		n.mu.Unlock()
		var err error
		if hold || len(l.queue) > 0 {
			l.queue = append(l.queue, frame)
		} else {
			_, err = l.broker.Write(frame)
		}
		l.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// down copies the broker's replies to the client as they are, or drops
// them while the proxy is deaf.
func (n *faultyNet) down(l *proxyLink) {
	defer n.wg.Done()
	defer n.drop(l)
	buf := make([]byte, 32<<10)
	for {
		k, err := l.broker.Read(buf)
		n.mu.Lock()
		deaf := n.deaf
		n.mu.Unlock()
		if k > 0 && !deaf {
			if _, werr := l.client.Write(buf[:k]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// deafen drops the broker's replies from now on: the broker stores what
// it gets, and the client never learns it.
func (n *faultyNet) deafen() {
	n.mu.Lock()
	n.deaf = true
	n.mu.Unlock()
}

// pass stops holding and delivers, in order, the held requests for which
// keep returns true; the others are lost (never delivered), their
// connections left open.
func (n *faultyNet) pass(keep func(frame []byte) bool) {
	for _, l := range n.snapshot(func() { n.hold = nil }) {
		l.mu.Lock()
		for _, f := range l.queue {
			if !keep(f) {
				continue
			}
			if _, err := l.broker.Write(f); err != nil {
				break
			}
		}
		l.queue = nil
		l.mu.Unlock()
	}
}

func (n *faultyNet) drop(l *proxyLink) {
	l.once.Do(func() {
		_ = l.client.Close()
		_ = l.broker.Close()
		n.mu.Lock()
		delete(n.links, l)
		n.mu.Unlock()
	})
}

// holdIf holds back, from now on, the requests for which f returns true,
// and every request behind one held on the same connection.
func (n *faultyNet) holdIf(f func(*protocol.Request) bool) {
	n.mu.Lock()
	n.hold = f
	n.mu.Unlock()
}

// holdAll holds back every request from now on.
func (n *faultyNet) holdAll() { n.holdIf(func(*protocol.Request) bool { return true }) }

// release delivers the held requests, in order, and stops holding.
func (n *faultyNet) release() {
	for _, l := range n.snapshot(func() { n.hold = nil }) {
		l.mu.Lock()
		for _, f := range l.queue {
			if _, err := l.broker.Write(f); err != nil {
				break
			}
		}
		l.queue = nil
		l.mu.Unlock()
	}
}

// cut closes every connection, dropping the requests held on them.
func (n *faultyNet) cut() {
	for _, l := range n.snapshot(nil) {
		n.drop(l)
	}
}

// held is how many requests wait in the proxy.
func (n *faultyNet) held() int {
	k := 0
	for _, l := range n.snapshot(nil) {
		l.mu.Lock()
		k += len(l.queue)
		l.mu.Unlock()
	}
	return k
}

// count is how many op requests came from clients.
func (n *faultyNet) count(op protocol.Op) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ops[op]
}

// dialCount is how many connections clients opened.
func (n *faultyNet) dialCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dials
}

// snapshot runs f (if not nil) under the lock and returns the links.
func (n *faultyNet) snapshot(f func()) []*proxyLink {
	n.mu.Lock()
	defer n.mu.Unlock()
	if f != nil {
		f()
	}
	out := make([]*proxyLink, 0, len(n.links))
	for l := range n.links {
		out = append(out, l)
	}
	return out
}

func (n *faultyNet) close() {
	n.mu.Lock()
	n.done = true
	n.mu.Unlock()
	_ = n.ln.Close()
	n.cut()
	n.wg.Wait()
}

// frameRecorder keeps the bytes a Decoder reads, so that the bytes of each
// decoded frame can be forwarded as they came.
type frameRecorder struct {
	r   io.Reader
	buf []byte
}

func (f *frameRecorder) Read(p []byte) (int, error) {
	k, err := f.r.Read(p)
	f.buf = append(f.buf, p[:k]...)
	return k, err
}

// take returns the bytes of the frame just decoded: everything read but
// the buffered bytes that follow it.
func (f *frameRecorder) take(buffered int) []byte {
	end := len(f.buf) - buffered
	frame := append([]byte(nil), f.buf[:end]...)
	f.buf = append(f.buf[:0], f.buf[end:]...)
	return frame
}
