package main

import (
	"bytes"
	"context"
	"github.com/metaq-go/metaq/internal/testsvc"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/brokertest"
)

// partitionsOf maps each attribute to the partitions its messages landed on.
func partitionsOf(out string) map[string]map[string]bool {
	got := map[string]map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^(\S+)\s+-> partition (\d+)`).FindAllStringSubmatch(out, -1) {
		if got[m[1]] == nil {
			got[m[1]] = map[string]bool{}
		}
		got[m[1]][m[2]] = true
	}
	return got
}

func TestInProcess(t *testing.T) {
	t.Parallel()
	addr := brokertest.Start(t, brokertest.Topics("meta-test"), brokertest.Partitions(4), smallJournal).Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out, addr, "meta-test", 12, ""))
	got := partitionsOf(out.String())
	require.Equal(t, map[string]bool{"0": true}, got["urgent"], out.String())
	for _, k := range []string{"orders.created", "payments.settled", "orders.paid"} {
		require.NotEmpty(t, got[k], out.String())
		require.NotContains(t, got[k], "0", "only urgent messages go to partition 0")
	}
}

func TestPlugin(t *testing.T) {
	t.Parallel()
	bin := testsvc.GoBuild(t, "github.com/metaq-go/metaq/examples/selector-plugin")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	addr := brokertest.Start(t, brokertest.Topics("meta-test"), brokertest.Partitions(4), smallJournal).Addr()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out, addr, "meta-test", 12, bin))
	got := partitionsOf(out.String())
	require.Len(t, got, 4, out.String())
	for k, parts := range got {
		require.Len(t, parts, 1, "%s: one partition per attribute prefix\n%s", k, out.String())
	}
	require.Equal(t, got["orders.created"], got["orders.paid"], "same prefix, same partition")
}

// smallJournal gives the brokers 4 MiB journal files, not 64 MiB: a broker
// pre-writes and fdatasyncs its journal file and two spares when it starts,
// and these tests commit far less than one file.
var smallJournal = brokertest.Edit(func(c *conf.Config) { c.JournalFileSize = 4 << 20 })
