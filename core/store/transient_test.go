package store

import (
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
)

// fsFaults is a file-system seam that fails chosen operations until
// cleared. Each field holds the error to return, or nil.
type fsFaults struct {
	mu       sync.Mutex
	create   error // creating a segment file
	dirOpen  error // opening the log directory (for its fsync)
	write    error // a segment write, after writing nothing
	partial  error // a segment write, after writing half of the bytes
	short    bool  // a segment write that writes half and reports no error
	truncate error // cutting a segment after a failed write
	writes   int   // segment writes attempted
}

func (fs *fsFaults) set(fn func(*fsFaults)) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fn(fs)
}

func (fs *fsFaults) hooks(dir string) *hooks {
	return &hooks{
		openFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			fs.mu.Lock()
			create, dirOpen := fs.create, fs.dirOpen
			fs.mu.Unlock()
			switch {
			case create != nil && flag&os.O_CREATE != 0:
				return nil, &os.PathError{Op: "open", Path: name, Err: create}
			case dirOpen != nil && name == dir:
				return nil, &os.PathError{Op: "open", Path: name, Err: dirOpen}
			}
			return os.OpenFile(name, flag, perm)
		},
		writeAt: func(f *os.File, b []byte, off int64) (int, error) {
			fs.mu.Lock()
			fs.writes++
			write, partial, short := fs.write, fs.partial, fs.short
			fs.mu.Unlock()
			switch {
			case write != nil:
				return 0, &os.PathError{Op: "write", Path: f.Name(), Err: write}
			case partial != nil:
				n, _ := f.WriteAt(b[:len(b)/2], off) // what a disk filling up does
				return n, &os.PathError{Op: "write", Path: f.Name(), Err: partial}
			case short:
				return f.WriteAt(b[:len(b)/2], off)
			}
			return f.WriteAt(b, off)
		},
		truncate: func(f *os.File, size int64) error {
			fs.mu.Lock()
			err := fs.truncate
			fs.mu.Unlock()
			if err != nil {
				return &os.PathError{Op: "truncate", Path: f.Name(), Err: err}
			}
			return f.Truncate(size)
		},
	}
}

// acked is what a log has acknowledged: record data by offset, in order.
type acked struct {
	offsets []int64
	datas   []string
	end     int64
}

// appendOK appends data to l, requires that it is acknowledged, and adds
// it.
func (a *acked) appendOK(t *testing.T, l *Log, data string) {
	t.Helper()
	_, off, err := l.AppendSync([]Entry{entry([]byte(data))})
	require.NoError(t, err, data)
	a.add(t, off, data)
}

func (a *acked) add(t *testing.T, off int64, data string) {
	t.Helper()
	require.Equal(t, a.end, off, "offsets must not move: %q", data)
	a.offsets = append(a.offsets, off)
	a.datas = append(a.datas, data)
	a.end = off + int64(message.HeaderSize+len(data))
}

// check reads l back: exactly the acknowledged records at their offsets.
func (a *acked) check(t *testing.T, l *Log) {
	t.Helper()
	require.NoError(t, l.Flush())
	require.Equal(t, a.end, l.MaxOffset())
	recs := readAllRecords(t, l, 1<<20)
	require.Len(t, recs, len(a.datas))
	for i, r := range recs {
		require.Equal(t, a.offsets[i], r.Offset)
		require.Equal(t, a.datas[i], string(r.Data))
	}
}

// checkFiles checks that the segment files hold exactly the acknowledged
// bytes: nothing of a failed write is left for recovery to find.
func (a *acked) checkFiles(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var total int64
	for _, e := range ents {
		if _, ok := parseSegmentName(e.Name()); ok {
			fi, err := e.Info()
			require.NoError(t, err)
			total += fi.Size()
		}
	}
	require.Equal(t, a.end, total, "segment files hold bytes that were never acknowledged")
}

