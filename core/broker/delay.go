package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/core/timer"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// Delayed and scheduled messages (docs/delayed.md). A put whose
// properties carry metaq-deliver-at or metaq-delay is appended, wrapped in
// a timer record, to a partition of the internal timer topic (so group
// commit, the journal, recovery and replication cover it) and answered
// with its msgId and offset -1. One timer loop per timer partition
// indexes it into an on-disk wheel (core/timer) and, when it is due,
// appends it to its target partition with its original msgId, then a
// delivered mark to the timer log.

// timerTick is how often a timer loop looks for due messages.
const timerTick = 50 * time.Millisecond

// timerChunk bounds the messages one delivery round appends.
const timerChunk = 4096

// delayStats are the timer's counters and metrics.
type delayStats struct {
	accepted, delivered, cancels, dropped atomic.Int64
	pending                               []atomic.Int64 // per timer partition
	lateness                              prometheus.Histogram
	wake                                  []chan struct{}
	// ask carries the dashboard's requests for pending messages by due
	// time to each timer loop (dashdelayed.go).
	ask []chan dueAsk
}

func newDelayStats(parts int) *delayStats {
	d := &delayStats{pending: make([]atomic.Int64, parts), wake: make([]chan struct{}, parts), ask: make([]chan dueAsk, parts)}
	for i := range d.wake {
		d.wake[i] = make(chan struct{}, 1)
		d.ask[i] = make(chan dueAsk, 1)
	}
	d.lateness = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "metaq_delayed_lateness_seconds",
		Help:    "How late delayed messages were appended to their partitions, from their due time.",
		Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300},
	})
	return d
}

// Pending returns the delayed messages held, over every timer partition.
func (d *delayStats) Pending() int64 {
	var n int64
	for i := range d.pending {
		n += d.pending[i].Load()
	}
	return n
}

// collect adds the timer's series to a scrape.
func (d *delayStats) collect(ch chan<- prometheus.Metric) {
	gauge := func(name, help string, v float64) {
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, help, nil, nil), prometheus.GaugeValue, v)
	}
	counter := func(name, help string, v float64) {
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, help, nil, nil), prometheus.CounterValue, v)
	}
	gauge("metaq_delayed_pending", "Delayed messages held by the timer, not yet due (or due and not appended yet).", float64(d.Pending()))
	counter("metaq_delayed_accepted_total", "Delayed messages accepted into the timer log.", float64(d.accepted.Load()))
	counter("metaq_delayed_delivered_total", "Delayed messages appended to their partitions when due.", float64(d.delivered.Load()))
	counter("metaq_delayed_cancels_total", "Cancellations of delayed messages recorded.", float64(d.cancels.Load()))
	counter("metaq_delayed_dropped_total", "Due delayed messages whose topic or partition no longer exists.", float64(d.dropped.Load()))
	d.lateness.Collect(ch)
}

// timerPartition is the timer partition of target partition p of topic.
func timerPartition(topic string, p int32, n int) int32 {
	h := fnv.New32a()
	h.Write([]byte(topic))
	return int32((h.Sum32() + uint32(p)) % uint32(n))
}

// delayWaiter answers a delayed put once its timer record is stored: with
// the msgId, the target partition and offset -1 (the message is not in
// its partition yet).
type delayWaiter struct {
	c      *conn
	p      int32
	cancel bool
}

func (w *delayWaiter) fix(token uint64) uint64 {
	return token&^(uint64(0xffff)<<32) | uint64(uint16(w.p))<<32
}

func (w *delayWaiter) AppendDone(token uint64, id, _ int64, err error) {
	if err == nil && !w.cancel {
		w.c.b.delay.accepted.Add(1)
	}
	w.c.AppendDone(w.fix(token), id, -1, err)
}

func (w *delayWaiter) SyncFailed(token uint64, err error) { w.c.SyncFailed(w.fix(token), err) }

