package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/broker"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
	"github.com/metaq-go/metaq/sdk/selector"
)

const topic = "t1"

type testBroker struct {
	b    *broker.Broker
	cfg  *conf.Config
	addr string
}

// startBroker runs a real broker (internal/brokertest) with topic t1 (4
// partitions) on 127.0.0.1.
func startBroker(tb testing.TB, mods ...func(*conf.Config)) *testBroker {
	tb.Helper()
	return runBroker(tb, brokerConfig(tb, mods...))
}

// brokerConfig is the configuration of startBroker's broker: topic t1 (4
// partitions) in a fresh data directory, then mods.
func brokerConfig(tb testing.TB, mods ...func(*conf.Config)) *conf.Config {
	cfg := brokertest.Default(tb)
	cfg.Topics = []conf.Topic{{Name: topic}}
	cfg.NumPartitions = 4
	if _, bench := tb.(*testing.B); !bench {
		setSmallJournal(cfg) // benchmarks measure the default, as a user's broker runs
	}
	for _, m := range mods {
		m(cfg)
	}
	return cfg
}

// testJournalFileSize is the brokers' journal file size here: 4 MiB
// files instead of the default 64 MiB. A broker pre-writes and fdatasyncs
// its journal file and two spares when it starts, and these tests commit
// far less than a file: at 64 MiB that fill was most of a start's CPU and
// disk time. 4 MiB still holds the largest record (max_message_size 1 MiB).
const testJournalFileSize = 4 << 20

func setSmallJournal(c *conf.Config) { c.JournalFileSize = testJournalFileSize }

// smallJournal is setSmallJournal as a brokertest option.
func smallJournal() brokertest.Option { return brokertest.Edit(setSmallJournal) }

// serverConfig writes the sample ../../conf/server.toml with
// journal_file_size = testJournalFileSize into tb's temp directory and
// returns its path, for metaq-server processes.
func serverConfig(tb testing.TB) string {
	tb.Helper()
	b, err := os.ReadFile("../../conf/server.toml")
	require.NoError(tb, err)
	re := regexp.MustCompile(`(?m)^journal_file_size = [0-9]+$`)
	require.True(tb, re.Match(b), "../../conf/server.toml sets no journal_file_size")
	b = re.ReplaceAll(b, []byte("journal_file_size = "+strconv.Itoa(testJournalFileSize)))
	p := filepath.Join(tb.TempDir(), "server.toml")
	require.NoError(tb, os.WriteFile(p, b, 0o644))
	return p
}

var zkRoots atomic.Int64

// zkRoot returns name with a suffix unique in this test binary: the tests
// share one ZooKeeper (testsvc.Run), and a run with -count above 1 must
// not find the nodes an earlier run of the same test left there.
func zkRoot(name string) string { return name + "-" + strconv.FormatInt(zkRoots.Add(1), 10) }

func runBroker(tb testing.TB, cfg *conf.Config) *testBroker {
	return runBrokerAt(tb, cfg, "", broker.Options{})
}

// stableAddr is an address for a broker that a test stops and starts
// again on it: a port of testsvc.StablePorts, which no bind to port 0 or
// connect of the tests alongside takes while the broker is down (one from
// a listen on :0 may be handed out again meanwhile, and the restart then
// fails: address already in use).
func stableAddr(tb testing.TB) string {
	tb.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(testsvc.StablePorts(tb, 1)[0]))
}

// runBrokerAt runs a broker with cfg and opts (its log silenced) on a
// listener at addr ("": a free port), closed when tb ends.
func runBrokerAt(tb testing.TB, cfg *conf.Config, addr string, opts broker.Options) *testBroker {
	tb.Helper()
	opts.Logf = func(string, ...any) {}
	bo := []brokertest.Option{brokertest.Config(cfg), brokertest.Listen(addr), brokertest.BrokerOptions(opts)}
	if _, bench := tb.(*testing.B); !bench {
		bo = append(bo, smallJournal()) // benchmarks measure the default, as a user's broker runs
	}
	b := brokertest.Start(tb, bo...)
	return &testBroker{b: b.Broker, cfg: cfg, addr: b.Addr()}
}

