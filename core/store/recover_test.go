package store

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
)

// copyDir copies the regular files of src into a new temporary directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644))
	}
	return dst
}

// lastSegment returns the path of the last segment file in dir.
func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.meta"))
	require.NoError(t, err)
	require.NotEmpty(t, m)
	return m[len(m)-1] // Glob sorts, names are zero-padded
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Size()
}

func TestReopenKeepsEverything(t *testing.T) {
	t.Parallel()
	for _, threshold := range []int{0, 5} {
		t.Run(fmt.Sprintf("threshold=%d", threshold), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{MaxSegmentSize: 300, UnflushThreshold: threshold}
			l := openLog(t, dir, opts)
			var want [][]byte
			for i := range 50 {
				d := fmt.Appendf(nil, "record-%d", i)
				want = append(want, d)
				mustAppend(t, l, d)
			}
			require.NoError(t, l.Close())
			end := l.MaxOffset()

			l2 := openLog(t, dir, opts)
			require.Equal(t, end, l2.MaxOffset())
			require.Equal(t, int64(50), l2.LastID())
			require.Eventually(t, l2.MessageCountComplete, 5*time.Second, time.Millisecond)
			require.Equal(t, int64(50), l2.MessageCount())
			recs := readAllRecords(t, l2, 1000)
			require.Len(t, recs, 50)
			for i, r := range recs {
				require.Equal(t, want[i], r.Data)
			}
			// Appends continue where the log ended.
			id, off := mustAppend(t, l2, []byte("after"))
			require.Equal(t, end, off)
			require.Equal(t, int64(1), id) // this test's id source restarts
		})
	}
}

// buildTornFixture writes a log with one sealed segment and a last segment
// of three records, and returns its dir, the last segment's start and the
// offsets of the records in the last segment.
func buildTornFixture(t *testing.T) (dir string, tailStart int64, recOffsets []int64) {
	dir = t.TempDir()
	l := openLog(t, dir, Options{MaxSegmentSize: 100})
	mustAppend(t, l, bytes.Repeat([]byte("s"), 80)) // 100 bytes: seals segment 0
	for i := range 3 {
		_, off := mustAppend(t, l, fmt.Appendf(nil, "tail-record-%d-%s", i, bytes.Repeat([]byte{'d'}, 10)))
		recOffsets = append(recOffsets, off)
	}
	require.Equal(t, 2, l.SegmentCount())
	require.NoError(t, l.Close())
	return dir, 100, recOffsets
}

func TestRecoverTornTailEveryByte(t *testing.T) {
	t.Parallel()
	dir, tailStart, offs := buildTornFixture(t)
	seg := lastSegment(t, dir)
	full := fileSize(t, seg)
	lastRec := offs[2] - tailStart
	for cut := lastRec; cut < full; cut++ {
		d := copyDir(t, dir)
		require.NoError(t, os.Truncate(lastSegment(t, d), cut))
		var logs []string
		l := openLog(t, d, Options{MaxSegmentSize: 100, Logf: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }})
		require.Equal(t, offs[2], l.MaxOffset(), "cut at %d", cut)
		require.Equal(t, lastRec, fileSize(t, lastSegment(t, d)), "cut at %d", cut)
		require.Equal(t, int64(3), l.LastID(), "cut at %d", cut)
		if cut > lastRec {
			require.Len(t, logs, 1, "the cut is logged")
			require.Contains(t, logs[0], "cutting last segment")
		}
		recs := readAllRecords(t, l, 1000)
		require.Len(t, recs, 3)
		_, off := mustAppend(t, l, []byte("new"))
		require.Equal(t, offs[2], off, "appends continue at the cut")
		require.NoError(t, l.Close())
	}
}

