package broker

import (
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/idem"
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/core/timer"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Delayed and scheduled messages (docs/delayed.md). A put whose
// properties carry metaq-deliver-at or metaq-delay is appended, wrapped in
// a timer record, to a partition of the internal timer topic (so group
// commit, the journal, recovery and replication cover it) and answered
// with its msgId and offset -1. The timer loops (core/timer's Service,
// through timerHost) index it into an on-disk wheel and, when it is due,
// append it to its target partition with its original msgId, then a
// delivered mark to the timer log.

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
	// it and tk: an idempotent delayed put's table and ticket
	// (delayidem.go), finished when the timer record is stored.
	it *idem.Table
	tk idem.Ticket
}

// finish tells an idempotent delayed put's table its outcome: stored
// (ok) with msgId id, or not.
func (w *delayWaiter) finish(id int64, ok bool) {
	if w.it != nil {
		w.it.Finish(w.tk, idem.Result{FirstID: id, FirstOffset: -1, Count: 1}, ok)
		w.it, w.tk = nil, idem.Ticket{}
	}
}

func (w *delayWaiter) failed() { w.finish(0, false) }

func (w *delayWaiter) fix(token uint64) uint64 {
	return token&^(uint64(0xffff)<<32) | uint64(uint16(w.p))<<32
}

func (w *delayWaiter) AppendDone(token uint64, id, _ int64, err error) {
	if err == nil && !w.cancel {
		w.c.b.delay.Accepted.Add(1)
	}
	w.finish(id, err == nil)
	w.c.AppendDone(w.fix(token), id, -1, err)
}

// SyncFailed: held here, the slave failed it; a retry is answered as
// stored, its msgId unknown (as idemWaiter's).
func (w *delayWaiter) SyncFailed(token uint64, err error) {
	w.finish(0, true)
	w.c.SyncFailed(w.fix(token), err)
}

// delayedPut stores a put that asks for a delivery time (or a cancel) in
// the timer log. It has answered the put when it returns.
func (c *conn) delayedPut(r *protocol.Request, t *topic, p int32, d message.Delivery, cancel int64, ps producerSeq) {
	b := c.b
	if ps.ok && cancel != 0 {
		b.stats.putFailed.Add(1)
		c.reply(protocol.StatusBadRequest, "delayed message: the idempotent producer's id and sequence are not taken "+
			"on a cancel (docs/delayed.md)", r.Opaque)
		return
	}
	var data []byte
	if cancel != 0 {
		data = timer.AppendCancel(nil, cancel)
	} else {
		now := time.Now().UnixMilli()
		if reason := b.delayRefusal(t, r.Body, d, now); reason != "" {
			b.stats.putFailed.Add(1)
			c.reply(protocol.StatusBadRequest, reason, r.Opaque)
			return
		}
		due := max(d.Due(now), now) // a time in the past is now
		data = timer.AppendMessage(make([]byte, 0, len(r.Body)+32+len(t.name)),
			&timer.Message{Due: due, Topic: t.name, Partition: p, Flag: r.Flag, Data: r.Body})
	}
	tt, err := b.openTopic(conf.TimerTopic)
	if err != nil {
		c.putFail(r.Opaque, "delayed message: timer topic: "+oneLine(err.Error()))
		return
	}
	tp := timerPartition(t.name, p, len(tt.parts))
	w := &delayWaiter{c: c, p: p, cancel: cancel != 0}
	if ps.ok {
		l := t.partition(p)
		if l == nil {
			c.putFail(r.Opaque, "delayed message: no partition "+strconv.Itoa(int(p)))
			return
		}
		var ok bool
		if w.it, w.tk, ok = c.delayIdemBegin(t.name, l, tt.parts[tp], p, r.Opaque, ps); !ok { // delayidem.go
			return
		}
	}
	c.entries = append(c.entries[:0], store.Entry{Flag: 0, CRC: message.Checksum(data), Data: data})
	if cancel != 0 {
		b.delay.Cancels.Add(1)
	}
	c.appendEntries(tt, tt.parts[tp], tp, r.Opaque, false, int64(len(data)), w)
	if cancel == 0 && (d.IsAt && d.At <= time.Now().UnixMilli() || !d.IsAt && d.Delay == 0) { // due on arrival
		b.delay.Wake(int(tp))
	}
}

