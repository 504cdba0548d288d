package client

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

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/offsetstore/offsetstoretest"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
)

// consumerHelperEnv and consumerHelperTopicEnv make the test binary a
// consumer process of that broker and topic (main_test.go).
const (
	consumerHelperEnv      = "METAQ_CLIENT_TEST_CONSUMER"
	consumerHelperTopicEnv = "METAQ_CLIENT_TEST_CONSUMER_TOPIC"
)

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
	t.Parallel()
	br := startBroker(t)
	all := produceN(t, br.addr, 40)
	ctx := ctxT(t, 20*time.Second)
	c1 := newConsumer(t, br.addr, withGroup("g1"), withCommitInterval(0))
	first := readN(t, c1, 25)
	require.NoError(t, c1.Close(ctx))

	c2 := newConsumer(t, br.addr, withGroup("g1"))
	second := readN(t, c2, 15)
	for k := range second {
		require.NotContains(t, first, k, "redelivered after a clean Close")
	}
	require.Equal(t, len(all), len(first)+len(second))
	require.NoError(t, c2.Close(ctx))

	// Another group starts from scratch (withStartFrom's default, Earliest).
	c3 := newConsumer(t, br.addr, withGroup("g2"))
	require.Len(t, readN(t, c3, 40), 40)

	// The stored positions, with the last message's id, are readable.
	s, err := newBrokerOffsetStore(br.addr)
	require.NoError(t, err)
	defer s.Close()
	got, err := s.Load(ctx, "g1", brokerPositions(t, s, 0, 1, 2, 3))
	require.NoError(t, err)
	for _, o := range got {
		require.Equal(t, c2.Position(o.Partition.Partition), o.Offset, "partition %s", o.Partition)
		if o.Offset > 0 {
			require.Greater(t, o.MsgID, int64(0), "msgId committed with the offset")
		}
	}
}

// TestBrokerOffsetsKilledConsumer: a consumer process killed with SIGKILL
// (no Close) is resumed from its last periodic commit: nothing is lost and
// only what it handled after that commit is delivered again.
func TestBrokerOffsetsKilledConsumer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("spawns a process")
	}
	br := startBroker(t)
	all := produceN(t, br.addr, 400)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), consumerHelperEnv+"="+br.addr, consumerHelperTopicEnv+"="+topic)
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
	s, err := newBrokerOffsetStore(br.addr)
	require.NoError(t, err)
	defer s.Close()
	stored, err := s.Load(ctx, "killed", brokerPositions(t, s, 0, 1, 2, 3))
	require.NoError(t, err)
	var committed int
	for k := range all {
		if o := stored[k.part].Offset; o > k.off {
			committed++
			require.True(t, handled[k], "offset %v committed but never handled", k)
		}
	}
	require.Greater(t, committed, 0, "no periodic commit happened")

	c2 := newConsumer(t, br.addr, withGroup("killed"))
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
	t.Parallel()
	br := startBroker(t)
	produceN(t, br.addr, 20)
	ctx := ctxT(t, 20*time.Second)
	c1 := newConsumer(t, br.addr, withGroup("g"))
	first := readN(t, c1, 12)
	require.NoError(t, c1.Close(ctx))
	require.NoError(t, br.b.Close())
	_, err := os.Stat(br.cfg.OffsetStoreFilePath())
	require.NoError(t, err, "offsets are in the file store")

	br2 := runBroker(t, br.cfg)
	c2 := newConsumer(t, br2.addr, withGroup("g"))
	second := readN(t, c2, 8)
	for k := range second {
		require.NotContains(t, first, k)
	}
}

// brokerPositions returns the positions of topic's partitions ps on the
// store's broker.
func brokerPositions(t *testing.T, s *brokerOffsetStore, ps ...int32) []message.Position {
	t.Helper()
	id, err := s.BrokerID(ctxT(t, 10*time.Second))
	require.NoError(t, err)
	out := make([]message.Position, len(ps))
	for i, p := range ps {
		out[i] = message.Position{Topic: topic, Partition: message.Partition{BrokerID: id, Partition: p}}
	}
	return out
}

