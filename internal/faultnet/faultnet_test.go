package faultnet

import (
	"bufio"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// echoServer echoes lines until the test ends.
func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// TestProxy: bytes pass, wait while held and arrive on release, and a cut
// closes the connection (and refuses new ones while asked to).
func TestProxy(t *testing.T) {
	p, err := Start(echoServer(t))
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	line := func(d time.Duration) (string, error) {
		c.SetReadDeadline(time.Now().Add(d))
		return r.ReadString('\n')
	}
	_, err = c.Write([]byte("one\n"))
	require.NoError(t, err)
	s, err := line(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "one\n", s)

	p.Hold()
	_, err = c.Write([]byte("two\n"))
	require.NoError(t, err)
	_, err = line(200 * time.Millisecond)
	require.Error(t, err, "a held proxy delivered")
	p.Release()
	s, err = line(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "two\n", s)

	p.Cut(true)
	_, err = line(5 * time.Second)
	require.Error(t, err)
	c2, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c2.Read(make([]byte, 1))
	require.Error(t, err, "a refusing proxy kept the connection")
	c2.Close()
	p.Refuse(false)
	c3, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c3.Close()
	_, err = c3.Write([]byte("three\n"))
	require.NoError(t, err)
	c3.SetReadDeadline(time.Now().Add(5 * time.Second))
	s, err = bufio.NewReader(c3).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "three\n", s)
}

// TestSwallow: a swallowed connection takes bytes and never answers; the
// next one is forwarded; Close ends the swallowed one.
func TestSwallow(t *testing.T) {
	p, err := Start(echoServer(t))
	require.NoError(t, err)
	p.Swallow(1)
	c1, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c1.Close()
	_, err = c1.Write([]byte("one\n"))
	require.NoError(t, err)
	c1.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = c1.Read(make([]byte, 1))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "a swallowed connection answered")

	c2, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c2.Close()
	_, err = c2.Write([]byte("two\n"))
	require.NoError(t, err)
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	s, err := bufio.NewReader(c2).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "two\n", s)
	require.Equal(t, 2, p.Accepts())

	p.Close()
	c1.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c1.Read(make([]byte, 1))
	require.Error(t, err)
	require.NotErrorIs(t, err, os.ErrDeadlineExceeded, "Close left the swallowed connection open")
}

// TestDropReplies: with DropReplies(2) the first reply arrives, the
// second is lost with its connection, and the next connection's first
// reply arrives again.
func TestDropReplies(t *testing.T) {
	p, err := Start(echoServer(t))
	require.NoError(t, err)
	defer p.Close()
	p.DropReplies(2)
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Write([]byte("one\n"))
	require.NoError(t, err)
	s, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "one\n", s)
	_, err = c.Write([]byte("two\n"))
	require.NoError(t, err)
	_, err = r.ReadString('\n')
	require.Error(t, err, "the dropped reply arrived")
	require.NotErrorIs(t, err, os.ErrDeadlineExceeded, "the connection was not cut")
	require.Equal(t, 1, p.Dropped())

	c2, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c2.Close()
	c2.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = c2.Write([]byte("three\n"))
	require.NoError(t, err)
	s, err = bufio.NewReader(c2).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "three\n", s)
}
