package broker

import (
	"context"

	"github.com/metaq-go/metaq/core/filterset"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/filters"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Read-ahead for remote filters. A remote filter call is a round trip to
// the plugin process, which on a small machine costs as much as the rest of
// a filtered get of a few hundred records. A consumer reads on from the
// next offset of its last reply, with the same fetch size; so once a
// connection has sent the reply of a filtered get of at most
// filterAheadMaxSize bytes, it reads the batches that follow and sends them
// to the plugin (filters.Instance.StartAccepts) without waiting for the
// verdicts. A get with the same instance, log, partition, offset and size
// as the oldest read-ahead collects its verdicts and replies from that
// batch instead of reading and judging its own: the plugin's round trip
// overlaps the consumer's. A connection keeps up to filterAheadBytes (and
// two to four batches) ahead and tops them up when one is left, so one
// write to the plugin and one read of its replies serve several gets.
//
// Data below a log's high-water mark never changes, so the batch is the
// one the get would have read or, if more was appended since, a prefix of
// it, which the get serves (the consumer gets the rest next). Any other get
// discards the read-aheads and is served the ordinary way, as is a get
// whose read-ahead failed. A read-ahead that no get takes costs one filter
// call: a filter may judge a batch that is never served (as it may judge
// one batch twice when a consumer retries).

const (
	// filterAheadMaxSize is the largest get size that reads ahead: for larger
	// batches the round trip is a small part of the filter's time.
	filterAheadMaxSize = 256 << 10
	// filterAheadBytes is how many bytes of batches a connection reads ahead.
	filterAheadBytes = 512 << 10
	filterAheadMax   = 4
)

// aheadDepth is how many batches of maxSize bytes a connection reads ahead.
func aheadDepth(maxSize int) int { return min(max(filterAheadBytes/maxSize, 2), filterAheadMax) }

// readAhead is one batch read and sent to the filter ahead of its get.
type readAhead struct {
	in        *filters.Instance
	log       *store.Log
	partition int32
	offset    int64
	maxSize   int
	viewLen   int // bytes read (the view's length)

	buf     []byte
	recs    []filters.Record // alias buf
	next    int64
	pending *filters.Pending
	keep    []bool // set by takeAhead
}

// startAhead tops the connection's read-aheads up, after offset next (the
// reply's), for the gets expected after r (on log l, r's partition), once
// at most one is left. A reply cut short by maxSize (next before scanned,
// the end of the records judged) stops reading ahead: the next get starts
// inside a judged batch. It first writes the replies queued so far, so the
// read-ahead does not delay them.
func (c *conn) startAhead(in *filters.Instance, r *protocol.Request, l *store.Log, next, scanned int64, maxSize int) {
	fsc := &c.filt
	if next != scanned {
		c.b.filters.dropped.Add(int64(len(fsc.ahead)))
		fsc.dropAhead()
		return
	}
	if len(fsc.ahead) > 0 {
		if a := fsc.ahead[0]; a.in != in || a.partition != r.Partition || a.maxSize != maxSize || a.offset != next {
			c.b.filters.dropped.Add(int64(len(fsc.ahead)))
			fsc.dropAhead()
		} else {
			next = fsc.ahead[len(fsc.ahead)-1].next
		}
	}
	if len(fsc.ahead) > 1 || r.Partition < 0 || maxSize > filterAheadMaxSize || next >= l.MaxOffset() {
		return
	}
	if c.wmu.TryLock() {
		err := c.writeQueuedLocked()
		c.wmu.Unlock()
		if err != nil {
			c.close()
			return
		}
	}
	var (
		added   []*readAhead
		batches [][]filters.Record
	)
	for len(fsc.ahead)+len(added) < aheadDepth(maxSize) && next < l.MaxOffset() {
		a := fsc.readAhead(in, l, r.Partition, next, maxSize)
		if a == nil {
			break
		}
		added = append(added, a)
		batches = append(batches, a.recs)
		next = a.next
	}
	if len(added) == 0 {
		return
	}
	for i, p := range in.StartAccepts(context.Background(), r.Partition, batches) {
		added[i].pending = p
	}
	fsc.ahead = append(fsc.ahead, added...)
}

// readAhead reads the batch at offset; nil if there is no whole record
// there.
func (fsc *filterScratch) readAhead(in *filters.Instance, l *store.Log, partition int32, offset int64, maxSize int) *readAhead {
	v, err := l.Read(offset, maxSize)
	if err != nil {
		return nil
	}
	a := &readAhead{in: in, log: l, partition: partition, offset: offset, maxSize: maxSize, viewLen: v.Len}
	a.buf, a.recs = fsc.spareBuffers()
	a.buf, err = v.ReadAll(a.buf)
	v.Release()
	if err == nil {
		a.recs, a.next = filterset.ScanRecords(a.recs, a.buf, offset, in.NeedBodies())
	}
	if err != nil || len(a.recs) == 0 {
		fsc.recycle(a) // the get sends the raw bytes
		return nil
	}
	return a
}

// takeAhead returns the read-ahead batch for the get r of view v (read
// from log l), judged without error, or nil when the get must be served
// the ordinary way.
func (c *conn) takeAhead(in *filters.Instance, r *protocol.Request, l *store.Log, v store.View, maxSize int) *readAhead {
	fsc := &c.filt
	if len(fsc.ahead) == 0 {
		return nil
	}
	a := fsc.ahead[0]
	if a.in != in || a.log != l || a.partition != r.Partition || a.offset != v.Offset || a.maxSize != maxSize || a.viewLen > v.Len {
		c.b.filters.dropped.Add(int64(len(fsc.ahead)))
		fsc.dropAhead()
		return nil
	}
	fsc.ahead = append(fsc.ahead[:0], fsc.ahead[1:]...)
	keep, err := a.pending.Wait()
	if err != nil {
		c.b.filters.dropped.Add(int64(1 + len(fsc.ahead)))
		fsc.recycle(a)
		fsc.dropAhead() // they likely fail too; the ordinary way applies the policy
		return nil
	}
	c.b.filters.taken.Add(1)
	a.keep = keep
	return a
}

// dropAhead discards every read-ahead.
func (fsc *filterScratch) dropAhead() {
	for _, a := range fsc.ahead {
		if a.pending != nil {
			a.pending.Discard()
		}
		fsc.recycle(a)
	}
	clear(fsc.ahead)
	fsc.ahead = fsc.ahead[:0]
}

// spareBuffers returns a kept buffer and record slice, or nil ones.
func (fsc *filterScratch) spareBuffers() ([]byte, []filters.Record) {
	n := len(fsc.spare)
	if n == 0 {
		return nil, nil
	}
	s := fsc.spare[n-1]
	fsc.spare = fsc.spare[:n-1]
	return s.buf, s.recs
}

// recycle keeps a finished read-ahead's buffers for the next one.
func (fsc *filterScratch) recycle(a *readAhead) {
	if cap(a.buf) <= filterAheadMaxSize && len(fsc.spare) <= filterAheadMax {
		clear(a.recs[:cap(a.recs)]) // drop the references into a.buf
		fsc.spare = append(fsc.spare, aheadBuffers{a.buf[:0], a.recs[:0]})
	}
	a.buf, a.recs = nil, nil
}

// aheadBuffers are the buffers of a finished read-ahead.
type aheadBuffers struct {
	buf  []byte
	recs []filters.Record
}
