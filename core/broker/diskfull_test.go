package broker

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// TestPutDiskFull runs a broker on a tiny real tmpfs, with the disk
// watermark off (disk_max_used_ratio = 1; TestPutDiskWatermark tests it),
// so the writes themselves hit ENOSPC: once it is full, puts fail with a
// clear 500 naming ENOSPC and the broker stays up; once
// space is freed, puts succeed again, and a get returns exactly the
// acknowledged messages at their acknowledged offsets.
func TestPutDiskFull(t *testing.T) {
	t.Parallel()
	dir := testsvc.MountTmpfs(t, 8<<20)
	b := fixture{dir: dir, mods: []func(*conf.Config){func(cfg *conf.Config) {
		cfg.NumPartitions = 1
		cfg.MaxSegmentSize = 64 << 10
		cfg.JournalFileSize = 1 << 20 // the journal and its two spare files: 3 MiB of the 8
		cfg.DiskMaxUsedRatio = 1
	}}, opts: Options{Logf: t.Logf}}.start(t)
	c := dialRaw(t, b.Addr())

	type ack struct {
		off  int64
		data []byte
	}
	var acks []ack
	seq := 0
	put := func() (protocol.Request, []byte) {
		seq++
		data := fmt.Appendf(nil, "msg-%04d-%s", seq, bytes.Repeat([]byte{'x'}, 6000+seq%7*100))
		r := c.roundTrip(t, protocol.AppendPut(nil, "t", 0, 0, int64(message.Checksum(data)), int32(seq), data))
		require.Equal(t, int32(seq), r.Opaque)
		if r.Code == protocol.StatusOK {
			_, p, off, _, err := protocol.ParsePutResult(r.Body)
			require.NoError(t, err)
			require.Equal(t, int32(0), p)
			acks = append(acks, ack{off, data})
		}
		return r, data
	}
	for range 5 {
		r, _ := put()
		require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	}

	// Fill the disk, then free a little: some puts fit, then they fail.
	// A put may still succeed after one failed: the broker itself frees
	// space when it drops a journal spare file it could not finish
	// writing. What must hold is that every failure is a clear 500 and
	// that puts keep failing once the disk is really full. (The segments
	// are written at checkpoints: on a full disk those are skipped and the
	// puts go on into the journal's files until they are used up too.)
	filler := filepath.Join(dir, "filler")
	size := testsvc.Fill(t, filler, 1)
	require.NoError(t, os.Truncate(filler, max(0, size-100<<10)))
	failures, total := 0, 0
	for i := 0; i < 2000 && failures < 3; i++ {
		r, _ := put()
		if r.Code == protocol.StatusOK {
			failures = 0
			continue
		}
		failures++
		total++
		require.Equal(t, protocol.StatusInternalError, r.Code)
		require.Contains(t, string(r.Body), "append failed: ")
		require.Contains(t, string(r.Body), "no space left on device")
	}
	require.Equal(t, 3, failures, "the disk never filled up: no three puts in a row failed")
	require.Greater(t, len(acks), 5, "no put fitted into the freed space")
	t.Logf("disk full after %d acknowledged puts; %d puts failed", len(acks), total)

	// Free the space: puts succeed again, at the next offset.
	require.NoError(t, os.Remove(filler))
	for range 10 {
		r, _ := put()
		require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	}
	last := acks[len(acks)-1]
	end := last.off + int64(message.HeaderSize+len(last.data))

	// Read everything back.
	var got []ack
	for off, i := int64(0), 0; off < end; i++ {
		require.Less(t, i, 1000)
		r := c.roundTrip(t, protocol.AppendGet(nil, "t", "g", 0, off, 1<<20, 9))
		require.Equal(t, protocol.OpValue, r.Op, "get at %d: %d %s", off, r.Code, r.Body)
		it := message.NewIterator(r.Body, off, 0)
		for it.Next() {
			got = append(got, ack{it.Record().Offset, append([]byte(nil), it.Record().Data...)})
		}
		require.NoError(t, it.Err())
		require.Greater(t, it.NextOffset(), off)
		off = it.NextOffset()
	}
	require.Equal(t, len(acks), len(got))
	for i := range acks {
		require.Equal(t, acks[i].off, got[i].off, "message %d", i)
		require.True(t, bytes.Equal(acks[i].data, got[i].data), "message %d", i)
	}
}
