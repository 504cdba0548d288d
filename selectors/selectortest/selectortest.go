// Package selectortest is the conformance suite every selector.Selector
// passes: sdk/selector's builtins, what selectors.Open returns, the bare
// plugin adapter and the example plugins.
//
//	func TestConformance(t *testing.T) {
//		selectortest.Run(t, func(t *testing.T) selector.Selector { return mySelector{} })
//	}
package selectortest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
)

// Option adjusts the suite.
type Option func(*config)

type config struct {
	group      func(*message.Message) (string, bool)
	partitions []int
	timeout    time.Duration
}

// Affinity declares what the selector promises to keep together: messages
// for which group returns the same string (and ok) get the same partition,
// across calls and goroutines, for the same partition list. For the hash
// builtin, group is the key.
func Affinity(group func(m *message.Message) (g string, ok bool)) Option {
	return func(c *config) { c.group = group }
}

// PartitionCounts sets the partition-list lengths the suite uses; default
// 1, 4 and 16.
func PartitionCounts(ns ...int) Option {
	return func(c *config) { c.partitions = ns }
}

// CallTimeout bounds each Select call the suite makes; default 10 s.
func CallTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout = d }
}

// Run runs the suite against one selector from newSelector; a selector
// with a Close method is closed at the end.
func Run(t *testing.T, newSelector func(t *testing.T) selector.Selector, opts ...Option) {
	t.Helper()
	cfg := config{partitions: []int{1, 4, 16}, timeout: 10 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	s := newSelector(t)
	if c, ok := s.(interface{ Close() error }); ok {
		t.Cleanup(func() { _ = c.Close() })
	}
	r := &runner{s: s, cfg: cfg}
	t.Run("Choices", r.choices)
	t.Run("NoPartitions", r.noPartitions)
	t.Run("Canceled", r.canceled)
	t.Run("Concurrent", r.concurrent)
	if cfg.group != nil {
		t.Run("Affinity", r.affinity)
	}
}

type runner struct {
	s   selector.Selector
	cfg config
}

// Partitions returns n partitions spread over two brokers, numbered so that
// an index into the list differs from the partition number.
func Partitions(n int) []message.Partition {
	ps := make([]message.Partition, n)
	for i := range ps {
		ps[i] = message.Partition{BrokerID: 1 + i%2, Partition: int32(i / 2)}
	}
	return ps
}

// Messages returns n varied messages of topic "conformance": with and
// without keys and attributes, empty and non-empty; seed varies the keys.
func Messages(n, seed int) []*message.Message {
	ms := make([]*message.Message, n)
	for i := range ms {
		m := &message.Message{Topic: "conformance", Body: make([]byte, (i*37)%100)}
		switch i % 4 {
		case 0:
			m.Key = []byte("key-" + strconv.Itoa(seed*1000+i))
		case 1:
			m.Attribute, m.HasAttribute = "orders.created."+strconv.Itoa(i%7), true
		case 2:
			m.Key = []byte("k" + strconv.Itoa(i%5))
			m.Attribute, m.HasAttribute = "", true
		}
		ms[i] = m
	}
	return ms
}

func (r *runner) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.timeout)
	t.Cleanup(cancel)
	return ctx
}

// one asks for m's partition among ps and checks the answer.
func (r *runner) one(ctx context.Context, ps []message.Partition, m *message.Message) (int, error) {
	before := *m
	c, err := r.s.Select(ctx, m.Topic, ps, m)
	if err != nil {
		return 0, fmt.Errorf("select: %w", err)
	}
	if c < 0 || c >= len(ps) {
		return 0, fmt.Errorf("choice %d out of [0, %d)", c, len(ps))
	}
	if m.Topic != before.Topic || string(m.Key) != string(before.Key) || m.Attribute != before.Attribute {
		return 0, errors.New("the selector modified the message")
	}
	return c, nil
}

func (r *runner) choices(t *testing.T) {
	ctx := r.ctx(t)
	for _, np := range r.cfg.partitions {
		ps := Partitions(np)
		orig := append([]message.Partition(nil), ps...)
		for i, m := range Messages(64, np) {
			if _, err := r.one(ctx, ps, m); err != nil {
				t.Fatalf("%d partitions, message %d: %v", np, i, err)
			}
		}
		for i := range ps {
			if ps[i] != orig[i] {
				t.Fatal("the selector modified the partition list")
			}
		}
	}
}

func (r *runner) noPartitions(t *testing.T) {
	for _, ps := range [][]message.Partition{nil, {}} {
		c, err := r.s.Select(r.ctx(t), "conformance", ps, Messages(1, 0)[0])
		if !errors.Is(err, selector.ErrNoPartitions) {
			t.Fatalf("no partitions: got %v, %v; want an error wrapping ErrNoPartitions", c, err)
		}
	}
}

func (r *runner) canceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m := Messages(1, 1)[0]
	c, err := r.s.Select(ctx, m.Topic, Partitions(4), m)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled context: got %v, %v; want an error wrapping context.Canceled", c, err)
	}
	// The selector still works afterwards.
	if _, err := r.one(r.ctx(t), Partitions(4), m); err != nil {
		t.Fatalf("after a canceled call: %v", err)
	}
}

func (r *runner) concurrent(t *testing.T) {
	const workers, calls = 8, 25
	ctx := r.ctx(t)
	errc := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, m := range Messages(calls, w) {
				np := r.cfg.partitions[(w+i)%len(r.cfg.partitions)]
				if _, err := r.one(ctx, Partitions(np), m); err != nil {
					errc <- fmt.Errorf("worker %d call %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

func (r *runner) affinity(t *testing.T) {
	for _, np := range r.cfg.partitions {
		t.Run("partitions="+strconv.Itoa(np), func(t *testing.T) {
			ctx := r.ctx(t)
			parts := Partitions(np)
			msgs := Messages(256, 7)
			var mu sync.Mutex
			seen := make(map[string]int)
			record := func(m *message.Message, c int) error {
				g, ok := r.cfg.group(m)
				if !ok {
					return nil
				}
				mu.Lock()
				defer mu.Unlock()
				if prev, ok := seen[g]; ok && prev != c {
					return fmt.Errorf("group %q got partition %d, earlier %d", g, c, prev)
				}
				seen[g] = c
				return nil
			}
			// In order, in reverse, and concurrently.
			errc := make(chan error, 4)
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range msgs {
						m := msgs[i]
						if w%2 == 1 {
							m = msgs[len(msgs)-1-i]
						}
						c, err := r.one(ctx, parts, m)
						if err == nil {
							err = record(m, c)
						}
						if err != nil {
							errc <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Error(err)
			}
		})
	}
}
