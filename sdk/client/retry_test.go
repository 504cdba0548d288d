package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
	"github.com/stretchr/testify/require"
)

type sentAt struct {
	m  *message.Message
	at time.Time
}

type fakeSender struct{ sent []sentAt }

func (f *fakeSender) sendAt(_ context.Context, m *message.Message, at time.Time) error {
	f.sent = append(f.sent, sentAt{m, at})
	return nil
}

// TestRetryPoisonFakeClock: a message its handler always fails on is
// delivered exactly MaxDeliveries times, each redelivery the schedule's
// backoff after the rejection before it, and then goes to the dead-letter
// topic with its origin, its delivery count and the last error.
func TestRetryPoisonFakeClock(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    RetryOptions
		want []time.Duration
	}{
		{"default", RetryOptions{}, DefaultRetryBackoff[:15]},
		{"short schedule repeats its last", RetryOptions{Backoff: []time.Duration{time.Second, 5 * time.Second}, MaxDeliveries: 5},
			[]time.Duration{time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second}},
		{"straight to the dead letters", RetryOptions{MaxDeliveries: 1}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := &fakeSender{}
			r, err := newRetrier("g", tc.o, fs, slog.New(slog.NewTextHandler(io.Discard, nil)))
			require.NoError(t, err)
			now := time.Unix(1_700_000_000, 0)
			r.now = func() time.Time { return now }
			orig := &message.Message{Topic: "orders", Partition: 3, Offset: 4096, ID: 77, Body: []byte("poison"),
				Key: []byte("k1"), Headers: message.Headers{{Key: "trace", Value: []byte("abc")}}}
			m := orig
			var seen []int
			var spacing []time.Duration
			for range 100 {
				v := *m
				r.view(&v)
				require.Equal(t, "orders", v.Topic)
				require.Equal(t, int64(77), v.ID)
				require.Equal(t, int32(3), v.Partition)
				require.Equal(t, int64(4096), v.Offset)
				require.Equal(t, []byte("k1"), v.Key)
				tr, _ := v.Headers.String("trace")
				require.Equal(t, "abc", tr)
				seen = append(seen, deliveries(&v))
				require.NoError(t, r.reject(context.Background(), m, fmt.Errorf("boom %d", len(seen))))
				s := fs.sent[len(fs.sent)-1]
				if s.m.Topic == "g.dlq" {
					break
				}
				require.Equal(t, "g.retry", s.m.Topic)
				require.Equal(t, s.at, s.m.DeliverAt)
				due := s.at.UnixMilli()
				spacing = append(spacing, s.at.Sub(now))
				now = s.at // the broker delivers it when due
				// As the consumer reads it from the retry topic: with the
				// broker's delivery header among the others.
				hs := append(slices.Clone(s.m.Headers), message.Header{Key: message.HeaderDeliverAt, Value: []byte(fmt.Sprint(due))})
				m = &message.Message{Topic: s.m.Topic, Partition: 0, Offset: int64(len(seen)) * 100, ID: int64(1000 + len(seen)),
					Body: s.m.Body, Key: s.m.Key, Headers: hs}
			}
			max := tc.o.MaxDeliveries
			if max == 0 {
				max = DefaultMaxDeliveries
			}
			require.Len(t, seen, max)
			for i, n := range seen {
				require.Equal(t, i+1, n, "delivery counts")
			}
			require.Equal(t, tc.want, spacing)
			dl := fs.sent[len(fs.sent)-1].m
			require.Equal(t, "g.dlq", dl.Topic)
			h := func(k string) string { v, _ := dl.Headers.String(k); return v }
			require.Equal(t, "orders", h(HeaderOriginTopic))
			require.Equal(t, "3", h(HeaderOriginPartition))
			require.Equal(t, "4096", h(HeaderOriginOffset))
			require.Equal(t, "77", h(HeaderOriginID))
			require.Equal(t, fmt.Sprint(max), h(HeaderDeliveryCount))
			require.Equal(t, fmt.Sprintf("boom %d", max), h(HeaderLastError))
			require.Equal(t, "abc", h("trace"))
			require.True(t, dl.DeliverAt.IsZero(), "a dead letter is not delayed")
			require.Len(t, dl.Headers, 7, "no header repeated")
			require.Equal(t, "orders", orig.Topic, "the fetched message is left alone")
		})
	}
}

