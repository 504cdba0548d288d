package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
)

const rcvTopic = "rt"

var rcvQuiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// rcvBroker runs a real broker with topic rt (2 partitions) on 127.0.0.1.
func rcvBroker(t *testing.T) string {
	t.Helper()
	return brokertest.Start(t, smallJournal(), brokertest.Topics(rcvTopic), brokertest.Partitions(2), brokertest.Quiet()).Addr()
}

// rcvSend sends bodies to partition 0, in order.
func rcvSend(t *testing.T, addr string, bodies ...string) {
	t.Helper()
	p, err := newBrokerProducer(addr, withLogger(rcvQuiet), withSelector(selector.Fixed(0)))
	require.NoError(t, err)
	defer func() { _ = p.Close(context.Background()) }()
	for _, b := range bodies {
		_, err := p.Send(context.Background(), &message.Message{Topic: rcvTopic, Body: []byte(b)})
		require.NoError(t, err)
	}
}

func rcvConsumer(t *testing.T, addr string, opts ...consOption) *brokerConsumer {
	t.Helper()
	base := []consOption{withLogger(rcvQuiet), withMaxFetchDelay(50 * time.Millisecond), withPartitions(0),
		withRetries(5, time.Millisecond)}
	c, err := newBrokerConsumer(addr, rcvTopic, append(base, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// rcvRun runs c.Consume(h) in the background; the returned func closes c
// and returns Consume's error.
func rcvRun(t *testing.T, c *brokerConsumer, h Handler) func() error {
	done := make(chan error, 1)
	go func() { done <- c.Consume(context.Background(), h) }()
	return func() error {
		require.NoError(t, c.Close(context.Background()))
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("Consume did not return after Close")
			return nil
		}
	}
}

// pendingBodies opens dir's store (sharing it if a consumer has it open).
func pendingBodies(t *testing.T, dir string) []string {
	t.Helper()
	s, err := acquireRecoverStore(dir, rcvQuiet)
	require.NoError(t, err)
	defer s.release()
	var out []string
	for _, e := range s.pending() {
		out = append(out, string(e.msg.Body))
	}
	return out
}

// recorder is a handler that fails for bodies in fail and records the
// others in order.
type recorder struct {
	mu       sync.Mutex
	fail     map[string]bool
	attempts map[string]int
	handled  []string
	msgs     []message.Message
}

func newRecorder(fail ...string) *recorder {
	r := &recorder{fail: make(map[string]bool), attempts: make(map[string]int)}
	for _, f := range fail {
		r.fail[f] = true
	}
	return r
}

func (r *recorder) handle(_ context.Context, m *message.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := string(m.Body)
	r.attempts[b]++
	if r.fail[b] || r.fail["*"] {
		return errors.New("boom " + b)
	}
	r.handled = append(r.handled, b)
	r.msgs = append(r.msgs, *m)
	return nil
}

func (r *recorder) setFail(fail ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = make(map[string]bool)
	for _, f := range fail {
		r.fail[f] = true
	}
}

func (r *recorder) snapshot() ([]string, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := make(map[string]int, len(r.attempts))
	for k, v := range r.attempts {
		a[k] = v
	}
	return append([]string(nil), r.handled...), a
}

func TestRecoverLocallyStoresThenReplays(t *testing.T) {
	t.Parallel()
	addr := rcvBroker(t)
	rcvSend(t, addr, "0", "1", "2", "3", "4")
	base := t.TempDir()
	dir := recoverDir(base, rcvTopic, "g")
	rec := newRecorder("2")
	c := rcvConsumer(t, addr, withGroup("g"), withRejectPolicy(RecoverLocally(base)),
		withRecoverInterval(100*time.Millisecond))
	stop := rcvRun(t, c, rec.handle)

	end := int64(5 * (message.HeaderSize + 1))
	require.Eventually(t, func() bool { return c.Position(0) == end }, 10*time.Second, 5*time.Millisecond)
	handled, attempts := rec.snapshot()
	require.Equal(t, []string{"0", "1", "3", "4"}, handled, "the rest flow, in order")
	require.GreaterOrEqual(t, attempts["2"], 6, "tried 1+5 times before the reject policy")
	require.Equal(t, []string{"2"}, pendingBodies(t, dir))
	fi, err := os.Stat(filepath.Join(dir, recoverJournalName))
	require.NoError(t, err)
	require.Positive(t, fi.Size())

	// Replays keep failing while the handler does: the message stays.
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, []string{"2"}, pendingBodies(t, dir))

	rec.setFail()
	require.Eventually(t, func() bool { return len(pendingBodies(t, dir)) == 0 }, 10*time.Second, 10*time.Millisecond)
	handled, _ = rec.snapshot()
	require.Equal(t, []string{"0", "1", "3", "4", "2"}, handled)
	rec.mu.Lock()
	got := rec.msgs[4]
	rec.mu.Unlock()
	require.Equal(t, rcvTopic, got.Topic)
	require.Equal(t, int32(0), got.Partition)
	require.Equal(t, int64(2*(message.HeaderSize+1)), got.Offset)
	require.ErrorIs(t, stop(), ErrClosed)

	fi, err = os.Stat(filepath.Join(dir, recoverJournalName))
	require.NoError(t, err)
	require.Zero(t, fi.Size(), "compacted once nothing is pending")
}

func TestRecoverReplayInInsertionOrder(t *testing.T) {
	t.Parallel()
	addr := rcvBroker(t)
	bodies := []string{"a", "b", "c", "d", "e"}
	rcvSend(t, addr, bodies...)
	base := t.TempDir()
	dir := recoverDir(base, rcvTopic, "g")
	rec := newRecorder("*")
	c := rcvConsumer(t, addr, withGroup("g"), withRejectPolicy(RecoverLocally(base)),
		withRecoverInterval(time.Hour), withRetries(0, time.Millisecond))
	stop := rcvRun(t, c, rec.handle)
	require.Eventually(t, func() bool { return len(pendingBodies(t, dir)) == 5 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, bodies, pendingBodies(t, dir))
	require.ErrorIs(t, stop(), ErrClosed)

	// Replay rounds at the store level: a failure stays and keeps its place.
	s, err := acquireRecoverStore(dir, rcvQuiet)
	require.NoError(t, err)
	defer s.release()
	rec = newRecorder("c")
	s.replay(context.Background(), rec.handle, rcvQuiet)
	handled, _ := rec.snapshot()
	require.Equal(t, []string{"a", "b", "d", "e"}, handled)
	require.NoError(t, s.put(&message.Message{Topic: rcvTopic, Body: []byte("f")}))
	rec.setFail()
	s.replay(context.Background(), rec.handle, rcvQuiet)
	handled, _ = rec.snapshot()
	require.Equal(t, []string{"a", "b", "d", "e", "c", "f"}, handled)
	require.Empty(t, s.pending())
}

func TestRecoverRestartReplaysPending(t *testing.T) {
	t.Parallel()
	addr := rcvBroker(t)
	rcvSend(t, addr, "0", "1", "2")
	base := t.TempDir()
	dir := recoverDir(base, rcvTopic, "g")
	rec := newRecorder("1")
	c1 := rcvConsumer(t, addr, withGroup("g"), withRejectPolicy(RecoverLocally(base)), withRecoverInterval(time.Hour))
	stop := rcvRun(t, c1, rec.handle)
	end := int64(3 * (message.HeaderSize + 1))
	require.Eventually(t, func() bool { return c1.Position(0) == end }, 10*time.Second, 5*time.Millisecond)
	require.ErrorIs(t, stop(), ErrClosed)
	recoverStores.mu.Lock()
	_, ok := recoverStores.m[dir]
	recoverStores.mu.Unlock()
	require.False(t, ok, "the store is closed with the last consumer")

	// A new consumer on the same dir: offsets resume past "1", the
	// recovery store delivers it.
	rec2 := newRecorder()
	c2 := rcvConsumer(t, addr, withGroup("g"), withRejectPolicy(RecoverLocally(base)),
		withRecoverInterval(50*time.Millisecond))
	stop = rcvRun(t, c2, rec2.handle)
	require.Eventually(t, func() bool { h, _ := rec2.snapshot(); return len(h) == 1 }, 10*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return len(pendingBodies(t, dir)) == 0 }, 10*time.Second, 5*time.Millisecond)
	require.ErrorIs(t, stop(), ErrClosed)
	h, _ := rec2.snapshot()
	require.Equal(t, []string{"1"}, h)
}

func TestRecoverDefaultPolicies(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	c, err := newBrokerConsumer("127.0.0.1:1", rcvTopic, withGroup("grp"))
	require.NoError(t, err)
	require.Equal(t, filepath.Join(os.Getenv("HOME"), ".metaq_recover", rcvTopic+"@grp"), c.recoverDir)
	require.Nil(t, c.rejectFn)
	c, err = newBrokerConsumer("127.0.0.1:1", rcvTopic)
	require.NoError(t, err)
	require.Empty(t, c.recoverDir, "no group: Drop")
	require.NotNil(t, c.rejectFn)
	c, err = newBrokerConsumer("127.0.0.1:1", rcvTopic, withGroup("grp"), withOnReject(func(context.Context, *message.Message, error) {}))
	require.NoError(t, err)
	require.Empty(t, c.recoverDir, "withOnReject is a custom policy")
	require.Equal(t, filepath.Join("b", "a_b@g__x"), recoverDir("b", "a/b", "g..x"))
}

func TestRecoverDropPolicyDrops(t *testing.T) {
	addr := rcvBroker(t)
	rcvSend(t, addr, "0", "1", "2")
	home := t.TempDir()
	t.Setenv("HOME", home)
	rec := newRecorder("1")
	c := rcvConsumer(t, addr, withGroup("g"), withRejectPolicy(Drop()), withRecoverInterval(10*time.Millisecond))
	stop := rcvRun(t, c, rec.handle)
	end := int64(3 * (message.HeaderSize + 1))
	require.Eventually(t, func() bool { return c.Position(0) == end }, 10*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	require.ErrorIs(t, stop(), ErrClosed)
	h, attempts := rec.snapshot()
	require.Equal(t, []string{"0", "2"}, h)
	require.Equal(t, 6, attempts["1"], "never replayed")
	_, err := os.Stat(filepath.Join(home, ".metaq_recover"))
	require.ErrorIs(t, err, os.ErrNotExist, "no store written")
}

func TestRecoverStoreFailureHoldsPosition(t *testing.T) {
	t.Parallel()
	addr := rcvBroker(t)
	rcvSend(t, addr, "0", "1", "2")
	base := t.TempDir()
	dir := recoverDir(base, rcvTopic, "g")
	rec := newRecorder("1")
	h := func(ctx context.Context, m *message.Message) error {
		if string(m.Body) == "0" {
			// After Consume opened the (empty) store: a file where its
			// directory must go makes every write fail.
			if err := os.WriteFile(dir, nil, 0o600); err != nil {
				return err
			}
		}
		return rec.handle(ctx, m)
	}
	c := rcvConsumer(t, addr, withGroup("g"), withRejectPolicy(RecoverLocally(base)))
	stop := rcvRun(t, c, h)
	one := int64(message.HeaderSize + 1)
	require.Eventually(t, func() bool { _, a := rec.snapshot(); return a["1"] >= 6 }, 10*time.Second, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, one, c.Position(0), "not past a message the policy did not take")
	require.ErrorIs(t, stop(), ErrClosed)
	hd, _ := rec.snapshot()
	require.Equal(t, []string{"0"}, hd)

	// An unreadable store fails Consume at once.
	c2 := rcvConsumer(t, addr, withGroup("g"), withRejectPolicy(RecoverLocally(base)))
	require.ErrorContains(t, c2.Consume(context.Background(), rec.handle), "recovery store")
}

func TestRecoverCloseStopsReplayer(t *testing.T) {
	t.Parallel()
	addr := rcvBroker(t)
	rcvSend(t, addr, "x")
	base := t.TempDir()
	dir := recoverDir(base, rcvTopic, "g")
	var calls atomic.Int64
	h := func(context.Context, *message.Message) error { calls.Add(1); return errors.New("always") }
	// Every goroutine the consumer starts inherits this label, so the
	// check below sees this consumer's goroutines and not those of the
	// tests running in parallel.
	label := pprof.Labels("leakcheck", t.Name())
	var c *brokerConsumer
	var stop func() error
	pprof.Do(context.Background(), label, func(context.Context) {
		c = rcvConsumer(t, addr, withGroup("g"), withRejectPolicy(RecoverLocally(base)),
			withRecoverInterval(5*time.Millisecond))
		stop = rcvRun(t, c, h)
	})
	require.Eventually(t, func() bool { return calls.Load() > 12 }, 10*time.Second, time.Millisecond, "replayed repeatedly")
	require.NotEmpty(t, labelledGoroutines(t.Name()), "the check sees the running consumer")
	require.ErrorIs(t, stop(), ErrClosed)
	n := calls.Load()
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, n, calls.Load(), "no replay after Close")
	recoverStores.mu.Lock()
	_, open := recoverStores.m[dir]
	recoverStores.mu.Unlock()
	require.False(t, open)
	// Bounded wait: no goroutine of the consumer (replayer, fetchers,
	// handlers, its connection) is left.
	deadline := time.Now().Add(5 * time.Second)
	left := labelledGoroutines(t.Name())
	for left != "" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		left = labelledGoroutines(t.Name())
	}
	if left != "" {
		t.Fatalf("consumer goroutines left after Close:\n%s", left)
	}
	require.Equal(t, []string{"x"}, pendingBodies(t, dir))
}

