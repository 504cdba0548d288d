package e2e

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
)

// copyTree copies the regular files and directories of src into dst.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	require.NoError(t, err)
}

// segmentFiles returns the .meta files of a partition directory, sorted.
func segmentFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.meta"))
	require.NoError(t, err)
	sort.Strings(m)
	return m
}

// TestTornTailRestart writes records through the broker, closes it, then
// damages the last record of the last segment in a copy of the data
// directory (truncated at ~25 points of its header and data, or one byte
// flipped in its crc, length or data) and restarts a broker on the copy:
// get must return exactly the good records, stats max_offset must be the
// end of the last good record, and a new put must land right after it. A
// flipped byte is damage, not a tear, after a clean stop (the journal
// vouches for the end): the record is kept, never served, and the log goes
// on after it.
func TestTornTailRestart(t *testing.T) {
	t.Parallel()
	const topic = "torn"
	base := t.TempDir()
	orig := filepath.Join(base, "orig")
	top := "unflush_threshold = 0\nmax_segment_size = 4096\n"
	topics := fmt.Sprintf("[[topic]]\nname = %q\nnum_partitions = 1\n", topic)

	// Write records of varied sizes until the last segment holds at least
	// three of them, so the damaged record has good neighbours before it.
	rng := rand.New(rand.NewPCG(1, 2))
	type written struct {
		id, off int64
		data    []byte
	}
	var recs []written
	tb := startBroker(t, brokerConfig(orig, top, topics))
	c := dial(t, tb.Addr)
	for i := 0; ; i++ {
		require.Less(t, i, 1000)
		data := bytes.Repeat([]byte{byte('a' + i%26)}, 100+rng.IntN(300))
		data = fmt.Appendf(data, "#%d", i)
		id, off := mustPut(t, c, topic, 0, data)
		recs = append(recs, written{id, off, data})
		if len(recs) >= 20 {
			// Segment boundaries: the offset command answers the start of
			// the segment holding an offset.
			segStart := mustInt(t, ok(t)(c.offset(topic, 0, off)))
			if segStart > 0 && off-segStart >= 2*(message.HeaderSize+100) {
				break
			}
		}
	}
	c.close()
	tb.Stop(t)

	last := recs[len(recs)-1]
	good := recs[:len(recs)-1]
	partDir := filepath.Join(orig, topic+"-0")
	segs := segmentFiles(t, partDir)
	require.GreaterOrEqual(t, len(segs), 2, "the test needs several segments")
	lastSeg := segs[len(segs)-1]
	fi, err := os.Stat(lastSeg)
	require.NoError(t, err)
	var segStart int64
	_, err = fmt.Sscanf(filepath.Base(lastSeg), "%020d.meta", &segStart)
	require.NoError(t, err)
	pos := last.off - segStart // position of the last record in its file
	recLen := int64(message.HeaderSize + len(last.data))
	require.Equal(t, fi.Size(), pos+recLen, "the last record must end the last segment")

	type damage struct {
		name string
		do   func(t *testing.T, path string)
	}
	var cases []damage
	cut := func(at int64) func(*testing.T, string) {
		return func(t *testing.T, path string) { require.NoError(t, os.Truncate(path, at)) }
	}
	flip := func(at int64) func(*testing.T, string) {
		return func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			require.NoError(t, err)
			defer f.Close()
			b := make([]byte, 1)
			_, err = f.ReadAt(b, at)
			require.NoError(t, err)
			b[0] ^= 0x5a
			_, err = f.WriteAt(b, at)
			require.NoError(t, err)
		}
	}
	// Every byte of the header (0 = the record entirely gone) ...
	for k := int64(0); k < message.HeaderSize; k++ {
		cases = append(cases, damage{fmt.Sprintf("cut_header+%d", k), cut(pos + k)})
	}
	// ... and several inside the data, up to one byte short.
	dl := int64(len(last.data))
	for _, k := range []int64{0, 1, dl / 3, dl / 2, dl - 2, dl - 1} {
		cases = append(cases, damage{fmt.Sprintf("cut_data+%d", k), cut(pos + message.HeaderSize + k)})
	}
	cases = append(cases,
		damage{"flip_crc", flip(pos + 5)},
		damage{"flip_data_first", flip(pos + message.HeaderSize)},
		damage{"flip_data_middle", flip(pos + message.HeaderSize + dl/2)},
		damage{"flip_data_last", flip(pos + recLen - 1)},
		damage{"flip_length_high", flip(pos)},    // length becomes huge (or negative)
		damage{"flip_length_low", flip(pos + 3)}, // length changes by a few bytes
	)

	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(base, fmt.Sprintf("case%02d", i))
			copyTree(t, orig, dir)
			tc.do(t, filepath.Join(dir, topic+"-0", filepath.Base(lastSeg)))

			tb := startBroker(t, brokerConfig(dir, top, topics))
			c := dial(t, tb.Addr)
			got, end, err := readPartition(c, topic, 0, 1500)
			if strings.HasPrefix(tc.name, "flip_") {
				// The broker stopped cleanly, so the journal vouches for
				// the partition's end: a flipped last record is damage,
				// not a torn tail. It is kept (quarantined), never
				// served, and the log goes on after it.
				require.Error(t, err, "a damaged record was served")
				require.Contains(t, err.Error(), "corrupt data", "the get at the damaged record is refused")
				require.Equal(t, last.off, end, "reads stop at the damaged record")
				require.Len(t, got, len(good))
				for j, w := range good {
					require.Equal(t, w.off, got[j].Offset)
					require.Equal(t, w.data, got[j].Data)
				}
				_, off := mustPut(t, c, topic, 0, []byte("after the damaged record"))
				require.Equal(t, last.off+recLen, off, "nothing acknowledged is cut: new puts land after the damaged record")
				return
			}
			require.NoError(t, err, "a damaged record was served")
			require.Len(t, got, len(good))
			for j, w := range good {
				require.Equal(t, w.off, got[j].Offset)
				require.Equal(t, w.id, got[j].ID)
				require.Equal(t, w.data, got[j].Data)
			}
			require.Equal(t, last.off, end, "readable end must be the end of the last good record")
			offs := partOffsets(t, c)
			require.Equal(t, [2]int64{0, last.off}, offs[topic+"-0"], "stats offsets min/max")
			require.Equal(t, last.off, mustInt(t, ok(t)(c.offset(topic, 0, 1<<40))), "offset command at the end")

			// The log continues right after the last good record, with a
			// fresh id.
			data := []byte("after the cut " + strings.Repeat("z", 50))
			id, off := mustPut(t, c, topic, 0, data)
			require.Equal(t, last.off, off, "new put must land right after the last good record")
			require.Greater(t, id, good[len(good)-1].id, "ids must keep rising")
			got, end, err = readPartition(c, topic, 0, 1500)
			require.NoError(t, err)
			require.Len(t, got, len(good)+1)
			require.Equal(t, data, got[len(got)-1].Data)
			require.Equal(t, id, got[len(got)-1].ID)
			require.Equal(t, off+int64(message.HeaderSize+len(data)), end)
		})
	}
}