// delayedPut stores a put that asks for a delivery time (or a cancel) in
// the timer log. It has answered the put when it returns.
func (c *conn) delayedPut(r *protocol.Request, t *topic, p int32, d message.Delivery, cancel int64, ps producerSeq) {
	b := c.b
	if ps.ok {
		b.stats.putFailed.Add(1)
		c.reply(protocol.StatusBadRequest, "delayed message: the idempotent producer's id and sequence are not taken "+
			"on a delayed message (send it with idempotence off; docs/delayed.md)", r.Opaque)
		return
	}
	cfg := b.config()
	var data []byte
	if cancel != 0 {
		data = timer.AppendCancel(nil, cancel)
	} else {
		now := time.Now().UnixMilli()
		due := d.Due(now)
		if due-now > cfg.MaxDelay {
			b.stats.putFailed.Add(1)
			c.reply(protocol.StatusBadRequest, "delayed message: delivery in "+
				(time.Duration(due-now)*time.Millisecond).String()+" exceeds max_delay "+
				(time.Duration(cfg.MaxDelay)*time.Millisecond).String(), r.Opaque)
			return
		}
		due = max(due, now) // a time in the past is now
		data = timer.AppendMessage(make([]byte, 0, len(r.Body)+32+len(t.name)),
			&timer.Message{Due: due, Topic: t.name, Partition: p, Flag: r.Flag, Data: r.Body})
		if len(data) > cfg.MaxMessageSize {
			b.stats.putFailed.Add(1)
			c.reply(protocol.StatusBadRequest, "delayed message of "+strconv.Itoa(len(r.Body))+
				" bytes: with its timer header ("+strconv.Itoa(len(data)-len(r.Body))+" bytes) it exceeds max_message_size "+
				strconv.Itoa(cfg.MaxMessageSize), r.Opaque)
			return
		}
	}
	tt, err := b.openTopic(conf.TimerTopic)
	if err != nil {
		c.putFail(r.Opaque, "delayed message: timer topic: "+oneLine(err.Error()))
		return
	}
	tp := timerPartition(t.name, p, len(tt.parts))
	c.entries = append(c.entries[:0], store.Entry{Flag: 0, CRC: message.Checksum(data), Data: data})
	if cancel != 0 {
		b.delay.cancels.Add(1)
	}
	c.appendEntries(tt, tt.parts[tp], tp, r.Opaque, false, int64(len(data)), &delayWaiter{c: c, p: p, cancel: cancel != 0})
	if cancel == 0 && (d.IsAt && d.At <= time.Now().UnixMilli() || !d.IsAt && d.Delay == 0) { // due on arrival
		b.wakeTimer(int(tp))
	}
}

// delayOf returns what a put asks of the timer: a delivery (ok), or a
// cancel of a msgId (cancel != 0). On a malformed header it has answered
// the put and bad is set.
func (c *conn) delayOf(r *protocol.Request) (d message.Delivery, cancel int64, ok, bad bool) {
	d, cancel, ok, err := message.TimerHeaders(r.Flag, r.Body)
	if err != nil {
		c.b.stats.putFailed.Add(1)
		c.reply(protocol.StatusBadRequest, badDataReason("", err), r.Opaque)
		return d, 0, false, true
	}
	return d, cancel, ok, false
}

func (b *Broker) wakeTimer(i int) {
	if i < len(b.delay.wake) {
		select {
		case b.delay.wake[i] <- struct{}{}:
		default:
		}
	}
}

// startTimers starts one timer loop per timer partition.
func (b *Broker) startTimers() {
	for i := range b.delay.wake {
		b.wg.Add(1)
		go b.timerLoop(i)
	}
}

// timerLoop runs timer partition i's wheel while this broker takes puts
// (not as a slave, not fenced): the wheel is rebuilt from the timer log
// when the loop starts and after a promotion, so the delivery position is
// the last delivered mark the log holds.
func (b *Broker) timerLoop(i int) {
	defer b.wg.Done()
	tk := time.NewTicker(timerTick)
	defer tk.Stop()
	var w *timer.Wheel
	var l *store.Log
	var failing time.Time
	for {
		select {
		case <-b.done:
			return
		case <-tk.C:
		case <-b.delay.wake[i]:
		case a := <-b.delay.ask[i]:
			a.answer(w)
			continue
		}
		if b.replRole() == repl.RoleSlave || (b.fo != nil && !b.fo.MayAck()) {
			w = nil // a slave's wheel is rebuilt at its promotion
			continue
		}
		if time.Now().Before(failing) {
			continue
		}
		if w == nil {
			var err error
			if w, l, err = b.openWheel(i); err != nil {
				if w == nil && l == nil && errors.Is(err, errNoTimerLog) {
					continue
				}
				b.errorf("timer %d: %v (retrying in 5s)", i, err)
				w, failing = nil, time.Now().Add(5*time.Second)
				continue
			}
		}
		if err := b.timerRound(i, w, l); err != nil {
			b.errorf("timer %d: %v (retrying in 1s)", i, err)
			w, failing = nil, time.Now().Add(time.Second)
		}
	}
}

