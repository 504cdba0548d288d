package timer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/prometheus/client_golang/prometheus"
)

// The delivery side of delayed messages (docs/delayed.md): one loop per
// timer partition indexes what the timer log gained into its wheel and,
// when messages fall due, appends them to their target partitions with
// their original msgIds, then a delivered mark to the timer log. The
// broker accepts delayed puts into the timer log itself (it answers
// them); the loops reach the broker only through Host, so that another
// front end (a second wire protocol) shares them.

// Tick is how often a timer loop looks for due messages.
const Tick = 50 * time.Millisecond

// chunk bounds the messages one delivery round appends.
const chunk = 4096

// ErrNoLog is Host.TimerLog's answer while the timer topic has never been
// used on this broker: the loop waits for it, quietly.
var ErrNoLog = errors.New("no timer log")

// Waiter is told when an append Host.Append started is durable (and
// replicated, with a sync slave), or failed: store.Waiter and
// repl.PutDone.
type Waiter interface {
	AppendDone(token uint64, firstID, firstOffset int64, err error)
	SyncFailed(token uint64, err error)
}

// Host is what the loops need of the broker that runs them.
type Host interface {
	// Delivering reports whether this broker delivers now: it takes
	// puts (not a slave, not fenced). A loop that is not delivering
	// drops its wheel and rebuilds it when it is again (a promotion).
	Delivering() bool
	// TimerLog returns timer partition i's log and the directory of its
	// wheel, or ErrNoLog.
	TimerLog(i int) (l *store.Log, wheelDir string, err error)
	// Target returns the log of partition p of topic, or an error when
	// the topic or the partition does not exist.
	Target(topic string, p int32) (*store.Log, error)
	// Append appends entries to partition p of topic (log l) as a put
	// is appended (through the sync master when there is one). An entry
	// with an ID keeps it; w is called unless Append returns an error.
	Append(topic string, l *store.Log, p int32, entries []store.Entry, w Waiter) error
	// Delivered counts n due messages appended to partition p of topic.
	Delivered(topic string, p int32, n int)
	// MaxMessageSize is the broker's max_message_size now.
	MaxMessageSize() int
}

// Options configure a Service.
type Options struct {
	Partitions int // timer_partitions
	// NoMarks makes the loops write no delivered marks (a test knob:
	// every round's mark lost, as in a crash).
	NoMarks             bool
	Logf, Warnf, Errorf func(format string, args ...any) // Warnf is Errorf when nil
	Now                 func() time.Time                 // time.Now when nil
	LatenessBucket      []float64                        // the lateness histogram's buckets; a default when nil
	// MaxDelay is max_delay now: a rebuilt wheel holding messages due
	// later than now + MaxDelay (max_delay lowered) logs a warning. None
	// when nil.
	MaxDelay func() time.Duration
}

// Service runs the timer loops and keeps their counters.
type Service struct {
	host Host
	opts Options

	// Accepted, Cancels: the broker counts delayed puts and cancels it
	// stored; Delivered and Dropped the loops count (dropped: due
	// messages whose topic or partition no longer exists).
	Accepted, Delivered, Cancels, Dropped atomic.Int64

	pending  []atomic.Int64 // per timer partition
	lateness prometheus.Histogram
	wake     []chan struct{}
	ask      []chan dueAsk
}

// New returns a Service for opts.Partitions timer partitions.
func New(h Host, opts Options) *Service {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Errorf == nil {
		opts.Errorf = opts.Logf
	}
	if opts.Warnf == nil {
		opts.Warnf = opts.Errorf
	}
	if opts.LatenessBucket == nil {
		opts.LatenessBucket = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300}
	}
	s := &Service{host: h, opts: opts, pending: make([]atomic.Int64, opts.Partitions),
		wake: make([]chan struct{}, opts.Partitions), ask: make([]chan dueAsk, opts.Partitions)}
	for i := range s.wake {
		s.wake[i] = make(chan struct{}, 1)
		s.ask[i] = make(chan dueAsk, 1)
	}
	s.lateness = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "metaq_delayed_lateness_seconds",
		Help:    "How late delayed messages were appended to their partitions, from their due time.",
		Buckets: opts.LatenessBucket,
	})
	return s
}

// Partitions is the number of timer partitions.
func (s *Service) Partitions() int { return len(s.wake) }

// Start starts one loop per timer partition. Each ends when done is
// closed and then calls wg.Done.
func (s *Service) Start(done <-chan struct{}, wg *sync.WaitGroup) {
	for i := range s.wake {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.loop(i, done)
		}()
	}
}

