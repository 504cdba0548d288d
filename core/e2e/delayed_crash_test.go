package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/brokertest"
	mqclient "github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// delayedCrashSpan is the spread of the delivery times of the delayed
// crash tests' messages: METAQ_DELAYED_CRASH_SPAN seconds (make soak), else
// 3 s.
func delayedCrashSpan(t *testing.T) time.Duration {
	if s := os.Getenv("METAQ_DELAYED_CRASH_SPAN"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "METAQ_DELAYED_CRASH_SPAN")
		return time.Duration(n) * time.Second
	}
	return 3 * time.Second
}

// delayedCrashRounds is how many crashes TestDelayedKill9 makes:
// METAQ_DELAYED_CRASH_ROUNDS (make soak), else 3.
func delayedCrashRounds(t *testing.T) int {
	if s := os.Getenv("METAQ_DELAYED_CRASH_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "METAQ_DELAYED_CRASH_ROUNDS")
		require.Positive(t, n, "METAQ_DELAYED_CRASH_ROUNDS")
		return n
	}
	return 3
}

// delayedSent is an acknowledged delayed put: its msgId and the time it
// asked to be delivered at.
type delayedSent struct {
	id int64
	at time.Time
}

// delayedWatch follows the partitions of a topic on the current broker
// (re-reading them from the start after a restart) and notes when each
// msgId was first seen, to check that none was delivered early.
type delayedWatch struct {
	topic string
	parts int
	mu    sync.Mutex
	addr  string
	first map[int64]time.Time
	stop  chan struct{}
	done  chan struct{}
}

