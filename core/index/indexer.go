package index

import (
	"slices"
	"sync"
	"time"

	"github.com/metaq-go/metaq/core/store"
)

// DefaultInterval is how often an Indexer looks for new records.
const DefaultInterval = 50 * time.Millisecond

// DefaultBudget is the most bytes of one partition an Indexer indexes per
// pass; what it leaves is indexed at the next pass, and a lookup scans it
// meanwhile.
const DefaultBudget = 32 << 20

// DefaultMaxOpenEntries bounds the entries of the open chunks of all the
// partitions of an Indexer (8 bytes each: 64 MiB).
const DefaultMaxOpenEntries = 8 << 20

// Indexer follows the logs of one data directory in the background, off
// the put path: every Interval it indexes what each log committed since
// the last pass. When the open chunks of its partitions hold more than
// MaxOpenEntries entries in all, it seals the largest.
type Indexer struct {
	Interval       time.Duration
	Budget         int64
	MaxOpenEntries int
	Logf           func(format string, args ...any)

	mu    sync.Mutex
	parts map[*store.Log]*Part
	wake  chan struct{}
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
	close sync.Once
}

// NewIndexer returns an Indexer; Start runs it.
func NewIndexer(logf func(format string, args ...any)) *Indexer {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &Indexer{Interval: DefaultInterval, Budget: DefaultBudget, MaxOpenEntries: DefaultMaxOpenEntries, Logf: logf,
		parts: map[*store.Log]*Part{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// Start runs the indexer's goroutine (once).
func (x *Indexer) Start() {
	x.once.Do(func() {
		x.wg.Add(1)
		go x.loop()
	})
}

// Add opens the index of l (in l's directory) and follows it.
func (x *Indexer) Add(l *store.Log, opts Options) (*Part, error) {
	if opts.Logf == nil {
		opts.Logf = x.Logf
	}
	p, err := Open(l.Dir(), l, opts)
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	x.parts[l] = p
	x.mu.Unlock()
	x.Kick()
	return p, nil
}

// Part returns the index of l, nil if l is not followed.
func (x *Indexer) Part(l *store.Log) *Part {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.parts[l]
}

// Remove stops following l and closes its index (sealing its open
// chunk); call it before l's Close.
func (x *Indexer) Remove(l *store.Log) {
	x.mu.Lock()
	p := x.parts[l]
	delete(x.parts, l)
	x.mu.Unlock()
	if p != nil {
		if err := p.Close(); err != nil {
			x.Logf("index %s: close: %v", p.dir, err)
		}
	}
}

// Kick asks for a pass now.
func (x *Indexer) Kick() {
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

// Close stops the goroutine; the parts still followed are closed.
func (x *Indexer) Close() {
	x.close.Do(func() {
		close(x.done)
		x.wg.Wait()
		x.mu.Lock()
		ps := x.parts
		x.parts = map[*store.Log]*Part{}
		x.mu.Unlock()
		for _, p := range ps {
			_ = p.Close()
		}
	})
}

func (x *Indexer) loop() {
	defer x.wg.Done()
	tk := time.NewTicker(x.Interval)
	defer tk.Stop()
	for {
		select {
		case <-x.done:
			return
		case <-tk.C:
		case <-x.wake:
		}
		x.Pass()
	}
}

// Pass indexes, for every followed log, up to Budget bytes.
func (x *Indexer) Pass() {
	x.mu.Lock()
	ps := make([]*Part, 0, len(x.parts))
	for _, p := range x.parts {
		ps = append(ps, p)
	}
	x.mu.Unlock()
	for _, p := range ps {
		select {
		case <-x.done:
			return
		default:
		}
		if _, err := p.Advance(x.Budget); err != nil {
			x.Logf("index %s: %v", p.dir, err)
		}
	}
	x.boundOpen(ps)
}

// boundOpen seals the largest open chunks while they hold more than
// MaxOpenEntries entries in all.
func (x *Indexer) boundOpen(ps []*Part) {
	type open struct {
		p *Part
		n int
	}
	var os []open
	total := 0
	for _, p := range ps {
		n := p.OpenEntries()
		total += n
		os = append(os, open{p, n})
	}
	if total <= x.MaxOpenEntries {
		return
	}
	slices.SortFunc(os, func(a, b open) int { return b.n - a.n })
	for _, o := range os {
		if total <= x.MaxOpenEntries/2 {
			break
		}
		if err := o.p.SealOpen(); err != nil {
			x.Logf("index %s: %v", o.p.dir, err)
			continue
		}
		total -= o.n
	}
}

// Stats sums the Stats of the partitions followed.
func (x *Indexer) Stats() Stats {
	x.mu.Lock()
	ps := make([]*Part, 0, len(x.parts))
	for _, p := range x.parts {
		ps = append(ps, p)
	}
	x.mu.Unlock()
	var s Stats
	for _, p := range ps {
		ps := p.Stats()
		s.Chunks += ps.Chunks
		s.Bytes += ps.Bytes
		s.Entries += ps.Entries
		s.Lag += ps.Lag
	}
	return s
}
