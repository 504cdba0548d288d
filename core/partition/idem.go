package partition

import (
	"errors"
	"strconv"
	"time"

	"github.com/metaq-go/metaq/core/idem"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
)

// The idempotent producer, a partition's side (core/idem holds the table;
// docs/protocol.md, "Idempotent producer"): a put or mput whose messages
// carry a producer id and sequences is judged by its partition's table
// before it is appended, and the table learns its result when the append
// completes. The broker (core/broker/idem.go) keeps the tables, reads the
// put and answers it.

// BeginIdem judges an idempotent put of producer id's sequences
// first..last in partition l by table t (rebuilt first from l's tail when
// it is not built, logf noting the rebuild). It returns the ticket to
// finish when the append completes; or, for a retry of a stored put, its
// first copy's result (Count > 0); or an *idem.RebuildError or
// *idem.RefusedError.
func BeginIdem(t *idem.Table, l *store.Log, id, first, last int64,
	logf func(string, ...any)) (idem.Ticket, idem.Result, error) {
	now := t.Clock() // the broker's clock loop's: no clock read per put
	if !t.Built() {
		if err := buildIdem(t, l, now, logf); err != nil {
			return idem.Ticket{}, idem.Result{}, &idem.RebuildError{Of: l.Dir(), Err: err}
		}
	}
	v, res, tk := t.Start(id, first, last, now)
	seqs := func() string {
		return "producer " + strconv.FormatInt(id, 10) + " sequences " + strconv.FormatInt(first, 10) +
			".." + strconv.FormatInt(last, 10)
	}
	switch v {
	case idem.Append:
		return tk, idem.Result{}, nil
	case idem.Duplicate:
		if res.Count > 0 {
			return idem.Ticket{}, res, nil
		}
		fallthrough // stored, its result unknown (the slave failed it)
	case idem.Stored:
		return idem.Ticket{}, idem.Result{}, &idem.RefusedError{Verdict: idem.Stored,
			Msg: seqs() + " are stored already, by a put whose offsets this broker no longer holds"}
	case idem.InFlight:
		return idem.Ticket{}, idem.Result{}, &idem.RefusedError{Verdict: v,
			Msg: seqs() + " are being stored by an earlier copy of this put; retry"}
	case idem.UnknownProducer:
		return idem.Ticket{}, idem.Result{}, &idem.RefusedError{Verdict: v,
			Msg: seqs() + ": the broker does not know the producer (it starts at sequence 0) or forgot it " +
				"(idempotent_producers, idle expiry, a restart or failover); a retry's first copy may be stored"}
	}
	return idem.Ticket{}, idem.Result{}, &idem.RefusedError{Verdict: idem.OutOfOrder,
		Msg: seqs() + ": the broker expects the producer's next sequence, not a gap or a part of a stored put"}
}

// buildIdem rebuilds table t of partition l from the log's tail, once
// (idem.Table.Build): the first idempotent put after the partition opened
// or after a failover.
func buildIdem(t *idem.Table, l *store.Log, now time.Time, logf func(string, ...any)) error {
	return t.Build(now, func() (func() (idem.Record, bool), error) {
		start := time.Now()
		recs, from, err := ScanProducers(l, t.Config().RebuildBytes)
		if err == nil {
			logf("idempotent producer: partition %s rebuilt from %d records of producers in [%d, %d) in %v",
				l.Dir(), len(recs), from, l.MaxOffset(), time.Since(start).Round(time.Millisecond))
		}
		return idem.Feed(recs), err
	})
}

// ScanProducers reads partition l's records from MaxOffset-back (from a
// record start at or before it that the log's record-count index knows,
// else from the start of the segment holding it: never a guess, which a
// body embedding whole records could mislead) to MaxOffset and returns
// those that carry an idempotent producer, oldest first. A damaged record
// ends the scan (recovery cut the log at the first bad record of its
// tail; one found here is never served either).
func ScanProducers(l *store.Log, back int64) (recs []idem.Record, from int64, err error) {
	end := l.MaxOffset()
	from = l.RecordStartBefore(max(l.MinOffset(), end-back))
	recs, err = scanFrom(l, from, end)
	return recs, from, err
}

// scanFrom reads l's records from offset from (a record boundary) to end
// and returns those that carry an idempotent producer, oldest first (a
// damaged record, or the log ending before end, stops the scan).
func scanFrom(l *store.Log, from, end int64) (recs []idem.Record, err error) {
	_, err = l.Walk(from, end, func(r *message.Record) error {
		if r.Flag&message.FlagHasProperties == 0 {
			return nil
		}
		if id, seq, ok, err := message.SplitDataProducer(r.Flag, r.Data); err == nil && ok {
			recs = append(recs, idem.Record{Producer: id, Seq: seq, ID: r.ID, Offset: r.Offset, Size: int64(r.Size())})
		}
		return nil
	})
	if errors.Is(err, store.ErrDamagedRecord) {
		err = nil
	}
	return recs, err
}
