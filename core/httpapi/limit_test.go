package httpapi

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeConn is a connection from a given address that records its Close.
type fakeConn struct {
	net.Conn // nil: only RemoteAddr and Close are called
	addr     net.Addr
	closed   bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.addr }
func (c *fakeConn) Close() error         { c.closed = true; return nil }

func fakeFrom(ip string) *fakeConn {
	return &fakeConn{addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}}
}

// admitted admits a connection from ip that must get a slot, and returns
// it with the connection it evicted (nil: none).
func admitted(t *testing.T, l *httpLimiter, ip string) (*httpConn, *fakeConn) {
	t.Helper()
	c, victim := l.admit(fakeFrom(ip))
	require.NotNil(t, c, "refused")
	if victim == nil {
		return c, nil
	}
	require.NoError(t, victim.Close())
	return c, victim.Conn.(*fakeConn)
}

// TestHTTPLimiterEvictsLongestWaiting: at the cap a newcomer closes the
// new or idle connection that has waited longest; active connections are
// never closed; with every connection active the newcomer is refused.
func TestHTTPLimiterEvictsLongestWaiting(t *testing.T) {
	l := newHTTPLimiter(3)
	a, v := admitted(t, l, "10.0.0.1")
	require.Nil(t, v)
	b, _ := admitted(t, l, "10.0.0.1")
	c, _ := admitted(t, l, "10.0.0.1")
	require.EqualValues(t, 3, l.conns.Load())

	l.connState(a, http.StateActive) // a request in progress
	l.connState(b, http.StateActive)
	l.connState(b, http.StateIdle) // b went idle after c was accepted

	// c (new since before b went idle) has waited longest.
	d, v := admitted(t, l, "10.0.0.1")
	require.Same(t, c.Conn, v, "the longest waiting (new) connection is closed")
	require.True(t, v.closed)
	e, v := admitted(t, l, "10.0.0.1")
	require.Same(t, b.Conn, v, "then the idle one")
	require.EqualValues(t, 2, l.evicted.Load())
	require.EqualValues(t, 3, l.conns.Load())

	// a, d and e active: nothing to close, the newcomer is refused.
	l.connState(d, http.StateActive)
	l.connState(e, http.StateActive)
	nc := fakeFrom("10.0.0.2")
	got, victim := l.admit(nc)
	require.Nil(t, got)
	require.Nil(t, victim)
	require.EqualValues(t, 1, l.refused.Load())
	require.False(t, a.Conn.(*fakeConn).closed, "an active connection is never closed")

	// a goes idle: it is the one to go.
	l.connState(a, http.StateIdle)
	_, v = admitted(t, l, "10.0.0.2")
	require.Same(t, a.Conn, v)

	// The server's own close of an evicted connection (StateClosed, Close)
	// frees nothing twice.
	l.connState(a, http.StateClosed)
	require.NoError(t, a.Close())
	require.EqualValues(t, 3, l.conns.Load())

	// A closed connection frees its slot: the next one evicts nobody.
	require.NoError(t, d.Close())
	l.connState(d, http.StateClosed)
	require.EqualValues(t, 2, l.conns.Load())
	_, v = admitted(t, l, "10.0.0.3")
	require.Nil(t, v)
	require.EqualValues(t, 3, l.evicted.Load())
}

// TestHTTPLimiterPerAddress: the connection closed for a newcomer comes
// from the address holding the most connections, even when another
// address's connection has waited longer.
func TestHTTPLimiterPerAddress(t *testing.T) {
	l := newHTTPLimiter(5)
	old, _ := admitted(t, l, "10.0.0.1")
	l.connState(old, http.StateActive)
	l.connState(old, http.StateIdle)
	var flood []*httpConn
	for range 4 {
		c, _ := admitted(t, l, "10.0.0.9")
		flood = append(flood, c)
	}
	_, v := admitted(t, l, "10.0.0.2")
	require.Same(t, flood[0].Conn, v, "the flooding address's longest waiting connection")
	_, v = admitted(t, l, "10.0.0.3")
	require.Same(t, flood[1].Conn, v)
	// 10.0.0.9 now holds 2, as many as no one else: on a tie the longest
	// waiting goes (old, idle since before the flood).
	l.connState(flood[2], http.StateActive)
	_, v = admitted(t, l, "10.0.0.4")
	require.Same(t, flood[3].Conn, v, "10.0.0.9 still holds the most (2)")
	_, v = admitted(t, l, "10.0.0.5")
	require.Same(t, old.Conn, v, "a tie: the longest waiting")
	require.False(t, flood[2].Conn.(*fakeConn).closed)
}

