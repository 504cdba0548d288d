package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/core/testsvc"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

// consumerHelperEnv makes the test binary a consumer process that prints
// "<partition> <offset>" per handled message until it is killed.
const consumerHelperEnv = "METAQ_CLIENT_TEST_CONSUMER"

// TestMain runs the consumer helper, or the tests with one ZooKeeper
// shared by the whole test binary (each ZooKeeper test keeps to its own
// root).
func TestMain(m *testing.M) {
	if addr := os.Getenv(consumerHelperEnv); addr != "" {
		runConsumerHelper(addr)
		return
	}
	testsvc.Main(m)
}

func runConsumerHelper(addr string) {
	c, err := client.NewConsumer(addr, topic, quiet, client.WithGroup("killed"),
		client.WithCommitInterval(100*time.Millisecond), client.WithMaxFetchDelay(50*time.Millisecond))
	if err != nil {
		os.Exit(3)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	_ = c.Consume(context.Background(), func(_ context.Context, m *message.Message) error {
		time.Sleep(3 * time.Millisecond) // progress spread over several commit periods
		mu.Lock()
		fmt.Fprintf(out, "%d %d\n", m.Partition, m.Offset)
		out.Flush()
		mu.Unlock()
		return nil
	})
	os.Exit(0)
}

func produceN(t *testing.T, addr string, n int) map[pos]bool {
	t.Helper()
	p := newProducer(t, addr)
	ctx := ctxT(t, 20*time.Second)
	all := make(map[pos]bool)
	for i := range n {
		r, err := p.Send(ctx, &message.Message{Topic: topic, Body: []byte(strconv.Itoa(i))})
		require.NoError(t, err)
		all[pos{r.Partition, r.Offset}] = true
	}
	return all
}

// TestBrokerOffsetsResumeAfterClose: a consumer with a group commits on
// Close through the broker; the next one resumes exactly there.
func TestBrokerOffsetsResumeAfterClose(t *testing.T) {
	br := startBroker(t)
	all := produceN(t, br.addr, 40)
	ctx := ctxT(t, 20*time.Second)
	c1 := newConsumer(t, br.addr, client.WithGroup("g1"), client.WithCommitInterval(0))
	first := readN(t, c1, 25)
	require.NoError(t, c1.Close(ctx))

	c2 := newConsumer(t, br.addr, client.WithGroup("g1"))
	second := readN(t, c2, 15)
	for k := range second {
		require.NotContains(t, first, k, "redelivered after a clean Close")
	}
	require.Equal(t, len(all), len(first)+len(second))
	require.NoError(t, c2.Close(ctx))

	// Another group starts from scratch (WithStartFrom's default, Earliest).
	c3 := newConsumer(t, br.addr, client.WithGroup("g2"))
	require.Len(t, readN(t, c3, 40), 40)

	// The stored positions, with the last message's id, are readable.
	s, err := client.NewBrokerOffsetStore(br.addr)
	require.NoError(t, err)
	defer s.Close()
	got, err := s.FetchOffsets(ctx, "g1", topic, []int32{0, 1, 2, 3})
	require.NoError(t, err)
	for _, o := range got {
		require.Equal(t, c2.Position(o.Partition), o.Offset, "partition %d", o.Partition)
		if o.Offset > 0 {
			require.Greater(t, o.MsgID, int64(0), "msgId committed with the offset")
		}
	}
}

// TestBrokerOffsetsKilledConsumer: a consumer process killed with SIGKILL
// (no Close) is resumed from its last periodic commit: nothing is lost and
// only what it handled after that commit is delivered again.
func TestBrokerOffsetsKilledConsumer(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	br := startBroker(t)
	all := produceN(t, br.addr, 400)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), consumerHelperEnv+"="+br.addr)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	handled := make(map[pos]bool)
	sc := bufio.NewScanner(stdout)
	for len(handled) < 150 && sc.Scan() {
		var p pos
		_, err := fmt.Sscanf(sc.Text(), "%d %d", &p.part, &p.off)
		require.NoError(t, err)
		handled[p] = true
	}
	require.Len(t, handled, 150, "helper consumer stopped early")
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	for sc.Scan() { // lines written before the kill
		var p pos
		if _, err := fmt.Sscanf(sc.Text(), "%d %d", &p.part, &p.off); err == nil {
			handled[p] = true
		}
	}

	ctx := ctxT(t, 20*time.Second)
	s, err := client.NewBrokerOffsetStore(br.addr)
	require.NoError(t, err)
	defer s.Close()
	stored, err := s.FetchOffsets(ctx, "killed", topic, []int32{0, 1, 2, 3})
	require.NoError(t, err)
	var committed int
	for k := range all {
		if o := stored[k.part].Offset; o > k.off {
			committed++
			require.True(t, handled[k], "offset %v committed but never handled", k)
		}
	}
	require.Greater(t, committed, 0, "no periodic commit happened")

	c2 := newConsumer(t, br.addr, client.WithGroup("killed"))
	rest := readN(t, c2, len(all)-committed)
	redelivered := 0
	for k := range all {
		switch {
		case rest[k] != nil && handled[k]:
			redelivered++
		case rest[k] == nil && !handled[k]:
			t.Fatalf("message %v lost", k)
		}
	}
	require.Less(t, redelivered, len(handled), "redelivery bounded by the last commit")
	t.Logf("killed after %d handled, %d committed, %d redelivered", len(handled), committed, redelivered)
}