func newDelayedWatch(topic string, parts int) *delayedWatch {
	return &delayedWatch{topic: topic, parts: parts, first: map[int64]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
}

// follow makes the watch read the broker at addr.
func (w *delayedWatch) follow(addr string) {
	w.mu.Lock()
	w.addr = addr
	w.mu.Unlock()
}

func (w *delayedWatch) run() {
	defer close(w.done)
	var c *client
	var at string
	offs := make([]int64, w.parts)
	for {
		select {
		case <-w.stop:
			if c != nil {
				c.close()
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
		w.mu.Lock()
		addr := w.addr
		w.mu.Unlock()
		if addr != at || c == nil {
			if c != nil {
				c.close()
				c = nil
			}
			var err error
			if c, err = dialClient(addr); err != nil {
				c = nil
				continue
			}
			at = addr
			clear(offs)
		}
		for p := range int32(w.parts) {
			r, err := c.get(w.topic, p, offs[p], 1<<20)
			if err != nil {
				c.close()
				c = nil
				break
			}
			if r.Op != protocol.OpValue {
				if r.Code == protocol.StatusMoved {
					if v, ok := protocol.ParseInt64(r.Body); ok {
						offs[p] = v
					}
				}
				continue
			}
			now := time.Now()
			it := message.NewIterator(r.Body, offs[p], 0)
			w.mu.Lock()
			for it.Next() {
				if _, seen := w.first[it.Record().ID]; !seen {
					w.first[it.Record().ID] = now
				}
			}
			w.mu.Unlock()
			offs[p] = it.NextOffset()
		}
	}
}

func (w *delayedWatch) halt() {
	close(w.stop)
	<-w.done
}

// delayedLoad sends delayed messages to topic through cl from 4
// goroutines until stop is closed: each asks for delivery 200 ms to 200 ms
// + span after its send, and a send is given sendTimeout. It returns the
// acknowledged ones.
func delayedLoad(cl *mqclient.Client, topic string, span, sendTimeout time.Duration, seed uint64, stop <-chan struct{}) []delayedSent {
	var mu sync.Mutex
	var out []delayedSent
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				at := time.Now().Add(200*time.Millisecond + time.Duration(rng.Int64N(int64(span))))
				m := &message.Message{Topic: topic, Body: fmt.Appendf(nil, "g%d-%d", g, i), DeliverAt: at}
				ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
				res, err := cl.ProduceSync(ctx, m)
				cancel()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				mu.Lock()
				out = append(out, delayedSent{id: res[0].ID, at: at})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// delayedCrashes runs the delayed crash workload: rounds times, a broker
// started by start takes delayed messages (due over the next span) for a
// random moment, then crash ends it (kill -9, or kill -9 and a power
// cut). A last start delivers what is left. Every acknowledged message
// must be delivered, none before its time; it returns how many msgIds
// were delivered more than once (the test logs it).
func delayedCrashes(t *testing.T, topic string, parts, rounds int, start func(round int) *brokertest.Server, crash func(round int, srv *brokertest.Server)) (dups int) {
	return delayedCrashesWith(t, topic, parts, rounds, delayedLoad, start, crash)
}

// delayedLoadFunc sends delayed messages to topic through cl until stop
// is closed and returns the acknowledged ones (delayedLoad, txDelayedLoad).
type delayedLoadFunc func(cl *mqclient.Client, topic string, span, sendTimeout time.Duration, seed uint64, stop <-chan struct{}) []delayedSent

// delayedCrashesWith is delayedCrashes with the workload load.
func delayedCrashesWith(t *testing.T, topic string, parts, rounds int, load delayedLoadFunc, start func(round int) *brokertest.Server, crash func(round int, srv *brokertest.Server)) (dups int) {
	span := delayedCrashSpan(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	w := newDelayedWatch(topic, parts)
	go w.run()
	defer func() {
		select {
		case <-w.done:
		default:
			w.halt()
		}
	}()
	var sent []delayedSent
	var srv *brokertest.Server
	for round := 0; round <= rounds; round++ {
		srv = start(round)
		w.follow(srv.Addr)
		if round == rounds {
			break
		}
		stop := make(chan struct{})
		res := make(chan []delayedSent)
		cl, err := mqclient.New(mqclient.Brokers(srv.Addr), mqclient.ProduceTimeout(2*time.Second),
			mqclient.Logger(slog.New(slog.DiscardHandler)))
		require.NoError(t, err)
		go func() {
			defer cl.Close(context.Background())
			res <- load(cl, topic, span, 3*time.Second, seed+uint64(round), stop)
		}()
		d := time.Duration(300+rng.IntN(700)) * time.Millisecond
		time.Sleep(d)
		crash(round, srv)
		close(stop)
		got := <-res
		t.Logf("round %d: crashed after %v with %d delayed messages acknowledged", round, d, len(got))
		sent = append(sent, got...)
	}
	return delayedCheck(t, srv.Addr, topic, parts, sent, w)
}

// delayedCheck waits until every message of sent is due and seen by the
// watch w (or 30 s more) and the broker at addr holds no delayed message,
// then reads topic there: every acknowledged message must be delivered,
// none before its time. It returns how many msgIds were stored more than
// once.
func delayedCheck(t *testing.T, addr, topic string, parts int, sent []delayedSent, w *delayedWatch) (dups int) {
	require.NotEmpty(t, sent, "no delayed put was acknowledged")
	last := time.Time{}
	for _, s := range sent {
		if s.at.After(last) {
			last = s.at
		}
	}
	// Wait until everything is due, then until the watch has seen every
	// acknowledged message (or 30 s more) and the timer holds nothing.
	time.Sleep(time.Until(last))
	c := dial(t, addr)
	defer c.close()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		missing := 0
		w.mu.Lock()
		for _, s := range sent {
			if _, seen := w.first[s.id]; !seen {
				missing++
			}
		}
		w.mu.Unlock()
		st := parseStats(t, ok(t)(c.stats("delayed")).Body)
		if missing == 0 && st["pending"] == "0" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the watch's last poll
	w.halt()
	count := map[int64]int{}
	for p := range int32(parts) {
		recs, _, err := readPartition(c, topic, p, 1<<20)
		require.NoError(t, err)
		for _, r := range recs {
			count[r.ID]++
		}
	}
	for _, s := range sent {
		n := count[s.id]
		require.Positive(t, n, "acknowledged delayed message %d (due %v) never delivered", s.id, s.at.Format(time.RFC3339Nano))
		first, seen := w.first[s.id]
		require.True(t, seen, "delayed message %d delivered but not seen by the watch", s.id)
		require.False(t, first.Before(s.at), "delayed message %d delivered early: seen %v, due %v", s.id, first.Format(time.RFC3339Nano), s.at.Format(time.RFC3339Nano))
	}
	for _, n := range count {
		if n > 1 {
			dups += n - 1
		}
	}
	t.Logf("%d delayed messages acknowledged, %d msgIds stored, %d duplicate deliveries (by msgId)", len(sent), len(count), dups)
	return dups
}