// Wake has timer partition i's loop look for due messages now.
func (s *Service) Wake(i int) {
	if i >= 0 && i < len(s.wake) {
		select {
		case s.wake[i] <- struct{}{}:
		default:
		}
	}
}

// Pending returns the delayed messages held, over every timer partition.
func (s *Service) Pending() int64 {
	var n int64
	for i := range s.pending {
		n += s.pending[i].Load()
	}
	return n
}

// PartitionPending returns the delayed messages timer partition i holds.
func (s *Service) PartitionPending(i int) int64 { return s.pending[i].Load() }

// Lateness is the histogram of delivery time minus due time.
func (s *Service) Lateness() prometheus.Histogram { return s.lateness }

// Collect adds the timer's series to a scrape.
func (s *Service) Collect(ch chan<- prometheus.Metric) {
	gauge := func(name, help string, v float64) {
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, help, nil, nil), prometheus.GaugeValue, v)
	}
	counter := func(name, help string, v float64) {
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, help, nil, nil), prometheus.CounterValue, v)
	}
	gauge("metaq_delayed_pending", "Delayed messages held by the timer, not yet due (or due and not appended yet).", float64(s.Pending()))
	counter("metaq_delayed_accepted_total", "Delayed messages accepted into the timer log.", float64(s.Accepted.Load()))
	counter("metaq_delayed_delivered_total", "Delayed messages appended to their partitions when due.", float64(s.Delivered.Load()))
	counter("metaq_delayed_cancels_total", "Cancellations of delayed messages recorded.", float64(s.Cancels.Load()))
	counter("metaq_delayed_dropped_total", "Due delayed messages whose topic or partition no longer exists.", float64(s.Dropped.Load()))
	s.lateness.Collect(ch)
}

// dueAsk is one request for a wheel's counts by due time.
type dueAsk struct {
	now    int64
	bounds []int64
	reply  chan []int64 // buffered: the loop never blocks on it
}

// DueCounts adds up the pending messages by due time over the wheels, as
// Wheel.DueCounts does for one. A wheel belongs to its loop, so each
// loop is asked and answers between rounds; a loop with no wheel (a
// slave, a timer never used) or one that does not answer before ctx is
// done is left out: asked and answered say how many there were.
func (s *Service) DueCounts(ctx context.Context, now int64, bounds []int64) (total []int64, answered, asked int) {
	total = make([]int64, len(bounds)+1)
	for i := range s.ask {
		a := dueAsk{now: now, bounds: bounds, reply: make(chan []int64, 1)}
		select {
		case s.ask[i] <- a:
		case <-ctx.Done():
			continue
		}
		select {
		case c := <-a.reply:
			if c != nil {
				answered++
				for k := range total {
					total[k] += c[k]
				}
			}
		case <-ctx.Done():
		}
	}
	return total, answered, len(s.ask)
}

// loop runs timer partition i's wheel while the broker delivers: the
// wheel is rebuilt from the timer log when the loop starts and after a
// promotion, so the delivery position is the last delivered mark the
// log holds.
func (s *Service) loop(i int, done <-chan struct{}) {
	tk := time.NewTicker(Tick)
	defer tk.Stop()
	var w *Wheel
	var l *store.Log
	var failing time.Time
	for {
		select {
		case <-done:
			return
		case <-tk.C:
		case <-s.wake[i]:
		case a := <-s.ask[i]:
			if w == nil {
				a.reply <- nil
			} else {
				a.reply <- w.DueCounts(a.now, a.bounds)
			}
			continue
		}
		if !s.host.Delivering() {
			w = nil // rebuilt when this broker delivers again
			continue
		}
		if s.opts.Now().Before(failing) {
			continue
		}
		if w == nil {
			var err error
			if w, l, err = s.open(i); err != nil {
				if errors.Is(err, ErrNoLog) {
					continue
				}
				s.opts.Errorf("timer %d: %v (retrying in 5s)", i, err)
				w, failing = nil, s.opts.Now().Add(5*time.Second)
				continue
			}
		}
		if err := s.round(i, w, l, done); err != nil {
			s.opts.Errorf("timer %d: %v (retrying in 1s)", i, err)
			w, failing = nil, s.opts.Now().Add(time.Second)
		}
	}
}