// delayRefusal is why a delayed put of body to topic t asking for d is
// refused at now (Unix ms), or "": a delivery further than max_delay, or
// a record that with its timer header exceeds max_message_size. A
// transactional put is checked so too (its delay counts from its commit).
func (b *Broker) delayRefusal(t *topic, body []byte, d message.Delivery, now int64) string {
	cfg := b.config()
	if due := d.Due(now); due-now > cfg.MaxDelay {
		return "delayed message: delivery in " + (time.Duration(due-now) * time.Millisecond).String() +
			" exceeds max_delay " + (time.Duration(cfg.MaxDelay) * time.Millisecond).String()
	}
	if hdr := timer.MessageHeaderSize(t.name); len(body)+hdr > cfg.MaxMessageSize {
		return "delayed message of " + strconv.Itoa(len(body)) + " bytes: with its timer header (" + strconv.Itoa(hdr) +
			" bytes) it exceeds max_message_size " + strconv.Itoa(cfg.MaxMessageSize)
	}
	return ""
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

// timerHost is what the timer loops (core/timer) need of the broker.
type timerHost struct{ b *Broker }

// Delivering: a master that may acknowledge delivers; a slave's wheel
// is rebuilt at its promotion.
func (h timerHost) Delivering() bool {
	b := h.b
	return b.replRole() != repl.RoleSlave && (b.fo == nil || b.fo.MayAck())
}

func (h timerHost) TimerLog(i int) (*store.Log, string, error) {
	b := h.b
	tc := b.config().TimerTopicConfig()
	b.mu.RLock()
	tt := b.topics[conf.TimerTopic]
	b.mu.RUnlock()
	if tt == nil || i >= len(tt.parts) {
		return nil, "", timer.ErrNoLog
	}
	return tt.parts[i], filepath.Join(b.logs().Dir(&tc), conf.TimerTopic+".wheel", strconv.Itoa(i)), nil
}

func (h timerHost) Target(topic string, p int32) (*store.Log, error) {
	t, err := h.b.lookup([]byte(topic), true)
	if err != nil {
		return nil, err
	}
	if l := t.partition(p); l != nil {
		return l, nil
	}
	return nil, fmt.Errorf("%s has no partition %d", topic, p)
}

// Append appends entries the way a put is: through the sync master when
// there is one.
func (h timerHost) Append(topic string, l *store.Log, p int32, entries []store.Entry, w timer.Waiter) error {
	b := h.b
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

func (h timerHost) Delivered(topic string, p int32, n int) {
	b := h.b
	b.mu.RLock()
	t := b.topics[topic]
	b.mu.RUnlock()
	if t != nil && int(p) < len(t.pc) {
		t.pc[p].msgsIn.Add(int64(n))
	}
}

func (h timerHost) MaxMessageSize() int { return h.b.config().MaxMessageSize }

// writeDelayedStats answers `stats delayed`.
func (b *Broker) writeDelayedStats(line func(string)) {
	d := b.delay
	line("pending " + strconv.FormatInt(d.Pending(), 10))
	line("accepted " + strconv.FormatInt(d.Accepted.Load(), 10))
	line("delivered " + strconv.FormatInt(d.Delivered.Load(), 10))
	line("cancels " + strconv.FormatInt(d.Cancels.Load(), 10))
	line("dropped " + strconv.FormatInt(d.Dropped.Load(), 10))
	for i := range d.Partitions() {
		line("timer_partition_" + strconv.Itoa(i) + "_pending " + strconv.FormatInt(d.PartitionPending(i), 10))
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
