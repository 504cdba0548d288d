package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
)

// seqIDs hands out ids 1, 2, 3, ...
type seqIDs struct{ last atomic.Int64 }

func (s *seqIDs) Next(n int) int64 { return s.last.Add(int64(n)) - int64(n) + 1 }

func entry(data []byte) Entry {
	return Entry{CRC: message.Checksum(data), Data: data}
}

func entryf(format string, args ...any) Entry { return entry(fmt.Appendf(nil, format, args...)) }

// openLog opens a log in dir and closes it at the end of the test.
func openLog(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	if opts.IDs == nil {
		opts.IDs = &seqIDs{}
	}
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	l, err := Open(dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// mustAppend appends one entry per data and returns its first offset.
func mustAppend(t testing.TB, l *Log, datas ...[]byte) (int64, int64) {
	t.Helper()
	es := make([]Entry, len(datas))
	for i, d := range datas {
		es[i] = entry(d)
	}
	id, off, err := l.AppendSync(es)
	require.NoError(t, err)
	return id, off
}

// readAllRecords reads the whole readable log with reads of maxSize bytes
// and checks that no read spans a segment and records chain.
func readAllRecords(t testing.TB, l *Log, maxSize int) []message.Record {
	t.Helper()
	var recs []message.Record
	off := l.MinOffset()
	for i := 0; off < l.MaxOffset(); i++ {
		require.Less(t, i, 1<<20, "read loop does not advance")
		v, err := l.Read(off, maxSize)
		require.NoError(t, err)
		require.Equal(t, off, v.Offset)
		segStart := v.Offset - v.Pos
		require.Equal(t, filepath.Join(l.Dir(), segmentName(segStart)), v.Path)
		if v.Mem == nil { // else in a journaled segment's memory tail
			fi, err := os.Stat(v.Path)
			require.NoError(t, err)
			require.LessOrEqual(t, v.Pos+int64(v.Len), fi.Size(), "read spans past its segment")
		}
		b, err := v.ReadAll(nil)
		v.Release()
		require.NoError(t, err)
		require.Len(t, b, v.Len)
		it := message.NewIterator(b, off, 0)
		for it.Next() {
			r := *it.Record()
			r.Data = append([]byte(nil), r.Data...)
			recs = append(recs, r)
		}
		require.NoError(t, it.Err())
		require.Positive(t, it.Consumed(), "maxSize %d smaller than the record at %d", maxSize, off)
		off = it.NextOffset()
	}
	require.Equal(t, l.MaxOffset(), off)
	return recs
}

func TestSegmentName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "00000000000000001234.meta", segmentName(1234))
	for name, want := range map[string]int64{
		"00000000000000001234.meta": 1234,
		"00000000000000000000.meta": 0,
	} {
		got, ok := parseSegmentName(name)
		require.True(t, ok, name)
		require.Equal(t, want, got)
	}
	for _, name := range []string{"1234.meta", "0000000000000000123x.meta", "00000000000000001234.meta.arc",
		"00000000000000001234.meta.zip", "-0000000000000001234.meta", "99999999999999999999.meta"} {
		_, ok := parseSegmentName(name)
		require.False(t, ok, name)
	}
}

