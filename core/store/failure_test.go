package store

import (
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// faults fails segment fsyncs on demand and counts them.
type faults struct {
	failSync atomic.Pointer[error]
	syncs    atomic.Int64
}

func (fl *faults) hooks() *hooks {
	return &hooks{
		sync: func(f *os.File) error {
			fl.syncs.Add(1)
			if e := fl.failSync.Load(); e != nil {
				return *e
			}
			return fdatasync(f)
		},
	}
}

func errp(err error) *error { return &err }

// TestInjectedFailures: a failed fsync fails the append it covers and the
// log for good (fsyncgate); see TestTransientFailures for write errors.
func TestInjectedFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		threshold int
		inject    func(*faults)
		cause     error
	}{
		{"groupcommit/fsync", 0, func(f *faults) { f.failSync.Store(errp(syscall.EIO)) }, syscall.EIO},
		{"threshold/fsync", 1, func(f *faults) { f.failSync.Store(errp(syscall.EIO)) }, syscall.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fl := &faults{}
			dir := t.TempDir()
			l := openLog(t, dir, Options{UnflushThreshold: tc.threshold, hooks: fl.hooks()})
			// threshold 1: the second append triggers the fsync.
			mustAppend(t, l, []byte("good-1"))
			mustAppend(t, l, []byte("good-2"))
			good := l.MaxOffset()
			require.Positive(t, good)

			tc.inject(fl)
			w := &recWaiter{}
			failed := func() bool {
				calls := w.calls()
				return len(calls) > 0 && calls[len(calls)-1].err != nil
			}
			// In threshold mode a failed fsync is noticed by the append that
			// triggers it (the second one, with threshold 1).
			for i := range 2 {
				require.NoError(t, l.Append([]Entry{entry([]byte("bad"))}, w, uint64(i)))
				if tc.threshold == 0 {
					require.Eventually(t, failed, 5*time.Second, time.Millisecond)
				}
				if failed() {
					break
				}
			}
			require.True(t, failed())
			calls := w.calls()
			for _, c := range calls[:len(calls)-1] {
				require.NoError(t, c.err, "only the append that hit the fault fails")
			}
			last := calls[len(calls)-1]
			require.ErrorIs(t, last.err, tc.cause)
			require.ErrorIs(t, last.err, ErrFailed)
			require.ErrorIs(t, l.Err(), tc.cause)

			// The log refuses further appends and never retries the fsync.
			syncs := fl.syncs.Load()
			fl.failSync.Store(nil)
			err := l.Append([]Entry{entry([]byte("refused"))}, w, 3)
			require.ErrorIs(t, err, ErrFailed)
			_, _, err = l.AppendSync([]Entry{entry([]byte("refused"))})
			require.ErrorIs(t, err, ErrFailed)
			require.ErrorIs(t, l.Flush(), ErrFailed)
			require.Equal(t, syncs, fl.syncs.Load(), "a failed fsync was retried")
			require.Len(t, w.calls(), len(calls))

			// Readable data stays readable; failed appends never become so.
			require.Equal(t, good, l.MaxOffset())
			require.Len(t, readAllRecords(t, l, 1000), 2)
			require.ErrorIs(t, l.Close(), tc.cause)
		})
	}
}

func TestFailureFailsAllPending(t *testing.T) {
	t.Parallel()
	g := newGateSync()
	var failNow atomic.Bool
	h := &hooks{sync: func(f *os.File) error {
		if err := g.sync(f); err != nil {
			return err
		}
		if failNow.Load() {
			return syscall.EIO
		}
		return nil
	}}
	l := openLog(t, t.TempDir(), Options{hooks: h})
	w := &recWaiter{}
	require.NoError(t, l.Append([]Entry{entry([]byte("first"))}, w, 0))
	<-g.started
	for i := 1; i <= 5; i++ {
		require.NoError(t, l.Append([]Entry{entry([]byte("queued"))}, w, uint64(i)))
	}
	failNow.Store(true)
	close(g.release)
	require.Eventually(t, func() bool { return len(w.calls()) == 6 }, 5*time.Second, time.Millisecond)
	for _, c := range w.calls() {
		require.ErrorIs(t, c.err, syscall.EIO, "token %d", c.token)
	}
	require.Equal(t, int64(0), l.MaxOffset())
}
