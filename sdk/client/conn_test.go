package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
	"github.com/metaq-go/metaq/sdk/selector"
)

var quiet = withLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// countDials is a dialer that counts its dials in n.
func countDials(n *atomic.Int32) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		n.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
}

// closedTopic is a broker option: topic "t" (one partition) and topic
// "closed", which refuses puts (accept_publish = false).
func closedTopic() brokertest.Option {
	return brokertest.Edit(func(c *conf.Config) {
		no := false
		c.Topics = []conf.Topic{{Name: "t"}, {Name: "closed", AcceptPublish: &no}}
	})
}

// TestPipelinedOutOfOrder: the broker answers the requests pipelined on a
// connection as each completes, not in the order they came: a put once it
// is fsynced (group commit), a put it refuses (topic "closed") at once.
// Bursts of 64 sends of both kinds go out on the one connection until the
// replies came out of order (seen in the order the callbacks run, which is
// the order the replies arrived); every send must get its own reply, and
// each stored message must be found at the offset, with the id, its reply
// gave.
func TestPipelinedOutOfOrder(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), closedTopic())
	var dials atomic.Int32
	p, err := newBrokerProducer(b.Addr(), quiet, withDialer(countDials(&dials)))
	require.NoError(t, err)
	defer p.Close(context.Background())
	ctx := ctxT(t, 30*time.Second)
	const n = 64
	type stored struct {
		id   int64
		body string
	}
	sent := make(map[int64]stored)
	reordered := false
	for burst := 0; burst < 20 && !reordered; burst++ {
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		results := make([]SendResult, n)
		errs := make([]error, n)
		for i := range n {
			topic := "t"
			if i%2 == 1 {
				topic = "closed"
			}
			wg.Add(1)
			p.SendAsync(ctx, &message.Message{Topic: topic, Body: fmt.Appendf(nil, "%d-%d", burst, i)}, func(r SendResult, err error) {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				results[i], errs[i] = r, err
				wg.Done()
			})
		}
		wg.Wait()
		for i := range n {
			if i%2 == 1 {
				require.ErrorIs(t, errs[i], ErrForbidden, "send %d of burst %d", i, burst)
				require.Contains(t, errs[i].Error(), "topic closed does not accept puts")
				continue
			}
			require.NoError(t, errs[i], "send %d of burst %d", i, burst)
			require.Equal(t, "t", results[i].Topic)
			require.NotContains(t, sent, results[i].Offset, "two replies name the same offset")
			sent[results[i].Offset] = stored{results[i].ID, fmt.Sprintf("%d-%d", burst, i)}
		}
		reordered = !slices.IsSorted(order)
	}
	require.True(t, reordered, "the broker never answered out of order")
	require.Equal(t, int32(1), dials.Load(), "all sends share one connection")

	c := consumerAt(t, b.Addr())
	for _, m := range collect(t, c, len(sent)) {
		want, ok := sent[m.Offset]
		require.True(t, ok, "message at %d was not acknowledged there", m.Offset)
		require.Equal(t, want.body, string(m.Body), "offset %d", m.Offset)
		require.Equal(t, want.id, m.ID, "offset %d", m.Offset)
	}
}

