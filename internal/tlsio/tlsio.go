// Package tlsio (not API) holds what the TLS clients of the project (the
// SDK, the CLI, tests) put under a tls.Conn.
package tlsio

import (
	"bufio"
	"net"
)

// ReadBufferSize is the read buffer BufferReads puts under a TLS
// connection: a tls.Conn reads each record (at most 16 KiB) with a Read
// of its own, so a 1 MiB value costs 64 syscalls without it and 16 with
// it.
const ReadBufferSize = 64 << 10

// BufferReads returns c with its reads buffered, for use under
// tls.Client: the record reads of the tls.Conn are served from one large
// read of the socket. Writes and the rest go to c unchanged.
func BufferReads(c net.Conn) net.Conn {
	return &readBuffered{Conn: c, r: bufio.NewReaderSize(c, ReadBufferSize)}
}

type readBuffered struct {
	net.Conn
	r *bufio.Reader
}

func (b *readBuffered) Read(p []byte) (int, error) { return b.r.Read(p) }
