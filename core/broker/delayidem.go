package broker

import (
	"errors"
	"strconv"
	"time"

	"github.com/metaq-go/metaq/core/idem"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/core/timer"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The idempotent producer for delayed puts (docs/delayed.md, "Retries and
// the idempotent producer"). A delayed put is stored in the timer log,
// not in its partition, so it is judged by a table of its own per target
// partition: the delayed puts to it, whose producers are not those of the
// partition's plain puts (the Go SDK draws a producer id per partition
// for its delayed messages apart from the plain one's), so that neither
// sees the other's sequences as gaps. The table is rebuilt, like a
// partition's, from the tail of the log that holds the puts: the target's
// timer partition, its message records for that target (the producer's
// id and sequence are in the put's record inside). A retried delayed put
// that is stored already is answered with its msgId and offset -1 and is
// not held twice.

// delayIdemKey keys a target partition's delayed-put table in Broker.idem
// (whose other keys are the partitions' logs).
type delayIdemKey struct{ l *store.Log }

// putFailer is a put's waiter that must hear of a put refused or failed
// before the store took it (idemWaiter, delayWaiter).
type putFailer interface{ failed() }

// delayIdemTable returns the delayed-put table of target partition l,
// made on first use (reset, with failover, when the epoch changed, as a
// partition's table is).
func (b *Broker) delayIdemTable(l *store.Log) *idem.Table {
	return b.idemEpoch(b.idemPartOf(delayIdemKey{l}, l))
}

// delayIdemBegin judges an idempotent delayed put (producer ps) for
// partition p of topic (log l), held in timer partition tl. It returns
// the table and ticket to finish when the timer record is stored, or ok
// false when it has answered the put: a retry of a stored put with the
// msgId of its first copy, or a refusal with its cause.
func (c *conn) delayIdemBegin(topic string, l, tl *store.Log, p int32, opaque int32, ps producerSeq) (*idem.Table, idem.Ticket, bool) {
	b := c.b
	t := b.delayIdemTable(l)
	now := t.Clock()
	err := t.Build(now, func() (func() (idem.Record, bool), error) {
		start := time.Now()
		recs, err := scanTimerProducers(tl, topic, p, t.Config().RebuildBytes)
		if err == nil {
			b.logf("idempotent producer: delayed puts to %s-%d rebuilt from %d records of producers in %s in %v",
				topic, p, len(recs), tl.Dir(), time.Since(start).Round(time.Millisecond))
		}
		return feed(recs), err
	})
	if err != nil {
		b.errorf("idempotent producer: rebuild of the delayed puts to %s-%d: %v", topic, p, err)
		c.putFail(opaque, "idempotent producer state: "+oneLine(err.Error()))
		return nil, idem.Ticket{}, false
	}
	v, res, tk := t.Start(ps.id, ps.seq, ps.seq, now)
	seqs := func() string {
		return "delayed message of producer " + strconv.FormatInt(ps.id, 10) + " sequence " + strconv.FormatInt(ps.seq, 10)
	}
	switch v {
	case idem.Append:
		return t, tk, true
	case idem.Duplicate:
		if res.Count > 0 {
			b.stats.idemDuplicates.Add(1)
			c.replyStored(opaque, p, idem.Result{FirstID: res.FirstID, FirstOffset: -1, Count: 1}, false)
			return nil, idem.Ticket{}, false
		}
		fallthrough
	case idem.Stored:
		b.stats.idemDuplicates.Add(1)
		c.reply(protocol.StatusInternalError, protocol.WithCause(protocol.CauseDuplicateSequence,
			seqs()+" is held already, by a put whose msgId this broker no longer holds"), opaque)
	case idem.InFlight:
		c.reply(protocol.StatusInternalError, protocol.WithCause(protocol.CauseSequenceInFlight,
			seqs()+" is being stored by an earlier copy of this put; retry"), opaque)
	case idem.UnknownProducer:
		b.stats.idemUnknown.Add(1)
		c.putFail(opaque, protocol.WithCause(protocol.CauseUnknownProducer,
			seqs()+": the broker does not know the producer (it starts at sequence 0) or forgot it "+
				"(idempotent_producers, idle expiry, a restart or failover); a retry's first copy may be stored"))
	default:
		b.stats.idemOutOfOrder.Add(1)
		c.putFail(opaque, protocol.WithCause(protocol.CauseOutOfOrderSequence,
			seqs()+": the broker expects the producer's next sequence, not a gap"))
	}
	return nil, idem.Ticket{}, false
}

// scanTimerProducers reads timer log tl's records from MaxOffset-back (a
// record boundary, as scanProducers finds one) to its end and returns, as
// records of the target, the message records for partition p of topic
// whose put carries an idempotent producer, oldest first. A damaged record
// ends the scan.
func scanTimerProducers(tl *store.Log, topic string, p int32, back int64) ([]idem.Record, error) {
	end := tl.MaxOffset()
	return scanTimerFrom(tl, tl.RecordStartBefore(max(tl.MinOffset(), end-back)), end, topic, p)
}

// scanTimerFrom is scanFrom for scanTimerProducers.
func scanTimerFrom(tl *store.Log, from, end int64, topic string, p int32) (recs []idem.Record, err error) {
	_, err = tl.Walk(from, end, func(r *message.Record) error {
		rec, err := timer.Parse(r.Data)
		if err != nil || rec.Kind != timer.KindMessage || rec.Msg.Partition != p || rec.Msg.Topic != topic {
			return nil
		}
		if id, seq, ok, err := message.SplitDataProducer(rec.Msg.Flag, rec.Msg.Data); err == nil && ok {
			// Size 0: each delayed put stays a batch of its own in the
			// rebuilt table (puts next to each other with consecutive
			// ids would merge into one run, whose retries after the
			// first are answered without their msgIds, which a cancel
			// needs).
			recs = append(recs, idem.Record{Producer: id, Seq: seq, ID: r.ID, Offset: r.Offset})
		}
		return nil
	})
	if errors.Is(err, store.ErrDamagedRecord) {
		err = nil
	}
	return recs, err
}