// labelledGoroutines returns the stacks of the live goroutines labelled
// leakcheck=name (by pprof.Do, inherited by the goroutines they start), or
// "" when there are none.
func labelledGoroutines(name string) string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	want := fmt.Sprintf("%q:%q", "leakcheck", name)
	var out []string
	for _, rec := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(rec, "# labels: ") && strings.Contains(rec, want) {
			out = append(out, rec)
		}
	}
	return strings.Join(out, "\n\n")
}

// journalWith writes a store with msgs (and tombstones for drop) in a new
// dir and returns the dir and the journal's size before the last record.
func journalWith(t *testing.T, n int, removeLast bool) (dir string, cut int64) {
	t.Helper()
	dir = t.TempDir()
	s, err := acquireRecoverStore(dir, rcvQuiet)
	require.NoError(t, err)
	defer s.release()
	for i := range n {
		cut = s.size
		m := &message.Message{Topic: rcvTopic, Partition: 1, Offset: int64(i * 100), ID: int64(i + 7),
			Attribute: "k=" + strconv.Itoa(i), HasAttribute: i%2 == 0, Body: []byte("body-" + strconv.Itoa(i))}
		require.NoError(t, s.put(m))
	}
	if removeLast {
		cut = s.size
		require.NoError(t, s.remove(s.ents[len(s.ents)-1].seq))
	}
	return dir, cut
}

