package stats

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/core/store"
)

func TestHelpAndFraming(t *testing.T) {
	require.True(t, strings.HasPrefix(Help, "STATS\r\n"))
	require.True(t, strings.HasSuffix(Help, "END\r\n"))
	require.NotContains(t, strings.ReplaceAll(Help, "\r\n", ""), "\n")

	var sb strings.Builder
	Lines(&sb, func(line func(string)) { line("a 1"); line("b 2") })
	require.Equal(t, "STATS\r\na 1\r\nb 2\r\nEND\r\n", sb.String())
	sb.Reset()
	KV(&sb, func(kv func(string, any)) { kv("pid", 7); kv("ratio", "0.5000") })
	require.Equal(t, "STATS\r\npid 7\r\nratio 0.5000\r\nEND\r\n", sb.String())
}

func TestOneNotOpen(t *testing.T) {
	for _, c := range []struct {
		configured int
		want       string
	}{{-1, "result_code 1\r\npartitions 0\r\n"}, {3, "result_code 2\r\npartitions 3\r\n"}} {
		var sb strings.Builder
		One(&sb, "t1", nil, c.configured, time.Second)
		require.Contains(t, sb.String(), "STATS\r\ntopic t1\r\n"+c.want+"message_count 0\r\nmessage_bytes 0\r\n")
		require.Contains(t, sb.String(), "topic_realtime_put null\r\n")
		require.True(t, strings.HasSuffix(sb.String(), "END\r\n"))
	}
}

func TestCountRefused(t *testing.T) {
	none := func(string) []*store.Log { return nil }
	_, err := Count("t1:x:0", none)
	var ce *CountError
	require.ErrorAs(t, err, &ce)
	require.Contains(t, ce.Msg, "stats count:<topic>:<partition>:<offset>: ")
	_, err = Count("t1:0:0", none)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "stats count:: no partition 0 of topic \"t1\"", ce.Msg)
}
