package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// fillSegments puts records of ~1 KiB into partition 0 until it spans at
// least n segments, and returns the segment starts (from the offset
// command) and the offsets of the records.
func fillSegments(t *testing.T, c *client, topic string, n int) (starts []int64, offs []int64) {
	t.Helper()
	seen := map[int64]bool{}
	for i := 0; len(starts) < n; i++ {
		require.Less(t, i, 10000)
		_, off := mustPut(t, c, topic, 0, bytes.Repeat([]byte{byte('a' + i%26)}, 1000))
		offs = append(offs, off)
		s := mustInt(t, ok(t)(c.offset(topic, 0, off)))
		if !seen[s] {
			seen[s] = true
			starts = append(starts, s)
		}
	}
	return starts, offs
}

// waitMinOffset polls stats offsets until partition 0's min_offset is want.
func waitMinOffset(t *testing.T, c *client, topic string, want int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		o := partOffsets(t, c)[topic+"-0"]
		if o[0] == want {
			return
		}
		require.LessOrEqual(t, o[0], want, "min_offset went past the expected %d", want)
		require.True(t, time.Now().Before(deadline), "min_offset still %d after %v, want %d", o[0], within, want)
		time.Sleep(25 * time.Millisecond)
	}
}

// checkAfterRetention checks the read side once min has risen to newMin.
func checkAfterRetention(t *testing.T, c *client, topic, partDir string, newMin int64, offs []int64) {
	t.Helper()
	for _, below := range []int64{0, newMin - 1} {
		r := got(t)(c.get(topic, 0, below, 4096))
		require.Equal(t, protocol.StatusMoved, r.Code, "get at %d: %v", below, r)
		require.Equal(t, strconv.FormatInt(newMin, 10), string(r.Body), "301 carries the new min")
	}
	require.Equal(t, newMin, mustInt(t, ok(t)(c.offset(topic, 0, 0))), "offset below min answers min")
	recs, end, err := readPartition(c, topic, 0, 8192)
	require.NoError(t, err)
	require.NotEmpty(t, recs)
	require.Equal(t, newMin, recs[0].Offset, "reading resumes at the new min")
	require.Equal(t, offs[len(offs)-1]+message.HeaderSize+1000, end)
	kept := 0
	for _, o := range offs {
		if o >= newMin {
			kept++
		}
	}
	require.Len(t, recs, kept)

	// The deleted files are gone (they are unlinked just after min_offset
	// is raised); the first file left starts at newMin.
	deadline := time.Now().Add(5 * time.Second)
	for {
		segs := segmentFiles(t, partDir)
		require.NotEmpty(t, segs)
		if filepath.Base(segs[0]) == fmt.Sprintf("%020d.meta", newMin) {
			break
		}
		require.True(t, time.Now().Before(deadline), "first segment file is %s, want start %d", segs[0], newMin)
		time.Sleep(10 * time.Millisecond)
	}

	// message_count follows the deletion.
	m := parseStats(t, ok(t)(c.stats(topic)).Body)
	require.Equal(t, strconv.Itoa(kept), m["message_count"])
}

// waitSealedWritten waits until every sealed segment of partDir (those
// starting at starts, but the last) holds all its bytes in its file: a
// group-commit broker writes what it put since its last checkpoint at the
// next one (docs/storage.md, "Segment tails"), and that write would make
// a file a test aged new again.
func waitSealedWritten(t *testing.T, partDir string, starts []int64) {
	t.Helper()
	for i := 0; i+1 < len(starts); i++ {
		p := filepath.Join(partDir, fmt.Sprintf("%020d.meta", starts[i]))
		require.Eventually(t, func() bool {
			fi, err := os.Stat(p)
			return err == nil && fi.Size() == starts[i+1]-starts[i]
		}, 10*time.Second, 5*time.Millisecond, "segment %s is written out", p)
	}
}

// TestRetention checks the delete policy end to end: sealed segments older
// than the policy disappear oldest first, stats min_offset rises, and a get
// below the new min is answered 301 with it. delete_check_interval = 1 s is
// the smallest the config allows.
func TestRetention(t *testing.T) {
	t.Parallel()
	t.Run("age", func(t *testing.T) {
		// delete,1s: every sealed segment goes about a second after it was
		// last written; the active one stays.
		t.Parallel()
		const topic = "ret"
		dir := t.TempDir()
		tb := startBroker(t, brokerConfig(dir, "max_segment_size = 4096\ndelete_check_interval = 1\n",
			fmt.Sprintf("[[topic]]\nname = %q\nnum_partitions = 1\ndelete_policy = \"delete,1s\"\n", topic)))
		c := dial(t, tb.Addr)
		starts, offs := fillSegments(t, c, topic, 4)
		active := starts[len(starts)-1]
		waitMinOffset(t, c, topic, active, 10*time.Second)
		checkAfterRetention(t, c, topic, filepath.Join(dir, topic+"-0"), active, offs)

		// The log goes on: a new put is readable.
		_, off := mustPut(t, c, topic, 0, bytes.Repeat([]byte("n"), 1000))
		require.Equal(t, offs[len(offs)-1]+message.HeaderSize+1000, off)
	})

	t.Run("prefix only", func(t *testing.T) {
		// delete,1h with mtimes set back: segments 0, 1 and 3 are old, 2 is
		// young. Only 0 and 1 may go: deletion is a prefix, never a hole.
		t.Parallel()
		const topic = "pre"
		dir := t.TempDir()
		tb := startBroker(t, brokerConfig(dir, "max_segment_size = 4096\ndelete_check_interval = 1\n",
			fmt.Sprintf("[[topic]]\nname = %q\nnum_partitions = 1\ndelete_policy = \"delete,1h\"\n", topic)))
		c := dial(t, tb.Addr)
		starts, offs := fillSegments(t, c, topic, 6)
		partDir := filepath.Join(dir, topic+"-0")
		waitSealedWritten(t, partDir, starts)
		old := time.Now().Add(-2 * time.Hour)
		for _, i := range []int{0, 1, 3} {
			p := filepath.Join(partDir, fmt.Sprintf("%020d.meta", starts[i]))
			require.NoError(t, os.Chtimes(p, old, old))
		}
		waitMinOffset(t, c, topic, starts[2], 10*time.Second)
		// Give the checker two more runs: nothing else may go.
		time.Sleep(2200 * time.Millisecond)
		require.Equal(t, starts[2], partOffsets(t, c)[topic+"-0"][0])
		checkAfterRetention(t, c, topic, partDir, starts[2], offs)
		require.Len(t, segmentFiles(t, partDir), len(starts)-2)

		// The active segment is never deleted, however old.
		for _, i := range []int{2, 3, 4, 5} {
			p := filepath.Join(partDir, fmt.Sprintf("%020d.meta", starts[i]))
			require.NoError(t, os.Chtimes(p, old, old))
		}
		active := starts[len(starts)-1]
		waitMinOffset(t, c, topic, active, 10*time.Second)
		checkAfterRetention(t, c, topic, partDir, active, offs)
	})
}