func TestRecoverTornTailCut(t *testing.T) {
	t.Parallel()
	for _, removeLast := range []bool{false, true} {
		src, cut := journalWith(t, 3, removeLast)
		data, err := os.ReadFile(filepath.Join(src, recoverJournalName))
		require.NoError(t, err)
		full := int64(len(data))
		for at := cut; at < full; at++ {
			dir := t.TempDir()
			path := filepath.Join(dir, recoverJournalName)
			require.NoError(t, os.WriteFile(path, data[:at], 0o600))
			s, err := acquireRecoverStore(dir, rcvQuiet)
			require.NoError(t, err)
			want := 2 // the cut record was the last put
			if removeLast {
				want = 3 // the cut record was the tombstone of the third
			}
			p := s.pending()
			require.Len(t, p, want, "cut at %d of %d (tombstone %v): only whole records", at, full, removeLast)
			for i, e := range p {
				require.Equal(t, "body-"+strconv.Itoa(i), string(e.msg.Body))
				require.Equal(t, int64(i*100), e.msg.Offset)
				require.Equal(t, int64(i+7), e.msg.ID)
				require.Equal(t, int32(1), e.msg.Partition)
				require.Equal(t, i%2 == 0, e.msg.HasAttribute)
				require.Equal(t, "k="+strconv.Itoa(i), e.msg.Attribute)
			}
			fi, err := os.Stat(path)
			require.NoError(t, err)
			require.Equal(t, cut, fi.Size(), "torn tail removed from the file")
			// Appending after the cut works and survives a reopen.
			require.NoError(t, s.put(&message.Message{Topic: rcvTopic, Body: []byte("new")}))
			s.release()
			s, err = acquireRecoverStore(dir, rcvQuiet)
			require.NoError(t, err)
			p = s.pending()
			require.Len(t, p, want+1)
			require.Equal(t, "new", string(p[want].msg.Body))
			require.Greater(t, p[want].seq, p[want-1].seq)
			s.release()
			matches, _ := filepath.Glob(path + ".corrupt-*")
			require.Empty(t, matches, "a torn tail is not corruption")
		}
	}
}

