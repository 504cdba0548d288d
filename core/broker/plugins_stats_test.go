package broker

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
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

func TestStatsPluginsFormat(t *testing.T) {
	t.Parallel()
	var sb strings.Builder
	writePluginStats(&sb, []host.Info{
		{Kind: plugins.KindFilter, Name: "colour", Version: 1, PID: 4242, State: host.StateRunning, Restarts: 2, Calls: 100, Errors: 3},
		{Kind: plugins.KindOffsetStore, Name: "zk", Version: 1, State: host.StateRestarting, Restarts: 7},
	})
	require.Equal(t, "STATS\r\n"+
		"filter colour version 1 pid 4242 state running restarts 2 calls 100 errors 3\r\n"+
		"offsetstore zk version 1 pid 0 state restarting restarts 7 calls 0 errors 0\r\n"+
		"END\r\n", sb.String())
}
