package index

import (
	"cmp"
	"slices"
	"sync"

	"github.com/metaq-go/metaq/core/store"
)

// Set is the key and id index of a broker's partitions: one background
// Indexer per data directory, following the logs opened in it. The zero
// Set is ready; a broker with index_keys = false adds no logs, and its
// lookups scan them (Set.Lookup).
type Set struct {
	mu     sync.Mutex
	byDir  map[string]*Indexer
	closed bool
}

// Add starts following parts (opened in data directory dir), starting
// that directory's Indexer (logging with logf) on first use. A partition
// that cannot be indexed is reported to errorf, and its lookups scan its
// log.
func (s *Set) Add(dir string, parts []*store.Log, opts Options, logf, errorf func(string, ...any)) {
	if len(parts) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if s.byDir == nil {
		s.byDir = map[string]*Indexer{}
	}
	x := s.byDir[dir]
	if x == nil {
		x = NewIndexer(logf)
		x.Start()
		s.byDir[dir] = x
	}
	for _, l := range parts {
		if _, err := x.Add(l, opts); err != nil {
			errorf("index: %v (lookups in %s scan its log)", err, l.Dir())
		}
	}
}

// Remove stops following parts and seals their open chunks; call it
// before they close.
func (s *Set) Remove(parts []*store.Log) {
	s.mu.Lock()
	xs := make([]*Indexer, 0, len(s.byDir))
	for _, x := range s.byDir {
		xs = append(xs, x)
	}
	s.mu.Unlock()
	for _, l := range parts {
		for _, x := range xs {
			x.Remove(l)
		}
	}
}

// Part returns the index of l, nil when it has none.
func (s *Set) Part(l *store.Log) *Part {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.byDir {
		if p := x.Part(l); p != nil {
			return p
		}
	}
	return nil
}

// Lookup finds q's records in l through its index, or a scan of the log
// where it has none (maxMsg is the largest message a scan expects).
func (s *Set) Lookup(l *store.Log, q Query, maxMsg int) (Result, error) {
	if p := s.Part(l); p != nil {
		return p.Lookup(q)
	}
	return Scan(l, q, maxMsg)
}

// DirStats is one data directory's index, for the metrics.
type DirStats struct {
	Dir string
	Stats
}

// Stats are each data directory's Indexer's stats, by directory.
func (s *Set) Stats() []DirStats {
	s.mu.Lock()
	out := make([]DirStats, 0, len(s.byDir))
	xs := make([]*Indexer, 0, len(s.byDir))
	for d, x := range s.byDir {
		out = append(out, DirStats{Dir: d})
		xs = append(xs, x)
	}
	s.mu.Unlock()
	for i, x := range xs {
		out[i].Stats = x.Stats()
	}
	slices.SortFunc(out, func(a, b DirStats) int { return cmp.Compare(a.Dir, b.Dir) })
	return out
}

// Close stops every Indexer (before the logs close); later Adds do
// nothing.
func (s *Set) Close() {
	s.mu.Lock()
	s.closed = true
	xs := s.byDir
	s.byDir = nil
	s.mu.Unlock()
	for _, x := range xs {
		x.Close()
	}
}
