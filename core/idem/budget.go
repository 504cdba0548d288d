package idem

import (
	"math"
	"sync"
	"sync/atomic"
)

// The estimated memory a table counts (Table.Bytes, Budget.Used): a
// producer's struct (its last Window puts), its LRU element and map
// entry; each range a rebuild kept of it; each forgotten id kept.
const (
	ProducerBytes = 512
	rangeBytes    = 16
	GhostBytes    = 8
)

func (p *producer) bytes() int64 { return ProducerBytes + rangeBytes*int64(cap(p.ranges)) }

// Budget bounds the estimated memory of the tables that share it (a
// broker's idempotent_memory, over all its partitions): when a table's
// new producer takes the total over the limit, the least recently used
// producer of all the tables is forgotten, until it is under again. A
// forgotten producer's puts are refused as UnknownProducer (its id is
// kept as forgotten by its table, as for MaxProducers): never stored
// twice. Least recently used is to the resolution of the tables' clock
// (Tick): among producers last used in the same tick, the victim's table
// is the first one found.
type Budget struct {
	limit   int64
	used    atomic.Int64
	evicted atomic.Int64

	mu     sync.Mutex // one eviction at a time; taken before a table's mu, never after
	tables map[*Table]struct{}
}

// NewBudget returns a budget of limit bytes (<= 0: no limit).
func NewBudget(limit int64) *Budget {
	if limit <= 0 {
		limit = math.MaxInt64
	}
	return &Budget{limit: limit, tables: map[*Table]struct{}{}}
}

// Limit returns the budget's bound in bytes (math.MaxInt64: none).
func (b *Budget) Limit() int64 { return b.limit }

// Used returns the estimated memory of the budget's tables.
func (b *Budget) Used() int64 { return b.used.Load() }

// Evicted returns how many producers the budget made its tables forget.
func (b *Budget) Evicted() int64 { return b.evicted.Load() }

func (b *Budget) add(t *Table) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tables[t] = struct{}{}
}

func (b *Budget) remove(t *Table) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.tables, t)
}

// evict forgets the least recently used producers of the budget's tables
// while the total is over the limit. It locks one table at a time.
func (b *Budget) evict() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.used.Load() > b.limit {
		var victim *Table
		oldest := int64(math.MaxInt64)
		for t := range b.tables {
			if u, ok := t.oldestUse(); ok && u < oldest {
				victim, oldest = t, u
			}
		}
		if victim == nil || !victim.evictOldest() {
			return // nothing left to forget: only forgotten ids count
		}
		b.evicted.Add(1)
	}
}

// oldestUse returns the last use (Unix ns) of the table's least recently
// used producer.
func (t *Table) oldestUse() (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.lru.Back()
	if e == nil {
		return 0, false
	}
	return e.Value.(*producer).used, true
}

// evictOldest forgets the table's least recently used producer.
func (t *Table) evictOldest() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.lru.Back()
	if e == nil {
		return false
	}
	t.forget(e.Value.(*producer))
	t.evicted++
	return true
}