// TestConnectionLossFailsInFlight: a dropped connection fails every call
// in flight with ErrConnectionLost, and the next call redials. The
// network between the producer and the real broker holds the 8 puts (so
// they are in flight, unanswered) and then cuts the connection.
func TestConnectionLossFailsInFlight(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet())
	fn := startFaultyNet(t, b.Addr())
	p, err := newBrokerProducer(fn.addr(), quiet, withSendTimeout(time.Minute))
	require.NoError(t, err)
	defer p.Close(context.Background())
	ctx := ctxT(t, 30*time.Second)
	_, err = p.Partitions(ctx, "t")
	require.NoError(t, err)
	fn.holdAll()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := p.Send(ctx, &message.Message{Topic: "t", Body: []byte("lost")})
			errs <- err
		}()
	}
	require.Eventually(t, func() bool { return fn.held() == 8 }, 20*time.Second, time.Millisecond)
	fn.cut()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.ErrorIs(t, err, ErrConnectionLost)
	}
	fn.release()
	res, err := p.Send(ctx, &message.Message{Topic: "t", Body: []byte("after")})
	require.NoError(t, err)
	require.Equal(t, 2, fn.dialCount(), "the next call redialed")
	// The held puts never reached the broker: the new one is its first.
	require.Equal(t, int64(0), res.Offset)
	got := collect(t, consumerAt(t, b.Addr()), 1)
	require.Equal(t, "after", string(got[0].Body))
	require.Equal(t, res.ID, got[0].ID)
}

// stopProcess stops p with SIGSTOP (it is continued when t ends) and waits
// until every thread of it is stopped: the signal takes effect
// asynchronously.
func stopProcess(t *testing.T, p *os.Process) {
	t.Helper()
	require.NoError(t, p.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = p.Signal(syscall.SIGCONT) })
	require.Eventually(t, func() bool {
		stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", p.Pid))
		if err != nil || len(stats) == 0 {
			return false
		}
		for _, path := range stats {
			b, err := os.ReadFile(path)
			// pid (comm) state ...: comm may hold spaces and parentheses.
			i := bytes.LastIndexByte(b, ')')
			if err != nil || i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "process %d did not stop", p.Pid)
}

// TestSendTimeout: a broker process that stops answering (SIGSTOP: the
// kernel still takes the bytes sent to it) makes Send and SendAsync fail
// with ErrTimeout once the send timeout has passed.
func TestSendTimeout(t *testing.T) {
	t.Parallel()
	s := brokertest.StartServer(t, "--config", serverConfig(t), "--port", "0", "--http-port", "0", "--host", "127.0.0.1", "--data-dir", t.TempDir())
	p, err := newBrokerProducer(s.Addr, quiet, withSendTimeout(150*time.Millisecond))
	require.NoError(t, err)
	defer p.Close(context.Background())
	// Connected, and the partitions learned, while the broker answers.
	_, err = p.Send(ctxT(t, 20*time.Second), &message.Message{Topic: "meta-test", Body: []byte("x")})
	require.NoError(t, err)
	stopProcess(t, s.Cmd.Process)

	start := time.Now()
	_, err = p.Send(context.Background(), &message.Message{Topic: "meta-test", Body: []byte("x")})
	require.ErrorIs(t, err, ErrTimeout)
	require.Less(t, time.Since(start), 2*time.Second)

	done := make(chan error, 1)
	p.SendAsync(context.Background(), &message.Message{Topic: "meta-test", Body: []byte("x")}, func(_ SendResult, err error) { done <- err })
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrTimeout)
	case <-time.After(5 * time.Second):
		t.Fatal("async send did not time out")
	}
}

// TestSendContextCancel: cancelling the context of a send waiting for its
// reply (the network holds the put back from the real broker) ends it
// with context.Canceled.
func TestSendContextCancel(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet())
	fn := startFaultyNet(t, b.Addr())
	p, err := newBrokerProducer(fn.addr(), quiet, withSendTimeout(time.Minute))
	require.NoError(t, err)
	defer p.Close(context.Background())
	_, err = p.Partitions(ctxT(t, 20*time.Second), "t")
	require.NoError(t, err)
	fn.holdAll()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err = p.Send(ctx, &message.Message{Topic: "t", Body: []byte("x")})
	require.ErrorIs(t, err, context.Canceled)

	ctx2, cancel2 := context.WithCancel(context.Background())
	fut := p.SendFuture(ctx2, &message.Message{Topic: "t", Body: []byte("x")})
	require.Eventually(t, func() bool { return fn.held() == 2 }, 10*time.Second, time.Millisecond)
	cancel2()
	_, err = fut.Wait(ctxT(t, 5*time.Second))
	require.ErrorIs(t, err, context.Canceled)

	// Already cancelled: fails without blocking.
	_, err = p.Send(ctx, &message.Message{Topic: "t", Body: []byte("x")})
	require.ErrorIs(t, err, context.Canceled)
}

