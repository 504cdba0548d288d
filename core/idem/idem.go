// Package idem is the broker's idempotent-producer state: per partition, a
// bounded table of producer id -> the last sequence stored and the
// results of its last few puts, so that a retried put or mput whose
// messages are already stored is answered with the original result and
// not appended again (docs/protocol.md, "Idempotent producer").
//
// The producer id and sequence travel in the record (properties field
// bit 4), so the table is not persisted: it is rebuilt from the log's
// tail (Table.Rebuild), lazily, on the first put that carries them after
// the partition was opened or after a failover made this broker a master.
package idem

import (
	"container/list"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Window is the number of puts per producer whose results a table keeps
// (Kafka keeps 5 batches): a retry of one of them is answered with its
// offsets; an older duplicate only as "already stored".
const Window = 8

// Defaults of Config.
const (
	DefaultMaxProducers = 1024
	DefaultIdleExpiry   = 24 * time.Hour // Kafka's producer.id.expiration.ms
	DefaultRebuildBytes = 8 << 20
)

// Config bounds a Table.
type Config struct {
	// MaxProducers is how many producers a partition's table remembers;
	// the least recently used is forgotten first.
	MaxProducers int
	// IdleExpiry forgets a producer that has not put to the partition
	// for this long.
	IdleExpiry time.Duration
	// RebuildBytes is how far back from the end of the log Rebuild
	// reads (from the start of the segment holding that point).
	RebuildBytes int64
	// Budget, if set, bounds the memory of this table and the others
	// sharing it (budget.go): over it, the least recently used producer
	// of them all is forgotten.
	Budget *Budget
}

func (c Config) withDefaults() Config {
	if c.MaxProducers <= 0 {
		c.MaxProducers = DefaultMaxProducers
	}
	if c.IdleExpiry <= 0 {
		c.IdleExpiry = DefaultIdleExpiry
	}
	if c.RebuildBytes <= 0 {
		c.RebuildBytes = DefaultRebuildBytes
	}
	return c
}

// Verdict is what a table says of a put.
type Verdict int

// The verdicts of Begin.
const (
	// Append: new sequences (or a producer first seen); append the put,
	// then call Done or Fail with the ticket.
	Append Verdict = iota
	// Duplicate: every sequence is stored, from the start of one of the
	// last puts; Result is the original put's (Count the retry's).
	Duplicate
	// Stored: every sequence is stored, by a put older than the window
	// or from inside one: its offsets are not known.
	Stored
	// InFlight: some of the sequences are being appended now; the retry
	// must wait.
	InFlight
	// OutOfOrder: a known producer's put whose first sequence is past
	// the next one expected (a gap), or that holds stored and new
	// sequences together: the put itself was certainly not stored.
	OutOfOrder
	// UnknownProducer: a put of a producer the table does not know that
	// does not start at 0, or of one it forgot lately (evicted, expired,
	// failed) at any sequence: it may be a retry of a put stored before
	// the table forgot the producer, so its outcome is unknown to the
	// broker and nothing is stored.
	UnknownProducer
)

// Result is a stored put's reply: the first message's id and offset and
// the number of messages.
type Result struct {
	FirstID     int64
	FirstOffset int64
	Count       int
}

// batch is one put of a producer: sequences first..last.
type batch struct {
	first, last int64
	res         Result
	pending     bool
	failed      bool // its append failed: not stored, a retry of it is appended
}

type producer struct {
	id      int64
	last    int64 // last sequence stored or being stored
	batches [Window]batch
	n, head int   // batches[head] is the oldest of n
	used    int64 // Unix ns of the last put (the caller's coarse clock)
	elem    *list.Element
	// rebuilt: the producer was read back from the log (Rebuild), whose
	// sequences up to rebuiltUpTo are known stored only inside the runs
	// the window kept: a put that failed before a restart leaves no trace
	// but a gap, so a retry of a sequence outside them is not taken for
	// stored.
	rebuilt     bool
	rebuiltUpTo int64
	// ranges are the sequences the rebuild read records for, as merged
	// intervals (ascending; at most maxRanges, the newest): a sequence
	// in one is stored, one in a gap between them is not known to be.
	ranges [][2]int64
}

// maxRanges bounds the intervals of stored sequences a rebuild keeps per
// producer (a gap is a put that failed and was never retried: rare).
const maxRanges = 64

// inRanges reports whether first..last lie in one of p's rebuilt ranges.
func (p *producer) inRanges(first, last int64) bool {
	for _, r := range p.ranges {
		if r[0] <= first && last <= r[1] {
			return true
		}
	}
	return false
}

// push adds b as the newest batch; lost reports that the oldest one went
// out of the window still failed (a retry of it could no longer be told
// from a stored put).
func (p *producer) push(b batch) (lost bool) {
	if p.n < Window {
		p.batches[(p.head+p.n)%Window] = b
		p.n++
		return false
	}
	lost = p.batches[p.head].failed
	p.batches[p.head] = b
	p.head = (p.head + 1) % Window
	return lost
}

// refill judges a put of sequences first..last, all at or below last,
// against the failed batches (ok false: it overlaps none): a retry from
// the start of one is appended again (Append; the batch's rest stays
// failed); one that overlaps one otherwise must wait for the start's
// retry (InFlight). UnknownProducer: the split pushed a failed batch out
// of the window.
func (p *producer) refill(first, last int64) (v Verdict, ok bool) {
	for i := p.n - 1; i >= 0; i-- {
		b := &p.batches[(p.head+i)%Window]
		if !b.failed || b.last < first || b.first > last {
			continue
		}
		switch {
		case b.first != first || last > b.last:
			return InFlight, true
		case last == b.last:
			b.failed, b.pending = false, true
		default: // the start of it: the rest stays failed
			b.first = last + 1
			if p.push(batch{first: first, last: last, pending: true}) {
				return UnknownProducer, true
			}
		}
		return Append, true
	}
	return Append, false
}

func (p *producer) find(first int64) *batch {
	for i := p.n - 1; i >= 0; i-- {
		b := &p.batches[(p.head+i)%Window]
		if b.first == first {
			return b
		}
	}
	return nil
}

// judge answers a put of sequences first..last, all at or below last: a
// retry of one of the last puts (or of the start of one: a batch retried
// message by message) gets its result; one still being stored, InFlight;
// the rest is Stored.
func (p *producer) judge(first, last int64) (Verdict, Result) {
	covered := false
	for i := p.n - 1; i >= 0; i-- {
		b := &p.batches[(p.head+i)%Window]
		if b.failed || b.last < first || b.first > last {
			continue
		}
		if b.pending {
			return InFlight, Result{}
		}
		if b.first == first && last <= b.last && b.res.Count > 0 {
			r := b.res
			r.Count = int(last - first + 1)
			return Duplicate, r
		}
		if b.first <= first && last <= b.last && b.res.Count > 0 {
			covered = true
		}
	}
	if p.rebuilt && first <= p.rebuiltUpTo && !covered && !p.inRanges(first, last) {
		// Read back from the log, and not inside a run it holds: maybe
		// stored before the window, maybe a put that failed before the
		// restart (a gap). The broker cannot tell; nothing is stored.
		return UnknownProducer, Result{}
	}
	return Stored, Result{}
}

// Table is one partition's producer state. Safe for concurrent use.
type Table struct {
	cfg Config

	buildMu sync.Mutex // one Build at a time

	clock atomic.Int64 // Unix ns: Tick's last time (Clock)

	mu        sync.Mutex
	built     atomic.Bool // set under mu
	producers map[int64]*producer
	// recent holds the producers looked up last (lookup), so that a put
	// of one of a partition's few active producers finds it by scanning
	// a cache line of ids instead of hashing into the map: only live
	// producers (forget and Reset take theirs out), replaced in turn.
	recentID   [recentN]int64
	recentP    [recentN]*producer
	recentNext int
	lru        list.List // of *producer, most recently used at the front
	evicted    int64
	// ghosts holds the ids of the last ghostCap producers the table
	// forgot (a ring, oldest at ghostHead): a put of one of them at
	// sequence 0 is refused as UnknownProducer, not taken for a new
	// producer (a retry of its first put would be stored twice). Looked
	// up only for a producer the table does not know.
	ghosts    []int64
	ghostHead int
	// expiredAt is the time of the last expiry (expireNs; MinInt64 after
	// a Rebuild). Begin expires only when its time differs: at one time
	// the producers idle too long are those of the last expiry at it,
	// since every producer seen since took that time. Begin's callers pass
	// the coarse clock, so this skips reading the LRU's oldest producer
	// (another core's cache line) on nearly every put.
	expiredAt int64
	// pending counts the puts Start let append whose Finish has not come
	// (Build waits for those begun before a Reset).
	pending int
	// bytes is the table's estimated memory (ProducerBytes per producer,
	// rangeBytes per rebuilt range, GhostBytes per forgotten id), also
	// counted in cfg.Budget.
	bytes int64
}

// recentN is how many producers a table's recent cache holds.
const recentN = 16

// lookup returns producer id, or nil when the table does not know it;
// with mu held.
func (t *Table) lookup(id int64) *producer {
	for i, rid := range &t.recentID {
		if rid == id {
			if p := t.recentP[i]; p != nil {
				return p
			}
		}
	}
	p := t.producers[id]
	if p != nil {
		t.remember(p)
	}
	return p
}

// remember puts p in the recent cache, in place of the oldest entry.
func (t *Table) remember(p *producer) {
	i := t.recentNext
	t.recentID[i], t.recentP[i] = p.id, p
	t.recentNext = (i + 1) % recentN
}

// ghostCap is how many forgotten ids a table keeps: 4 x MaxProducers, at
// least 1024 (8 bytes each), so that producers that churn through a small
// table do not push a forgotten one out before its retry comes.
func (t *Table) ghostCap() int { return max(4*t.cfg.MaxProducers, 1024) }

// NewTable returns an empty table, not yet built.
func NewTable(cfg Config) *Table {
	t := &Table{cfg: cfg.withDefaults(), producers: map[int64]*producer{}}
	t.clock.Store(time.Now().UnixNano())
	if b := t.cfg.Budget; b != nil {
		b.add(t)
	}
	return t
}

// charge adds n bytes to the table's estimated memory and its budget's.
// Called with mu held.
func (t *Table) charge(n int64) {
	t.bytes += n
	if b := t.cfg.Budget; b != nil {
		b.used.Add(n)
	}
}

// Bytes returns the table's estimated memory (ProducerBytes per producer
// remembered, GhostBytes per forgotten id kept).
func (t *Table) Bytes() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bytes
}