// TestBrokerOffsetsSurviveBrokerRestart: offsets live in the broker's
// file store and survive a broker restart.
func TestBrokerOffsetsSurviveBrokerRestart(t *testing.T) {
	br := startBroker(t)
	produceN(t, br.addr, 20)
	ctx := ctxT(t, 20*time.Second)
	c1 := newConsumer(t, br.addr, client.WithGroup("g"))
	first := readN(t, c1, 12)
	require.NoError(t, c1.Close(ctx))
	require.NoError(t, br.b.Close())
	_, err := os.Stat(br.cfg.OffsetStoreFilePath())
	require.NoError(t, err, "offsets are in the file store")

	br2 := runBroker(t, br.cfg)
	c2 := newConsumer(t, br2.addr, client.WithGroup("g"))
	second := readN(t, c2, 8)
	for k := range second {
		require.NotContains(t, first, k)
	}
}

func TestBrokerOffsetStoreErrors(t *testing.T) {
	br := startBroker(t)
	ctx := ctxT(t, 10*time.Second)
	s, err := client.NewBrokerOffsetStore(br.addr)
	require.NoError(t, err)
	defer s.Close()
	err = s.CommitOffsets(ctx, "g", "nope", []client.StoredOffset{{Partition: 0, Offset: 1}})
	require.ErrorIs(t, err, client.ErrBadRequest)
	require.ErrorContains(t, err, "unknown topic")
	err = s.CommitOffsets(ctx, "g", topic, []client.StoredOffset{{Partition: 9, Offset: 1}})
	require.ErrorIs(t, err, client.ErrBadRequest)
	_, err = s.FetchOffsets(ctx, "g", topic, []int32{4})
	require.ErrorIs(t, err, client.ErrBadRequest)
	require.NoError(t, s.CommitOffsets(ctx, "g", topic, []client.StoredOffset{{Partition: 3, Offset: 1 << 60, MsgID: 1<<62 + 1}}))
	got, err := s.FetchOffsets(ctx, "g", topic, []int32{3, 2})
	require.NoError(t, err)
	require.Equal(t, []client.StoredOffset{{Partition: 3, Offset: 1 << 60, MsgID: 1<<62 + 1}, {Partition: 2, Offset: -1, MsgID: -1}}, got)
	off, found, err := s.Load(ctx, "g", topic, 2)
	require.NoError(t, err)
	require.False(t, found)
	require.Equal(t, int64(-1), off)
}

// flakyStore fails commits while failing is set.
type flakyStore struct {
	memStore
	failing  atomic.Bool
	failures atomic.Int64
}

func (s *flakyStore) Commit(ctx context.Context, g, t string, offs map[int32]int64) error {
	if s.failing.Load() {
		s.failures.Add(1)
		return errors.New("store down")
	}
	return s.memStore.Commit(ctx, g, t, offs)
}

// TestCommitFailureRetriedAndReported: a failed periodic commit is logged
// and retried next period; a failed final commit is returned by Close.
func TestCommitFailureRetriedAndReported(t *testing.T) {
	br := startBroker(t)
	produceN(t, br.addr, 20)
	store := &flakyStore{memStore: memStore{offs: map[string]int64{}}}
	store.failing.Store(true)
	var logs lockedBuf
	logger := client.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	c := newConsumer(t, br.addr, client.WithGroup("g"), client.WithOffsetStore(store, 20*time.Millisecond), logger)
	ctx := ctxT(t, 20*time.Second)
	var n atomic.Int64
	go c.Consume(ctx, func(context.Context, *message.Message) error { n.Add(1); return nil })
	require.Eventually(t, func() bool { return n.Load() == 20 && store.failures.Load() >= 3 }, 10*time.Second, 5*time.Millisecond)
	require.Contains(t, logs.String(), "offset commit failed")
	store.failing.Store(false)
	require.Eventually(t, func() bool {
		total := int64(0)
		for p := int32(0); p < 4; p++ {
			off, _, _ := store.Load(ctx, "g", topic, p)
			total += off
		}
		return total == 20*(message.HeaderSize+2)-10 // bodies "0".."9" are 1 byte, "10".."19" 2
	}, 10*time.Second, 5*time.Millisecond, "retried commit carries every position")

	// Always failing: Close reports it.
	c2 := newConsumer(t, br.addr, client.WithGroup("g2"), client.WithOffsetStore(store, time.Hour), logger)
	store.failing.Store(true)
	for range c2.Messages(ctx) {
		break
	}
	err := c2.Close(ctx)
	require.ErrorContains(t, err, "store down")
}

type lockedBuf struct {
	mu sync.Mutex
	b  []byte
}

var _ io.Writer = (*lockedBuf)(nil)

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
