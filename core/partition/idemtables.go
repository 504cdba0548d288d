package partition

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/idem"
	"github.com/metaq-go/metaq/core/store"
)

// IdemTables are a broker's idempotent-producer tables: one per partition
// (keyed by its log) and one per target of delayed puts (keyed by the
// broker's key for it), each made on first use with the bounds of the
// configuration then, all under one memory budget (idempotent_memory).
// With failover a table built under another epoch is reset at its next
// use: the broker was a slave (or fenced) meanwhile, and the log changed
// under the table (a promotion always takes a new epoch).
type IdemTables struct {
	m          sync.Map // key -> *IdemPart
	conf       func() idem.Config
	memory     func() int64
	epoch      func() (int64, bool)
	budgetOnce sync.Once
	budget     *idem.Budget
}

// NewIdemTables returns the tables: conf gives a new table's bounds (its
// Budget is the tables'), memory the budget's bound when it is first
// used, epoch the failover epoch (ok false: no failover).
func NewIdemTables(conf func() idem.Config, memory func() int64, epoch func() (e int64, ok bool)) *IdemTables {
	return &IdemTables{conf: conf, memory: memory, epoch: epoch}
}

// IdemPart is a table, the log its puts are in, and the failover epoch
// it describes.
type IdemPart struct {
	l     *store.Log
	t     *idem.Table
	epoch atomic.Int64
}

// Log is the log whose puts ip's table judges.
func (ip *IdemPart) Log() *store.Log { return ip.l }

// Part returns the table kept under key for log l, made on first use.
func (ts *IdemTables) Part(key any, l *store.Log) *IdemPart {
	v, ok := ts.m.Load(key)
	if !ok {
		cfg := ts.conf()
		cfg.Budget = ts.Budget()
		v, _ = ts.m.LoadOrStore(key, &IdemPart{l: l, t: idem.NewTable(cfg)})
	}
	return v.(*IdemPart)
}

// Table returns ip's table, reset first, with failover, when it was
// built under another epoch.
func (ts *IdemTables) Table(ip *IdemPart) *idem.Table {
	if e, ok := ts.epoch(); ok {
		if old := ip.epoch.Load(); old != e && ip.epoch.CompareAndSwap(old, e) {
			ip.t.Reset()
		}
	}
	return ip.t
}

// Budget is the bound on all the tables' memory, made on first use.
func (ts *IdemTables) Budget() *idem.Budget {
	ts.budgetOnce.Do(func() { ts.budget = idem.NewBudget(ts.memory()) })
	return ts.budget
}

// Tick advances every table's coarse clock (idem.Table.Tick), which also
// forgets its idle producers.
func (ts *IdemTables) Tick(now time.Time) {
	ts.m.Range(func(_, v any) bool {
		v.(*IdemPart).t.Tick(now)
		return true
	})
}

// IdemTick is how often Run advances the tables' clocks.
const IdemTick = 5 * time.Second

// Run advances every table's coarse clock (Tick) every IdemTick until done
// closes.
func (ts *IdemTables) Run(done <-chan struct{}) {
	tk := time.NewTicker(IdemTick)
	defer tk.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-tk.C:
			ts.Tick(now)
		}
	}
}

// IdemConfig is a new table's bounds in cfg (idempotent_producers,
// idempotent_idle_expiry, idempotent_rebuild_bytes).
func IdemConfig(cfg *conf.Config) idem.Config {
	return idem.Config{
		MaxProducers: cfg.IdempotentProducers,
		IdleExpiry:   time.Duration(cfg.IdempotentIdleExpiry) * time.Second,
		RebuildBytes: cfg.IdempotentRebuildBytes,
	}
}

// Forget drops the tables kept under keys (of logs that closed: a
// deleted topic), releasing their memory.
func (ts *IdemTables) Forget(keys ...any) {
	for _, k := range keys {
		if v, ok := ts.m.LoadAndDelete(k); ok {
			v.(*IdemPart).t.Release()
		}
	}
}