// TestTransientFailures: a failed write or segment roll fails that append
// with the errno in the message, leaves the log working (not ErrFailed),
// and the next append succeeds at the offset the failed one would have
// had; what is read back, before and after a reopen, is exactly what was
// acknowledged.
func TestTransientFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		inject func(*fsFaults)
		cause  error
		text   string
	}{
		{"roll/create-EMFILE", func(f *fsFaults) { f.create = syscall.EMFILE }, syscall.EMFILE, "too many open files"},
		{"roll/create-ENOSPC", func(f *fsFaults) { f.create = syscall.ENOSPC }, syscall.ENOSPC, "no space left on device"},
		{"roll/dir-EMFILE", func(f *fsFaults) { f.dirOpen = syscall.EMFILE }, syscall.EMFILE, "too many open files"},
		{"write/ENOSPC", func(f *fsFaults) { f.write = syscall.ENOSPC }, syscall.ENOSPC, "no space left on device"},
		{"write/EIO", func(f *fsFaults) { f.write = syscall.EIO }, syscall.EIO, "input/output error"},
		{"write/partial-ENOSPC", func(f *fsFaults) { f.partial = syscall.ENOSPC }, syscall.ENOSPC, "no space left on device"},
		{"write/short", func(f *fsFaults) { f.short = true }, io.ErrShortWrite, "short write"},
	} {
		for _, mode := range []struct {
			name      string
			threshold int
		}{{"groupcommit", 0}, {"threshold", 1000}} {
			t.Run(mode.name+"/"+tc.name, func(t *testing.T) {
				dir := t.TempDir()
				fs := &fsFaults{}
				// Records of 26 bytes: the segment is full after three.
				opts := Options{MaxSegmentSize: 64, UnflushThreshold: mode.threshold, hooks: fs.hooks(dir)}
				l := openLog(t, dir, opts)
				var a acked
				for _, d := range []string{"good-1", "good-2", "good-3"} {
					a.appendOK(t, l, d)
				}
				segs := l.SegmentCount()

				// The fourth append rolls, then writes. It is large, so that
				// half of it holds whole records longer than what follows.
				fs.set(tc.inject)
				bad := make([]Entry, 4)
				for i := range bad {
					bad[i] = entryf("bad-%d-%s", i, strings.Repeat("b", 40))
				}
				for range 3 {
					_, _, err := l.AppendSync(bad)
					require.ErrorIs(t, err, tc.cause)
					require.ErrorContains(t, err, tc.text)
					require.NotErrorIs(t, err, ErrFailed, "a %s must not fail the log", tc.name)
					require.NoError(t, l.Err())
				}
				if strings.HasPrefix(tc.name, "roll/") {
					require.Equal(t, segs, l.SegmentCount(), "no segment is published by a failed roll")
				}
				a.check(t, l)
				fs.set(func(f *fsFaults) {
					f.create, f.dirOpen, f.write, f.partial, f.short, f.truncate = nil, nil, nil, nil, false, nil
				})

				for _, d := range []string{"good-4", "good-5", "good-6", "good-7"} {
					a.appendOK(t, l, d)
				}
				require.Greater(t, l.SegmentCount(), segs, "the roll happened once the fault cleared")
				a.check(t, l)
				a.checkFiles(t, dir)
				require.NoError(t, l.Close())

				// Recovery finds the same records and nothing of the failed ones.
				l = openLog(t, dir, Options{MaxSegmentSize: 64, UnflushThreshold: mode.threshold})
				a.check(t, l)
				a.appendOK(t, l, "good-8")
				a.check(t, l)
			})
		}
	}
}