// TestHTTPSource: connections count by IP, IPv6 ones by their /64.
func TestHTTPSource(t *testing.T) {
	require.Equal(t, "10.0.0.1", addrIP(&net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 1}))
	require.Equal(t, "10.0.0.1", addrIP(&net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.1"), Port: 1}))
	require.Equal(t, "2001:db8:1:2::/64", addrIP(&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 1}))
	require.Equal(t, "2001:db8:1:2::/64", hostSource("[2001:db8:1:2::9]:443"))
	require.Equal(t, "127.0.0.1", hostSource("127.0.0.1:80"))
	require.Equal(t, "pipe", hostSource("pipe"))
}

// TestHTTPListenerRefuses: over a real socket, a newcomer finds every
// connection active and gets a 503 with Retry-After and Connection: close;
// once the connection goes idle the next newcomer takes its place.
func TestHTTPListenerRefuses(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer raw.Close()
	lim := newHTTPLimiter(1)
	ln := &httpListener{Listener: raw, lim: lim}
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	next := func() net.Conn {
		select {
		case c := <-accepted:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("no connection accepted")
			return nil
		}
	}
	first, err := net.Dial("tcp", raw.Addr().String())
	require.NoError(t, err)
	defer first.Close()
	sc := next()
	lim.connState(sc, http.StateActive)

	second, err := net.Dial("tcp", raw.Addr().String())
	require.NoError(t, err)
	defer second.Close()
	second.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(second), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, 503, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.True(t, resp.Close, "Connection: close")
	require.Contains(t, string(body), "http_max_connections")
	require.EqualValues(t, 1, lim.refused.Load())

	lim.connState(sc, http.StateIdle)
	third, err := net.Dial("tcp", raw.Addr().String())
	require.NoError(t, err)
	defer third.Close()
	next().Close()
	first.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = first.Read(make([]byte, 1))
	require.Error(t, err, "the idle connection was closed for the newcomer")
	require.EqualValues(t, 1, lim.evicted.Load())
}

// TestHTTPGate: requests beyond the work slots, or beyond half of them
// from one address, get 503 at once; the probes always pass.
func TestHTTPGate(t *testing.T) {
	lim := newHTTPLimiter(16) // 12 work slots, 6 per address
	require.Equal(t, 12, cap(lim.work))
	require.Equal(t, 6, lim.workAddr)
	release := make(chan struct{})
	started := make(chan struct{}, 16)
	h := lim.gate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isProbe(r) {
			if _, ok := r.Context().Deadline(); !ok {
				t.Error("no request deadline")
			}
			started <- struct{}{}
			<-release
		}
		w.WriteHeader(200)
	}), time.Minute)
	from := func(path, ip string) *http.Request {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = ip + ":40000"
		return r
	}
	busy := func(r *http.Request) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		require.Equal(t, 503, rec.Code)
		require.Equal(t, "1", rec.Header().Get("Retry-After"))
		require.Equal(t, "close", rec.Header().Get("Connection"))
		require.Contains(t, rec.Body.String(), "http_max_connections")
	}
	done := make(chan int, 12)
	serve := func(ip string) {
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, from("/api/v1/topics", ip))
			done <- rec.Code
		}()
		<-started
	}
	for range 6 {
		serve("10.0.0.1")
	}
	busy(from("/metrics", "10.0.0.1")) // 10.0.0.1 holds its half
	for range 6 {
		serve("10.0.0.2")
	}
	busy(from("/metrics", "10.0.0.3")) // every slot taken
	require.EqualValues(t, 2, lim.busy.Load())
	for _, p := range []string{"/healthz", "/readyz"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, from(p, "10.0.0.1"))
		require.Equal(t, 200, rec.Code, p)
	}
	close(release)
	for range 12 {
		require.Equal(t, 200, <-done)
	}
	require.Empty(t, lim.workBy)
	require.Empty(t, lim.work)
}

