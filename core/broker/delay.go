package broker

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/core/timer"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Delayed and scheduled messages (docs/delayed.md). A put whose
// properties carry metaq-deliver-at or metaq-delay is checked and wrapped
// in a timer record by core/timer (accept.go), appended to a partition of
// the internal timer topic and answered here with its msgId and offset
// -1. The timer loops (core/timer's Service, through timerHost) index it
// into an on-disk wheel and, when it is due, append it to its target
// partition with its original msgId, then a delivered mark to the timer
// log.

func init() { registerErrors(timerStatus) }

// timerStatus maps a *timer.RefusedError (400).
func timerStatus(err error) (int, string, bool) {
	var e *timer.RefusedError
	if errors.As(err, &e) {
		return protocol.StatusBadRequest, e.Msg, true
	}
	return 0, "", false
}

// putRefused answers a put refused by err (counted as a failed put).
func (c *conn) putRefused(err error, opaque int32) {
	c.b.stats.putFailed.Add(1)
	c.replyErr(err, opaque)
}

// putFailer is a put's waiter that must hear of a put refused or failed
// before the store took it (idem.Waiter, timer.PutWaiter).
type putFailer interface{ Failed() }

// delayIdemKey keys a target partition's delayed-put table in Broker.idem
// (whose other keys are the partitions' logs).
type delayIdemKey struct{ l *store.Log }

// delayedPut stores a put that asks for a delivery time (or a cancel) in
// the timer log. It has answered the put when it returns.
func (c *conn) delayedPut(r *protocol.Request, t *partition.Topic, p int32, d message.Delivery, cancel int64, ps producerSeq) {
	b := c.b
	data, err := timer.Accept(t.Name(), p, r.Flag, r.Body, d, cancel, ps.ok, time.Now().UnixMilli(), timer.LimitsOf(b.config()))
	if err != nil {
		c.putRefused(err, r.Opaque)
		return
	}
	tt, err := b.openTopic(conf.TimerTopic)
	if err != nil {
		c.putFail(r.Opaque, "delayed message: timer topic: "+oneLine(err.Error()))
		return
	}
	tp := timer.PartitionOf(t.Name(), p, len(tt.Parts))
	// Answered with the target partition's token (count 0: a put).
	w := b.delay.NewPutWaiter(c, uint64(uint32(r.Opaque))|uint64(uint16(p))<<32, cancel != 0)
	if ps.ok && !c.delayIdemBegin(w, t.Name(), tt.Parts[tp], t.Partition(p), p, r.Opaque, ps) {
		return
	}
	c.entries = append(c.entries[:0], store.Entry{Flag: 0, CRC: message.Checksum(data), Data: data})
	if cancel != 0 {
		b.delay.Cancels.Add(1)
	}
	c.appendEntries(tt, tt.Parts[tp], tp, r.Opaque, false, int64(len(data)), w)
	if cancel == 0 && timer.DueOnArrival(d, time.Now().UnixMilli()) {
		b.delay.Wake(int(tp))
	}
}

// delayIdemBegin judges an idempotent delayed put (producer ps) for
// partition p of topic (log l, nil when there is none), held in timer
// partition tl (timer.BeginIdem) with the delayed-put table of l (made on
// first use, reset with failover when the epoch changed, as a partition's
// table is). It sets w's table and ticket, or returns false when it has
// answered the put: a retry of a stored put with the msgId of its first
// copy, or a refusal with its cause.
func (c *conn) delayIdemBegin(w *timer.PutWaiter, topic string, tl, l *store.Log, p int32, opaque int32, ps producerSeq) bool {
	b := c.b
	if l == nil {
		c.putFail(opaque, "delayed message: no partition "+strconv.Itoa(int(p)))
		return false
	}
	t := b.idem.Table(b.idem.Part(delayIdemKey{l}, l))
	tk, res, err := timer.BeginIdem(t, tl, topic, p, ps.id, ps.seq, b.logf)
	switch {
	case err != nil:
		c.idemRefused(opaque, err, 1) // idem.go
	case res.Count > 0:
		b.stats.idemDuplicates.Add(1)
		c.replyStored(opaque, p, res, false)
	default:
		w.Idem(t, tk)
		return true
	}
	return false
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
	tt := b.topics.Get(conf.TimerTopic)
	if tt == nil || i >= len(tt.Parts) {
		return nil, "", timer.ErrNoLog
	}
	return tt.Parts[i], timer.WheelDir(b.logs().Dir(&tc), i), nil
}

func (h timerHost) Target(topic string, p int32) (*store.Log, error) {
	t, err := h.b.lookup([]byte(topic), true)
	if err != nil {
		return nil, err
	}
	if l := t.Partition(p); l != nil {
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
	t := b.topics.Get(topic)
	if t != nil && int(p) < len(t.PC) {
		t.PC[p].MsgsIn.Add(int64(n))
	}
}

func (h timerHost) MaxMessageSize() int { return h.b.config().MaxMessageSize }

// copiesTimer reports whether get r of the timer topic is a slave's copy
// of it (timer.MayCopy).
func (c *conn) copiesTimer(r *protocol.Request) bool {
	cfg := c.b.config()
	return r.Op == protocol.OpGet && timer.MayCopy(string(r.Group), cfg.EffectiveSlaveGroup(), cfg.Auth.Enabled, func() bool {
		u := c.auth.Current(cfg)
		return u != nil && u.Admin
	})
}

// timerOpen reports whether the timer topic is open here.
func (b *Broker) timerOpen() bool {
	return b.topics.Get(conf.TimerTopic) != nil
}

// hasTimerLog reports whether the data directory holds timer partitions.
func (b *Broker) hasTimerLog() bool {
	tc := b.config().TimerTopicConfig()
	return timer.HasLog(b.logs().Dir(&tc))
}
