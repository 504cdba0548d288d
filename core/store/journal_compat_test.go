package store

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// extractFixture unpacks the tar.gz file testdata/name (directories and
// regular files only) into a new temporary directory and returns it.
func extractFixture(t *testing.T, name string) string {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	dir := t.TempDir()
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return dir
		}
		require.NoError(t, err)
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		require.True(t, filepath.IsLocal(h.Name), "fixture entry %q", h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			require.NoError(t, os.MkdirAll(path, 0o755))
		case tar.TypeReg:
			b, err := io.ReadAll(io.LimitReader(tr, 16<<20))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, b, 0o644))
		default:
			t.Fatalf("fixture entry %q of type %c", h.Name, h.Typeflag)
		}
	}
}

// TestPreviousBinaryJournal: data directories written by the binary from
// before the replayed partitions' closed-table entries (main 88fba7f),
// recovered by this one. testdata/prev-binary-journal.tar.gz holds two,
// made by that binary's crashAfterCheckpoint(t, 20, 6) on the journaled
// partition t-0 (26 records, 23988 bytes, ids 1 to 26) with the segment
// then cut back to the checkpoint's end (a power cut lost its tail):
// crashed/, as the crash left it (the last 6 records only in the
// journal), and replayed/, a copy taken right after that binary's
// OpenJournal on it returned (a restart killed after its replay, before
// t-0 opened: its recovery checkpoint names t-0 nowhere).
//
// This binary replays crashed/ and vouches for t-0's replayed end, so a
// second crash with a roll's gap with bytes past it is mended. In
// replayed/ nothing vouches for t-0: it opens with every record (its
// Open scans), an empty roll past its end is removed, and a later segment
// with bytes is still refused.
func TestPreviousBinaryJournal(t *testing.T) {
	t.Parallel()
	const n, end int64 = 26, 23988 // records 0 to 9 of 922 bytes, 10 to 25 of 923
	name := partName(0)
	openAt := func(t *testing.T, dir string) (*Journal, *logBuf) {
		lb := &logBuf{}
		j, err := OpenJournal(dir, testFileSize(JournalOptions{Logf: lb.logf}))
		require.NoError(t, err)
		t.Cleanup(func() { _ = j.Close() })
		return j, lb
	}
	openP := func(t *testing.T, dir string, j *Journal, lb *logBuf) (*Log, error) {
		l, err := Open(filepath.Join(dir, name), Options{Journal: j, IDs: &seqIDs{}, Logf: lb.logf, MaxSegmentSize: 1 << 30})
		if err == nil {
			t.Cleanup(func() { _ = l.Close() })
		}
		return l, err
	}
	check := func(t *testing.T, l *Log) {
		t.Helper()
		require.Equal(t, end, l.MaxOffset())
		require.Equal(t, int64(n), l.LastID())
		recs := readAllRecords(t, l, 1<<20)
		require.Len(t, recs, int(n))
		for i, r := range recs {
			require.Equal(t, fmt.Appendf(bytes.Repeat([]byte{'a' + byte(i%26)}, 900), "#%d", i), r.Data)
			require.Equal(t, int64(i+1), r.ID)
		}
	}
	gap := func(t *testing.T, dir string, at int64, size int) string {
		path := filepath.Join(dir, name, segmentName(at))
		require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte{'z'}, size), 0o644))
		return path
	}
	fx := extractFixture(t, "prev-binary-journal.tar.gz")

	t.Run("crashed", func(t *testing.T) {
		dir := filepath.Join(fx, "crashed")
		fi, err := os.Stat(filepath.Join(dir, name, segmentName(0)))
		require.NoError(t, err)
		require.Less(t, fi.Size(), end, "the fixture's last records are only in the journal")
		j, _ := openAt(t, dir)
		j.mu.Lock()
		c, ok := j.closedTableLocked()[name]
		j.mu.Unlock()
		require.True(t, ok, "the replayed partition is vouched for")
		require.Equal(t, closedEnd{end: end, lastID: n}, c)
		// A second crash, before t-0 opens, with a roll's gap past its end.
		twice := filepath.Join(t.TempDir(), "twice")
		require.NoError(t, os.CopyFS(twice, os.DirFS(dir)))
		gapSeg := gap(t, twice, end+20980, 3000)
		j2, lb := openAt(t, twice)
		l, err := openP(t, twice, j2, lb)
		require.NoError(t, err)
		require.NoFileExists(t, gapSeg)
		check(t, l)
	})

	for _, size := range []int{0, 3000} {
		t.Run(fmt.Sprintf("replayed, a roll of %d bytes", size), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "replayed")
			require.NoError(t, os.CopyFS(dir, os.DirFS(filepath.Join(fx, "replayed"))))
			gapSeg := gap(t, dir, end+20980, size)
			j, lb := openAt(t, dir)
			j.mu.Lock()
			_, ok := j.closedTableLocked()[name]
			j.mu.Unlock()
			require.False(t, ok, "the previous binary's recovery checkpoint names t-0 nowhere")
			l, err := openP(t, dir, j, lb)
			if size > 0 {
				require.ErrorIs(t, err, ErrBrokenChain)
				require.FileExists(t, gapSeg)
				return
			}
			require.NoError(t, err)
			require.Contains(t, lb.String(), "removed 1 empty segment(s)")
			check(t, l)
		})
	}
	t.Run("replayed, no gap", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "replayed")
		require.NoError(t, os.CopyFS(dir, os.DirFS(filepath.Join(fx, "replayed"))))
		j, lb := openAt(t, dir)
		l, err := openP(t, dir, j, lb)
		require.NoError(t, err)
		check(t, l)
	})
}
