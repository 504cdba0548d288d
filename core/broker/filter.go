package broker

import (
	"encoding/binary"

	"github.com/metaq-go/metaq/core/filterset"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/filters"
	"github.com/metaq-go/metaq/filters/expr"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// initFilters opens every [[topic.filter]] (core/filterset).
func (b *Broker) initFilters() error {
	set, err := filterset.Open(b.config(), b.plugins, b.logf)
	if err != nil {
		return err
	}
	b.filters = set
	if n := set.Len(); n > 0 {
		b.logf("filters: %d topic filter(s) loaded", n)
	}
	return nil
}

func (b *Broker) closeFilters() error { return b.filters.Close() }

// sendFiltered answers a get whose group has a filter: in, the topic's
// [[topic.filter]] for the group, and cf, the one the consumer chose on
// this connection (consumerfilter.go); either may be nil. The connection's
// filterset.Scratch judges the view (or takes the batch a remote filter
// judged ahead of this get), and the get is answered
//
//   - fvalue <len> <opaque> <next>, the kept records each prefixed by its
//     int64 BE offset, where next = offset + bytes of whole records scanned
//     (or, if the kept records would overflow maxSize+8 bytes, the offset
//     of the first one left out: Batch.Layout);
//   - 301 with next when nothing is kept (reference §1);
//   - the raw bytes as a plain value when there is no whole record (one
//     record larger than maxSize: the client grows its get; or a bad record
//     at the offset: the client resyncs);
//   - when in fails: the plain value, unfiltered (failure_policy open; with
//     cf, the records cf keeps), or 503 (closed).
//
// For a remote filter it then starts judging the batches after the
// reply's next, which a consumer reading on asks for next
// (core/filterset/ahead.go).
//
// l is the partition's log, which v was read from. It releases v.
func (c *conn) sendFiltered(in *filters.Instance, cf *expr.Expr, r *protocol.Request, l *store.Log, v store.View, maxSize int) {
	fsc := &c.filt
	out, batch, msgs, err := fsc.Judge(in, cf, r.Partition, l, v, maxSize)
	switch out {
	case filterset.Plain:
		c.sendPlain(v, r.Opaque, msgs)
		return
	case filterset.Failed:
		if err == filterset.ErrUnavailable {
			c.reply(protocol.StatusBusy, "filter "+in.Name()+" unavailable", r.Opaque)
		} else {
			c.reply(protocol.StatusInternalError, "read failed: "+err.Error(), r.Opaque)
		}
		return
	}
	sent := c.replyFiltered(r, batch, maxSize)
	scanned := batch.Next
	fsc.Done(batch)
	if from, ok := fsc.AheadFrom(in, r.Partition, l, sent, scanned, maxSize); ok {
		if c.wmu.TryLock() { // the replies queued so far first
			err := c.writeQueuedLocked()
			c.wmu.Unlock()
			if err != nil {
				c.close()
				return
			}
		}
		fsc.StartAhead(in, r.Partition, l, from, maxSize)
	}
}

// replyFiltered sends the kept records of a judged batch and returns the
// next offset it announced.
func (c *conn) replyFiltered(r *protocol.Request, b *filterset.Batch, maxSize int) int64 {
	total, end, next := b.Layout(maxSize)
	if total == 0 {
		c.replyInt(protocol.StatusMoved, next, r.Opaque)
		return next
	}
	out, ok := c.lockOut()
	if !ok {
		return next
	}
	out = protocol.AppendFValueHeader(out, total, r.Opaque, next)
	kept := 0
	for i, k := range b.Keep[:end] {
		if !k {
			continue
		}
		kept++
		rec := &b.Recs[i]
		pos := int(rec.Offset - b.Base)
		out = binary.BigEndian.AppendUint64(out, uint64(rec.Offset))
		out = append(out, b.Buf[pos:pos+message.HeaderSize+rec.Size]...)
	}
	// Counted before the send, as unfiltered gets are (dispatch.go).
	if pc := c.getPC; pc != nil {
		pc.BytesOut.Add(int64(total - 8*kept)) // the records, without their offset prefixes
		pc.MsgsOut.Add(int64(kept))
	}
	c.unlockOut(out)
	return next
}

// sendPlain sends v, which holds msgs whole records, as a plain value
// reply (sendfile) and releases it.
func (c *conn) sendPlain(v store.View, opaque int32, msgs int) {
	// Counted before the send, as unfiltered gets are (dispatch.go).
	if pc := c.getPC; pc != nil {
		pc.BytesOut.Add(int64(v.Len))
		pc.MsgsOut.Add(int64(msgs))
	}
	err := c.sendValue(v, opaque)
	v.Release()
	if err != nil {
		c.close()
	}
}

// FilterStats returns how many gets were judged by a server-side filter
// and how many of those the filter failed (served per its failure policy).
func (b *Broker) FilterStats() (calls, errors int64) {
	return b.filters.Counters().Calls.Load(), b.filters.Counters().Errors.Load()
}

// FilterReadAheadStats returns how many batches read ahead for remote
// filters a get used, and how many were discarded (the consumer asked for
// something else, or the read-ahead failed).
func (b *Broker) FilterReadAheadStats() (taken, dropped int64) {
	return b.filters.Counters().Taken.Load(), b.filters.Counters().Dropped.Load()
}
