package store

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
)

// TestWalk: Walk gives every record from a record start to the end, in
// order, across segments and past a record longer than its 1 MiB read;
// it returns where it stopped (the end asked, or the log's end before
// it, or fn's record when fn fails); and
// RecordStartBefore gives record starts at or before the offset asked.
func TestWalk(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Options{MaxSegmentSize: 256 << 10})
	var datas [][]byte
	for i := range 300 {
		d := bytes.Repeat([]byte{byte('a' + i%26)}, 100+i*10)
		if i == 150 {
			d = bytes.Repeat([]byte("L"), 3<<20/2) // longer than a read
		}
		datas = append(datas, d)
		mustAppend(t, l, d)
	}
	require.Greater(t, l.SegmentCount(), 2)
	var got [][]byte
	var starts []int64
	next, err := l.Walk(0, l.MaxOffset(), func(r *message.Record) error {
		got = append(got, bytes.Clone(r.Data))
		starts = append(starts, r.Offset)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, l.MaxOffset(), next, "complete: the records reach the end asked")
	require.Equal(t, datas, got)

	next, err = l.Walk(starts[10], l.MaxOffset()+1, func(*message.Record) error { return nil })
	require.NoError(t, err)
	require.Equal(t, l.MaxOffset(), next, "the log ends before the end asked")

	stop := errors.New("stop")
	next, err = l.Walk(0, l.MaxOffset(), func(r *message.Record) error {
		if r.Offset == starts[5] {
			return stop
		}
		return nil
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, starts[5], next, "fn's error stops the walk at its record")

	for _, off := range []int64{0, starts[1] + 3, starts[149] + 7, starts[151] - 1, l.MaxOffset() - 1} {
		at := l.RecordStartBefore(off)
		require.LessOrEqual(t, at, off)
		require.Contains(t, starts, at, "a record start at or before %d", off)
	}
	require.Equal(t, l.MaxOffset(), l.RecordStartBefore(l.MaxOffset()+5))
}
