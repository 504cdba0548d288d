package main

import (
	"context"
	"fmt"
	"net"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// rawConn is one broker connection spoken to directly with sdk/protocol,
// for what the SDK does not offer (version) and for the benchmarks.
type rawConn struct {
	nc   net.Conn
	dec  *protocol.Decoder
	req  protocol.Request
	wbuf []byte
	op   int32
}

// maxReplyBody bounds the replies a rawConn accepts: a get reply is at most
// the broker's max_transfer_size (2 MiB by default).
const maxReplyBody = 64 << 20

// dialRaw connects to addr with sec's TLS and auth (nil: plaintext).
func dialRaw(ctx context.Context, sec *security, addr string) (*rawConn, error) {
	nc, err := sec.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return newRawConn(nc), nil
}

func newRawConn(nc net.Conn) *rawConn {
	return &rawConn{nc: nc, dec: protocol.NewDecoder(nc, protocol.Limits{MaxLine: 4096, MaxBody: maxReplyBody})}
}

func (c *rawConn) Close() error { return c.nc.Close() }

// roundTrip sends one request and reads its reply. body aliases the
// decoder's buffer until the next call.
func (c *rawConn) roundTrip(encode func(dst []byte, opaque int32) []byte) (code int, body []byte, err error) {
	c.op++
	op := c.op
	c.wbuf = encode(c.wbuf[:0], op)
	if _, err := c.nc.Write(c.wbuf); err != nil {
		return 0, nil, err
	}
	for {
		if err := c.dec.Decode(&c.req); err != nil {
			return 0, nil, err
		}
		if c.req.Op != protocol.OpResult && c.req.Op != protocol.OpValue {
			return 0, nil, fmt.Errorf("unexpected %s frame from the broker", c.req.Op)
		}
		if c.req.Opaque == op {
			return c.req.Code, c.req.Body, nil
		}
		// A stale reply (an earlier request that timed out): skip it.
	}
}

func appendVersion(dst []byte, op int32) []byte { return protocol.AppendVersion(dst, op) }