// open rebuilds timer partition i's wheel.
func (s *Service) open(i int) (*Wheel, *store.Log, error) {
	l, dir, err := s.host.TimerLog(i)
	if err != nil {
		return nil, nil, err
	}
	start := time.Now()
	w, err := Open(dir, l, s.host.MaxMessageSize())
	if err != nil {
		return nil, nil, err
	}
	if err := s.skipDelivered(i, w); err != nil {
		return nil, nil, err
	}
	s.pending[i].Store(w.Pending())
	if w.Pending() > 0 || l.MaxOffset() > 0 {
		s.opts.Logf("timer %d: wheel rebuilt from %d bytes of timer log in %v: %d pending, delivered up to %s",
			i, l.MaxOffset()-l.MinOffset(), time.Since(start).Round(time.Millisecond), w.Pending(),
			time.UnixMilli(w.Mark().DueUpTo).UTC().Format(time.RFC3339Nano))
	}
	if s.opts.MaxDelay != nil {
		md := s.opts.MaxDelay()
		if n, last := w.PendingAfter(s.opts.Now().Add(md).UnixMilli()); n > 0 {
			s.opts.Warnf("timer %d: %d pending message(s) due later than now + max_delay (%v), the last at %s: they stay in the timer log and are delivered when due (max_delay applies to new puts)",
				i, n, md, time.UnixMilli(last).UTC().Format(time.RFC3339))
		}
	}
	return w, l, nil
}

// skipDelivered finds, in the partitions the delivery rounds after the
// timer log's last mark appended to (their intents), the due messages
// those rounds delivered before a crash lost their mark, and makes the
// wheel skip them: a due message is delivered again only when the
// intent's range cannot be read.
func (s *Service) skipDelivered(i int, w *Wheel) error {
	its := w.Intents()
	if len(its) == 0 {
		return nil
	}
	type key struct {
		topic string
		p     int32
	}
	from := map[key]int64{}
	for _, t := range its {
		k := key{t.Topic, t.Partition}
		if f, ok := from[k]; !ok || t.From < f {
			from[k] = t.From
		}
	}
	ids := map[int64]struct{}{}
	for k, f := range from {
		tl, err := s.host.Target(k.topic, k.p)
		if err != nil || tl == nil {
			continue
		}
		if _, err = tl.Walk(max(f, tl.MinOffset()), tl.MaxOffset(), func(r *message.Record) error {
			ids[r.ID] = struct{}{}
			return nil
		}); err != nil {
			s.opts.Errorf("timer %d: reading %s partition %d from %d for messages delivered before a crash: %v (they may be delivered again)",
				i, k.topic, k.p, f, err)
		}
	}
	n, err := w.SkipDelivered(s.opts.Now().UnixMilli(), func(id int64) bool { _, ok := ids[id]; return ok })
	if err != nil {
		return err
	}
	if n > 0 {
		s.opts.Logf("timer %d: %d due message(s) were delivered before the restart, their delivered mark lost: not delivered again", i, n)
	}
	return nil
}

// round indexes what the timer log gained and delivers what is due.
func (s *Service) round(i int, w *Wheel, l *store.Log, done <-chan struct{}) error {
	if err := w.Index(); err != nil {
		return err
	}
	defer func() { s.pending[i].Store(w.Pending()) }()
	var buf []byte
	for {
		now := s.opts.Now().UnixMilli()
		es, mk, ok, err := w.Due(now, chunk)
		if err != nil {
			return err
		}
		if len(es) == 0 && !ok {
			return nil
		}
		if len(es) > 0 {
			if buf, err = s.deliver(i, l, es, now, buf[:0]); err != nil {
				w.Requeue(es)
				return err
			}
		}
		if ok && !s.opts.NoMarks {
			// The mark is not waited for: one lost in a crash only means
			// the round it covers is found again from its intent.
			data := AppendMark(nil, mk)
			if err := s.host.Append(conf.TimerTopic, l, int32(i), []store.Entry{{CRC: message.Checksum(data), Data: data}}, noWait{}); err != nil {
				return fmt.Errorf("delivered mark: %w", err)
			}
			w.Marked(mk)
		}
		s.pending[i].Store(w.Pending())
		select {
		case <-done:
			return nil
		default:
		}
	}
}

