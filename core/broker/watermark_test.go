package broker

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

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/diskwatch"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// stats returns the lines of `stats <item>` as key -> rest of the line.
func (c *rawClient) stats(t *testing.T, item string) map[string]string {
	t.Helper()
	r := c.roundTrip(t, protocol.AppendStats(nil, item, 77))
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	m := map[string]string{}
	for _, l := range strings.Split(string(r.Body), "\r\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			m[k] = v
		}
	}
	return m
}

// statInt is one integer of the `stats` summary.
func (c *rawClient) statInt(t *testing.T, key string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(c.stats(t, "")[key], 10, 64)
	require.NoError(t, err, key)
	return v
}

// waitDisk waits (bounded) until `stats disks` says dir is full or not.
func (c *rawClient) waitDisk(t *testing.T, dir string, full bool) time.Duration {
	t.Helper()
	start := time.Now()
	want := "full " + strconv.FormatBool(full)
	for i := 0; ; i++ {
		line := c.stats(t, "disks")[dir]
		if strings.HasSuffix(line, want) {
			return time.Since(start)
		}
		require.Less(t, time.Since(start), 20*time.Second, "stats disks still says %s %q", dir, line)
		time.Sleep(10 * time.Millisecond)
	}
}

// wmPut puts data to topic partition 0 and returns the reply.
func wmPut(t *testing.T, c *rawClient, topic string, data []byte, opaque int32) protocol.Request {
	t.Helper()
	return c.roundTrip(t, protocol.AppendPut(nil, topic, 0, 0, int64(message.Checksum(data)), opaque, data))
}

// wmMPut mputs n copies of data to topic partition 0.
func wmMPut(t *testing.T, c *rawClient, topic string, data []byte, n int, opaque int32) protocol.Request {
	t.Helper()
	var body []byte
	for range n {
		body = protocol.AppendMPutEntry(body, 0, int32(message.Checksum(data)), data)
	}
	return c.roundTrip(t, append(protocol.AppendMPutHeader(nil, topic, 0, len(body), n, opaque), body...))
}

// readAll reads topic partition 0 from offset 0 to its end.
func readAll(t *testing.T, c *rawClient, topic string) (offs []int64, datas [][]byte) {
	t.Helper()
	for off, i := int64(0), 0; ; i++ {
		require.Less(t, i, 10000)
		r := c.roundTrip(t, protocol.AppendGet(nil, topic, "g", 0, off, 1<<20, 9))
		if r.Code == protocol.StatusNotFound {
			return offs, datas
		}
		require.Equal(t, protocol.OpValue, r.Op, "get at %d: %d %s", off, r.Code, r.Body)
		it := message.NewIterator(r.Body, off, 0)
		for it.Next() {
			offs = append(offs, it.Record().Offset)
			datas = append(datas, bytes.Clone(it.Record().Data))
		}
		require.NoError(t, it.Err())
		require.Greater(t, it.NextOffset(), off)
		off = it.NextOffset()
	}
}