func newProducer(tb testing.TB, addr string, opts ...prodOption) *brokerProducer {
	tb.Helper()
	p, err := newBrokerProducer(addr, append([]prodOption{quiet}, opts...)...)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func newConsumer(tb testing.TB, addr string, opts ...consOption) *brokerConsumer {
	tb.Helper()
	c, err := newBrokerConsumer(addr, topic, append([]consOption{quiet, withMaxFetchDelay(100 * time.Millisecond)}, opts...)...)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

type pos struct {
	part int32
	off  int64
}

// readN reads n messages with the iterator and returns them by position.
func readN(tb testing.TB, c *brokerConsumer, n int) map[pos]*message.Message {
	tb.Helper()
	got := make(map[pos]*message.Message)
	for m, err := range c.Messages(ctxT(tb, 20*time.Second)) {
		require.NoError(tb, err)
		k := pos{m.Partition, m.Offset}
		require.NotContains(tb, got, k, "duplicate delivery")
		got[k] = m
		if len(got) == n {
			break
		}
	}
	require.Len(tb, got, n)
	return got
}

func TestRoundTripSyncAsyncFuture(t *testing.T) {
	t.Parallel()
	br := startBroker(t)
	p := newProducer(t, br.addr)
	ctx := ctxT(t, 20*time.Second)
	var mu sync.Mutex
	sent := make(map[pos]*message.Message)
	record := func(m *message.Message, r SendResult) {
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, topic, r.Topic)
		sent[pos{r.Partition, r.Offset}] = &message.Message{Topic: topic, Body: m.Body, Attribute: m.Attribute,
			HasAttribute: m.HasAttribute, ID: r.ID, Partition: r.Partition, Offset: r.Offset}
	}
	mk := func(kind string, i int) *message.Message {
		m := &message.Message{Topic: topic, Body: []byte(fmt.Sprintf("%s-%d", kind, i))}
		if i%3 == 0 {
			m.Attribute, m.HasAttribute = "attr-"+strconv.Itoa(i), true
		}
		return m
	}
	for i := range 50 {
		m := mk("sync", i)
		r, err := p.Send(ctx, m)
		require.NoError(t, err)
		require.Equal(t, r.ID, m.ID)
		record(m, r)
	}
	var wg sync.WaitGroup
	for i := range 200 {
		m := mk("async", i)
		wg.Add(1)
		p.SendAsync(ctx, m, func(r SendResult, err error) {
			defer wg.Done()
			require.NoError(t, err)
			record(m, r)
		})
	}
	futs := make([]*sendFuture, 50)
	msgs := make([]*message.Message, 50)
	for i := range futs {
		msgs[i] = mk("future", i)
		futs[i] = p.SendFuture(ctx, msgs[i])
	}
	for i, f := range futs {
		r, err := f.Wait(ctx)
		require.NoError(t, err)
		record(msgs[i], r)
	}
	wg.Wait()
	require.Len(t, sent, 300)

	got := readN(t, newConsumer(t, br.addr), 300)
	parts := make(map[int32]int)
	for k, want := range sent {
		m := got[k]
		require.NotNil(t, m, "message at %v not consumed", k)
		require.Equal(t, want, m)
		parts[k.part]++
	}
	require.Len(t, parts, 4, "round robin reaches every partition")
}

// TestBatchOffsets checks that mput results (consecutive ids, offsets
// computed from record sizes) match what the consumer reads back.
func TestBatchOffsets(t *testing.T) {
	t.Parallel()
	br := startBroker(t)
	p := newProducer(t, br.addr, withBatching(64, 16<<10, 5*time.Millisecond), withSelector(selector.HashByKey()))
	ctx := ctxT(t, 20*time.Second)
	const n = 1000
	results := make([]SendResult, n)
	bodies := make([][]byte, n)
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range n {
		bodies[i] = bytes.Repeat([]byte{byte('a' + i%26)}, 1+i%300)
		m := &message.Message{Topic: topic, Body: bodies[i], Key: []byte(strconv.Itoa(i % 7))}
		if i%5 == 0 {
			m.Attribute, m.HasAttribute = "k"+strconv.Itoa(i), true
		}
		wg.Add(1)
		p.SendAsync(ctx, m, func(r SendResult, err error) {
			defer wg.Done()
			if err != nil {
				failed.Add(1)
				return
			}
			results[i] = r
		})
	}
	// A few sync sends through the same batches.
	for i := range 5 {
		_, err := p.Send(ctx, &message.Message{Topic: topic, Body: []byte("sync" + strconv.Itoa(i))})
		require.NoError(t, err)
	}
	wg.Wait()
	require.Zero(t, failed.Load())
	got := readN(t, newConsumer(t, br.addr), n+5)
	ids := make(map[int64]bool)
	for i, r := range results {
		m := got[pos{r.Partition, r.Offset}]
		require.NotNil(t, m, "message %d at %+v not consumed", i, r)
		require.Equal(t, r.ID, m.ID)
		require.Equal(t, bodies[i], m.Body)
		require.Equal(t, i%5 == 0, m.HasAttribute)
		require.False(t, ids[r.ID], "duplicate id")
		ids[r.ID] = true
	}
}

func TestConsumerStartFrom(t *testing.T) {
	t.Parallel()
	br := startBroker(t)
	p := newProducer(t, br.addr, withSelector(selector.Fixed(2)))
	ctx := ctxT(t, 20*time.Second)
	var res []SendResult
	send := func(k int) {
		for range k {
			r, err := p.Send(ctx, &message.Message{Topic: topic, Body: []byte(strconv.Itoa(len(res)))})
			require.NoError(t, err)
			res = append(res, r)
		}
	}
	send(10)

	latest := newConsumer(t, br.addr, withPartitions(2), withStartFrom(Latest))
	// Start the run (which resolves Latest) before sending more.
	ch := make(chan *message.Message, 5)
	go func() {
		defer close(ch)
		for m, err := range latest.Messages(ctx) {
			if err != nil {
				return
			}
			ch <- m
			if len(ch) == cap(ch) {
				return
			}
		}
	}()
	require.Eventually(t, func() bool { return latest.Position(2) == res[9].Offset+int64(message.HeaderSize+1) },
		5*time.Second, 5*time.Millisecond)
	send(5)
	for i := 10; i < 15; i++ {
		m := <-ch
		require.NotNil(t, m)
		require.Equal(t, strconv.Itoa(i), string(m.Body))
		require.Equal(t, res[i].Offset, m.Offset)
	}

	at := newConsumer(t, br.addr, withPartitions(2), withStartFrom(AtOffset(res[3].Offset)))
	i := 3
	for m, err := range at.Messages(ctx) {
		require.NoError(t, err)
		require.Equal(t, strconv.Itoa(i), string(m.Body))
		if i++; i == 15 {
			break
		}
	}
	require.Equal(t, res[14].Offset+int64(message.HeaderSize+2), at.Position(2))

	early := newConsumer(t, br.addr, withPartitions(2, 0))
	require.Len(t, readN(t, early, 15), 15)
	require.Equal(t, int64(0), early.Position(0))
	require.Equal(t, int64(-1), early.Position(1))
}

// TestFetchGrowth: a message larger than the fetch size is read after the
// size grows; one larger than the limit stops the consumer with a clear error.
func TestFetchGrowth(t *testing.T) {
	t.Parallel()
	br := startBroker(t)
	p := newProducer(t, br.addr, withSelector(selector.Fixed(1)))
	ctx := ctxT(t, 20*time.Second)
	big := bytes.Repeat([]byte("B"), 300<<10)
	for _, b := range [][]byte{[]byte("small-1"), big, []byte("small-2")} {
		_, err := p.Send(ctx, &message.Message{Topic: topic, Body: b})
		require.NoError(t, err)
	}
	c := newConsumer(t, br.addr, withPartitions(1), withMaxFetchSize(4096))
	var got [][]byte
	for m, err := range c.Messages(ctx) {
		require.NoError(t, err)
		got = append(got, m.Body)
		if len(got) == 3 {
			break
		}
	}
	require.Equal(t, "small-1", string(got[0]))
	require.Equal(t, big, got[1])
	require.Equal(t, "small-2", string(got[2]))

	small := newConsumer(t, br.addr, withPartitions(1), withMaxFetchSize(4096), withMaxFetchSizeLimit(64<<10))
	var seen int
	err := small.Consume(ctx, func(context.Context, *message.Message) error { seen++; return nil })
	require.ErrorIs(t, err, ErrRecordTooLarge)
	require.Equal(t, 1, seen)
}

func TestProducerCloseWaitsForInFlight(t *testing.T) {
	t.Parallel()
	br := startBroker(t)
	for _, batching := range []bool{false, true} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
			var opts []prodOption
			if batching {
				opts = append(opts, withBatching(100, 0, 50*time.Millisecond))
			}
			p, err := newBrokerProducer(br.addr, append(opts, quiet)...)
			require.NoError(t, err)
			var ok, failed atomic.Int32
			for range 2000 {
				p.SendAsync(context.Background(), &message.Message{Topic: topic, Body: []byte("x")}, func(_ SendResult, err error) {
					if err != nil {
						failed.Add(1)
					} else {
						ok.Add(1)
					}
				})
			}
			require.NoError(t, p.Close(ctxT(t, 20*time.Second)))
			require.Equal(t, int32(2000), ok.Load())
			require.Zero(t, failed.Load())
		})
	}
}