var errNoTimerLog = errors.New("no timer log")

// openWheel rebuilds timer partition i's wheel; errNoTimerLog while the
// timer topic has never been used here.
func (b *Broker) openWheel(i int) (*timer.Wheel, *store.Log, error) {
	cfg := b.config()
	tc := cfg.TimerTopicConfig()
	b.mu.RLock()
	tt := b.topics[conf.TimerTopic]
	b.mu.RUnlock()
	if tt == nil {
		return nil, nil, errNoTimerLog
	}
	if i >= len(tt.parts) {
		return nil, nil, errNoTimerLog
	}
	l := tt.parts[i]
	dir := filepath.Join(b.logs().Dir(&tc), conf.TimerTopic+".wheel", strconv.Itoa(i))
	start := time.Now()
	w, err := timer.Open(dir, l, cfg.MaxMessageSize)
	if err != nil {
		return nil, nil, err
	}
	if err := b.skipDelivered(i, w); err != nil {
		return nil, nil, err
	}
	b.delay.pending[i].Store(w.Pending())
	if w.Pending() > 0 || l.MaxOffset() > 0 {
		b.logf("timer %d: wheel rebuilt from %d bytes of timer log in %v: %d pending, delivered up to %s",
			i, l.MaxOffset()-l.MinOffset(), time.Since(start).Round(time.Millisecond), w.Pending(),
			time.UnixMilli(w.Mark().DueUpTo).UTC().Format(time.RFC3339Nano))
	}
	return w, l, nil
}

// skipDelivered finds, in the partitions the delivery rounds after the
// timer log's last mark appended to (their intents), the due messages
// those rounds delivered before a crash lost their mark, and makes the
// wheel skip them: a due message is delivered again only when the
// intent's range cannot be read.
func (b *Broker) skipDelivered(i int, w *timer.Wheel) error {
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
	var buf []byte
	for k, f := range from {
		t, err := b.lookup([]byte(k.topic), true)
		if err != nil {
			continue
		}
		tl := t.partition(k.p)
		if tl == nil {
			continue
		}
		if buf, err = collectIDs(tl, f, b.config().MaxMessageSize, ids, buf); err != nil {
			b.errorf("timer %d: reading %s partition %d from %d for messages delivered before a crash: %v (they may be delivered again)",
				i, k.topic, k.p, f, err)
		}
	}
	n, err := w.SkipDelivered(time.Now().UnixMilli(), func(id int64) bool { _, ok := ids[id]; return ok })
	if err != nil {
		return err
	}
	if n > 0 {
		b.logf("timer %d: %d due message(s) were delivered before the restart, their delivered mark lost: not delivered again", i, n)
	}
	return nil
}

// collectIDs adds the msgIds of log l's records from offset from to its
// end to ids.
func collectIDs(l *store.Log, from int64, maxMsg int, ids map[int64]struct{}, buf []byte) ([]byte, error) {
	off := max(from, l.MinOffset())
	end := l.MaxOffset()
	size := max(maxMsg+message.HeaderSize, 1<<20)
	for off < end {
		v, err := l.Read(off, size)
		if err != nil {
			var oor *store.OffsetOutOfRangeError
			if errors.As(err, &oor) && oor.Min > off {
				off = oor.Min
				continue
			}
			if errors.Is(err, store.ErrNoData) {
				return buf, nil
			}
			return buf, err
		}
		buf, err = v.ReadAll(buf[:0])
		v.Release()
		if err != nil {
			return buf, err
		}
		it := message.NewIterator(buf, off, size)
		n := 0
		for it.Next() {
			ids[it.Record().ID] = struct{}{}
			n++
		}
		if err := it.Err(); err != nil {
			return buf, err
		}
		if n == 0 {
			return buf, fmt.Errorf("no whole record at %d", off)
		}
		off = it.NextOffset()
	}
	return buf, nil
}

