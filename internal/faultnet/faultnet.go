// Package faultnet (test helper, not API) is a TCP proxy that is a faulty
// network between two real processes: it forwards bytes both ways and, on
// demand, holds them (a network that stops delivering: the bytes wait in
// the proxy, nothing is lost), delays them, or cuts every connection (and
// can refuse new ones, or swallow them: read, never answer). It knows nothing of the protocol on top, so the
// replication link, a client and ZooKeeper can all run through it.
// (sdk/client's faultyNet is a frame-aware proxy for the SDK's own tests.)
package faultnet

import (
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards every connection made to Addr to its target.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cond    *sync.Cond // held changes
	held    bool
	delay   time.Duration
	refuse  bool
	swallow int // connections still to swallow
	closed  bool
	conns   map[net.Conn]struct{}
	accepts int
	drop    int // DropReplies' n (0: off)
	chunks  int // chunks read from targets since DropReplies
	dropped int
	wg      sync.WaitGroup
}

// Start listens on a free 127.0.0.1 port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address to dial instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Hold stops forwarding: bytes already read wait in the proxy, and the
// senders' writes block once the socket buffers fill, until Release.
func (p *Proxy) Hold() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

// Release forwards again, what was held first.
func (p *Proxy) Release() {
	p.mu.Lock()
	p.held = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Delay holds every chunk of bytes d before forwarding it (0: none).
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Cut closes every connection now; with refuse, new connections are
// accepted and closed at once until Refuse(false).
func (p *Proxy) Cut(refuse bool) {
	p.mu.Lock()
	p.refuse = refuse
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.held = false
	p.cond.Broadcast()
	p.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// Refuse sets whether new connections are closed at once.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// Swallow makes the next n connections a server that accepted and hangs:
// the proxy reads what they send and never answers nor forwards it, until
// Cut or Close. (A ZooKeeper still starting did that to a connect request.)
func (p *Proxy) Swallow(n int) {
	p.mu.Lock()
	p.swallow = n
	p.mu.Unlock()
}

// DropReplies makes every nth chunk of bytes a target sends back lost
// with its connection: the proxy discards the chunk and cuts that
// connection, so that the client sent its requests, the target handled
// them, and their replies never arrived (n <= 0: off). Dropped counts
// the chunks lost so.
func (p *Proxy) DropReplies(n int) {
	p.mu.Lock()
	p.drop, p.chunks = n, 0
	p.mu.Unlock()
}

// Dropped is the number of chunks DropReplies discarded so far.
func (p *Proxy) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// Accepts is the number of connections accepted so far.
func (p *Proxy) Accepts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepts
}

// Close cuts everything and stops listening.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.Cut(true)
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.accepts++
		refuse := p.refuse || p.closed
		swallow := !refuse && p.swallow > 0
		if swallow {
			p.swallow--
			p.conns[down] = struct{}{}
			p.wg.Add(1)
		}
		p.mu.Unlock()
		if refuse {
			down.Close()
			continue
		}
		if swallow {
			go p.drain(down)
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			down.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			down.Close()
			up.Close()
			return
		}
		p.conns[down], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(up, down, false)
		go p.pipe(down, up, true)
	}
}

// pipe copies src to dst, obeying hold, delay and (fromTarget: src is
// the target) DropReplies; either side ending closes both.
func (p *Proxy) pipe(dst, src net.Conn, fromTarget bool) {
	defer p.wg.Done()
	defer func() {
		src.Close()
		dst.Close()
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.held && !p.closed {
				if _, live := p.conns[src]; !live {
					break
				}
				p.cond.Wait()
			}
			_, live := p.conns[src]
			d := p.delay
			lose := false
			if fromTarget && p.drop > 0 && live {
				p.chunks++
				if lose = p.chunks%p.drop == 0; lose {
					p.dropped++
				}
			}
			p.mu.Unlock()
			if !live || lose {
				return
			}
			if d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// drain reads c until it ends (Cut or Close closes it), answering nothing.
func (p *Proxy) drain(c net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(io.Discard, c)
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}
