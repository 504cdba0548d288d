package store

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHoldPOK: the journal's fdatasync holds its P only on a local file
// system and with another P to spare.
func TestHoldPOK(t *testing.T) {
	dir := t.TempDir()
	ok, why := holdPOK(dir, 1)
	require.False(t, ok)
	require.Equal(t, "GOMAXPROCS 1", why)
	ok, why = holdPOK("/proc", 4) // not a file system a journal is on, nor local storage
	require.False(t, ok)
	require.Contains(t, why, "not a local")
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		ok, _ = holdPOK("/dev/shm", 2) // tmpfs
		require.True(t, ok)
	}
}

// TestPinnedSyncTurnsBlocking: a call while GOMAXPROCS is 1 is the
// blocking one; after one call over the limit every call is, and that is
// logged once.
func TestPinnedSyncTurnsBlocking(t *testing.T) {
	var mu sync.Mutex
	var pinned, blocking int
	var logs []string
	delay := time.Duration(0)
	procs := 2
	p := &pinnedSync{
		call: func(*os.File) error {
			mu.Lock()
			pinned++
			d := delay
			mu.Unlock()
			time.Sleep(d)
			return nil
		},
		blocking: func(*os.File) error { mu.Lock(); blocking++; mu.Unlock(); return nil },
		slow:     20 * time.Millisecond,
		logf:     func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) },
		procs:    func() int { return procs },
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "j"))
	require.NoError(t, err)
	defer f.Close()
	for range 5 {
		require.NoError(t, p.sync(f))
	}
	require.Equal(t, 5, pinned)
	require.Empty(t, logs)
	// With one P a call is the blocking one (and nothing is turned off).
	procs = 1
	require.NoError(t, p.sync(f))
	require.Equal(t, 5, pinned)
	require.Equal(t, 1, blocking)
	procs = 2
	delay = 30 * time.Millisecond
	require.NoError(t, p.sync(f))
	require.Len(t, logs, 1)
	require.Contains(t, logs[0], "blocking calls from now on")
	for range 5 {
		require.NoError(t, p.sync(f))
	}
	require.Equal(t, 6, pinned)
	require.Equal(t, 6, blocking)
	require.Len(t, logs, 1)
}

// TestJournalRoundSyncChoice: a journal on this test's temporary
// directory holds its P in its rounds' fdatasync where holdPOK allows it,
// never with journal_fdatasync = "blocking", and its appends are
// acknowledged and survive a reopen either way.
func TestJournalRoundSyncChoice(t *testing.T) {
	for _, mode := range []RoundSync{RoundSyncAuto, RoundSyncBlocking} {
		dataDir := t.TempDir()
		opts := smallJournal()
		opts.RoundSync = mode
		j := openJournal(t, dataDir, opts)
		want := "blocking (journal_fdatasync = \"blocking\")"
		if mode == RoundSyncAuto {
			ok, why := holdPOK(filepath.Join(dataDir, JournalDirName), runtime.GOMAXPROCS(0))
			want = "holding its P"
			if !ok {
				want = "blocking (" + why + ")"
			}
		}
		require.Equal(t, want, j.roundSyncHow)
		logs := openJLogs(t, dataDir, j, 2, Options{MaxSegmentSize: 16 << 10})
		for i := range 50 {
			waitJournalIdle(t, j) // so AppendLead commits before it returns
			w := &recWaiter{}
			require.NoError(t, logs[i%2].AppendLead([]Entry{entryf("r-%d", i)}, w, uint64(i)))
			calls := w.calls()
			require.Len(t, calls, 1)
			require.NoError(t, calls[0].err)
		}
		before := j.Stats().Fsyncs
		require.Greater(t, before, int64(0))
		for _, l := range logs {
			require.NoError(t, l.Close())
		}
		require.NoError(t, j.Close())
		j = openJournal(t, dataDir, opts)
		logs = openJLogs(t, dataDir, j, 2, Options{MaxSegmentSize: 16 << 10})
		for _, l := range logs {
			require.Greater(t, l.MaxOffset(), int64(0))
		}
	}
}