// timerRound indexes what the timer log gained and delivers what is due.
func (b *Broker) timerRound(i int, w *timer.Wheel, l *store.Log) error {
	if err := w.Index(); err != nil {
		return err
	}
	defer func() { b.delay.pending[i].Store(w.Pending()) }()
	var buf []byte
	for {
		now := time.Now().UnixMilli()
		es, mk, ok, err := w.Due(now, timerChunk)
		if err != nil {
			return err
		}
		if len(es) == 0 && !ok {
			return nil
		}
		if len(es) > 0 {
			if buf, err = b.deliver(i, l, es, now, buf[:0]); err != nil {
				w.Requeue(es)
				return err
			}
		}
		if ok && !b.knobs.noTimerMarks {
			// The mark is not waited for: one lost in a crash only means
			// the round it covers is delivered again (at least once).
			if err := b.appendTo(conf.TimerTopic, l, int32(i), []store.Entry{markEntry(mk)}, noWait{}); err != nil {
				return fmt.Errorf("delivered mark: %w", err)
			}
			w.Marked(mk)
		}
		b.delay.pending[i].Store(w.Pending())
		select {
		case <-b.done:
			return nil
		default:
		}
	}
}

func markEntry(mk timer.Mark) store.Entry {
	data := timer.AppendMark(nil, mk)
	return store.Entry{CRC: message.Checksum(data), Data: data}
}

// deliver appends due messages es (read back from timer partition i's
// log l) to their partitions with their msgIds, waiting until every
// append is durable (and replicated, with a sync slave). Before it
// appends, it writes the round's intent (the partitions and their end
// offsets) to l and waits for it: after a crash that loses the round's
// mark, skipDelivered finds what the round delivered from there.
func (b *Broker) deliver(i int, l *store.Log, es []timer.Entry, now int64, buf []byte) ([]byte, error) {
	type target struct {
		topic string
		p     int32
	}
	groups := map[target][]store.Entry{}
	var order []target
	for _, e := range es {
		var rec timer.Record
		var id int64
		var err error
		buf, rec, id, err = readTimerRecord(l, e.Offset, buf)
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
		t  *topic
		tl *store.Log
	}
	dests := make([]dest, 0, len(order))
	intent := make([]timer.Target, 0, len(order))
	for _, k := range order {
		t, err := b.lookup([]byte(k.topic), true)
		var tl *store.Log
		if err == nil {
			tl = t.partition(k.p)
		}
		if tl == nil || k.p < 0 {
			b.delay.dropped.Add(int64(len(groups[k])))
			b.errorf("timer: %d due message(s) for %s partition %d dropped: the topic or partition no longer exists (%v)",
				len(groups[k]), k.topic, k.p, err)
			continue
		}
		dests = append(dests, dest{k, t, tl})
		intent = append(intent, timer.Target{Topic: k.topic, Partition: k.p, From: tl.MaxOffset()})
	}
	if len(intent) > 0 {
		data := timer.AppendIntent(nil, intent)
		iw := &batchWait{}
		iw.add(1)
		if err := b.appendTo(conf.TimerTopic, l, int32(i), []store.Entry{{CRC: message.Checksum(data), Data: data}}, iw); err != nil {
			iw.done(err)
		}
		if err := iw.wait(); err != nil {
			return buf, fmt.Errorf("delivery intent: %w", err)
		}
	}
	bw := &batchWait{}
	for _, d := range dests {
		k, t, tl := d.k, d.t, d.tl
		ents := groups[k]
		// One append per target: group commit makes it one write and sync.
		for len(ents) > 0 {
			n := min(len(ents), 512)
			bw.add(1)
			if err := b.appendTo(t.name, tl, k.p, ents[:n], bw); err != nil {
				bw.done(err)
			}
			t.pc[k.p].msgsIn.Add(int64(n))
			ents = ents[n:]
		}
	}
	if err := bw.wait(); err != nil {
		return buf, fmt.Errorf("delivering %d due message(s): %w", len(es), err)
	}
	b.delay.delivered.Add(int64(len(es)))
	for _, e := range es {
		b.delay.lateness.Observe(float64(max(now-e.Due, 0)) / 1000)
	}
	return buf, nil
}