func TestRetryOptionsChecked(t *testing.T) {
	fs := &fakeSender{}
	_, err := newRetrier("g", RetryOptions{MaxDeliveries: -1}, fs, slog.Default())
	require.Error(t, err)
	_, err = newRetrier("g", RetryOptions{Backoff: []time.Duration{-1}}, fs, slog.Default())
	require.Error(t, err)
	_, err = newRetrier("a%b", RetryOptions{}, fs, slog.Default())
	require.ErrorContains(t, err, "valid retry and dead-letter topic names")
	_, err = New(Brokers("127.0.0.1:1"), ConsumeTopics("t"), Reject(RetryTopics(RetryOptions{})))
	require.ErrorContains(t, err, "RetryTopics needs a ConsumerGroup")
	_, err = New(Brokers("127.0.0.1:1"), ConsumeTopics("t"), ConsumerGroup("g"), Broadcast(), Reject(RetryTopics(RetryOptions{})))
	require.ErrorContains(t, err, "RetryTopics needs a ConsumerGroup")
	require.Error(t, RetryTopics(RetryOptions{}).Reject(context.Background(), &message.Message{}, nil))
	var long [3000]byte
	for i := range long {
		long[i] = 'x'
	}
	r, err := newRetrier("g", RetryOptions{}, fs, slog.Default())
	require.NoError(t, err)
	out, _, _ := r.next(&message.Message{Topic: "t"}, errors.New(string(long[:])), time.Now())
	v, _ := out.Headers.String(HeaderLastError)
	require.Len(t, v, MaxLastErrorLen)
}

// TestRetryTopicsE2E: a group member with RetryTopics gets a poison
// message MaxDeliveries times through the group's retry topic, seeing its
// original topic and id with a growing delivery count, then finds it in
// the dead-letter topic; the other messages flow.
func TestRetryTopicsE2E(t *testing.T) {
	t.Parallel()
	for _, mode := range ackModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			retryTopicsE2E(t, mode)
		})
	}
}

func retryTopicsE2E(t *testing.T, mode ackMode) {
	_, base := mode.start(t, "rg")
	p := newClient(t, base...)
	res, err := p.ProduceSync(ctxT(t, 5*time.Second), &message.Message{Topic: topic, Body: []byte("ok1")},
		&message.Message{Topic: topic, Body: []byte("poison"), Key: []byte("pk")}, &message.Message{Topic: topic, Body: []byte("ok2")})
	require.NoError(t, err)
	poisonID := res[1].ID

	c := newClient(t, append(append(slices.Clone(base), ConsumeTopics(topic), ConsumerGroup("rg"), HandlerRetries(1, time.Millisecond),
		Reject(RetryTopics(RetryOptions{Backoff: []time.Duration{300 * time.Millisecond, 600 * time.Millisecond}, MaxDeliveries: 3})),
		FetchMaxWait(50*time.Millisecond)), mode.member...)...)
	var mu sync.Mutex
	counts := map[int]int{} // delivery count -> handler calls
	var calls []time.Time   // of the poison message
	var ok []string
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- c.Consume(ctx, func(_ context.Context, m *message.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if string(m.Body) != "poison" {
				ok = append(ok, string(m.Body))
				return nil
			}
			if m.Topic != topic || m.ID != poisonID || string(m.Key) != "pk" {
				return fmt.Errorf("bad view %s %d %q", m.Topic, m.ID, m.Key)
			}
			counts[deliveries(m)]++
			calls = append(calls, time.Now())
			return errors.New("always fails")
		})
	}()
	dlq := newClient(t, append(slices.Clone(base), ConsumeTopics(DeadLetterTopicOf("rg")), ConsumerGroup("rg-dlq-reader"),
		Reject(Drop()), FetchMaxWait(50*time.Millisecond))...)
	got := make(chan *message.Message, 1)
	go func() {
		_ = dlq.Consume(ctx, func(_ context.Context, m *message.Message) error {
			select {
			case got <- m:
			default:
			}
			return nil
		})
	}()
	var dl *message.Message
	select {
	case dl = <-got:
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("no dead letter; the poison message's deliveries: %v; the reader reads %v, the member %v", counts, dlq.Assigned(), c.Assigned())
	}
	h := func(k string) string { v, _ := dl.Headers.String(k); return v }
	require.Equal(t, "poison", string(dl.Body))
	require.Equal(t, topic, h(HeaderOriginTopic))
	require.Equal(t, fmt.Sprint(poisonID), h(HeaderOriginID))
	require.Equal(t, "3", h(HeaderDeliveryCount))
	require.Equal(t, "always fails", h(HeaderLastError))
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[int]int{1: 2, 2: 2, 3: 2}, counts, "3 deliveries of 2 attempts each")
	// The broker's timer holds each redelivery for its backoff: from the
	// rejection (after a delivery's last attempt) to the next delivery.
	require.Len(t, calls, 6)
	for i, want := range []time.Duration{300 * time.Millisecond, 600 * time.Millisecond} {
		gap := calls[2*i+2].Sub(calls[2*i+1])
		require.GreaterOrEqual(t, gap, want-5*time.Millisecond, "redelivery %d came early", i+2)
		t.Logf("redelivery %d: %v after the rejection (backoff %v)", i+2, gap, want)
	}
	require.ElementsMatch(t, []string{"ok1", "ok2"}, ok)
}

