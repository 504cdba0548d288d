package timer

import (
	"errors"
	"strconv"
	"time"

	"github.com/metaq-go/metaq/core/idem"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
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

// BeginIdem judges an idempotent delayed put of producer id, sequence
// seq, for partition p of topic, held in timer partition tl, by table t
// (rebuilt first from tl when it is not built; logf notes the rebuild).
// It returns the ticket to finish when the timer record is stored; or,
// for a retry of a stored put, its first copy's result (Count 1, offset
// -1); or an *idem.RebuildError or *idem.RefusedError (the verdicts'
// texts name the delayed message; core/partition.BeginIdem judges a
// partition's puts).
func BeginIdem(t *idem.Table, tl *store.Log, topic string, p int32, id, seq int64,
	logf func(string, ...any)) (idem.Ticket, idem.Result, error) {
	now := t.Clock()
	err := t.Build(now, func() (func() (idem.Record, bool), error) {
		start := time.Now()
		recs, err := ScanProducers(tl, topic, p, t.Config().RebuildBytes)
		if err == nil {
			logf("idempotent producer: delayed puts to %s-%d rebuilt from %d records of producers in %s in %v",
				topic, p, len(recs), tl.Dir(), time.Since(start).Round(time.Millisecond))
		}
		return idem.Feed(recs), err
	})
	if err != nil {
		return idem.Ticket{}, idem.Result{}, &idem.RebuildError{
			Of: "the delayed puts to " + topic + "-" + strconv.Itoa(int(p)), Err: err}
	}
	v, res, tk := t.Start(id, seq, seq, now)
	seqs := func() string {
		return "delayed message of producer " + strconv.FormatInt(id, 10) + " sequence " + strconv.FormatInt(seq, 10)
	}
	switch v {
	case idem.Append:
		return tk, idem.Result{}, nil
	case idem.Duplicate:
		if res.Count > 0 {
			return idem.Ticket{}, idem.Result{FirstID: res.FirstID, FirstOffset: -1, Count: 1}, nil
		}
		fallthrough
	case idem.Stored:
		return idem.Ticket{}, idem.Result{}, &idem.RefusedError{Verdict: idem.Stored,
			Msg: seqs() + " is held already, by a put whose msgId this broker no longer holds"}
	case idem.InFlight:
		return idem.Ticket{}, idem.Result{}, &idem.RefusedError{Verdict: v, Msg: seqs() + " is being stored by an earlier copy of this put; retry"}
	case idem.UnknownProducer:
		return idem.Ticket{}, idem.Result{}, &idem.RefusedError{Verdict: v, Msg: seqs() + ": the broker does not know the producer (it starts at sequence 0) or forgot it " +
			"(idempotent_producers, idle expiry, a restart or failover); a retry's first copy may be stored"}
	}
	return idem.Ticket{}, idem.Result{}, &idem.RefusedError{Verdict: idem.OutOfOrder,
		Msg: seqs() + ": the broker expects the producer's next sequence, not a gap"}
}

// ScanProducers reads timer log tl's records from MaxOffset-back (a
// record boundary, as the broker's scan of a partition finds one) to its
// end and returns, as records of the target, the message records for
// partition p of topic whose put carries an idempotent producer, oldest
// first. A damaged record ends the scan.
func ScanProducers(tl *store.Log, topic string, p int32, back int64) ([]idem.Record, error) {
	end := tl.MaxOffset()
	return ScanFrom(tl, tl.RecordStartBefore(max(tl.MinOffset(), end-back)), end, topic, p)
}

// ScanFrom is ScanProducers over [from, end).
func ScanFrom(tl *store.Log, from, end int64, topic string, p int32) (recs []idem.Record, err error) {
	_, err = tl.Walk(from, end, func(r *message.Record) error {
		rec, err := Parse(r.Data)
		if err != nil || rec.Kind != KindMessage || rec.Msg.Partition != p || rec.Msg.Topic != topic {
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