// TestTornWriteCutFails: when cutting off a partial write fails as well,
// appends fail (the cut is retried first) until the cut succeeds; then
// they go on at the right offset and nothing of the failed write remains.
func TestTornWriteCutFails(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name      string
		threshold int
	}{{"groupcommit", 0}, {"threshold", 1000}} {
		t.Run(mode.name, func(t *testing.T) {
			dir := t.TempDir()
			fs := &fsFaults{}
			l := openLog(t, dir, Options{MaxSegmentSize: 64, UnflushThreshold: mode.threshold, hooks: fs.hooks(dir)})
			var a acked
			_, off, err := l.AppendSync([]Entry{entry([]byte("good-1"))})
			require.NoError(t, err)
			a.add(t, off, "good-1")

			fs.set(func(f *fsFaults) { f.partial, f.truncate = syscall.ENOSPC, syscall.EIO })
			_, _, err = l.AppendSync([]Entry{entry([]byte("torn-1")), entry([]byte("torn-2"))})
			require.ErrorIs(t, err, syscall.ENOSPC)
			fs.set(func(f *fsFaults) { f.partial = nil })
			writes := fs.writes
			_, _, err = l.AppendSync([]Entry{entry([]byte("refused"))})
			require.ErrorIs(t, err, syscall.EIO)
			require.ErrorContains(t, err, "after a failed write")
			require.NotErrorIs(t, err, ErrFailed)
			require.Equal(t, writes, fs.writes, "no write while the file holds a partial write")

			fs.set(func(f *fsFaults) { f.truncate = nil })
			for _, d := range []string{"good-2", "good-3", "good-4"} { // the last one rolls
				_, off, err := l.AppendSync([]Entry{entry([]byte(d))})
				require.NoError(t, err)
				a.add(t, off, d)
			}
			a.check(t, l)
			a.checkFiles(t, dir)
			require.NoError(t, l.Close())
			l = openLog(t, dir, Options{UnflushThreshold: mode.threshold})
			a.check(t, l)
		})
	}
}

// TestGroupCommitFailedChunkRequeue: appends queued while a write is
// failing go into the next write and take the failed records' offsets.
func TestGroupCommitFailedChunkRequeue(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	h := &hooks{writeAt: func(f *os.File, b []byte, off int64) (int, error) {
		if off > 0 {
			fail := false
			once.Do(func() { fail = true })
			if fail {
				close(entered)
				<-release
				n, _ := f.WriteAt(b[:len(b)/3], off)
				return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
			}
		}
		return f.WriteAt(b, off)
	}}
	l := openLog(t, dir, Options{hooks: h})
	var a acked
	_, off, err := l.AppendSync([]Entry{entry([]byte("first"))})
	require.NoError(t, err)
	a.add(t, off, "first")

	w := &recWaiter{}
	require.NoError(t, l.Append([]Entry{entry([]byte("fails"))}, w, 0))
	<-entered
	for i := 1; i <= 5; i++ {
		require.NoError(t, l.Append([]Entry{entryf("queued-%d", i)}, w, uint64(i)))
	}
	close(release)
	require.Eventually(t, func() bool { return len(w.calls()) == 6 }, 10*time.Second, time.Millisecond)
	for _, c := range w.calls() {
		if c.token == 0 {
			require.ErrorIs(t, c.err, syscall.ENOSPC)
			continue
		}
		require.NoError(t, c.err, "token %d", c.token)
		a.add(t, c.offset, "queued-"+string(rune('0'+c.token)))
	}
	a.check(t, l)
	a.checkFiles(t, dir)
}

// TestFsyncFailureAfterTransient: a failed fsync is final even after
// transient failures the log recovered from.
func TestFsyncFailureAfterTransient(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fs := &fsFaults{}
	h := fs.hooks(dir)
	var failSync bool
	var mu sync.Mutex
	h.sync = func(f *os.File) error {
		mu.Lock()
		defer mu.Unlock()
		if failSync {
			return syscall.EIO
		}
		return fdatasync(f)
	}
	l := openLog(t, dir, Options{hooks: h})
	fs.set(func(f *fsFaults) { f.write = syscall.ENOSPC })
	_, _, err := l.AppendSync([]Entry{entry([]byte("x"))})
	require.ErrorIs(t, err, syscall.ENOSPC)
	fs.set(func(f *fsFaults) { f.write = nil })
	_, _, err = l.AppendSync([]Entry{entry([]byte("y"))})
	require.NoError(t, err)
	mu.Lock()
	failSync = true
	mu.Unlock()
	_, _, err = l.AppendSync([]Entry{entry([]byte("z"))})
	require.ErrorIs(t, err, syscall.EIO)
	require.ErrorIs(t, err, ErrFailed)
	mu.Lock()
	failSync = false
	mu.Unlock()
	_, _, err = l.AppendSync([]Entry{entry([]byte("after"))})
	require.ErrorIs(t, err, ErrFailed, "the log stays failed after an fsync error")
	require.True(t, errors.Is(l.Err(), syscall.EIO))
}