// TestRetryInPlaceOrdered: with RetryInPlace a poison message blocks its
// partition only, is never skipped, and once it succeeds its partition
// goes on in order; the other partition flows meanwhile.
func TestRetryInPlaceOrdered(t *testing.T) {
	t.Parallel()
	for _, mode := range ackModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			retryInPlaceOrdered(t, mode)
		})
	}
}

func retryInPlaceOrdered(t *testing.T, mode ackMode) {
	addr, base := mode.start(t, "og")
	ctx := ctxT(t, 20*time.Second)
	for p, bodies := range [][]string{{"a0", "a1", "poison", "a3", "a4"}, {"b0", "b1", "b2"}} {
		pr := newProducer(t, addr, withSelector(selector.Fixed(p)))
		for _, b := range bodies {
			_, err := pr.Send(ctx, &message.Message{Topic: topic, Body: []byte(b)})
			require.NoError(t, err)
		}
	}
	c := newClient(t, append(append(slices.Clone(base), ConsumeTopics(topic), ConsumerGroup("og"), HandlerRetries(2, time.Millisecond),
		Reject(RetryInPlace(20*time.Millisecond)), FetchMaxWait(50*time.Millisecond)), mode.member...)...)
	var mu sync.Mutex
	var healed bool
	attempts := 0
	got := map[int32][]string{}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.Consume(cctx, func(_ context.Context, m *message.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if string(m.Body) == "poison" && !healed {
				attempts++
				return errors.New("not yet")
			}
			got[m.Partition] = append(got[m.Partition], string(m.Body))
			return nil
		})
	}()
	snap := func() (map[int32][]string, int) {
		mu.Lock()
		defer mu.Unlock()
		return map[int32][]string{0: slices.Clone(got[0]), 1: slices.Clone(got[1])}, attempts
	}
	require.Eventually(t, func() bool { g, a := snap(); return len(g[1]) == 3 && a > 10 }, 10*time.Second, 10*time.Millisecond)
	g, _ := snap()
	require.Equal(t, []string{"a0", "a1"}, g[0], "partition 0 waits at the poison message")
	require.Equal(t, []string{"b0", "b1", "b2"}, g[1], "partition 1 flows")
	mu.Lock()
	healed = true
	mu.Unlock()
	require.Eventually(t, func() bool { g, _ := snap(); return len(g[0]) == 5 }, 10*time.Second, 10*time.Millisecond)
	g, _ = snap()
	require.Equal(t, []string{"a0", "a1", "poison", "a3", "a4"}, g[0], "in order, nothing skipped")
	cancel()
	<-done
}

// TestRetryTopicsCreated: a group with RetryTopics on a broker that lacks
// <group>.retry and <group>.dlq creates them when it starts consuming (the
// retry topic with the group's topic's partitions, the dead-letter topic
// with one), and a poison message reaches the dead-letter topic through
// them; a second member finds them and creates nothing.
func TestRetryTopicsCreated(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Config(brokerConfig(t)), brokertest.HTTP(), brokertest.Quiet())
	br := struct{ addr string }{b.Addr()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := newClient(t, Brokers(br.addr))
	_, err := p.ProduceSync(ctx, &message.Message{Topic: topic, Body: []byte("poison")})
	require.NoError(t, err)
	c := newClient(t, Brokers(br.addr), ConsumeTopics(topic), ConsumerGroup("cg"), HandlerRetries(1, time.Millisecond),
		Reject(RetryTopics(RetryOptions{Backoff: []time.Duration{50 * time.Millisecond}, MaxDeliveries: 2})),
		HeartbeatInterval(100*time.Millisecond), FetchMaxWait(50*time.Millisecond))
	var calls atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- c.Consume(ctx, func(context.Context, *message.Message) error {
			calls.Add(1)
			return errors.New("always fails")
		})
	}()
	dlq := newClient(t, Brokers(br.addr), ConsumeTopics(DeadLetterTopicOf("cg")), FetchMaxWait(50*time.Millisecond))
	got := make(chan *message.Message, 1)
	go func() {
		for ctx.Err() == nil { // until Consume above has created the topic
			_ = dlq.Consume(ctx, func(_ context.Context, m *message.Message) error {
				select {
				case got <- m:
				default:
				}
				return nil
			})
			time.Sleep(20 * time.Millisecond)
		}
	}()
	select {
	case m := <-got:
		require.Equal(t, "poison", string(m.Body))
		v, _ := m.Headers.String(HeaderDeliveryCount)
		require.Equal(t, "2", v)
	case err := <-done:
		t.Fatalf("Consume ended: %v", err)
	case <-ctx.Done():
		t.Fatal("no dead letter")
	}
	require.EqualValues(t, 4, calls.Load(), "2 deliveries of 2 attempts")
	cn, err := c.rawConn(br.addr)
	require.NoError(t, err)
	infos, err := statsTopics(ctx, cn)
	require.NoError(t, err)
	parts := map[string]int{}
	for _, ti := range infos {
		parts[ti.Name] = ti.Partitions
	}
	require.Equal(t, 4, parts[RetryTopicOf("cg")])
	require.Equal(t, 1, parts[DeadLetterTopicOf("cg")])
	// Another member: the topics exist, Consume starts.
	c2 := newClient(t, Brokers(br.addr), ConsumeTopics(topic), ConsumerGroup("cg"), Reject(RetryTopics(RetryOptions{})),
		HeartbeatInterval(100*time.Millisecond), FetchMaxWait(50*time.Millisecond))
	require.NoError(t, c2.ensureRetryTopics(ctx))
	cancel()
	<-done
}