// appendTo appends entries to partition p of topic (log l) the way a put
// is: through the sync master when there is one.
func (b *Broker) appendTo(topic string, l *store.Log, p int32, entries []store.Entry, w repl.PutDone) error {
	if b.sync != nil {
		// nil ids: a due message keeps the msgId of its acceptance (a
		// delivered mark gets one from the log, which has b.ids).
		ids := store.IDSource(nil)
		if entries[0].ID == 0 {
			ids = b.ids
		}
		refused, err := b.sync.Put(topic, p, l, entries, ids, w, 0, func(int) {})
		if refused != nil {
			return refused
		}
		return err
	}
	return l.Append(entries, w, 0)
}

// noWait is the waiter of an append nobody waits for.
type noWait struct{}

func (noWait) AppendDone(uint64, int64, int64, error) {}
func (noWait) SyncFailed(uint64, error)               {}

// readTimerRecord reads the timer log record at off.
func readTimerRecord(l *store.Log, off int64, buf []byte) ([]byte, timer.Record, int64, error) {
	size := 4096
	for range 2 {
		v, err := l.Read(off, size)
		if err != nil {
			return buf, timer.Record{}, 0, fmt.Errorf("timer log at %d: %w", off, err)
		}
		buf, err = v.ReadAll(buf[:0])
		v.Release()
		if err != nil {
			return buf, timer.Record{}, 0, err
		}
		if len(buf) >= message.HeaderSize {
			if need := message.HeaderSize + int(binary.BigEndian.Uint32(buf)); need > len(buf) && need > size {
				size = need
				continue
			}
		}
		r, _, err := message.ParseRecord(buf, 0)
		if err != nil {
			return buf, timer.Record{}, 0, fmt.Errorf("timer log at %d: %w", off, err)
		}
		rec, err := timer.Parse(r.Data)
		if err == nil && rec.Kind != timer.KindMessage {
			err = fmt.Errorf("timer log at %d: kind %d where a message was indexed", off, rec.Kind)
		}
		return buf, rec, r.ID, err
	}
	return buf, timer.Record{}, 0, fmt.Errorf("timer log at %d: record does not fit", off)
}

// batchWait waits for a number of appends (store.Waiter, repl.PutDone).
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

// writeDelayedStats answers `stats delayed`.
func (b *Broker) writeDelayedStats(line func(string)) {
	d := b.delay
	line("pending " + strconv.FormatInt(d.Pending(), 10))
	line("accepted " + strconv.FormatInt(d.accepted.Load(), 10))
	line("delivered " + strconv.FormatInt(d.delivered.Load(), 10))
	line("cancels " + strconv.FormatInt(d.cancels.Load(), 10))
	line("dropped " + strconv.FormatInt(d.dropped.Load(), 10))
	for i := range d.pending {
		line("timer_partition_" + strconv.Itoa(i) + "_pending " + strconv.FormatInt(d.pending[i].Load(), 10))
	}
}

// isDelayed reports whether a body carries a delivery or cancel header
// (malformed ones included).
func isDelayed(flag int32, data []byte) bool {
	_, _, ok, err := message.TimerHeaders(flag, data)
	return ok || err != nil
}

// copiesTimer reports whether get r of the timer topic is a slave's
// copy of it: it names this broker's slave group (slave_group, the
// slaves' default "meta-slave-group_<broker_id>"), and with auth on its
// user is an admin (the timer log holds the payloads of every topic).
func (c *conn) copiesTimer(r *protocol.Request) bool {
	cfg := c.b.config()
	if r.Op != protocol.OpGet || string(r.Group) != cfg.EffectiveSlaveGroup() {
		return false
	}
	if !cfg.Auth.Enabled {
		return true
	}
	u := c.auth.Current(cfg)
	return u != nil && u.Admin
}

// timerOpen reports whether the timer topic is open here.
func (b *Broker) timerOpen() bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.topics[conf.TimerTopic] != nil
}

// hasTimerLog reports whether the data directory holds timer partitions.
func (b *Broker) hasTimerLog() bool {
	tc := b.config().TimerTopicConfig()
	_, err := os.Stat(filepath.Join(b.logs().Dir(&tc), conf.TimerTopic+"-0"))
	return err == nil
}