func TestAppendReadSegments(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name      string
		threshold int
	}{{"groupcommit", 0}, {"threshold", 1}} {
		t.Run(mode.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, Options{MaxSegmentSize: 200, UnflushThreshold: mode.threshold})
			require.Equal(t, int64(0), l.MinOffset())
			require.Equal(t, int64(0), l.MaxOffset())
			_, err := l.Read(0, 100)
			require.ErrorIs(t, err, ErrNoData)

			var want [][]byte
			var offsets []int64
			next := int64(0)
			for i := range 40 {
				batch := 1 + i%3
				datas := make([][]byte, batch)
				for j := range datas {
					datas[j] = fmt.Appendf(nil, "msg-%d-%d-%s", i, j, make([]byte, i%7))
				}
				id, off := mustAppend(t, l, datas...)
				require.Equal(t, next, off)
				require.Equal(t, int64(len(want)+1), id)
				for _, d := range datas {
					offsets = append(offsets, next)
					next += int64(message.HeaderSize + len(d))
					want = append(want, d)
				}
				if mode.threshold > 0 {
					require.NoError(t, l.Flush())
				}
			}
			require.Equal(t, next, l.MaxOffset())
			require.Equal(t, next, l.SizeBytes())
			require.Equal(t, int64(len(want)), l.MessageCount())
			require.Equal(t, int64(len(want)), l.LastID())
			require.Greater(t, l.SegmentCount(), 3)

			for _, maxSize := range []int{64, 100, 1 << 20} {
				recs := readAllRecords(t, l, maxSize)
				require.Len(t, recs, len(want))
				for i, r := range recs {
					require.Equal(t, want[i], r.Data)
					require.Equal(t, int64(i+1), r.ID)
					require.Equal(t, offsets[i], r.Offset)
				}
			}

			// Segment files chain and each but the last reached the limit.
			// (Besides them, the directory holds only the flush mark.)
			ents, err := os.ReadDir(dir)
			require.NoError(t, err)
			ents = slices.DeleteFunc(ents, func(e os.DirEntry) bool { return e.Name() == FlushMarkName })
			start := int64(0)
			for i, e := range ents {
				s, ok := parseSegmentName(e.Name())
				require.True(t, ok)
				require.Equal(t, start, s)
				fi, err := e.Info()
				require.NoError(t, err)
				if i < len(ents)-1 {
					require.GreaterOrEqual(t, fi.Size(), int64(200))
				}
				start += fi.Size()
			}
			require.Equal(t, next, start)
		})
	}
}

func TestReadSemantics(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Options{MaxSegmentSize: 100})
	// 4 records of 20+30 = 50 bytes: segments [0,100) [100,200).
	for i := range 4 {
		mustAppend(t, l, fmt.Appendf(nil, "%030d", i))
	}
	require.Equal(t, int64(200), l.MaxOffset())
	require.Equal(t, 2, l.SegmentCount())

	// A read never crosses into the next segment.
	v, err := l.Read(50, 1000)
	require.NoError(t, err)
	require.Equal(t, 50, v.Len)
	require.Equal(t, int64(50), v.Pos)
	v.Release()

	// A read may end in a partial record.
	v, err = l.Read(100, 70)
	require.NoError(t, err)
	require.Equal(t, 70, v.Len)
	b, err := v.ReadAll([]byte("x"))
	require.NoError(t, err)
	v.Release()
	require.Equal(t, byte('x'), b[0])
	it := message.NewIterator(b[1:], 100, 0)
	require.True(t, it.Next())
	require.Equal(t, []byte(fmt.Sprintf("%030d", 2)), it.Record().Data)
	require.False(t, it.Next())
	require.NoError(t, it.Err())
	require.Equal(t, 50, it.Consumed())

	// Alignment is not validated.
	v, err = l.Read(103, 10)
	require.NoError(t, err)
	require.Equal(t, int64(3), v.Pos)
	v.Release()

	_, err = l.Read(200, 10)
	require.ErrorIs(t, err, ErrNoData)
	_, err = l.Read(1<<40, 10)
	require.ErrorIs(t, err, ErrNoData)
	_, err = l.Read(0, 0)
	require.ErrorIs(t, err, ErrBadSize)
	_, err = l.Read(0, -1)
	require.ErrorIs(t, err, ErrBadSize)
	_, err = l.Read(-5, 10)
	var oor *OffsetOutOfRangeError
	require.ErrorAs(t, err, &oor)
	require.ErrorIs(t, err, ErrBelowMin)
	require.Equal(t, int64(0), oor.Min)

	for off, want := range map[int64]int64{-1: 0, 0: 0, 1: 0, 99: 0, 100: 100, 150: 100, 199: 100, 200: 200, 5000: 200} {
		require.Equal(t, want, l.NearestOffset(off), "NearestOffset(%d)", off)
	}
}