// Release forgets every producer and takes the table out of its budget:
// its partition is gone (a deleted topic).
func (t *Table) Release() {
	t.Reset()
	if b := t.cfg.Budget; b != nil {
		b.remove(t)
	}
}

// Clock returns the time of the last Tick (or of NewTable): a coarse
// clock for Begin on the put path, which then reads no clock itself. Its
// resolution (the caller's tick) only delays an idle expiry.
func (t *Table) Clock() time.Time { return time.Unix(0, t.clock.Load()) }

// Tick advances Clock to now and forgets the producers idle longer than
// IdleExpiry: the owner calls it every few seconds.
func (t *Table) Tick(now time.Time) {
	t.clock.Store(now.UnixNano())
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expire(now)
}

// Config returns the table's configuration, defaults applied.
func (t *Table) Config() Config { return t.cfg }

// Built reports whether Rebuild has run (or Reset has not since).
func (t *Table) Built() bool { return t.built.Load() }

// Reset forgets every producer and marks the table unbuilt: the log it
// described may have changed under it (this broker was a slave).
func (t *Table) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.built.Store(false)
	clear(t.producers)
	clear(t.recentID[:])
	clear(t.recentP[:])
	t.lru.Init()
	t.ghosts, t.ghostHead = nil, 0
	t.charge(-t.bytes)
}

