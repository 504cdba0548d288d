package broker

import (
	"bytes"
	"testing"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
	"github.com/stretchr/testify/require"
)

// TestPipelinedReadGrows: a connection that sends puts back to back (more
// than the 4 KiB its decoder reads at first) gets a pipelinedReadSize read
// buffer, and every put is answered in order; one that waits for each
// reply does not; the place is given back when the connection closes.
func TestPipelinedReadGrows(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0)
	data := bytes.Repeat([]byte("p"), 1000)
	frame := func(opaque int32) []byte {
		return protocol.AppendPut(nil, "t", 0, 0, int64(message.Checksum(data)), opaque, data)
	}
	var req protocol.Request

	sync := dialRaw(t, b.Addr())
	for i := range 20 {
		sync.bw.Write(frame(int32(i)))
		require.NoError(t, sync.bw.Flush())
		require.NoError(t, sync.dec.Decode(&req))
		require.Equal(t, protocol.StatusOK, req.Code)
		require.Equal(t, int32(i), req.Opaque)
	}
	require.Equal(t, int32(0), b.grownReads.Load(), "a synchronous producer's reads fill no buffer")

	const n = 500
	pipe := dialRaw(t, b.Addr())
	var all []byte
	for i := range n {
		all = append(all, frame(int32(i))...)
	}
	pipe.bw.Write(all) // about 550 KiB in one go
	require.NoError(t, pipe.bw.Flush())
	for i := range n {
		require.NoError(t, pipe.dec.Decode(&req))
		require.Equal(t, protocol.StatusOK, req.Code, "put %d: %s", i, req.Body)
		require.Equal(t, int32(i), req.Opaque)
	}
	require.Equal(t, int32(1), b.grownReads.Load())

	pipe.nc.Close()
	require.Eventually(t, func() bool { return b.grownReads.Load() == 0 }, 10*time.Second, time.Millisecond)
	require.Equal(t, int64(20+n), b.topics.Get("t").Parts[0].MaxOffset()/int64(message.HeaderSize+len(data)))
}

// TestLocalConnReadNotGrown: an in-process connection of the HTTP data
// plane (a produce request's mput of 100 KiB, then puts back to back)
// reads without a pipelinedReadSize buffer, every request answered.
func TestLocalConnReadNotGrown(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0)
	data := bytes.Repeat([]byte("l"), 1000)
	var body []byte
	for range 100 {
		body = protocol.AppendMPutEntry(body, 0, int32(message.Checksum(data)), data)
	}
	all := append(protocol.AppendMPutHeader(nil, "t", 0, len(body), 100, 1), body...)
	for i := range 50 {
		all = protocol.AppendPut(all, "t", 0, 0, int64(message.Checksum(data)), int32(i+2), data)
	}
	nc, err := b.localConn(nil, "127.0.0.1:1")
	require.NoError(t, err)
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	werr := make(chan error, 1)
	go func() { _, err := nc.Write(all); werr <- err }() // a pipe's write waits for the reads
	dec := protocol.NewDecoder(nc, protocol.Limits{})
	var req protocol.Request
	for i := range 51 {
		require.NoError(t, dec.Decode(&req))
		require.Equal(t, protocol.StatusOK, req.Code, "request %d: %s", i, req.Body)
		require.Equal(t, int32(i+1), req.Opaque)
	}
	require.NoError(t, <-werr)
	require.Equal(t, int32(0), b.grownReads.Load())
	require.Equal(t, int64(150), b.topics.Get("t").Parts[0].MaxOffset()/int64(message.HeaderSize+len(data)))
}