func TestAppendErrors(t *testing.T) {
	t.Parallel()
	for _, threshold := range []int{0, 10} {
		t.Run(fmt.Sprintf("threshold=%d", threshold), func(t *testing.T) {
			l := openLog(t, t.TempDir(), Options{MaxMessageSize: 10, UnflushThreshold: threshold})
			w := &recWaiter{}
			require.ErrorIs(t, l.Append(nil, w, 1), ErrEmptyBatch)
			require.ErrorIs(t, l.Append([]Entry{entry(make([]byte, 10)), entry(make([]byte, 11))}, w, 2), ErrTooLarge)
			_, _, err := l.AppendSync([]Entry{entry(make([]byte, 10))})
			require.NoError(t, err)
			require.Equal(t, int64(1), l.MessageCount())

			require.NoError(t, l.Close())
			require.NoError(t, l.Close())
			require.ErrorIs(t, l.Append([]Entry{entry(nil)}, w, 3), ErrClosed)
			_, err = l.Read(0, 10)
			require.ErrorIs(t, err, ErrClosed)
			require.Empty(t, w.calls())
		})
	}
	_, err := Open(t.TempDir(), Options{})
	require.Error(t, err)
}

// recWaiter records every completion.
type recWaiter struct {
	mu   sync.Mutex
	done []doneCall
}

type doneCall struct {
	token       uint64
	id, offset  int64
	err         error
	maxAtSignal int64
}

func (w *recWaiter) AppendDone(token uint64, id, off int64, err error) {
	w.mu.Lock()
	w.done = append(w.done, doneCall{token: token, id: id, offset: off, err: err})
	w.mu.Unlock()
}

func (w *recWaiter) calls() []doneCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]doneCall(nil), w.done...)
}

func TestCloseWaitsForPendingAppends(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Options{})
	w := &recWaiter{}
	for i := range 100 {
		require.NoError(t, l.Append([]Entry{entryf("m%d", i)}, w, uint64(i)))
	}
	require.NoError(t, l.Close())
	calls := w.calls()
	require.Len(t, calls, 100)
	for _, c := range calls {
		require.NoError(t, c.err)
	}
}

func TestViewOutlivesClose(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Options{})
	mustAppend(t, l, []byte("hello"))
	v, err := l.Read(0, 100)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	b, err := v.ReadAll(nil)
	require.NoError(t, err)
	require.Equal(t, []byte("hello"), b[message.HeaderSize:])
	require.Equal(t, uint32(5), binary.BigEndian.Uint32(b))
	v.Release()
	_, err = v.File.Stat()
	require.True(t, errors.Is(err, os.ErrClosed), "file not closed after the last release: %v", err)
}

func TestOpenLocksDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLog(t, dir, Options{})
	_, err := Open(dir, Options{IDs: &seqIDs{}})
	require.ErrorIs(t, err, ErrLocked)
	require.NoError(t, l.Close())
	l2 := openLog(t, dir, Options{})
	require.NoError(t, l2.Close())
}

// TestAppendGivenIDs: entries that carry ids (a committed transaction's)
// are stored with them, and the log's last id is the batch's last; a batch
// with ids on some entries only is refused.
func TestAppendGivenIDs(t *testing.T) {
	t.Parallel()
	for _, threshold := range []int{0, 10} {
		t.Run(fmt.Sprintf("threshold=%d", threshold), func(t *testing.T) {
			l := openLog(t, t.TempDir(), Options{UnflushThreshold: threshold})
			mustAppend(t, l, []byte("plain"))
			a, b := entry([]byte("a")), entry([]byte("b"))
			a.ID, b.ID = 900, 901
			_, _, err := l.AppendSync([]Entry{a, b})
			require.NoError(t, err)
			require.Equal(t, int64(901), l.LastID())
			c := entry([]byte("c"))
			_, _, err = l.AppendSync([]Entry{a, c})
			require.ErrorContains(t, err, "ids given for some entries only")
			require.NoError(t, l.Flush())
			recs := readAllRecords(t, l, 1<<20)
			require.Len(t, recs, 3)
			require.Equal(t, int64(900), recs[1].ID)
			require.Equal(t, []byte("b"), recs[2].Data)
			require.Equal(t, int64(901), recs[2].ID)
		})
	}
}