// Len returns the number of producers remembered.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.producers)
}

// Evicted returns how many producers the bounds made the table forget.
func (t *Table) Evicted() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.evicted
}

// Begin judges a put of producer id with sequences first..last (an mput's
// entries are consecutive). On Append the put is recorded as in flight
// and the caller must call Done or Fail with the same id and first.
func (t *Table) Begin(id, first, last int64, now time.Time) (Verdict, Result) {
	v, r, _ := t.start(id, first, last, now, false)
	return v, r
}

// Ticket is a put Start let append, for Finish: it holds the producer, so
// that the put path looks the producer up once.
type Ticket struct {
	p     *producer
	first int64
}

// Start is Begin that also returns the put's Ticket (valid on Append),
// which Finish takes instead of the id. With a Budget over its bound, it
// forgets the least recently used producers of the budget's tables after
// judging the put.
func (t *Table) Start(id, first, last int64, now time.Time) (Verdict, Result, Ticket) {
	return t.start(id, first, last, now, true)
}

func (t *Table) start(id, first, last int64, now time.Time, ticket bool) (Verdict, Result, Ticket) {
	t.mu.Lock()
	v, r, p := t.begin(id, first, last, now)
	if p != nil && ticket {
		t.pending++
	} else {
		p = nil
	}
	t.mu.Unlock()
	if b := t.cfg.Budget; b != nil && b.used.Load() > b.limit {
		b.evict()
	}
	return v, r, Ticket{p: p, first: first}
}