// TestBrokerRestart: the producer and a running consumer survive a broker
// restart on the same address.
func TestBrokerRestart(t *testing.T) {
	t.Parallel()
	br := runBrokerAt(t, brokerConfig(t), stableAddr(t), broker.Options{})
	p := newProducer(t, br.addr)
	ctx := ctxT(t, 30*time.Second)
	c := newConsumer(t, br.addr)
	var got atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- c.Consume(ctx, func(context.Context, *message.Message) error { got.Add(1); return nil })
	}()
	for range 20 {
		_, err := p.Send(ctx, &message.Message{Topic: topic, Body: []byte("before")})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return got.Load() == 20 }, 10*time.Second, 5*time.Millisecond)

	require.NoError(t, br.b.Close())
	cfg := *br.cfg
	runBrokerAt(t, &cfg, br.addr, broker.Options{})

	for range 20 {
		_, err := p.Send(ctx, &message.Message{Topic: topic, Body: []byte("after")})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return got.Load() == 40 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, c.Close(ctx))
	require.ErrorIs(t, <-done, ErrClosed)
}

func TestConsumeRetryAndReject(t *testing.T) {
	t.Parallel()
	br := startBroker(t)
	p := newProducer(t, br.addr, withSelector(selector.Fixed(0)))
	ctx := ctxT(t, 20*time.Second)
	for i := range 5 {
		_, err := p.Send(ctx, &message.Message{Topic: topic, Body: []byte(strconv.Itoa(i))})
		require.NoError(t, err)
	}
	var rejected []string
	attempts := make(map[string]int)
	var handled []string
	c := newConsumer(t, br.addr, withPartitions(0), withRetries(5, time.Millisecond),
		withOnReject(func(_ context.Context, m *message.Message, err error) {
			rejected = append(rejected, string(m.Body)+":"+err.Error())
		}))
	cctx, cancel := context.WithCancel(ctx)
	err := c.Consume(cctx, func(_ context.Context, m *message.Message) error {
		b := string(m.Body)
		attempts[b]++
		if b == "2" || (b == "3" && attempts[b] < 3) {
			return errors.New("boom")
		}
		handled = append(handled, b)
		if b == "4" {
			cancel()
		}
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []string{"0", "1", "3", "4"}, handled)
	require.Equal(t, 6, attempts["2"])
	require.Equal(t, 3, attempts["3"])
	require.Equal(t, []string{"2:boom"}, rejected)
	require.Equal(t, int64(5*(message.HeaderSize+1)), c.Position(0))
}

// memStore is an offsets.Store in memory.
type memStore struct {
	mu   sync.Mutex
	offs map[string]message.Position
}

func (s *memStore) key(g string, p message.Position) string {
	return g + "/" + p.Topic + "/" + p.Partition.String()
}

func (s *memStore) Load(_ context.Context, g string, ps []message.Position) ([]message.Position, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]message.Position, len(ps))
	for i, p := range ps {
		out[i] = offsets.NotStored(p)
		if v, ok := s.offs[s.key(g, p)]; ok {
			out[i] = v
		}
	}
	return out, nil
}

