package broker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/protocol"
)

func (c *rawClient) call(t *testing.T, frame []byte) protocol.Request {
	t.Helper()
	_, err := c.bw.Write(frame)
	require.NoError(t, err)
	require.NoError(t, c.bw.Flush())
	var req protocol.Request
	require.NoError(t, c.dec.Decode(&req))
	return req
}

// TestStatsMembers: `stats members` lists each local-mode member with the
// partitions it holds; `stats groups` keeps its format.
func TestStatsMembers(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0) // topic t, 2 partitions
	stats := func() string {
		c := dialRaw(t, b.Addr())
		r := c.call(t, protocol.AppendStats(nil, "members", 1))
		require.Equal(t, protocol.StatusOK, r.Code)
		return string(r.Body)
	}
	require.Equal(t, "STATS\r\nEND\r\n", stats())

	a := dialRaw(t, b.Addr())
	r := a.call(t, protocol.AppendJoin(nil, "g", "t", "g_a", "default", 1))
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	require.Equal(t, "STATS\r\ng t member g_a partitions 0,1\r\nEND\r\n", stats())

	// A second member waits for a's acknowledgement: it holds nothing yet.
	c := dialRaw(t, b.Addr())
	r = c.call(t, protocol.AppendJoin(nil, "g", "t", "g_b", "default", 2))
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	require.Equal(t, "STATS\r\ng t member g_a partitions 0,1\r\ng t member g_b partitions -\r\nEND\r\n", stats())

	// Another group sorts before g.
	d := dialRaw(t, b.Addr())
	r = d.call(t, protocol.AppendJoin(nil, "f", "t", "x", "default", 3))
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	require.Equal(t, "STATS\r\nf t member x partitions 0,1\r\ng t member g_a partitions 0,1\r\ng t member g_b partitions -\r\nEND\r\n", stats())

	sc := dialRaw(t, b.Addr())
	r = sc.call(t, protocol.AppendStats(nil, "groups", 4))
	require.Regexp(t, `^STATS\r\nf t members 1 generation \d+\r\ng t members 2 generation \d+\r\nEND\r\n$`, string(r.Body))
	r = sc.call(t, protocol.AppendStats(nil, "help", 5))
	require.Contains(t, string(r.Body), "stats members")
}