// TestBrokerErrors: the real broker's refusals reach the caller as a
// *BrokerError with the code and the broker's text, matched by code with
// errors.Is: 500 for a topic it does not have, 403 for a topic closed to
// puts, 400 for a message over its max_message_size. The client's own
// refusals come before anything is sent.
func TestBrokerErrors(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), closedTopic(), brokertest.Edit(func(c *conf.Config) { c.MaxMessageSize = 1024 }))
	// "gone" is no topic of the broker; fixing its partition count has the
	// producer send to it without asking `stats` first. The producer's own
	// size limit is above the broker's.
	p, err := newBrokerProducer(b.Addr(), quiet, withTopicPartitions("gone", 1), withMaxMessageSize(1<<20))
	require.NoError(t, err)
	defer p.Close(context.Background())
	ctx := ctxT(t, 10*time.Second)

	_, err = p.Send(ctx, &message.Message{Topic: "gone", Body: []byte("x")})
	var be *BrokerError
	require.ErrorAs(t, err, &be)
	require.Equal(t, 500, be.Code)
	require.Equal(t, "The server do not accept topic gone", be.Msg)
	require.Empty(t, be.Cause)
	require.False(t, be.Temporary())
	require.ErrorIs(t, err, ErrInternal)
	require.NotErrorIs(t, err, ErrNoData)

	_, err = p.Send(ctx, &message.Message{Topic: "closed", Body: []byte("x")})
	require.ErrorAs(t, err, &be)
	require.Equal(t, 403, be.Code)
	require.Equal(t, "topic closed does not accept puts (accept_publish = false)", be.Msg)
	require.True(t, be.Temporary())
	require.ErrorIs(t, err, ErrForbidden)
	require.NotErrorIs(t, err, ErrInternal)

	_, err = p.Send(ctx, &message.Message{Topic: "t", Body: make([]byte, 2000)})
	require.ErrorAs(t, err, &be)
	require.Equal(t, 400, be.Code)
	require.Equal(t, "message of 2000 bytes exceeds max_message_size 1024", be.Msg)
	require.ErrorIs(t, err, ErrBadRequest)

	_, err = p.Send(ctx, &message.Message{Topic: "nope", Body: []byte("x")})
	require.ErrorIs(t, err, ErrUnknownTopic)
	_, err = p.Send(ctx, &message.Message{Body: []byte("x")})
	require.ErrorIs(t, err, ErrInvalidMessage)
}

// lastPartition selects the topic's last partition.
var lastPartition = selector.Func(func(_ context.Context, _ string, ps []message.Partition, _ *message.Message) (int, error) {
	return len(ps) - 1, nil
})