func TestRecoverCorruptMiddleKeepsCopy(t *testing.T) {
	t.Parallel()
	dir, _ := journalWith(t, 3, false)
	path := filepath.Join(dir, recoverJournalName)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	first := recHeader + int(int32(uint32(data[0])<<24|uint32(data[1])<<16|uint32(data[2])<<8|uint32(data[3])))
	data[first+recHeader+3] ^= 0xff // inside the second record's payload
	require.NoError(t, os.WriteFile(path, data, 0o600))
	s, err := acquireRecoverStore(dir, rcvQuiet)
	require.NoError(t, err)
	defer s.release()
	require.Len(t, s.pending(), 1, "records before the corrupt one survive")
	matches, _ := filepath.Glob(path + ".corrupt-*")
	require.Len(t, matches, 1, "the original is kept for inspection")
}

func TestRecoverCompaction(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := acquireRecoverStore(dir, rcvQuiet)
	require.NoError(t, err)
	// Only this store compacts at every removal (a package variable set
	// here raced with the removals of the parallel tests' stores).
	s.mu.Lock()
	s.compactMin = 1
	s.mu.Unlock()
	for i := range 4 {
		require.NoError(t, s.put(&message.Message{Topic: rcvTopic, Body: []byte(strconv.Itoa(i))}))
	}
	seqs := []uint64{s.ents[0].seq, s.ents[1].seq, s.ents[2].seq}
	for _, q := range seqs {
		require.NoError(t, s.remove(q))
	}
	require.Equal(t, s.ents[0].size, s.size, "rewritten with only the pending record")
	_, err = os.Stat(filepath.Join(dir, recoverJournalName+".tmp"))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NoError(t, s.put(&message.Message{Topic: rcvTopic, Body: []byte("4")}))
	s.release()
	s, err = acquireRecoverStore(dir, rcvQuiet)
	require.NoError(t, err)
	defer s.release()
	var got []string
	for _, e := range s.pending() {
		got = append(got, string(e.msg.Body))
	}
	require.Equal(t, []string{"3", "4"}, got)
}