// TestBrokerOffsetStoreConformance runs the offsets.Store suite on a
// broker with the suite's topics, ten partitions each.
func TestBrokerOffsetStoreConformance(t *testing.T) {
	t.Parallel()
	topics := []string{"os-a", "os-b", "os.c-x_y"}
	br := startBroker(t, func(c *conf.Config) {
		c.NumPartitions = 10
		for _, n := range topics {
			c.Topics = append(c.Topics, conf.Topic{Name: n})
		}
	})
	sp := offsetstoretest.Space{Topics: topics, BrokerIDs: []int{br.cfg.BrokerID}, MaxPartition: 9}
	open := func(t *testing.T) offsets.Store {
		s, err := newBrokerOffsetStore(br.addr)
		require.NoError(t, err)
		return s
	}
	offsetstoretest.RunIn(t, sp, open)
	offsetstoretest.RunDurableIn(t, sp, open)
}

func TestBrokerOffsetStoreErrors(t *testing.T) {
	t.Parallel()
	br := startBroker(t)
	ctx := ctxT(t, 10*time.Second)
	s, err := newBrokerOffsetStore(br.addr)
	require.NoError(t, err)
	defer s.Close()
	at := func(topic string, p int32) []message.Position {
		ps := brokerPositions(t, s, p)
		ps[0].Topic, ps[0].Offset = topic, 1
		return ps
	}
	err = s.Commit(ctx, "g", at("nope", 0))
	require.ErrorIs(t, err, ErrBadRequest)
	require.ErrorContains(t, err, "unknown topic")
	err = s.Commit(ctx, "g", at(topic, 9))
	require.ErrorIs(t, err, ErrBadRequest)
	_, err = s.Load(ctx, "g", at(topic, 4))
	require.ErrorIs(t, err, ErrBadRequest)
	other := at(topic, 0)
	other[0].Partition.BrokerID++
	err = s.Commit(ctx, "g", other)
	require.ErrorIs(t, err, offsets.ErrInvalid, "a partition of another broker")
	require.ErrorContains(t, err, "is not a partition of broker")
	want := brokerPositions(t, s, 3, 2)
	want[0].Offset, want[0].MsgID = 1<<60, 1<<62+1
	require.NoError(t, s.Commit(ctx, "g", want[:1]))
	got, err := s.Load(ctx, "g", want)
	require.NoError(t, err)
	want[1].Offset, want[1].MsgID = -1, -1
	require.Equal(t, want, got)
}

// flakyStore fails commits while failing is set.
type flakyStore struct {
	memStore
	failing  atomic.Bool
	failures atomic.Int64
}

func (s *flakyStore) Commit(ctx context.Context, g string, ps []message.Position) error {
	if s.failing.Load() {
		s.failures.Add(1)
		return errors.New("store down")
	}
	return s.memStore.Commit(ctx, g, ps)
}

// TestCommitFailureRetriedAndReported: a failed periodic commit is logged
// and retried next period; a failed final commit is returned by Close.
func TestCommitFailureRetriedAndReported(t *testing.T) {
	t.Parallel()
	br := startBroker(t)
	produceN(t, br.addr, 20)
	store := &flakyStore{memStore: memStore{offs: map[string]message.Position{}}}
	store.failing.Store(true)
	var logs lockedBuf
	logger := withLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	c := newConsumer(t, br.addr, withGroup("g"), withOffsetStore(store, 20*time.Millisecond), logger)
	ctx := ctxT(t, 20*time.Second)
	var n atomic.Int64
	go c.Consume(ctx, func(context.Context, *message.Message) error { n.Add(1); return nil })
	require.Eventually(t, func() bool { return n.Load() == 20 && store.failures.Load() >= 3 }, 10*time.Second, 5*time.Millisecond)
	require.Contains(t, logs.String(), "offset commit failed")
	store.failing.Store(false)
	require.Eventually(t, func() bool {
		total := int64(0)
		store.mu.Lock()
		for _, p := range store.offs {
			total += p.Offset
		}
		store.mu.Unlock()
		return total == 20*(message.HeaderSize+2)-10 // bodies "0".."9" are 1 byte, "10".."19" 2
	}, 10*time.Second, 5*time.Millisecond, "retried commit carries every position")

	// Always failing: Close reports it.
	c2 := newConsumer(t, br.addr, withGroup("g2"), withOffsetStore(store, time.Hour), logger)
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
