package broker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// statsItem sends `stats <item>` and returns the reply body.
func statsItem(t *testing.T, b *Broker, item string) string {
	t.Helper()
	c := dialRaw(t, b.Addr())
	c.bw.Write(protocol.AppendStats(nil, item, 3))
	require.NoError(t, c.bw.Flush())
	var req protocol.Request
	require.NoError(t, c.dec.Decode(&req))
	require.Equal(t, protocol.StatusOK, req.Code)
	return string(req.Body)
}

func TestStatsPluginsEmpty(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0)
	require.Equal(t, "STATS\r\nEND\r\n", statsItem(t, b, "plugins"))
	require.Contains(t, statsItem(t, b, "help"), "stats plugins       one line per plugin process")
}
