// Package selectortest is the conformance suite every selectors.Selector
// passes: the builtins, the remote (plugin) adapter and the example
// plugins.
//
//	func TestConformance(t *testing.T) {
//		selectortest.Run(t, func(t *testing.T) selectors.Selector { return mySelector{} })
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

	"github.com/metaq-go/metaq/selectors"
)

// Option adjusts the suite.
type Option func(*config)

type config struct {
	group      func(selectors.Meta) (string, bool)
	partitions []int
	timeout    time.Duration
}

// Affinity declares what the selector promises to keep together: messages
// for which group returns the same string (and ok) get the same partition,
// within a batch, across calls and goroutines, for the same partition
// list. For the hash builtin, group is the key.
func Affinity(group func(m selectors.Meta) (g string, ok bool)) Option {
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

// Batches are the batch sizes the suite uses.
var Batches = []int{1, 16, 256}

// Run runs the suite against one selector from newSelector, closing it at
// the end.
func Run(t *testing.T, newSelector func(t *testing.T) selectors.Selector, opts ...Option) {
	t.Helper()
	cfg := config{partitions: []int{1, 4, 16}, timeout: 10 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	s := newSelector(t)
	if s == nil {
		t.Fatal("newSelector returned nil")
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = s.Close()
		}
	})
	r := &runner{cfg: cfg, s: s}
	t.Run("Choices", r.choices)
	t.Run("EmptyBatch", r.emptyBatch)
	t.Run("NoPartitions", r.noPartitions)
	t.Run("Canceled", r.canceled)
	t.Run("Concurrent", r.concurrent)
	if cfg.group != nil {
		t.Run("Affinity", r.affinity)
	}
	t.Run("Close", func(t *testing.T) {
		closed = true
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})
}

type runner struct {
	cfg config
	s   selectors.Selector
}

// Partitions returns n partitions spread over two brokers, numbered so that
// an index into the list differs from the partition number.
func Partitions(n int) []selectors.Partition {
	ps := make([]selectors.Partition, n)
	for i := range ps {
		ps[i] = selectors.Partition{BrokerID: 1 + i%2, Partition: int32(i / 2)}
	}
	return ps
}

// Messages returns n varied metas: with and without keys and attributes,
// empty and non-empty; seed varies the keys.
func Messages(n, seed int) []selectors.Meta {
	ms := make([]selectors.Meta, n)
	for i := range ms {
		m := &ms[i]
		m.Size = (i * 37) % 1000
		switch i % 4 {
		case 0:
			m.Key = []byte("key-" + strconv.Itoa(seed*1000+i))
		case 1:
			m.Attribute, m.HasAttribute = "orders.created."+strconv.Itoa(i%7), true
		case 2:
			m.Key = []byte("k" + strconv.Itoa(i%5))
			m.Attribute, m.HasAttribute = "", true
		}
	}
	return ms
}

func (r *runner) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.timeout)
	t.Cleanup(cancel)
	return ctx
}

// check returns an error unless resp answers req correctly.
func check(req *selectors.SelectRequest, resp *selectors.SelectResponse, err error) error {
	if err != nil {
		return fmt.Errorf("Select(topic %q, %d partitions, %d messages): %w", req.Topic, len(req.Partitions), len(req.Messages), err)
	}
	if resp == nil {
		return errors.New("Select returned a nil response and no error")
	}
	if len(resp.Choices) != len(req.Messages) {
		return fmt.Errorf("got %d choices for %d messages", len(resp.Choices), len(req.Messages))
	}
	for i, c := range resp.Choices {
		if c < 0 || c >= len(req.Partitions) {
			return fmt.Errorf("choice %d for message %d is outside [0, %d)", c, i, len(req.Partitions))
		}
	}
	return nil
}

func (r *runner) choices(t *testing.T) {
	for _, np := range r.cfg.partitions {
		for _, nb := range Batches {
			t.Run(fmt.Sprintf("partitions=%d/batch=%d", np, nb), func(t *testing.T) {
				req := &selectors.SelectRequest{Topic: "conformance", Partitions: Partitions(np), Messages: Messages(nb, np)}
				before := append([]selectors.Meta(nil), req.Messages...)
				resp, err := r.s.Select(r.ctx(t), req)
				if err := check(req, resp, err); err != nil {
					t.Fatal(err)
				}
				for i := range before {
					if string(before[i].Key) != string(req.Messages[i].Key) || before[i].Attribute != req.Messages[i].Attribute {
						t.Fatalf("Select modified message %d of the request", i)
					}
				}
			})
		}
	}
}

func (r *runner) emptyBatch(t *testing.T) {
	for _, msgs := range [][]selectors.Meta{nil, {}} {
		req := &selectors.SelectRequest{Topic: "conformance", Partitions: Partitions(3), Messages: msgs}
		resp, err := r.s.Select(r.ctx(t), req)
		if err := check(req, resp, err); err != nil {
			t.Fatalf("empty batch: %v", err)
		}
	}
}

func (r *runner) noPartitions(t *testing.T) {
	for _, ps := range [][]selectors.Partition{nil, {}} {
		req := &selectors.SelectRequest{Topic: "conformance", Partitions: ps, Messages: Messages(3, 0)}
		resp, err := r.s.Select(r.ctx(t), req)
		if !errors.Is(err, selectors.ErrNoPartitions) {
			t.Fatalf("no partitions: got %v, %v; want an error wrapping ErrNoPartitions", resp, err)
		}
	}
}

func (r *runner) canceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := &selectors.SelectRequest{Topic: "conformance", Partitions: Partitions(4), Messages: Messages(16, 1)}
	resp, err := r.s.Select(ctx, req)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled context: got %v, %v; want an error wrapping context.Canceled", resp, err)
	}
	// The selector still works afterwards.
	resp, err = r.s.Select(r.ctx(t), req)
	if err := check(req, resp, err); err != nil {
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
			for i := range calls {
				np := r.cfg.partitions[(w+i)%len(r.cfg.partitions)]
				req := &selectors.SelectRequest{Topic: "conformance-" + strconv.Itoa(w%3), Partitions: Partitions(np), Messages: Messages(1+(w*calls+i)%32, w)}
				resp, err := r.s.Select(ctx, req)
				if err := check(req, resp, err); err != nil {
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
			record := func(m selectors.Meta, c int) error {
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
			// The whole batch, then in slices of varied sizes, in reverse,
			// and concurrently.
			batches := [][]selectors.Meta{msgs}
			for lo, size := 0, 1; lo < len(msgs); lo, size = lo+size, size*2 {
				batches = append(batches, msgs[lo:min(lo+size, len(msgs))])
			}
			rev := make([]selectors.Meta, len(msgs))
			for i := range msgs {
				rev[len(msgs)-1-i] = msgs[i]
			}
			batches = append(batches, rev)
			errc := make(chan error, len(batches))
			var wg sync.WaitGroup
			for _, b := range batches {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req := &selectors.SelectRequest{Topic: "conformance", Partitions: parts, Messages: b}
					resp, err := r.s.Select(ctx, req)
					if err := check(req, resp, err); err != nil {
						errc <- err
						return
					}
					for i, c := range resp.Choices {
						if err := record(b[i], c); err != nil {
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
