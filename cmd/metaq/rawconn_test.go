package main

import (
	"bytes"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// TestRawConnHostileBroker: a "broker" that answers with 8 MiB of newlines
// makes the CLI's round trip fail with a protocol error, not crash.
func TestRawConnHostileBroker(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		_, _ = c.Write(bytes.Repeat([]byte("\n"), 8<<20))
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	c := newRawConn(nc)
	defer c.Close()
	require.NoError(t, nc.SetDeadline(time.Now().Add(30*time.Second)))
	_, _, err = c.roundTrip(appendVersion)
	var pe *protocol.Error
	require.True(t, errors.As(err, &pe), "%v", err)
	require.True(t, pe.Fatal)
	require.Contains(t, pe.Msg, "too many empty lines")
}