// deliver appends due messages es (read back from timer partition i's
// log l) to their partitions with their msgIds, waiting until every
// append is durable (and replicated, with a sync slave). Before it
// appends, it writes the round's intent (the partitions and their end
// offsets) to l and waits for it: after a crash that loses the round's
// mark, skipDelivered finds what the round delivered from there.
func (s *Service) deliver(i int, l *store.Log, es []Entry, now int64, buf []byte) ([]byte, error) {
	type target struct {
		topic string
		p     int32
	}
	groups := map[target][]store.Entry{}
	var order []target
	for _, e := range es {
		var rec Record
		var id int64
		var err error
		buf, rec, id, err = readRecord(l, e.Offset, buf)
		if err != nil {
			return buf, err
		}
		m := rec.Msg
		data := append([]byte(nil), m.Data...)
		k := target{m.Topic, m.Partition}
		if _, seen := groups[k]; !seen {
			order = append(order, k)
		}
		groups[k] = append(groups[k], store.Entry{ID: id, Flag: m.Flag, CRC: message.Checksum(data), Data: data})
	}
	type dest struct {
		k  target
		tl *store.Log
	}
	dests := make([]dest, 0, len(order))
	intent := make([]Target, 0, len(order))
	for _, k := range order {
		var tl *store.Log
		var err error
		if k.p >= 0 {
			tl, err = s.host.Target(k.topic, k.p)
		}
		if tl == nil {
			s.Dropped.Add(int64(len(groups[k])))
			s.opts.Errorf("timer: %d due message(s) for %s partition %d dropped: the topic or partition no longer exists (%v)",
				len(groups[k]), k.topic, k.p, err)
			continue
		}
		dests = append(dests, dest{k, tl})
		intent = append(intent, Target{Topic: k.topic, Partition: k.p, From: tl.MaxOffset()})
	}
	if len(intent) > 0 {
		data := AppendIntent(nil, intent)
		iw := &batchWait{}
		iw.add(1)
		if err := s.host.Append(conf.TimerTopic, l, int32(i), []store.Entry{{CRC: message.Checksum(data), Data: data}}, iw); err != nil {
			iw.done(err)
		}
		if err := iw.wait(); err != nil {
			return buf, fmt.Errorf("delivery intent: %w", err)
		}
	}
	bw := &batchWait{}
	for _, d := range dests {
		ents := groups[d.k]
		// One append per target: group commit makes it one write and sync.
		for len(ents) > 0 {
			n := min(len(ents), 512)
			bw.add(1)
			if err := s.host.Append(d.k.topic, d.tl, d.k.p, ents[:n], bw); err != nil {
				bw.done(err)
			}
			s.host.Delivered(d.k.topic, d.k.p, n)
			ents = ents[n:]
		}
	}
	if err := bw.wait(); err != nil {
		return buf, fmt.Errorf("delivering %d due message(s): %w", len(es), err)
	}
	s.Delivered.Add(int64(len(es)))
	for _, e := range es {
		s.lateness.Observe(float64(max(now-e.Due, 0)) / 1000)
	}
	return buf, nil
}

// noWait is the waiter of an append nobody waits for.
type noWait struct{}

func (noWait) AppendDone(uint64, int64, int64, error) {}
func (noWait) SyncFailed(uint64, error)               {}

// readRecord reads the timer log record at off.
func readRecord(l *store.Log, off int64, buf []byte) ([]byte, Record, int64, error) {
	size := 4096
	for range 2 {
		v, err := l.Read(off, size)
		if err != nil {
			return buf, Record{}, 0, fmt.Errorf("timer log at %d: %w", off, err)
		}
		buf, err = v.ReadAll(buf[:0])
		v.Release()
		if err != nil {
			return buf, Record{}, 0, err
		}
		if len(buf) >= message.HeaderSize {
			if need := message.HeaderSize + int(binary.BigEndian.Uint32(buf)); need > len(buf) && need > size {
				size = need
				continue
			}
		}
		r, _, err := message.ParseRecord(buf, 0)
		if err != nil {
			return buf, Record{}, 0, fmt.Errorf("timer log at %d: %w", off, err)
		}
		rec, err := Parse(r.Data)
		if err == nil && rec.Kind != KindMessage {
			err = fmt.Errorf("timer log at %d: kind %d where a message was indexed", off, rec.Kind)
		}
		return buf, rec, r.ID, err
	}
	return buf, Record{}, 0, fmt.Errorf("timer log at %d: record does not fit", off)
}

// batchWait waits for a number of appends.
type batchWait struct {
	wg  sync.WaitGroup
	mu  sync.Mutex
	err error
}

func (w *batchWait) add(n int) { w.wg.Add(n) }

func (w *batchWait) done(err error) {
	if err != nil {
		w.mu.Lock()
		if w.err == nil {
			w.err = err
		}
		w.mu.Unlock()
	}
	w.wg.Done()
}

func (w *batchWait) AppendDone(_ uint64, _, _ int64, err error) { w.done(err) }
func (w *batchWait) SyncFailed(_ uint64, err error)             { w.done(err) }

func (w *batchWait) wait() error {
	w.wg.Wait()
	return w.err
}