// TestPartitionRefresh: the broker restarted (same data, same address)
// with fewer partitions refuses a put to a partition it no longer has
// (500 "partition out of range: ..."): the producer relearns the partition
// count with one `stats` (counted on the way, by a network that lets
// everything through) and retries once, on a partition the topic has.
func TestPartitionRefresh(t *testing.T) {
	t.Parallel()
	cfg := brokertest.Default(t)
	cfg.NumPartitions = 4
	b := brokertest.Start(t, smallJournal(), brokertest.Config(cfg), brokertest.Listen(stableAddr(t)), brokertest.Quiet())
	addr := b.Addr()
	fn := startFaultyNet(t, addr)
	last, err := newBrokerProducer(fn.addr(), quiet, withSelector(lastPartition))
	require.NoError(t, err)
	defer last.Close(context.Background())
	fixed, err := newBrokerProducer(fn.addr(), quiet, withSelector(selector.Fixed(3)))
	require.NoError(t, err)
	defer fixed.Close(context.Background())
	ctx := ctxT(t, 20*time.Second)
	for _, p := range []*brokerProducer{last, fixed} {
		r, err := p.Send(ctx, &message.Message{Topic: "t", Body: []byte("x")})
		require.NoError(t, err)
		require.Equal(t, int32(3), r.Partition)
	}
	require.Equal(t, 2, fn.count(protocol.OpStats), "one stats per producer")

	require.NoError(t, b.Close())
	cfg2 := *cfg
	cfg2.NumPartitions = 2
	brokertest.Start(t, smallJournal(), brokertest.Config(&cfg2), brokertest.Listen(addr), brokertest.Quiet())
	require.Eventually(t, func() bool { return last.cn.live() == nil && fixed.cn.live() == nil },
		10*time.Second, time.Millisecond, "the producers saw their connections close")

	r, err := last.Send(ctx, &message.Message{Topic: "t", Body: []byte("x")})
	require.NoError(t, err)
	require.Equal(t, int32(1), r.Partition, "retried on the last partition of two")
	require.Equal(t, 3, fn.count(protocol.OpStats))
	n, err := last.Partitions(ctx, "t")
	require.NoError(t, err)
	require.Equal(t, 2, n)

	_, err = fixed.Send(ctx, &message.Message{Topic: "t", Body: []byte("x")})
	require.Error(t, err) // selector.Fixed(3) is now out of range: the broker's refusal stands
	var be *BrokerError
	require.ErrorAs(t, err, &be)
	require.Equal(t, protocol.CausePartitionOutOfRange, be.Cause)
	require.Equal(t, 4, fn.count(protocol.OpStats))
	n, err = fixed.Partitions(ctx, "t")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, 4, fn.count(protocol.OpStats), "relearned once")
	// last: one put, then a refused one and its retry; fixed: one put, then
	// a refused one that is not retried (no partition to retry on).
	require.Equal(t, 5, fn.count(protocol.OpPut))
}

// TestRedialBackoff: while the broker is down (stopped: nothing listens on
// its address) sends fail with the deadline and the dial error, and dials
// are spaced out; once it is back on its address, sends go through.
func TestRedialBackoff(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Listen(stableAddr(t)), brokertest.Quiet())
	addr := b.Addr()
	require.NoError(t, b.Close())
	var dials atomic.Int32
	p, err := newBrokerProducer(addr, quiet, withTopicPartitions("t", 1), withRedialBackoff(40*time.Millisecond, 80*time.Millisecond),
		withDialer(func(ctx context.Context, network, a string) (net.Conn, error) {
			dials.Add(1)
			// Each dial runs to its end (a refusal comes at once): the send's
			// deadline never cuts one short, so the last error is a refusal
			// and not an i/o timeout.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			var d net.Dialer
			return d.DialContext(ctx, network, a)
		}))
	require.NoError(t, err)
	defer p.Close(context.Background())
	_, err = p.Send(ctxT(t, 400*time.Millisecond), &message.Message{Topic: "t", Body: []byte("x")})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "refused")
	require.LessOrEqual(t, dials.Load(), int32(12))
	require.GreaterOrEqual(t, dials.Load(), int32(2))

	brokertest.Start(t, smallJournal(), brokertest.Config(b.Config), brokertest.Listen(addr), brokertest.Quiet())
	_, err = p.Send(ctxT(t, 20*time.Second), &message.Message{Topic: "t", Body: []byte("x")})
	require.NoError(t, err)
}

