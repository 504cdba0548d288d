package security

import (
	"crypto/tls"
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
)

// TestListen: the plaintext port alone, TLS only (port = 0 with TLS on),
// both, and a busy tls_port leaving nothing open.
func TestListen(t *testing.T) {
	c := &conf.Config{Host: "127.0.0.1"}
	ln, tln, err := Listen(c, false)
	require.NoError(t, err)
	require.Nil(t, tln)
	ln.Close()
	ln, tln, err = Listen(c, true)
	require.NoError(t, err)
	require.Nil(t, ln, "port = 0 with TLS on: TLS only")
	tlsPort := tln.Addr().(*net.TCPAddr).Port
	c.TLSPort = tlsPort // busy now
	busy := tln
	defer busy.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c.Port = free.Addr().(*net.TCPAddr).Port
	free.Close()
	_, _, err = Listen(c, true)
	require.ErrorContains(t, err, "listen tls: ")
	again, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(c.Port))
	require.NoError(t, err, "the plaintext port was left open")
	again.Close()
	c.TLSPort = 0
	ln, tln, err = Listen(c, true)
	require.NoError(t, err)
	require.NotNil(t, ln)
	require.NotNil(t, tln)
	ln.Close()
	tln.Close()
}

// TestMustAuthenticate: every connection with [auth] on; without it only
// a TLS one (until its handshake completes).
func TestMustAuthenticate(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	require.True(t, MustAuthenticate(c1, true))
	require.False(t, MustAuthenticate(c1, false))
	require.True(t, MustAuthenticate(tls.Server(c1, &tls.Config{}), false))
}