func (s *memStore) Commit(_ context.Context, g string, ps []message.Position) error {
	if err := offsets.ValidateCommit(g, ps); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range ps {
		s.offs[s.key(g, p)] = p
	}
	return nil
}

func TestOffsetStoreResume(t *testing.T) {
	t.Parallel()
	br := startBroker(t)
	p := newProducer(t, br.addr)
	ctx := ctxT(t, 20*time.Second)
	for i := range 40 {
		_, err := p.Send(ctx, &message.Message{Topic: topic, Body: []byte(strconv.Itoa(i))})
		require.NoError(t, err)
	}
	store := &memStore{offs: make(map[string]message.Position)}
	c1 := newConsumer(t, br.addr, withOffsetStore(store, time.Hour), withGroup("g1"))
	first := readN(t, c1, 25)
	require.NoError(t, c1.Close(ctx))
	c2 := newConsumer(t, br.addr, withOffsetStore(store, time.Hour), withGroup("g1"))
	second := readN(t, c2, 15)
	for k := range second {
		require.NotContains(t, first, k)
	}
}

func TestAdminTopics(t *testing.T) {
	t.Parallel()
	br := startBroker(t, func(c *conf.Config) { c.Topics = append(c.Topics, conf.Topic{Name: "empty"}) })
	p := newProducer(t, br.addr, withSelector(selector.Fixed(3)))
	ctx := ctxT(t, 10*time.Second)
	for range 3 {
		_, err := p.Send(ctx, &message.Message{Topic: topic, Body: []byte("abc")})
		require.NoError(t, err)
	}
	a, err := newBrokerAdmin(br.addr)
	require.NoError(t, err)
	defer a.Close()
	ts, err := a.Topics(ctx)
	require.NoError(t, err)
	require.Len(t, ts, 2)
	require.Equal(t, "empty", ts[0].Name)
	ti := ts[1]
	require.Equal(t, topic, ti.Name)
	require.Equal(t, 4, ti.Partitions)
	require.Equal(t, int64(3), ti.MessageCount)
	require.Len(t, ti.Offsets, 4)
	require.Equal(t, partitionOffsets{Partition: 3, Min: 0, Max: 3 * (message.HeaderSize + 3)}, ti.Offsets[3])
	s, err := brokerStats(ctx, br.addr, "")
	require.NoError(t, err)
	require.Contains(t, s, "STATS\r\n")
	off, err := a.Offset(ctx, topic, "g", 3, 1<<62)
	require.NoError(t, err)
	require.Equal(t, int64(3*(message.HeaderSize+3)), off)
}