// TestOversizedReply: a reply over the client's size limit fails only its
// call; the connection stays and the next call on it is answered. The
// real broker sends such replies to a client with a small limit: a get
// for more bytes than the limit, and `stats topics` of many topics.
func TestOversizedReply(t *testing.T) {
	t.Parallel()
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("a-topic-with-a-long-name-%03d", i)
	}
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.Topics(names...))
	p, err := newBrokerProducer(b.Addr(), quiet)
	require.NoError(t, err)
	defer p.Close(context.Background())
	ctx := ctxT(t, 20*time.Second)
	_, err = p.Send(ctx, &message.Message{Topic: names[0], Body: make([]byte, 16<<10)})
	require.NoError(t, err)

	var dials atomic.Int32
	opts := defaultConnOptions()
	opts.maxReply = 8 << 10
	opts.dial = countDials(&dials)
	cn := newConn(b.Addr(), opts)
	defer cn.close()
	_, err = cn.roundTrip(ctx, func(dst []byte, op int32) []byte {
		return protocol.AppendGet(dst, names[0], defaultGroup, 0, 0, 20<<10, op)
	})
	require.Error(t, err)
	require.Contains(t, err.Error(), "exceeds limit")
	_, err = stats(ctx, cn, "topics")
	require.Error(t, err)
	require.Contains(t, err.Error(), "exceeds limit")
	body, err := stats(ctx, cn, "")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(body, "STATS\r\n") && strings.HasSuffix(body, "END\r\n"), "%q", body)
	require.Equal(t, int32(1), dials.Load(), "the connection stayed")
}

// TestClosedErrors: a closed producer refuses sends with ErrClosed, and
// Close with a deadline fails what is still in flight (a put the network
// holds back from the real broker) with ErrClosed.
func TestClosedErrors(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet())
	p, err := newBrokerProducer(b.Addr(), quiet)
	require.NoError(t, err)
	require.NoError(t, p.Close(context.Background()))
	require.NoError(t, p.Close(context.Background()))
	_, err = p.Send(context.Background(), &message.Message{Topic: "t", Body: []byte("x")})
	require.ErrorIs(t, err, ErrClosed)
	got := make(chan error, 1)
	p.SendAsync(context.Background(), &message.Message{Topic: "t", Body: []byte("x")}, func(_ SendResult, err error) { got <- err })
	require.ErrorIs(t, <-got, ErrClosed)

	fn := startFaultyNet(t, b.Addr())
	p2, err := newBrokerProducer(fn.addr(), quiet, withSendTimeout(time.Minute))
	require.NoError(t, err)
	_, err = p2.Partitions(ctxT(t, 20*time.Second), "t")
	require.NoError(t, err)
	fn.holdAll()
	fut := p2.SendFuture(context.Background(), &message.Message{Topic: "t", Body: []byte("x")})
	require.Eventually(t, func() bool { return fn.held() == 1 }, 10*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, p2.Close(ctx), context.DeadlineExceeded)
	select {
	case <-fut.Done():
	default:
		t.Fatal("Close returned before the callback ran")
	}
	_, err = fut.Wait(context.Background())
	require.ErrorIs(t, err, ErrClosed)
}

func TestDataChecksum(t *testing.T) {
	t.Parallel()
	for _, m := range []*message.Message{
		{Body: []byte("hello")},
		{Body: []byte("hello"), Attribute: "a=b", HasAttribute: true},
		{Body: nil, Attribute: "", HasAttribute: true},
		{Body: []byte("hello"), Key: []byte{}},
		{Body: []byte("hello"), Key: []byte("k"), Tags: []string{"a"}, Attribute: "x", HasAttribute: true},
		{Body: []byte("hello"), Headers: message.Headers{{Key: "big", Value: make([]byte, 1000)}}},
		{Body: []byte("hello"), Timestamp: time.UnixMilli(1)},
	} {
		require.Equal(t, message.Checksum(m.AppendData(nil)), dataChecksum(m))
	}
}

func TestBrokerErrorIs(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("wrapped: %w", &BrokerError{Code: 404, Msg: "Could not find"})
	require.ErrorIs(t, err, ErrNoData)
	require.False(t, errors.Is(err, ErrMoved))
	require.True(t, (&BrokerError{Code: 503}).Temporary())
}
