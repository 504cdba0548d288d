package partition

import (
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/store"
)

// testLogs returns a Logs on a temporary data directory and the lines
// it logged.
func testLogs(t *testing.T) (*Logs, func() []string) {
	t.Helper()
	cfg := &conf.Config{DataDir: t.TempDir(), MaxSegmentSize: 100, MaxMessageSize: 1 << 10}
	m := LogsFromConf(cfg)
	m.IDs = store.NewIDWorker(1, time.Now)
	var mu sync.Mutex
	var lines []string
	logf := func(level string) func(string, ...any) {
		return func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			lines = append(lines, level+" "+format)
		}
	}
	m.Logf, m.Errorf = logf("INFO"), logf("ERROR")
	return &m, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), lines...)
	}
}

func TestLogsFromConf(t *testing.T) {
	m := LogsFromConf(&conf.Config{DataDir: "/d", Recovery: conf.RecoveryTruncate, MaxSegmentSize: 7, MaxMessageSize: 9})
	require.Equal(t, Logs{DataDir: "/d", Recovery: store.RecoverTruncate, MaxSegmentSize: 7, MaxMessageSize: 9}, m)
	require.Equal(t, store.RecoverQuarantine, LogsFromConf(&conf.Config{}).Recovery)
	require.Equal(t, "/d", m.Dir(&conf.TopicConfig{}))
	require.Equal(t, "/own", m.Dir(&conf.TopicConfig{DataDir: "/own"}))
}

func TestLogsOpenTopicsOnDiskClose(t *testing.T) {
	m, _ := testLogs(t)
	var journalDirs []string
	m.Journal = func(dir string, unflushThreshold int) *store.Journal {
		journalDirs = append(journalDirs, dir)
		return nil
	}
	require.Empty(t, m.TopicsOnDisk())

	tc := &conf.TopicConfig{NumPartitions: 2, UnflushThreshold: 0}
	parts, err := m.Open("a-b", tc, 0, 2)
	require.NoError(t, err)
	require.Len(t, parts, 2)
	require.Equal(t, []string{m.DataDir, m.DataDir}, journalDirs)
	id, _, err := parts[1].AppendSync([]store.Entry{{Data: []byte("x")}})
	require.NoError(t, err)
	more, err := m.Open("a-b", tc, 2, 3) // a grown topic
	require.NoError(t, err)
	parts = append(parts, more...)

	// Not topic directories: a file, no partition number, no name.
	require.NoError(t, os.WriteFile(filepath.Join(m.DataDir, "f-0"), nil, 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(m.DataDir, "c-x"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(m.DataDir, "-1"), 0o755))
	names := m.TopicsOnDisk()
	sort.Strings(names)
	require.Equal(t, []string{"a-b", "a-b", "a-b"}, names)
	require.NoError(t, CloseLogs(parts))

	// Reopening observes the ids already given out.
	m2, _ := testLogs(t)
	m2.DataDir = m.DataDir
	parts, err = m2.Open("a-b", tc, 0, 2)
	require.NoError(t, err)
	require.Greater(t, m2.IDs.Next(1), id)
	require.NoError(t, CloseLogs(parts))
}

func TestLogsOpenFailureClosesOpened(t *testing.T) {
	m, _ := testLogs(t)
	// Partition 1's directory is a file: Open fails there.
	require.NoError(t, os.WriteFile(filepath.Join(m.DataDir, "t-1"), nil, 0o644))
	_, err := m.Open("t", &conf.TopicConfig{NumPartitions: 2}, 0, 2)
	require.ErrorContains(t, err, "open topic t partition 1: ")
	// Partition 0 was closed: opening it again succeeds (its lock is free).
	parts, err := m.Open("t", &conf.TopicConfig{NumPartitions: 1}, 0, 1)
	require.NoError(t, err)
	require.NoError(t, CloseLogs(parts))
}

func TestLogsRetention(t *testing.T) {
	m, lines := testLogs(t)
	parts, err := m.Open("r", &conf.TopicConfig{NumPartitions: 2}, 0, 2)
	require.NoError(t, err)
	defer CloseLogs(parts)
	for range 6 {
		_, _, err := parts[0].AppendSync([]store.Entry{{Data: make([]byte, 30)}}) // 50 bytes
		require.NoError(t, err)
	}
	require.Equal(t, 3, parts[0].SegmentCount())
	old := time.Now().Add(-2 * time.Hour)
	ents, err := os.ReadDir(filepath.Join(m.DataDir, "r-0"))
	require.NoError(t, err)
	for _, e := range ents {
		require.NoError(t, os.Chtimes(filepath.Join(m.DataDir, "r-0", e.Name()), old, old))
	}
	now := time.Now()

	require.False(t, m.Retain("r", parts, 0, now), "no policy")
	require.Equal(t, 3, parts[0].SegmentCount())
	require.True(t, m.Retain("r", parts, time.Hour, now))
	require.Equal(t, 1, parts[0].SegmentCount(), "the sealed segments went, the active one stays")
	require.Equal(t, int64(200), parts[0].MinOffset())
	require.False(t, m.Retain("r", parts, time.Hour, now), "nothing left to delete")
	require.Contains(t, lines(), "INFO store %s-%d: store: %s: deleted segment %s (offsets %d..%d)", "the logs' reports carry the partition")
	require.Equal(t, "INFO retention %s-%d: deleted %d segment(s), min offset now %d", lines()[len(lines())-1])
}

func TestRetentionLoop(t *testing.T) {
	done := make(chan struct{})
	ran := make(chan time.Time, 1)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		RetentionLoop(done, 1, func(now time.Time) {
			select {
			case ran <- now:
			default:
			}
		})
	}()
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("apply did not run")
	}
	close(done)
	<-exited
}

func TestCloseLogsNone(t *testing.T) {
	require.NoError(t, CloseLogs(nil))
}