// TestRetryTopicsDefault: a group member given no Reject policy uses
// RetryTopics: it creates the group's topics and a rejected message goes
// to <group>.retry. On a broker with no admin API it cannot create them
// and falls back to Drop: Consume runs, the poison message is dropped and
// the next one handled.
func TestRetryTopicsDefault(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	withAPI := brokertest.Start(t, brokertest.Config(brokerConfig(t)), brokertest.HTTP(), brokertest.Quiet()).Addr()
	noAPI := startBroker(t).addr
	for _, addr := range []string{withAPI, noAPI} {
		p := newClient(t, Brokers(addr))
		_, err := p.ProduceSync(ctx, &message.Message{Topic: topic, Body: []byte("poison"), Key: []byte("k")},
			&message.Message{Topic: topic, Body: []byte("ok"), Key: []byte("k")})
		require.NoError(t, err)
		c := newClient(t, Brokers(addr), ConsumeTopics(topic), ConsumerGroup("dg"), HandlerRetries(0, 0),
			HeartbeatInterval(100*time.Millisecond), FetchMaxWait(50*time.Millisecond))
		require.NotNil(t, c.retrier, "RetryTopics is the default")
		cctx, ccancel := context.WithCancel(ctx)
		okc := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- c.Consume(cctx, func(_ context.Context, m *message.Message) error {
				if string(m.Body) == "poison" {
					return errors.New("poison")
				}
				close(okc)
				return nil
			})
		}()
		select {
		case <-okc:
		case err := <-done:
			t.Fatalf("%s: Consume ended: %v", addr, err)
		case <-ctx.Done():
			t.Fatalf("%s: the message after the poison one was not handled", addr)
		}
		cn, err := c.rawConn(addr)
		require.NoError(t, err)
		retried := func() int64 {
			infos, err := statsTopics(ctx, cn)
			require.NoError(t, err)
			for _, ti := range infos {
				if ti.Name == RetryTopicOf("dg") {
					return ti.MessageCount
				}
			}
			return -1 // absent
		}
		if addr == noAPI {
			require.True(t, c.retrier.dropping.Load(), "fell back to Drop")
			require.EqualValues(t, -1, retried())
		} else {
			require.False(t, c.retrier.dropping.Load())
			pending := func() string {
				body, err := stats(ctx, cn, "delayed")
				require.NoError(t, err)
				for _, l := range statsLines(body) {
					if v, ok := strings.CutPrefix(l, "pending "); ok {
						return v
					}
				}
				return ""
			}
			// The poison message waits 10 s (DefaultRetryBackoff[0]) in
			// the broker's timer for the retry topic, which exists.
			require.Eventually(t, func() bool { return retried() == 0 && pending() == "1" }, 10*time.Second, 20*time.Millisecond,
				"the poison message is held for the retry topic")
		}
		ccancel()
		<-done
	}
}

// TestRetryTopicsBrokerDown: a broker of the Client that cannot be reached
// when Consume starts is skipped (its consumers wait for it as before);
// the topics are created on the others.
func TestRetryTopicsBrokerDown(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 20*time.Second)
	up := brokertest.Start(t, brokertest.Config(brokerConfig(t)), brokertest.HTTP(), brokertest.Quiet()).Addr()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := ln.Addr().String()
	ln.Close()
	c := newClient(t, Brokers(up, down), ConsumeTopics(topic), ConsumerGroup("bd"), Reject(RetryTopics(RetryOptions{})),
		DialTimeout(500*time.Millisecond), RequestTimeout(time.Second))
	require.NoError(t, c.ensureRetryTopics(ctx))
	cn, err := c.rawConn(up)
	require.NoError(t, err)
	infos, err := statsTopics(ctx, cn)
	require.NoError(t, err)
	var names []string
	for _, ti := range infos {
		names = append(names, ti.Name)
	}
	require.Subset(t, names, []string{RetryTopicOf("bd"), DeadLetterTopicOf("bd")})
}
