package tx

import (
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
)

// testHost is a broker for the Manager's tests: topic "t" of two
// threshold-mode partitions under dataDir (no auto-created topics), ids
// from a counter.
type testHost struct {
	parts []*store.Log
	// timer is partition 0 of the timer topic, the one partition of it
	// (delayed.go).
	timer *store.Log
	maxID atomic.Int64
}

func (h *testHost) Next(n int) int64 { return h.maxID.Add(int64(n)) - int64(n) + 1 }

func (h *testHost) Log(topic string, p int) (*store.Log, error) {
	if topic == conf.TimerTopic && p == 0 {
		return h.timer, nil
	}
	if topic != "t" {
		return nil, partition.ErrNoTopic
	}
	if p < 0 || p >= len(h.parts) {
		return nil, partition.ErrNoPartition
	}
	return h.parts[p], nil
}

func (h *testHost) Partitions(topic string) (int, error) {
	if topic != "t" {
		return 0, partition.ErrNoTopic
	}
	return len(h.parts), nil
}

func (h *testHost) Topics() []string { return []string{"t"} }

func (h *testHost) OpenTopic(topic string) (Topic, error) {
	if topic != "t" && topic != conf.TimerTopic {
		return nil, errors.New("unknown topic")
	}
	return testTopic(topic), nil
}

// testTopic is a threshold-mode topic without counters.
type testTopic string

func (t testTopic) Name() string              { return string(t) }
func (t testTopic) ThresholdFlush() bool      { return true }
func (t testTopic) CountIn(int32, int, int64) {}

func (h *testHost) NextID() int64 { return h.Next(1) }

func (h *testHost) ObserveID(id int64) {
	for {
		cur := h.maxID.Load()
		if id <= cur || h.maxID.CompareAndSwap(cur, id) {
			return
		}
	}
}

func (h *testHost) AppendFailed(error)       {}
func (h *testHost) Fence() error             { return nil }
func (h *testHost) Master() *repl.SyncMaster { return nil }
func (h *testHost) Slave() SlaveLogs         { return nil }

func (h *testHost) TimerLog(string, int32) (Topic, *store.Log, int32, error) {
	return testTopic(conf.TimerTopic), h.timer, 0, nil
}

func (h *testHost) close() {
	for _, l := range h.parts {
		l.Close()
	}
	h.timer.Close()
}

func (h *testHost) records(t testing.TB, p int) []message.Record { return logRecords(t, h.parts[p]) }

// openTestHost opens topic t's partitions under dataDir.
func openTestHost(t testing.TB, dataDir string) *testHost {
	t.Helper()
	h := &testHost{}
	for p := 0; p < 2; p++ {
		l, err := store.Open(filepath.Join(dataDir, "t-"+strconv.Itoa(p)), store.Options{IDs: h, UnflushThreshold: 1})
		require.NoError(t, err)
		h.parts = append(h.parts, l)
		for _, r := range logRecords(t, l) { // as a broker's ids continue above those stored
			h.ObserveID(r.ID)
		}
	}
	l, err := store.Open(filepath.Join(dataDir, conf.TimerTopic+"-0"), store.Options{IDs: h, UnflushThreshold: 1})
	require.NoError(t, err)
	h.timer = l
	return h
}

// testConfig is the Manager's configuration for dataDir.
func testConfig(dataDir string) Config {
	return Config{
		Dir:              filepath.Join(dataDir, DirName),
		DefaultTimeout:   60e9,
		MaxBytes:         16 << 20,
		MaxBufferedBytes: 256 << 20,
		FlushMode:        txFlushCommit,
		MaxMessageSize:   message.DefaultMaxMessageSize,
		FrameLimit:       1 << 20,
	}
}

// openTestManager starts a broker's transactions over dataDir: its
// partitions, then the Manager (its journal replayed). Both are closed
// by the returned func.
func openTestManager(t testing.TB, dataDir string) (*Manager, *testHost, func()) {
	t.Helper()
	h := openTestHost(t, dataDir)
	m, err := Open(testConfig(dataDir), h, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		h.close()
		require.NoError(t, err)
	}
	return m, h, func() {
		m.Wait()
		h.close()
		require.NoError(t, m.Close())
	}
}

// logRecords reads every record of l.
func logRecords(t testing.TB, l *store.Log) []message.Record {
	t.Helper()
	var out []message.Record
	var buf []byte
	for off := l.MinOffset(); off < l.MaxOffset(); {
		v, err := l.Read(off, 1<<20)
		require.NoError(t, err)
		buf, err = v.ReadAll(buf[:0])
		v.Release()
		require.NoError(t, err)
		it := message.NewIterator(buf, off, 0)
		for it.Next() {
			r := *it.Record()
			r.Data = append([]byte(nil), r.Data...)
			out = append(out, r)
		}
		require.NoError(t, it.Err())
		require.Positive(t, it.Consumed())
		off = it.NextOffset()
	}
	return out
}
