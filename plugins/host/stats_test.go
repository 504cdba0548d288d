package host

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/plugins"
)

// TestStatsPluginsFormat: the lines of `stats plugins` (the broker frames
// them, core/broker TestStatsPluginsEmpty).
func TestStatsPluginsFormat(t *testing.T) {
	t.Parallel()
	var sb strings.Builder
	sb.WriteString("STATS\r\n")
	StatsLines([]Info{
		{Kind: plugins.KindFilter, Name: "colour", Version: 1, PID: 4242, State: StateRunning, Restarts: 2, Calls: 100, Errors: 3},
		{Kind: plugins.KindOffsetStore, Name: "zk", Version: 1, State: StateRestarting, Restarts: 7},
	}, func(l string) { sb.WriteString(l + "\r\n") })
	sb.WriteString("END\r\n")
	require.Equal(t, "STATS\r\n"+
		"filter colour version 1 pid 4242 state running restarts 2 calls 100 errors 3\r\n"+
		"offsetstore zk version 1 pid 0 state restarting restarts 7 calls 0 errors 0\r\n"+
		"END\r\n", sb.String())
}
