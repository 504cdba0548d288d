package broker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// BenchmarkConsumerFilterGet: gets of 256 records of 100-byte payloads
// tagged TagA (one in ten) or TagB, unfiltered (sendfile) and through the
// consumer filter "TagA" registered on the connection, reporting records
// examined per second of each (issue 26's consumer filter benchmark; the
// CLI's is `metaq bench consume --filter-pass 10`).
func BenchmarkConsumerFilterGet(b *testing.B) {
	br := startBroker(b, 0)
	c := dialRaw(b, br.Addr())
	payload := make([]byte, 100)
	var body []byte
	var rec int
	const n = 256 * 64
	for i := 0; i < n; i += 256 {
		body = body[:0]
		for j := range 256 {
			m := message.Message{Body: payload, Tags: []string{"TagB"}}
			if (i+j)%10 == 0 {
				m.Tags[0] = "TagA"
			}
			d := m.AppendData(nil)
			rec = message.HeaderSize + len(d)
			body = protocol.AppendMPutEntry(body, m.Flag(), int32(message.Checksum(d)), d)
		}
		frame := append(protocol.AppendMPutHeader(nil, "t", 0, len(body), 256, 1), body...)
		r := rawCall(b, c, frame)
		require.Equal(b, protocol.StatusOK, r.Code, string(r.Body))
	}
	for _, mode := range []string{"unfiltered", "filter=TagA"} {
		b.Run(mode, func(b *testing.B) {
			c := dialRaw(b, br.Addr())
			if mode != "unfiltered" {
				r := rawCall(b, c, protocol.AppendFilter(nil, "t", "g", "TagA", 1))
				require.Equal(b, protocol.StatusOK, r.Code, string(r.Body))
			}
			size := 256 * rec
			var req protocol.Request
			off := 0
			for b.Loop() {
				_, err := c.bw.Write(protocol.AppendGet(nil, "t", "g", 0, int64(off), int32(size), 2))
				require.NoError(b, err)
				require.NoError(b, c.bw.Flush())
				require.NoError(b, c.dec.Decode(&req))
				if req.Op != protocol.OpValue && req.Op != protocol.OpFValue {
					b.Fatalf("get: %d %s", req.Code, req.Body)
				}
				off = (off + size) % (n * rec)
			}
			b.ReportMetric(float64(b.N)*256/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// rawCall sends frame on c and returns the reply.
func rawCall(tb testing.TB, c *rawClient, frame []byte) protocol.Request {
	tb.Helper()
	_, err := c.bw.Write(frame)
	require.NoError(tb, err)
	require.NoError(tb, c.bw.Flush())
	var req protocol.Request
	require.NoError(tb, c.dec.Decode(&req))
	return req
}