// Finish records the outcome of a put Start let append: Done's with ok,
// Fail's without. A producer forgotten meanwhile is left forgotten.
func (t *Table) Finish(k Ticket, r Result, ok bool) {
	if k.p == nil {
		return
	}
	t.mu.Lock()
	t.pending--
	if ok {
		k.p.done(k.first, r)
	} else {
		k.p.fail(k.first)
	}
	t.mu.Unlock()
}

// begin is Start's judgement, with mu held; p is the producer on Append.
func (t *Table) begin(id, first, last int64, at time.Time) (Verdict, Result, *producer) {
	now := at.UnixNano()
	if now != t.expiredAt { // the caller's coarse clock moved: see expiredAt
		t.expireNs(now)
	}
	p := t.lookup(id)
	if p == nil {
		// A producer starts at sequence 0 (Kafka's rule): a first sight
		// past 0 could be a producer this table forgot, or one whose
		// earlier puts were lost and may yet be retried; accepting it
		// would store such a retry again. So is a producer the table
		// forgot lately, even at 0. The client starts over with a new
		// id if the put is a first attempt, and reports the outcome as
		// unknown if it is a retry.
		if first != 0 || slices.Contains(t.ghosts, id) {
			return UnknownProducer, Result{}, nil
		}
		p = &producer{id: id}
		p.elem = t.lru.PushFront(p)
		t.producers[id] = p
		t.remember(p)
		t.charge(ProducerBytes)
		t.bound()
	} else {
		t.lru.MoveToFront(p.elem)
		p.used = now
		switch {
		case first == p.last+1:
		case first > p.last+1 || last > p.last: // a gap, or stored and new together
			return OutOfOrder, Result{}, nil
		default: // every sequence is stored, being stored, or failed
			if v, ok := p.refill(first, last); ok {
				if v == UnknownProducer { // a failed batch went out of the window
					t.forget(p)
				}
				return v, Result{}, nil
			}
			v, r := p.judge(first, last)
			return v, r, nil
		}
	}
	p.used = now
	p.last = last
	if p.push(batch{first: first, last: last, pending: true}) {
		// A failed batch went out of the window: its retry would be
		// taken for stored. Forget the producer (its puts are refused
		// as UnknownProducer) rather than say so; this put is appended,
		// its Done lost.
		t.forget(p)
	}
	return Append, Result{}, p
}

// Done records the result of a put Begin let append.
func (t *Table) Done(id, first int64, r Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.lookup(id); p != nil {
		p.done(first, r)
	}
}

func (p *producer) done(first int64, r Result) {
	if b := p.find(first); b != nil && b.pending {
		b.pending, b.res = false, r
	}
}

// Fail records that a put Begin let append was not stored. The producer
// and its other puts stay (those in flight still land with Done): the
// newest put is simply taken back, an older one is marked failed, and a
// retry of it (or of its start) is appended again.
func (t *Table) Fail(id, first int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.lookup(id); p != nil {
		p.fail(first)
	}
}

func (p *producer) fail(first int64) {
	b := p.find(first)
	if b == nil || !b.pending {
		return
	}
	if newest := &p.batches[(p.head+p.n-1)%Window]; b == newest && b.last == p.last {
		p.last = b.first - 1
		p.n--
		return
	}
	b.pending, b.failed = false, true
}

func (t *Table) forget(p *producer) {
	t.lru.Remove(p.elem)
	delete(t.producers, p.id)
	for i, rp := range &t.recentP {
		if rp == p {
			t.recentID[i], t.recentP[i] = 0, nil
		}
	}
	t.charge(-p.bytes())
	t.ghost(p.id)
}

// ghost remembers id as forgotten (bounded: the oldest ghost goes).
func (t *Table) ghost(id int64) {
	if len(t.ghosts) < t.ghostCap() {
		t.ghosts = append(t.ghosts, id)
		t.charge(GhostBytes)
		return
	}
	t.ghosts[t.ghostHead] = id
	t.ghostHead = (t.ghostHead + 1) % len(t.ghosts)
}

// bound forgets the least recently used producers over MaxProducers.
func (t *Table) bound() {
	for len(t.producers) > t.cfg.MaxProducers {
		t.forget(t.lru.Back().Value.(*producer))
		t.evicted++
	}
}

// expire forgets producers idle longer than IdleExpiry (from the least
// recently used end, which is the longest idle).
func (t *Table) expire(now time.Time) { t.expireNs(now.UnixNano()) }

func (t *Table) expireNs(now int64) {
	t.expiredAt = now
	for e := t.lru.Back(); e != nil; e = t.lru.Back() {
		p := e.Value.(*producer)
		if now-p.used < int64(t.cfg.IdleExpiry) {
			return
		}
		t.forget(p)
		t.evicted++
	}
}

