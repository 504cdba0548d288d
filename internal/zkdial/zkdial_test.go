package zkdial

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"
)

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// TestSilentServer: a server that accepts and never answers the connect
// request gets a second connection after about recvTimeout (+ the
// client's 1 s pause once every server was tried), not after go-zookeeper's
// 10 x recvTimeout.
func TestSilentServer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepts := make(chan time.Time, 16)
	var mu sync.Mutex
	var conns []net.Conn
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			accepts <- time.Now()
			go func() { _, _ = io.Copy(io.Discard, c) }() // read, never answer
		}
	}()
	const session = 1500 * time.Millisecond
	c, _, err := zk.Connect([]string{ln.Addr().String()}, session,
		zk.WithLogger(nopLogger{}), zk.WithDialer(Bounded(nil, session)))
	require.NoError(t, err)
	defer c.Close()
	first := <-accepts
	select {
	case second := <-accepts:
		// recvTimeout is 1 s; go-zookeeper alone would wait 10 s.
		gap := second.Sub(first)
		t.Logf("reconnected after %v", gap)
		require.Greater(t, gap, 900*time.Millisecond, "the handshake had its bound")
	case <-time.After(4 * session):
		t.Fatal("no second connection within 4 x the session timeout")
	}
}

// recConn records the deadlines set on the connection under it.
type recConn struct {
	net.Conn
	mu          sync.Mutex
	read, write time.Time
}

func (r *recConn) SetDeadline(t time.Time) error {
	r.mu.Lock()
	r.read, r.write = t, t
	r.mu.Unlock()
	return r.Conn.SetDeadline(t)
}

func (r *recConn) SetReadDeadline(t time.Time) error {
	r.mu.Lock()
	r.read = t
	r.mu.Unlock()
	return r.Conn.SetReadDeadline(t)
}

func (r *recConn) SetWriteDeadline(t time.Time) error {
	r.mu.Lock()
	r.write = t
	r.mu.Unlock()
	return r.Conn.SetWriteDeadline(t)
}

func (r *recConn) deadlines() (time.Time, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.read, r.write
}

// TestDeadlinesAfterHandshake: until the connect response has been read in
// full (here in three pieces) every deadline is capped at the bound and a
// zero one becomes the bound; afterwards the client's own deadlines pass
// through, and the ones it last set are back in force.
func TestDeadlinesAfterHandshake(t *testing.T) {
	t.Parallel()
	client, server := net.Pipe()
	defer server.Close()
	rec := &recConn{Conn: client}
	const session = 30 * time.Second
	dial := Bounded(func(string, string, time.Duration) (net.Conn, error) { return rec, nil }, session)
	start := time.Now()
	c, err := dial("tcp", "zk:2181", time.Second)
	require.NoError(t, err)
	defer c.Close()
	bound := 20 * time.Second
	r, w := rec.deadlines()
	require.WithinDuration(t, start.Add(bound), r, time.Second)
	require.Equal(t, r, w)
	end := r

	far := time.Now().Add(10 * bound)
	require.NoError(t, c.SetWriteDeadline(far))
	_, w = rec.deadlines()
	require.Equal(t, end, w, "a deadline past the bound is capped")
	near := time.Now().Add(time.Second)
	require.NoError(t, c.SetReadDeadline(near))
	r, _ = rec.deadlines()
	require.Equal(t, near, r, "a nearer deadline stands")
	require.NoError(t, c.SetDeadline(time.Time{}))
	r, w = rec.deadlines()
	require.Equal(t, end, r, "a zero deadline becomes the bound")
	require.Equal(t, end, w)

	// The connect response: int32 length, then 36 bytes (protocol
	// version, timeout, session id, a 16-byte password with its length).
	resp := make([]byte, 4+36)
	binary.BigEndian.PutUint32(resp, 36)
	go func() {
		_, _ = server.Write(resp[:2])
		_, _ = server.Write(resp[2:20])
		_, _ = server.Write(resp[20:])
	}()
	buf := make([]byte, 4)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(far))
	r, _ = rec.deadlines()
	require.Equal(t, end, r, "still capped: the body is unread")
	require.NoError(t, c.SetReadDeadline(time.Time{}))
	_, err = io.ReadFull(c, make([]byte, 36))
	require.NoError(t, err)
	r, w = rec.deadlines()
	require.True(t, r.IsZero() && w.IsZero(), "the client's last deadlines (none) are back: %v %v", r, w)

	require.NoError(t, c.SetReadDeadline(far))
	require.NoError(t, c.SetWriteDeadline(far))
	r, w = rec.deadlines()
	require.Equal(t, far, r, "passed through after the handshake")
	require.Equal(t, far, w)
}

// TestNoBound: a zero session timeout leaves the dialer's connection as is.
func TestNoBound(t *testing.T) {
	t.Parallel()
	client, server := net.Pipe()
	defer server.Close()
	defer client.Close()
	c, err := Bounded(func(string, string, time.Duration) (net.Conn, error) { return client, nil }, 0)("tcp", "zk:2181", time.Second)
	require.NoError(t, err)
	require.Same(t, client, c)
}