// TestPutDiskWatermark runs a broker whose data_dir is a real 8 MiB tmpfs
// (topic "t") and a topic "u" on another disk. A filler file takes the
// tmpfs past disk_max_used_ratio (0.90): puts and mputs to "t" are
// refused with the disk-full message, counted in stats, and nothing is
// acknowledged; puts to "u", gets, offsets and offset commits (the file
// store is on the full disk too) go on. Deleting the filler lets puts to
// "t" resume by themselves, and every acknowledged message is read back
// at its acknowledged offset.
func TestPutDiskWatermark(t *testing.T) {
	t.Parallel()
	dir := testsvc.MountTmpfs(t, 8<<20)
	other := t.TempDir()
	cfg := testConfig()
	cfg.Port = 0
	cfg.JournalFileSize = 1 << 20 // the journal and its spare fit the small disk
	cfg.DataDir = dir
	cfg.MaxSegmentSize = 256 << 10
	cfg.Topics = []conf.Topic{{Name: "t"}, {Name: "u", DataDir: &other}}
	b, err := New(cfg, Options{Logf: t.Logf})
	require.NoError(t, err)
	require.NoError(t, b.Start())
	t.Cleanup(func() { b.Close() })
	c := dialRaw(t, b.Addr())
	require.Equal(t, conf.DefaultDiskMaxUsedRatio, cfg.DiskMaxUsedRatio)

	type ack struct {
		off  int64
		data []byte
	}
	var acks []ack
	seq := int32(0)
	put := func(topic string) protocol.Request {
		seq++
		data := fmt.Appendf(nil, "msg-%04d-%s", seq, bytes.Repeat([]byte{'x'}, 1000))
		r := wmPut(t, c, topic, data, seq)
		require.Equal(t, seq, r.Opaque)
		if r.Code == protocol.StatusOK && topic == "t" {
			_, _, off, _, err := protocol.ParsePutResult(r.Body)
			require.NoError(t, err)
			acks = append(acks, ack{off, data})
		}
		return r
	}
	for range 20 {
		r := put("t")
		require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	}
	c.waitDisk(t, dir, false)
	used, err := strconv.ParseFloat(c.stats(t, "")["disk_used_ratio"], 64)
	require.NoError(t, err)
	// Under the ratio: the journal's file and its spares (1 MiB each;
	// one more while a freed file is renamed forward) and the segments.
	require.Less(t, used, cfg.DiskMaxUsedRatio)

	// Past the ratio (not full: the file system still has room).
	filler := filepath.Join(dir, "filler")
	testsvc.Fill(t, filler, 0.93)
	require.Less(t, testsvc.UsedRatio(t, dir), 0.99)
	took := c.waitDisk(t, dir, true)
	t.Logf("disk %.1f%% used; the broker saw it full after %v", 100*testsvc.UsedRatio(t, dir), took)

	failed, rejects := c.statInt(t, "put_failed"), c.statInt(t, "disk_full_rejects")
	want := regexp.MustCompile(`^disk full: data_dir ` + regexp.QuoteMeta(dir) +
		` is 9\d\.\d% used, over disk_max_used_ratio 0\.90; puts resume when space is freed$`)
	maxOff := c.roundTrip(t, protocol.AppendOffset(nil, "t", "g", 0, 1<<62, 5))
	for i := range 3 {
		r := put("t")
		require.Equal(t, protocol.StatusInternalError, r.Code, "put %d: %s", i, r.Body)
		require.Regexp(t, want, string(r.Body))
	}
	r := wmMPut(t, c, "t", []byte("batch"), 10, 99)
	require.Equal(t, protocol.StatusInternalError, r.Code, string(r.Body))
	require.Regexp(t, want, string(r.Body))
	require.Equal(t, failed+4, c.statInt(t, "put_failed"))
	require.Equal(t, rejects+4, c.statInt(t, "disk_full_rejects"))
	used, err = strconv.ParseFloat(c.stats(t, "")["disk_used_ratio"], 64)
	require.NoError(t, err)
	require.Greater(t, used, 0.90)
	require.Regexp(t, `^used_ratio 0\.9\d{3} inodes_used_ratio 0\.\d{4} full true$`, c.stats(t, "disks")[dir])
	require.Regexp(t, `^used_ratio 0\.\d{4} inodes_used_ratio 0\.\d{4} full false$`, c.stats(t, "disks")[other])

	// Nothing was appended; the other disk, reads, offsets and commits go on.
	require.Equal(t, maxOff.Body, c.roundTrip(t, protocol.AppendOffset(nil, "t", "g", 0, 1<<62, 5)).Body)
	r = put("u")
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	offs, datas := readAll(t, c, "t")
	require.Len(t, offs, len(acks))
	for i, a := range acks {
		require.Equal(t, a.data, datas[i], "message %d", i)
	}
	es := []protocol.OffsetEntry{{Topic: "t", Partition: 0, Offset: acks[len(acks)-1].off, MsgID: 1}}
	r = c.roundTrip(t, commitFrame("g1", es))
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	r = c.roundTrip(t, fetchFrame("g1", es))
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	got, err := protocol.ParseOffsetLines(r.Body, true)
	require.NoError(t, err)
	require.Equal(t, es, got)

	// Free the space: puts resume by themselves, without a restart.
	require.NoError(t, os.Remove(filler))
	start := time.Now()
	for {
		r := put("t")
		if r.Code == protocol.StatusOK {
			break
		}
		require.Regexp(t, want, string(r.Body))
		require.Less(t, time.Since(start), 20*time.Second, "puts still refused after the filler was deleted")
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("puts accepted again %v after the filler was deleted (check interval %v)", time.Since(start), diskwatch.CheckInterval)
	r = wmMPut(t, c, "t", []byte("batch"), 10, 100)
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	c.waitDisk(t, dir, false)

	offs, datas = readAll(t, c, "t")
	require.Len(t, offs, len(acks)+10)
	for i, a := range acks {
		require.Equal(t, a.off, offs[i], "message %d", i)
		require.Equal(t, a.data, datas[i], "message %d", i)
	}
}

// TestPutDiskWatermarkRetention fills a 16 MiB tmpfs with the topic's own
// segments until puts are refused (disk_max_used_ratio 0.5), then runs
// retention: it deletes the old segments, and puts resume at once (a
// retention run that deletes segments asks for a disk check).
func TestPutDiskWatermarkRetention(t *testing.T) {
	t.Parallel()
	dir := testsvc.MountTmpfs(t, 16<<20)
	b := fixture{dir: dir, mods: []func(*conf.Config){func(cfg *conf.Config) {
		cfg.NumPartitions = conf.Default().NumPartitions
		cfg.JournalFileSize = 1 << 20 // the journal and its spare fit the small disk
		cfg.MaxSegmentSize = 256 << 10
		cfg.DiskMaxUsedRatio = 0.5
		cfg.DeletePolicy = "delete,1h"
	}}, opts: Options{Logf: t.Logf}}.start(t)
	c := dialRaw(t, b.Addr())

	data := bytes.Repeat([]byte{'y'}, 1000)
	acked, enospc := 0, 0
	var refusal string
	for i := 0; refusal == ""; i++ {
		require.Less(t, i, 2000, "puts never refused")
		r := wmMPut(t, c, "t", data, 32, int32(i+1))
		switch {
		case r.Code == protocol.StatusOK:
			acked += 32
		case strings.HasPrefix(string(r.Body), "disk full: "):
			refusal = string(r.Body)
		default: // the disk filled up between two checks: a clean failure
			require.Contains(t, string(r.Body), "no space left on device")
			enospc++
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("refused after %d acknowledged messages (%d puts hit ENOSPC first): %s", acked, enospc, refusal)
	require.Contains(t, refusal, "over disk_max_used_ratio 0.50; puts resume when space is freed")
	minOff := b.topics.Get("t").Parts[0].MinOffset()

	start := time.Now()
	b.applyRetention(time.Now().Add(2 * time.Hour)) // as the retention loop does, two hours later
	require.Greater(t, b.topics.Get("t").Parts[0].MinOffset(), minOff, "retention deleted nothing")
	for {
		r := wmMPut(t, c, "t", data, 32, 7)
		if r.Code == protocol.StatusOK {
			break
		}
		require.Contains(t, string(r.Body), "disk full: ")
		require.Less(t, time.Since(start), 20*time.Second, "puts still refused after retention freed the disk")
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("puts accepted again %v after retention freed the disk", time.Since(start))
}