// TestRecoverRecordProperties: a pending message keeps its key, timestamp,
// tags and headers in the recovery journal; one without them is written as
// before (a put, or a keyed put).
func TestRecoverRecordProperties(t *testing.T) {
	t.Parallel()
	for _, m := range []*message.Message{
		{Topic: "t", Body: []byte("b"), ID: 5, Partition: 2, Offset: 40},
		{Topic: "t", Body: []byte("b"), Attribute: "a", HasAttribute: true, Key: []byte("k")},
		propsMsg(3),
		{Topic: "t", Body: []byte("b"), Key: []byte{}},
	} {
		rec := encodePut(7, m)
		kind, seq, got, err := decodeRecord(rec[recHeader:])
		require.NoError(t, err)
		require.Equal(t, recPut, kind)
		require.Equal(t, uint64(7), seq)
		require.Equal(t, m.Body, got.Body)
		require.Equal(t, m.Attribute, got.Attribute)
		require.Equal(t, m.Key, got.Key)
		require.Equal(t, m.Tags, got.Tags)
		require.Equal(t, m.Headers, got.Headers)
		require.True(t, m.Timestamp.Equal(got.Timestamp))
		require.Equal(t, m.ID, got.ID)
		if !m.HasProperties() {
			want := recPut
			if len(m.Key) > 0 {
				want = recPutKeyed
			}
			require.Equal(t, want, rec[recHeader], "written as before")
		}
	}
}
