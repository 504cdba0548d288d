package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// TestServerDiskWatermark runs the metaq-server binary on a real 8 MiB
// tmpfs with disk_max_used_ratio = 0.8. A filler file takes the disk past
// it: puts are refused with the disk-full message while gets keep working;
// a restart on the still-full disk refuses puts from its first one; once
// the filler is deleted puts are accepted again by themselves, and every
// acknowledged message is read back at its offset.
func TestServerDiskWatermark(t *testing.T) {
	t.Parallel()
	dataDir := testsvc.MountTmpfs(t, 8<<20)
	config := filepath.Join(t.TempDir(), "server.toml")
	require.NoError(t, os.WriteFile(config, []byte(brokerConfig(dataDir, `
max_segment_size = 262144
disk_max_used_ratio = 0.8
journal_file_size = 1048576
`, `[[topic]]
name = "t"
`)), 0o644))
	srv := startServer(t, config, dataDir)
	c := dial(t, srv.Addr)

	acks := map[int64][]byte{}
	put := func(i int) reply {
		data := fmt.Appendf(nil, "msg-%05d-%s", i, bytes.Repeat([]byte{'z'}, 2000))
		r := got(t)(c.put("t", 0, data))
		if r.Code == protocol.StatusOK {
			_, _, off, _, err := protocol.ParsePutResult(r.Body)
			require.NoError(t, err)
			acks[off] = data
		}
		return r
	}
	i := 0
	for ; i < 50; i++ {
		require.Equal(t, protocol.StatusOK, put(i).Code)
	}

	filler := filepath.Join(dataDir, "filler")
	testsvc.Fill(t, filler, 0.85)
	refused := func(r reply) bool {
		if r.Code == protocol.StatusOK {
			return false
		}
		require.Equal(t, protocol.StatusInternalError, r.Code, "reply %v", r)
		require.Regexp(t, `^disk full: data_dir `+regexp.QuoteMeta(dataDir)+` is 8\d\.\d% used, over disk_max_used_ratio 0\.80; puts resume when space is freed$`, string(r.Body))
		return true
	}
	start := time.Now()
	for ; !refused(put(i)); i++ {
		require.Less(t, time.Since(start), 20*time.Second, "puts never refused")
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("puts refused %v after the disk went past the ratio", time.Since(start))
	st := parseStats(t, ok(t)(c.stats("")).Body)
	require.NotEqual(t, "0", st["disk_full_rejects"])
	used, err := strconv.ParseFloat(st["disk_used_ratio"], 64)
	require.NoError(t, err)
	require.Greater(t, used, 0.8)
	recs, _, err := readPartition(c, "t", 0, 64<<10)
	require.NoError(t, err)
	require.Len(t, recs, len(acks))

	// A broker started on a full disk refuses puts from the first one.
	srv.Kill()
	srv = startServer(t, config, dataDir)
	c = dial(t, srv.Addr)
	require.True(t, refused(put(i)))
	recs, _, err = readPartition(c, "t", 0, 64<<10)
	require.NoError(t, err)
	require.Len(t, recs, len(acks))

	require.NoError(t, os.Remove(filler))
	start = time.Now()
	for ; refused(put(i)); i++ {
		require.Less(t, time.Since(start), 20*time.Second, "puts still refused after the filler was deleted")
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("puts accepted again %v after the filler was deleted", time.Since(start))
	for n := i + 10; i < n; i++ {
		require.Equal(t, protocol.StatusOK, put(i).Code)
	}
	require.Contains(t, srv.Logs.String(), "accepting puts")

	recs, _, err = readPartition(c, "t", 0, 64<<10)
	require.NoError(t, err)
	require.Len(t, recs, len(acks))
	for _, r := range recs {
		require.Equal(t, acks[r.Offset], r.Data, "record at %d", r.Offset)
	}
	require.True(t, strings.HasPrefix(string(recs[0].Data), "msg-00000-"))
}
