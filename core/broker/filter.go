package broker

import (
	"context"
	"encoding/binary"
	"sync/atomic"

	"github.com/metaq-go/metaq/core/filterset"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/filters"
	"github.com/metaq-go/metaq/filters/expr"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// maxFilterScratch is the largest read buffer a connection keeps between
// filtered gets, in bytes.
const maxFilterScratch = 4 << 20

// filterSet is the broker's filters (core/filterset) and the counts of
// their use by gets.
type filterSet struct {
	set *filterset.Set
	// calls and errors count Accept calls made by gets, for every filter.
	calls, errors atomic.Int64
	// taken and dropped count read-ahead batches that a get used and that
	// were discarded (filter_ahead.go).
	taken, dropped atomic.Int64
}

// lookup returns the filter of a topic and group, or nil.
func (fs *filterSet) lookup(topic string, group []byte) *filters.Instance {
	return fs.set.Lookup(topic, group)
}

// filterScratch is a connection's reusable state for filtered gets (used by
// the read loop only).
type filterScratch struct {
	buf  []byte
	recs []filters.Record
	// ahead are the batches being judged ahead of the gets expected next,
	// oldest first, for a remote filter (filter_ahead.go); spare are buffers
	// for the next ones.
	ahead []*readAhead
	spare []aheadBuffers
	// keep holds the verdicts of a get judged by a consumer's filter only.
	keep []bool
}

// initFilters opens every [[topic.filter]] (core/filterset).
func (b *Broker) initFilters() error {
	set, err := filterset.Open(b.config(), b.plugins, b.logf)
	if err != nil {
		return err
	}
	b.filters.set = set
	if n := set.Len(); n > 0 {
		b.logf("filters: %d topic filter(s) loaded", n)
	}
	return nil
}

func (b *Broker) closeFilters() error { return b.filters.set.Close() }

// sendFiltered answers a get whose group has a filter: in, the topic's
// [[topic.filter]] for the group, and cf, the one the consumer chose on
// this connection (consumerfilter.go); either may be nil, and with both a
// record is kept when both keep it. It reads the view, walks its whole
// records (a record failing its checksum stops the walk), asks in once for
// the whole batch, matches cf against each record and replies
//
//   - fvalue <len> <opaque> <next>, the kept records each prefixed by its
//     int64 BE offset, where next = offset + bytes of whole records scanned
//     (or, if the kept records would overflow maxSize+8 bytes, the offset
//     of the first one left out);
//   - 301 with next when nothing is kept (reference §1);
//   - the raw bytes as a plain value when there is no whole record (one
//     record larger than maxSize: the client grows its get; or a bad record
//     at the offset: the client resyncs);
//   - when in fails: the plain value, unfiltered (failure_policy open; with
//     cf, the records cf keeps), or 503 (closed).
//
// For a remote filter the batch may already have been read and judged
// ahead of this get (filter_ahead.go); either way it then starts judging
// the batch at next, which a consumer reading on asks for next.
//
// l is the partition's log, which v was read from. It releases v.
func (c *conn) sendFiltered(in *filters.Instance, cf *expr.Expr, r *protocol.Request, l *store.Log, v store.View, maxSize int) {
	b := c.b
	fsc := &c.filt
	if in == nil {
		b.filters.dropped.Add(int64(len(fsc.ahead))) // read-aheads serve a topic filter's gets
		fsc.dropAhead()
	} else if a := c.takeAhead(in, r, l, v, maxSize); a != nil {
		v.Release()
		b.filters.calls.Add(1)
		matchAll(cf, a.recs, a.keep)
		next := c.replyFiltered(r, a.buf, a.offset, a.recs, a.keep, a.next, maxSize)
		fsc.recycle(a)
		c.startAhead(in, r, l, next, a.next, maxSize)
		return
	}
	buf, err := v.ReadAll(fsc.buf[:0])
	if err != nil {
		v.Release()
		c.reply(protocol.StatusInternalError, "read failed: "+err.Error(), r.Opaque)
		return
	}
	if cap(buf) <= maxFilterScratch {
		fsc.buf = buf[:0]
	} else {
		fsc.buf = nil
	}
	recs, next := filterset.ScanRecords(fsc.recs[:0], buf, v.Offset, in != nil && in.NeedBodies())
	fsc.recs = recs
	if len(recs) == 0 {
		c.sendPlain(v, r.Opaque, 0) // no whole record
		return
	}
	var keep []bool
	if in != nil {
		var err error
		keep, err = in.Accept(context.Background(), r.Partition, recs)
		b.filters.calls.Add(1)
		if err != nil {
			b.filters.errors.Add(1)
			if in.Policy() != filters.FailOpen {
				v.Release()
				c.reply(protocol.StatusBusy, "filter "+in.Name()+" unavailable", r.Opaque)
				return
			}
			if cf == nil {
				c.sendPlain(v, r.Opaque, len(recs))
				return
			}
			keep = nil // open: as if it kept every record
		}
	}
	if keep == nil {
		fsc.keep = fsc.keep[:0]
		for range recs {
			fsc.keep = append(fsc.keep, true)
		}
		keep = fsc.keep
	}
	matchAll(cf, recs, keep)
	v.Release()
	if sent := c.replyFiltered(r, buf, v.Offset, recs, keep, next, maxSize); in != nil && in.Remote() {
		c.startAhead(in, r, l, sent, next, maxSize)
	}
}

// matchAll clears keep[i] for each record cf does not match (cf nil: none).
func matchAll(cf *expr.Expr, recs []filters.Record, keep []bool) {
	if cf == nil {
		return
	}
	for i := range recs {
		if keep[i] && !cf.Match(&recs[i]) {
			keep[i] = false
		}
	}
}

// replyFiltered sends the kept records of a judged batch (buf starts at
// offset base) and returns the next offset it announced.
func (c *conn) replyFiltered(r *protocol.Request, buf []byte, base int64, recs []filters.Record, keep []bool, next int64, maxSize int) int64 {
	// The reply stays within the get's maxSize (plus one offset prefix), so
	// that it fits the client's reply limit even for tiny records: kept
	// records past that are left for the next get, which starts at them.
	total, end := 0, len(keep)
	for i, k := range keep {
		if !k {
			continue
		}
		n := 8 + message.HeaderSize + recs[i].Size
		if total > 0 && total+n > maxSize+8 {
			end, next = i, recs[i].Offset
			break
		}
		total += n
	}
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
	for i, k := range keep[:end] {
		if !k {
			continue
		}
		kept++
		pos := int(recs[i].Offset - base)
		out = binary.BigEndian.AppendUint64(out, uint64(recs[i].Offset))
		out = append(out, buf[pos:pos+message.HeaderSize+recs[i].Size]...)
	}
	// Counted before the send, as unfiltered gets are (dispatch.go).
	if pc := c.getPC; pc != nil {
		pc.bytesOut.Add(int64(total - 8*kept)) // the records, without their offset prefixes
		pc.msgsOut.Add(int64(kept))
	}
	c.unlockOut(out)
	return next
}

// sendPlain sends v, which holds msgs whole records, as a plain value
// reply (sendfile) and releases it.
func (c *conn) sendPlain(v store.View, opaque int32, msgs int) {
	// Counted before the send, as unfiltered gets are (dispatch.go).
	if pc := c.getPC; pc != nil {
		pc.bytesOut.Add(int64(v.Len))
		pc.msgsOut.Add(int64(msgs))
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
	return b.filters.calls.Load(), b.filters.errors.Load()
}

// FilterReadAheadStats returns how many batches read ahead for remote
// filters a get used, and how many were discarded (the consumer asked for
// something else, or the read-ahead failed).
func (b *Broker) FilterReadAheadStats() (taken, dropped int64) {
	return b.filters.taken.Load(), b.filters.dropped.Load()
}