// Build rebuilds the table with the records scan returns unless it is
// built already; concurrent callers wait for the first one's rebuild. It
// first waits for the puts in flight (Start's without their Finish yet):
// after a Reset, those begun before it.
// scan's error leaves the table unbuilt, for the next Build to retry.
func (t *Table) Build(now time.Time, scan func() (next func() (Record, bool), err error)) error {
	if t.Built() {
		return nil
	}
	t.buildMu.Lock()
	defer t.buildMu.Unlock()
	if t.Built() {
		return nil
	}
	if err := t.settle(); err != nil {
		return err
	}
	next, err := scan()
	if err != nil {
		return err
	}
	t.Rebuild(now, next)
	return nil
}

// settleWait bounds how long Build waits for the puts in flight.
var settleWait = 30 * time.Second

// settle waits (at most settleWait) until no put Start let append is in
// flight: after a Reset those begun before it may not be in the log yet,
// and a rebuild that read the log without them would take their retries
// for new puts (stored twice when the first copy lands).
func (t *Table) settle() error {
	deadline := time.Now().Add(settleWait)
	for {
		t.mu.Lock()
		n := t.pending
		t.mu.Unlock()
		if n <= 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d idempotent puts begun before the table was reset are still in flight after %v", n, settleWait)
		}
		time.Sleep(time.Millisecond)
	}
}

// Record is one stored record as Rebuild reads it.
type Record struct {
	Producer, Seq int64
	ID, Offset    int64
	Size          int64 // encoded size, header included
}

// Rebuild marks the table built and replays records (oldest first, from
// the log's tail; next returns false at the end) into it: per producer the
// last sequence and, as its puts, runs of consecutive sequences stored
// back to back. A put of an mput is such a run; back-to-back single puts
// merge into one, so a retry of one of them after a restart is answered
// as Stored rather than with its offset. Entries already in the table
// (puts that raced the rebuild) stay.
func (t *Table) Rebuild(now time.Time, next func() (Record, bool)) {
	type run struct {
		b   batch
		end int64 // offset after the run's last record
	}
	runs := map[int64]*run{}
	seen := map[int64]*producer{}
	var order []int64
	for {
		r, ok := next()
		if !ok {
			break
		}
		p := seen[r.Producer]
		if p == nil {
			p = &producer{id: r.Producer, last: -1}
			seen[r.Producer] = p
		}
		order = append(order, r.Producer)
		switch n := len(p.ranges); {
		case n > 0 && r.Seq == p.ranges[n-1][1]+1:
			p.ranges[n-1][1] = r.Seq
		case n == 0 || r.Seq > p.ranges[n-1][1]+1:
			if n == maxRanges {
				p.ranges = append(p.ranges[:0], p.ranges[1:]...)
			}
			p.ranges = append(p.ranges, [2]int64{r.Seq, r.Seq})
		}
		cur := runs[r.Producer]
		if cur != nil && r.Seq == cur.b.last+1 && r.Offset == cur.end && r.ID == cur.b.res.FirstID+int64(cur.b.res.Count) {
			cur.b.last = r.Seq
			cur.b.res.Count++
			cur.end += r.Size
		} else {
			if cur != nil {
				p.push(cur.b)
			}
			runs[r.Producer] = &run{b: batch{first: r.Seq, last: r.Seq, res: Result{FirstID: r.ID, FirstOffset: r.Offset, Count: 1}}, end: r.Offset + r.Size}
		}
		p.last = r.Seq
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.built.Store(true)
	t.expiredAt = math.MinInt64 // its producers took its time, maybe an older one: expire at the next Begin
	// Least recently used first, so that the last producer seen ends at
	// the front of the LRU.
	done := map[int64]bool{}
	for i := len(order) - 1; i >= 0; i-- {
		id := order[i]
		if done[id] {
			continue
		}
		done[id] = true
		if len(done) > t.cfg.MaxProducers { // past the bound: known as forgotten
			if _, live := t.producers[id]; !live {
				t.ghost(id)
			}
			continue
		}
		if _, live := t.producers[id]; live {
			continue
		}
		p := seen[id]
		if r := runs[id]; r != nil {
			p.push(r.b)
		}
		p.rebuilt, p.rebuiltUpTo = true, p.last
		p.used = now.UnixNano()
		p.elem = t.lru.PushBack(p)
		t.producers[id] = p
		t.charge(p.bytes())
	}
	t.bound()
}
