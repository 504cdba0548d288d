package store

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func setAge(t *testing.T, dir string, start int64, mtime time.Time) {
	t.Helper()
	require.NoError(t, os.Chtimes(filepath.Join(dir, segmentName(start)), mtime, mtime))
}

func TestDeleteOlderThan(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLog(t, dir, Options{MaxSegmentSize: 100})
	for range 10 {
		mustAppend(t, l, make([]byte, 30)) // 50 bytes: 5 segments of 2 records
	}
	require.Equal(t, 5, l.SegmentCount())
	now := time.Now()
	old := now.Add(-2 * time.Hour)
	for _, s := range []int64{0, 100, 300, 400} { // 200 is young: deletion must stop there
		setAge(t, dir, s, old)
	}

	// A reader holds a View on the first segment while it is deleted.
	v, err := l.Read(0, 100)
	require.NoError(t, err)

	n, err := l.DeleteOlderThan(time.Hour, now)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, int64(200), l.MinOffset())
	require.Equal(t, int64(300), l.SizeBytes())
	require.Equal(t, int64(6), l.MessageCount())
	require.NoFileExists(t, filepath.Join(dir, segmentName(0)))
	require.NoFileExists(t, filepath.Join(dir, segmentName(100)))
	require.FileExists(t, filepath.Join(dir, segmentName(200)))

	b, err := v.ReadAll(nil)
	require.NoError(t, err, "a View outlives the deletion of its segment")
	require.Len(t, b, 100)
	v.Release()

	_, err = l.Read(150, 10)
	var oor *OffsetOutOfRangeError
	require.ErrorAs(t, err, &oor)
	require.Equal(t, int64(200), oor.Min)
	require.Equal(t, int64(200), l.NearestOffset(0))
	require.Len(t, readAllRecords(t, l, 1000), 6)

	// Everything old, including the active segment: all sealed ones go,
	// the active one stays.
	for _, s := range []int64{200, 300, 400} {
		setAge(t, dir, s, old)
	}
	n, err = l.DeleteOlderThan(time.Hour, now)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, int64(400), l.MinOffset())
	require.Equal(t, 1, l.SegmentCount())
	n, err = l.DeleteOlderThan(time.Hour, now)
	require.NoError(t, err)
	require.Zero(t, n)

	_, off := mustAppend(t, l, []byte("still writable"))
	require.Equal(t, int64(500), off)
	require.NoError(t, l.Close())
	_, err = l.DeleteOlderThan(time.Hour, now)
	require.ErrorIs(t, err, ErrClosed)

	// Reopening starts at the new minimum.
	l2 := openLog(t, dir, Options{MaxSegmentSize: 100})
	require.Equal(t, int64(400), l2.MinOffset())
	require.Equal(t, l.MaxOffset(), l2.MaxOffset())
}

func TestDeleteWhileCounting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLog(t, dir, Options{MaxSegmentSize: 100})
	for range 10 {
		mustAppend(t, l, make([]byte, 30))
	}
	require.NoError(t, l.Close())
	for _, s := range []int64{0, 100, 200} {
		setAge(t, dir, s, time.Now().Add(-2*time.Hour))
	}
	l2 := openLog(t, dir, Options{MaxSegmentSize: 100})
	n, err := l2.DeleteOlderThan(time.Hour, time.Now())
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Eventually(t, l2.MessageCountComplete, 5*time.Second, time.Millisecond)
	require.Equal(t, int64(4), l2.MessageCount(), "deleted segments are not counted, counted ones are subtracted")
}

// TestDeleteOlderThanBelow: a limit keeps the segments ending after it,
// old as they are, and says how many it held.
func TestDeleteOlderThanBelow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLog(t, dir, Options{MaxSegmentSize: 100})
	for range 10 {
		mustAppend(t, l, make([]byte, 30)) // 5 segments of 2 records
	}
	require.Equal(t, []int64{0, 100, 200, 300, 400}, l.SegmentStarts())
	now := time.Now()
	for _, s := range []int64{0, 100, 200, 300} {
		setAge(t, dir, s, now.Add(-2*time.Hour))
	}
	n, held, err := l.DeleteOlderThanBelow(time.Hour, now, 150) // segment 100 ends at 200
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 3, held)
	require.Equal(t, int64(100), l.MinOffset())
	n, held, err = l.DeleteOlderThanBelow(time.Hour, now, 300)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, 1, held)
	require.Equal(t, []int64{300, 400}, l.SegmentStarts())
}