// TestHTTPLimiterStalled: with no connection waiting, a newcomer closes
// the connection stalled longest: a Write blocked, or a Read blocked with
// no handler running; a Read pending under a running handler, or a stall
// shorter than httpStallAfter, is not one.
func TestHTTPLimiterStalled(t *testing.T) {
	l := newHTTPLimiter(4)
	var cs []*httpConn
	for range 4 {
		c, _ := admitted(t, l, "10.0.0.1")
		l.connState(c, http.StateActive)
		cs = append(cs, c)
	}
	now := httpClock()
	long := now - int64(3*httpStallAfter)
	cs[0].readSince.Store(long) // a handler runs: net/http's background read
	cs[0].handlers.Add(1)
	cs[1].readSince.Store(now) // blocked, not for long
	cs[2].writeSince.Store(now - int64(2*httpStallAfter))
	cs[3].readSince.Store(long + 1) // the rest of a body, dripped after the reply
	active := func() *fakeConn {    // a newcomer that starts its request at once
		t.Helper()
		c, v := admitted(t, l, "10.0.0.2")
		l.connState(c, http.StateActive)
		return v
	}
	require.Same(t, cs[3].Conn, active())
	require.Same(t, cs[2].Conn, active())
	got, victim := l.admit(fakeFrom("10.0.0.2"))
	require.Nil(t, got, "cs[0] and cs[1] are not stalled")
	require.Nil(t, victim)
	cs[0].handlers.Add(-1) // the handler returned; the read is the client's
	require.Same(t, cs[0].Conn, active())

	// A connection closing after an error reply goes first once its
	// handler has returned, before any stall.
	l = newHTTPLimiter(3)
	cs = cs[:0]
	for range 3 {
		c, _ := admitted(t, l, "10.0.0.1")
		l.connState(c, http.StateActive)
		cs = append(cs, c)
	}
	cs[0].writeSince.Store(long)
	cs[1].closing.Store(true)
	cs[1].handlers.Add(1)
	cs[2].closing.Store(true)
	require.Same(t, cs[2].Conn, active())
	require.Same(t, cs[0].Conn, active(), "cs[1]'s handler still runs")
	cs[1].handlers.Add(-1)
	require.Same(t, cs[1].Conn, active())
}

// TestHTTPStalledBody runs a real server behind the limiter: 16
// connections whose requests the handler answers 204 without reading
// their bodies hold every slot while net/http reads the rest of the body
// before it sends the reply, and the body never comes; after
// httpStallAfter a newcomer's /healthz is answered in their place. An
// error reply to such a request closes the connection at once.
func TestHTTPStalledBody(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	lim := newHTTPLimiter(16)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if isProbe(r) {
				w.Write([]byte("ok"))
				return
			}
			if r.URL.Path == "/denied" {
				w.WriteHeader(401) // as without credentials
				return
			}
			w.WriteHeader(204) // the body is left unread
		}),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
	}
	lim.hook(srv, time.Minute)
	go srv.Serve(&httpListener{Listener: raw, lim: lim})
	defer srv.Close()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	denied, err := net.DialTimeout("tcp", raw.Addr().String(), 5*time.Second)
	require.NoError(t, err)
	defer denied.Close()
	denied.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(denied, "POST /denied HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(denied), nil)
	require.NoError(t, err, "the 401 comes without the rest of the body")
	require.Equal(t, 401, resp.StatusCode)
	require.True(t, resp.Close, "Connection: close")
	require.Eventually(t, func() bool { return lim.conns.Load() == 0 }, 10*time.Second, 10*time.Millisecond)

	for range 16 {
		c, err := net.DialTimeout("tcp", raw.Addr().String(), 5*time.Second)
		require.NoError(t, err)
		held = append(held, c)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = io.WriteString(c, "POST /api/v1/topics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{")
		require.NoError(t, err)
	}
	// Each connection is active (its header read), no handler runs, and
	// a Read of its body is pending.
	stalled := func() int {
		lim.mu.Lock()
		defer lim.mu.Unlock()
		n := 0
		for _, a := range lim.addrs {
			for c := a.all.head; c != nil; c = c.anext {
				if !c.listed && c.stalledSince() != 0 {
					n++
				}
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return stalled() == 16 }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(httpStallAfter + 200*time.Millisecond)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err = hc.Get("http://" + raw.Addr().String() + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.EqualValues(t, 1, lim.evicted.Load())
	require.EqualValues(t, 0, lim.refused.Load())
}