func TestRecoverCorruptLastRecord(t *testing.T) {
	t.Parallel()
	dir, tailStart, offs := buildTornFixture(t)
	seg := lastSegment(t, dir)
	orig, err := os.ReadFile(seg)
	require.NoError(t, err)
	lastRec := int(offs[2] - tailStart)

	// Bytes covered by validation: length (0..3), checksum (4..7) and data
	// (20..). The id and flag (8..19) are not covered by MetaQ's checksum.
	var positions []int
	for p := lastRec; p < len(orig); p++ {
		if rel := p - lastRec; rel < 8 || rel >= message.HeaderSize {
			positions = append(positions, p)
		}
	}
	for _, p := range positions {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			d := copyDir(t, dir)
			b := bytes.Clone(orig)
			b[p] ^= mask
			require.NoError(t, os.WriteFile(lastSegment(t, d), b, 0o644))
			l := openLog(t, d, Options{MaxSegmentSize: 100})
			require.Equal(t, offs[2], l.MaxOffset(), "flip %#x at %d", mask, p)
			got, err := os.ReadFile(lastSegment(t, d))
			require.NoError(t, err)
			require.Equal(t, orig[:lastRec], got)
			require.NoError(t, l.Close())
		}
	}

	// In truncate mode a bad record in the middle cuts everything after it
	// too (quarantine mode refuses to start: quarantine_test.go).
	d := copyDir(t, dir)
	b := bytes.Clone(orig)
	b[int(offs[1]-tailStart)+message.HeaderSize] ^= 1
	require.NoError(t, os.WriteFile(lastSegment(t, d), b, 0o644))
	l := openLog(t, d, Options{MaxSegmentSize: 100, Recovery: RecoverTruncate})
	require.Equal(t, offs[1], l.MaxOffset())
	require.Equal(t, int64(2), l.LastID())
}

func TestRecoverLengthOverMax(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLog(t, dir, Options{})
	mustAppend(t, l, []byte("small"))
	mustAppend(t, l, make([]byte, 100))
	require.NoError(t, l.Close())
	// Reopened with a lower limit, the 100-byte record is not recognised.
	l2 := openLog(t, dir, Options{MaxMessageSize: 50})
	require.Equal(t, int64(message.HeaderSize+5), l2.MaxOffset())
}

func TestRecoverBrokenChain(t *testing.T) {
	t.Parallel()
	rec := message.AppendRecord(nil, 1, 0, make([]byte, 80)) // 100 bytes
	for _, tc := range []struct {
		name   string
		second int64
		what   string
	}{{"gap", 150, "gap of 50 bytes"}, {"overlap", 60, "overlap of 40 bytes"}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, segmentName(0)), rec, 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, segmentName(tc.second)), rec, 0o644))
			_, err := Open(dir, Options{IDs: &seqIDs{}})
			require.ErrorIs(t, err, ErrBrokenChain)
			require.Contains(t, err.Error(), segmentName(0))
			require.Contains(t, err.Error(), segmentName(tc.second))
			require.Contains(t, err.Error(), tc.what)
		})
	}
}

func TestRecoverIgnoresOtherFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, name := range []string{"00000000000000000000.meta.arc", "00000000000000000000.meta.zip", "notes.txt", "12.meta"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("junk"), 0o644))
	}
	l := openLog(t, dir, Options{})
	require.Equal(t, int64(0), l.MaxOffset())
	require.Equal(t, 1, l.SegmentCount())
	_, off := mustAppend(t, l, []byte("x"))
	require.Equal(t, int64(0), off)
}

func TestRecoverEmptyLastSegment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLog(t, dir, Options{MaxSegmentSize: 100, IDs: &seqIDs{}})
	for range 4 {
		mustAppend(t, l, make([]byte, 30)) // 50 bytes each: segments [0,100) [100,200)
	}
	require.NoError(t, l.Close())
	// A crash right after a roll leaves an empty last segment.
	require.NoError(t, os.WriteFile(filepath.Join(dir, segmentName(200)), nil, 0o644))

	l2 := openLog(t, dir, Options{MaxSegmentSize: 100})
	require.Equal(t, int64(200), l2.MaxOffset())
	require.Equal(t, int64(4), l2.LastID(), "the last id comes from the previous segment")
	require.Eventually(t, l2.MessageCountComplete, 5*time.Second, time.Millisecond)
	require.Equal(t, int64(4), l2.MessageCount())
	_, off := mustAppend(t, l2, []byte("x"))
	require.Equal(t, int64(200), off)
	require.Equal(t, 3, l2.SegmentCount())
}

func TestRecoverEmptyDirAndZeroLengthSegment(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "topic-0")
	l := openLog(t, dir, Options{})
	require.Equal(t, int64(0), l.MaxOffset())
	require.FileExists(t, filepath.Join(dir, segmentName(0)))
	require.NoError(t, l.Close())
	l2 := openLog(t, dir, Options{})
	require.Equal(t, int64(0), l2.MaxOffset())
	require.Equal(t, int64(0), l2.LastID())
	require.True(t, l2.MessageCountComplete())
}

