package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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

// stats reply for topic t with n partitions.
func statsReply(w *fakeWriter, r *protocol.Request, topic string, n int) bool {
	if r.Op != protocol.OpStats {
		return false
	}
	w.result(protocol.StatusOK, fmt.Sprintf("STATS\r\n%s partitions %d message_count 0 message_bytes 0 accept_publish true accept_subscribe true\r\nEND\r\n", topic, n), r.Opaque)
	return true
}

// TestPipelinedOutOfOrder holds 64 puts until all have arrived on the one
// connection, then answers them in reverse order: every send must get its
// own reply.
func TestPipelinedOutOfOrder(t *testing.T) {
	const n = 64
	type held struct {
		opaque int32
		body   string
	}
	var mu sync.Mutex
	var pending []held
	f := startFake(t, func(w *fakeWriter, r *protocol.Request) {
		if statsReply(w, r, "t", 1) {
			return
		}
		mu.Lock()
		pending = append(pending, held{r.Opaque, string(r.Body)})
		if len(pending) < n {
			mu.Unlock()
			return
		}
		batch := pending
		pending = nil
		mu.Unlock()
		for i := len(batch) - 1; i >= 0; i-- {
			k, _ := strconv.Atoi(batch[i].body)
			w.result(200, fmt.Sprintf("%d 0 %d", 1000+k, 10*k), batch[i].opaque)
		}
	})
	var dials atomic.Int32
	p, err := newBrokerProducer(f.addr(), quiet, withDialer(func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}))
	require.NoError(t, err)
	defer p.Close(context.Background())
	ctx := ctxT(t, 10*time.Second)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := p.Send(ctx, &message.Message{Topic: "t", Body: []byte(strconv.Itoa(i))})
			require.NoError(t, err)
			require.Equal(t, int64(1000+i), res.ID)
			require.Equal(t, int64(10*i), res.Offset)
		}()
	}
	wg.Wait()
	require.Equal(t, int32(1), dials.Load(), "all sends share one connection")
}

// TestConnectionLossFailsInFlight: a dropped connection fails every call
// in flight with ErrConnectionLost, and the next call redials.
func TestConnectionLossFailsInFlight(t *testing.T) {
	var answer atomic.Bool
	var arrived atomic.Int32
	var f *fakeBroker
	f = startFake(t, func(w *fakeWriter, r *protocol.Request) {
		if statsReply(w, r, "t", 1) {
			return
		}
		if answer.Load() {
			w.result(200, "7 0 0", r.Opaque)
			return
		}
		if arrived.Add(1) == 8 {
			w.close()
		}
	})
	p, err := newBrokerProducer(f.addr(), quiet)
	require.NoError(t, err)
	defer p.Close(context.Background())
	ctx := ctxT(t, 10*time.Second)
	_, err = p.Partitions(ctx, "t")
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := p.Send(ctx, &message.Message{Topic: "t", Body: []byte("x")})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.ErrorIs(t, err, ErrConnectionLost)
	}
	answer.Store(true)
	res, err := p.Send(ctx, &message.Message{Topic: "t", Body: []byte("x")})
	require.NoError(t, err)
	require.Equal(t, int64(7), res.ID)
}

// silentFake accepts requests and never answers puts.
func silentFake(t *testing.T) *fakeBroker {
	return startFake(t, func(w *fakeWriter, r *protocol.Request) { statsReply(w, r, "t", 2) })
}

func TestSendTimeout(t *testing.T) {
	f := silentFake(t)
	p, err := newBrokerProducer(f.addr(), quiet, withSendTimeout(150*time.Millisecond))
	require.NoError(t, err)
	defer p.Close(context.Background())
	start := time.Now()
	_, err = p.Send(context.Background(), &message.Message{Topic: "t", Body: []byte("x")})
	require.ErrorIs(t, err, ErrTimeout)
	require.Less(t, time.Since(start), 2*time.Second)

	done := make(chan error, 1)
	p.SendAsync(context.Background(), &message.Message{Topic: "t", Body: []byte("x")}, func(_ SendResult, err error) { done <- err })
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrTimeout)
	case <-time.After(5 * time.Second):
		t.Fatal("async send did not time out")
	}
}