func TestRecoverOnlyScansLastSegment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLog(t, dir, Options{MaxSegmentSize: 100})
	for range 6 {
		mustAppend(t, l, make([]byte, 30))
	}
	require.NoError(t, l.Close())
	// Garbage inside a sealed segment is not looked at by Open (MetaQ trusts
	// sealed segments); only the background count notices it.
	first := filepath.Join(dir, segmentName(0))
	b, err := os.ReadFile(first)
	require.NoError(t, err)
	b[60] ^= 0xff
	b[50] = 0x7f // length of the second record: far past the end
	require.NoError(t, os.WriteFile(first, b, 0o644))
	var logs strings.Builder
	l2 := openLog(t, dir, Options{MaxSegmentSize: 100, Logf: func(f string, a ...any) { fmt.Fprintf(&logs, f+"\n", a...) }})
	require.Equal(t, int64(300), l2.MaxOffset())
	require.Eventually(t, l2.MessageCountComplete, 5*time.Second, time.Millisecond)
	require.NoError(t, l2.Close())
	require.Equal(t, int64(5), l2.MessageCount())
	require.Contains(t, logs.String(), "invalid record at byte 50")
}

// FuzzRecover writes arbitrary bytes as the last segment (after one sealed
// segment) and opens the log in both recovery modes. Truncate: Open must
// not panic, must keep exactly a prefix of valid records, and the log must
// accept appends after it. Quarantine: Open either does the same, and then
// no valid record with data starts in what it cut, or fails with a
// *CorruptError, leaves the segment as it was and has copied the damage
// aside.
func FuzzRecover(f *testing.F) {
	f.Add([]byte{})
	f.Add(message.AppendRecord(nil, 7, 0, []byte("hello")))
	f.Add(message.AppendRecord(message.AppendRecord(nil, 1, 1, []byte("\x00\x00\x00\x01a")), 2, 0, nil)[:30])
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	const maxMsg = 1 << 16
	sealed := message.AppendRecord(nil, 1, 0, []byte("sealed"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, segmentName(0)), sealed, 0o644))
		tailStart := int64(len(sealed))
		tail := filepath.Join(dir, segmentName(tailStart))
		require.NoError(t, os.WriteFile(tail, data, 0o644))

		qd := copyDir(t, dir)
		ql, err := Open(qd, Options{IDs: &seqIDs{}, MaxMessageSize: maxMsg})
		if err != nil {
			var ce *CorruptError
			require.ErrorAs(t, err, &ce)
			got, rerr := os.ReadFile(filepath.Join(qd, segmentName(tailStart)))
			require.NoError(t, rerr)
			require.Equal(t, data, got, "a refused start changed the segment")
			for _, r := range ce.Ranges {
				q, rerr := os.ReadFile(r.Quarantine)
				require.NoError(t, rerr)
				require.Equal(t, data[r.Pos:r.End], q)
			}
		} else {
			kept := ql.MaxOffset() - tailStart
			require.NoError(t, ql.Close())
			for q := kept + 1; q < int64(len(data)); q++ {
				r, _, perr := message.ParseRecord(data[q:], maxMsg)
				require.True(t, perr != nil || len(r.Data) == 0, "quarantine mode cut a valid record at %d", q)
			}
		}

		l, err := Open(dir, Options{IDs: &seqIDs{}, MaxMessageSize: maxMsg, Recovery: RecoverTruncate})
		require.NoError(t, err)
		defer l.Close()

		got, err := os.ReadFile(tail)
		require.NoError(t, err)
		require.True(t, bytes.HasPrefix(data, got), "recovery rewrote bytes")
		// The kept bytes are a chain of valid records, and the next record
		// (if any) is invalid or incomplete.
		var count, lastID int64
		pos := 0
		for pos < len(got) {
			r, n, err := message.ParseRecord(got[pos:], maxMsg)
			require.NoError(t, err, "invalid record kept at %d", pos)
			require.False(t, zeroHeader(got[pos:]), "zero-filled record kept at %d", pos)
			pos += n
			count++
			lastID = r.ID
		}
		if rest := data[len(got):]; len(rest) > 0 {
			_, _, err := message.ParseRecord(rest, maxMsg)
			require.True(t, err != nil || zeroHeader(rest), "a valid record was cut at %d", len(got))
		}
		require.Equal(t, tailStart+int64(len(got)), l.MaxOffset())
		if count > 0 {
			require.Equal(t, lastID, l.LastID())
		} else {
			require.Equal(t, int64(1), l.LastID())
		}
		_, off, err := l.AppendSync([]Entry{entry([]byte("next"))})
		require.NoError(t, err)
		require.Equal(t, l.MaxOffset()-int64(message.HeaderSize+4), off)
		require.Equal(t, tailStart+int64(len(got)), off)
	})
}