func TestSendContextCancel(t *testing.T) {
	f := silentFake(t)
	p, err := newBrokerProducer(f.addr(), quiet, withSendTimeout(time.Minute))
	require.NoError(t, err)
	defer p.Close(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err = p.Send(ctx, &message.Message{Topic: "t", Body: []byte("x")})
	require.ErrorIs(t, err, context.Canceled)

	ctx2, cancel2 := context.WithCancel(context.Background())
	fut := p.SendFuture(ctx2, &message.Message{Topic: "t", Body: []byte("x")})
	cancel2()
	_, err = fut.Wait(ctxT(t, 5*time.Second))
	require.ErrorIs(t, err, context.Canceled)

	// Already cancelled: fails without blocking.
	_, err = p.Send(ctx, &message.Message{Topic: "t", Body: []byte("x")})
	require.ErrorIs(t, err, context.Canceled)
}

func TestBrokerErrors(t *testing.T) {
	f := startFake(t, func(w *fakeWriter, r *protocol.Request) {
		if statsReply(w, r, "t", 1) {
			return
		}
		w.result(500, "append failed: disk full", r.Opaque)
	})
	p, err := newBrokerProducer(f.addr(), quiet)
	require.NoError(t, err)
	defer p.Close(context.Background())
	ctx := ctxT(t, 5*time.Second)
	_, err = p.Send(ctx, &message.Message{Topic: "t", Body: []byte("x")})
	var be *BrokerError
	require.ErrorAs(t, err, &be)
	require.Equal(t, 500, be.Code)
	require.Equal(t, "append failed: disk full", be.Msg)
	require.ErrorIs(t, err, ErrInternal)
	require.NotErrorIs(t, err, ErrNoData)

	_, err = p.Send(ctx, &message.Message{Topic: "nope", Body: []byte("x")})
	require.ErrorIs(t, err, ErrUnknownTopic)
	_, err = p.Send(ctx, &message.Message{Body: []byte("x")})
	require.ErrorIs(t, err, ErrInvalidMessage)
}

// TestPartitionRefresh: a 500 about the partition makes the producer relearn
// the partition count and retry once.
func TestPartitionRefresh(t *testing.T) {
	var parts atomic.Int32
	parts.Store(4)
	var statsCalls atomic.Int32
	f := startFake(t, func(w *fakeWriter, r *protocol.Request) {
		if r.Op == protocol.OpStats {
			statsCalls.Add(1)
			statsReply(w, r, "t", int(parts.Load()))
			return
		}
		if r.Partition >= parts.Load() {
			w.result(500, protocol.WithCause(protocol.CausePartitionOutOfRange, strconv.Itoa(int(r.Partition))), r.Opaque)
			return
		}
		w.result(200, fmt.Sprintf("1 %d 0", r.Partition), r.Opaque)
	})
	p, err := newBrokerProducer(f.addr(), quiet, withSelector(selector.Fixed(3)))
	require.NoError(t, err)
	defer p.Close(context.Background())
	ctx := ctxT(t, 5*time.Second)
	_, err = p.Send(ctx, &message.Message{Topic: "t", Body: []byte("x")})
	require.NoError(t, err)
	parts.Store(2)
	_, err = p.Send(ctx, &message.Message{Topic: "t", Body: []byte("x")})
	require.Error(t, err) // selector.Fixed(3) is now out of range
	require.Equal(t, int32(2), statsCalls.Load())
	n, err := p.Partitions(ctx, "t")
	require.NoError(t, err)
	require.Equal(t, 2, n)
}

// TestRedialBackoff: with nothing listening, sends fail with the deadline
// and the dial error, and dials are spaced out.
func TestRedialBackoff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	var dials atomic.Int32
	p, err := newBrokerProducer(addr, quiet, withTopicPartitions("t", 1), withRedialBackoff(40*time.Millisecond, 80*time.Millisecond),
		withDialer(func(ctx context.Context, network, a string) (net.Conn, error) {
			dials.Add(1)
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
}

// TestOversizedReply: a reply over the size limit fails only its call.
func TestOversizedReply(t *testing.T) {
	f := startFake(t, func(w *fakeWriter, r *protocol.Request) {
		if len(r.Item) == 0 {
			w.result(200, string(make([]byte, 300<<10)), r.Opaque)
			return
		}
		w.result(200, "STATS\r\nEND\r\n", r.Opaque)
	})
	cn := newConn(f.addr(), defaultConnOptions())
	cn.opts.maxReply = 100 << 10
	defer cn.close()
	ctx := ctxT(t, 5*time.Second)
	_, err := stats(ctx, cn, "")
	require.Error(t, err)
	require.Contains(t, err.Error(), "exceeds limit")
	body, err := stats(ctx, cn, "x")
	require.NoError(t, err)
	require.Equal(t, "STATS\r\nEND\r\n", body)
}

func TestClosedErrors(t *testing.T) {
	f := silentFake(t)
	p, err := newBrokerProducer(f.addr(), quiet)
	require.NoError(t, err)
	require.NoError(t, p.Close(context.Background()))
	require.NoError(t, p.Close(context.Background()))
	_, err = p.Send(context.Background(), &message.Message{Topic: "t", Body: []byte("x")})
	require.ErrorIs(t, err, ErrClosed)
	got := make(chan error, 1)
	p.SendAsync(context.Background(), &message.Message{Topic: "t", Body: []byte("x")}, func(_ SendResult, err error) { got <- err })
	require.ErrorIs(t, <-got, ErrClosed)

	// Close with a deadline fails what is still in flight with ErrClosed.
	p2, err := newBrokerProducer(f.addr(), quiet, withSendTimeout(time.Minute))
	require.NoError(t, err)
	fut := p2.SendFuture(context.Background(), &message.Message{Topic: "t", Body: []byte("x")})
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
	for _, m := range []*message.Message{
		{Body: []byte("hello")},
		{Body: []byte("hello"), Attribute: "a=b", HasAttribute: true},
		{Body: nil, Attribute: "", HasAttribute: true},
	} {
		require.Equal(t, message.Checksum(m.AppendData(nil)), dataChecksum(m))
	}
}

func TestBrokerErrorIs(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", &BrokerError{Code: 404, Msg: "Could not find"})
	require.ErrorIs(t, err, ErrNoData)
	require.False(t, errors.Is(err, ErrMoved))
	require.True(t, (&BrokerError{Code: 503}).Temporary())
}
