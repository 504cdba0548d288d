package filterset

import (
	"context"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/filters"
)

// Read-ahead for remote filters. A remote filter call is a round trip to
// the plugin process, which on a small machine costs as much as the rest of
// a filtered get of a few hundred records. A consumer reads on from the
// next offset of its last reply, with the same fetch size; so once a
// connection has sent the reply of a filtered get of at most
// AheadMaxSize bytes, it reads the batches that follow and sends them
// to the plugin (filters.Instance.StartAccepts) without waiting for the
// verdicts. A get with the same instance, log, partition, offset and size
// as the oldest read-ahead collects its verdicts and replies from that
// batch instead of reading and judging its own: the plugin's round trip
// overlaps the consumer's. A connection keeps up to aheadBytes (and
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
	// AheadMaxSize is the largest get size that reads ahead: for larger
	// batches the round trip is a small part of the filter's time.
	AheadMaxSize = 256 << 10
	// aheadBytes is how many bytes of batches a connection reads ahead.
	aheadBytes = 512 << 10
	aheadMax   = 4
)

// aheadDepth is how many batches of maxSize bytes a connection reads ahead.
func aheadDepth(maxSize int) int { return min(max(aheadBytes/maxSize, 2), aheadMax) }

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

// AheadFrom is the first half of topping the connection's read-aheads up
// after a filtered get's reply (judged by in, of partition on log l,
// announcing next, having scanned the batch to scanned): it reports the
// offset to read ahead from and whether to, once at most one batch is
// left. A reply cut short by maxSize (next before scanned) stops reading
// ahead: the next get starts inside a judged batch. The broker then writes
// the replies queued so far, so the read-ahead does not delay them, and
// calls StartAhead.
func (s *Scratch) AheadFrom(in *filters.Instance, partition int32, l *store.Log, next, scanned int64, maxSize int) (int64, bool) {
	if in == nil || !in.Remote() {
		return 0, false
	}
	if next != scanned {
		s.cnt.Dropped.Add(int64(len(s.ahead)))
		s.dropAhead()
		return 0, false
	}
	if len(s.ahead) > 0 {
		if a := s.ahead[0]; a.in != in || a.partition != partition || a.maxSize != maxSize || a.offset != next {
			s.cnt.Dropped.Add(int64(len(s.ahead)))
			s.dropAhead()
		} else {
			next = s.ahead[len(s.ahead)-1].next
		}
	}
	if len(s.ahead) > 1 || partition < 0 || maxSize > AheadMaxSize || next >= l.MaxOffset() {
		return 0, false
	}
	return next, true
}

// StartAhead reads the batches from next (AheadFrom's) and sends them to
// in without waiting for the verdicts.
func (s *Scratch) StartAhead(in *filters.Instance, partition int32, l *store.Log, next int64, maxSize int) {
	var (
		added   []*readAhead
		batches [][]filters.Record
	)
	for len(s.ahead)+len(added) < aheadDepth(maxSize) && next < l.MaxOffset() {
		a := s.readAhead(in, l, partition, next, maxSize)
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
	for i, p := range in.StartAccepts(context.Background(), partition, batches) {
		added[i].pending = p
	}
	s.ahead = append(s.ahead, added...)
}

// readAhead reads the batch at offset; nil if there is no whole record
// there.
func (s *Scratch) readAhead(in *filters.Instance, l *store.Log, partition int32, offset int64, maxSize int) *readAhead {
	v, err := l.Read(offset, maxSize)
	if err != nil {
		return nil
	}
	a := &readAhead{in: in, log: l, partition: partition, offset: offset, maxSize: maxSize, viewLen: v.Len}
	a.buf, a.recs = s.spareBuffers()
	a.buf, err = v.ReadAll(a.buf)
	v.Release()
	if err == nil {
		a.recs, a.next = ScanRecords(a.recs, a.buf, offset, in.NeedBodies())
	}
	if err != nil || len(a.recs) == 0 {
		s.recycle(a) // the get sends the raw bytes
		return nil
	}
	return a
}

// takeAhead returns the read-ahead batch for the get of view v (read
// from log l), judged without error, or nil when the get must be served
// the ordinary way.
func (s *Scratch) takeAhead(in *filters.Instance, partition int32, l *store.Log, v store.View, maxSize int) *readAhead {
	if len(s.ahead) == 0 {
		return nil
	}
	a := s.ahead[0]
	if a.in != in || a.log != l || a.partition != partition || a.offset != v.Offset || a.maxSize != maxSize || a.viewLen > v.Len {
		s.cnt.Dropped.Add(int64(len(s.ahead)))
		s.dropAhead()
		return nil
	}
	s.ahead = append(s.ahead[:0], s.ahead[1:]...)
	keep, err := a.pending.Wait()
	if err != nil {
		s.cnt.Dropped.Add(int64(1 + len(s.ahead)))
		s.recycle(a)
		s.dropAhead() // they likely fail too; the ordinary way applies the policy
		return nil
	}
	s.cnt.Taken.Add(1)
	a.keep = keep
	return a
}

// dropAhead discards every read-ahead.
func (s *Scratch) dropAhead() {
	for _, a := range s.ahead {
		if a.pending != nil {
			a.pending.Discard()
		}
		s.recycle(a)
	}
	clear(s.ahead)
	s.ahead = s.ahead[:0]
}

// spareBuffers returns a kept buffer and record slice, or nil ones.
func (s *Scratch) spareBuffers() ([]byte, []filters.Record) {
	n := len(s.spare)
	if n == 0 {
		return nil, nil
	}
	sp := s.spare[n-1]
	s.spare = s.spare[:n-1]
	return sp.buf, sp.recs
}

// recycle keeps a finished read-ahead's buffers for the next one.
func (s *Scratch) recycle(a *readAhead) {
	if cap(a.buf) <= AheadMaxSize && len(s.spare) <= aheadMax {
		clear(a.recs[:cap(a.recs)]) // drop the references into a.buf
		s.spare = append(s.spare, aheadBuffers{a.buf[:0], a.recs[:0]})
	}
	a.buf, a.recs = nil, nil
}

// aheadBuffers are the buffers of a finished read-ahead.
type aheadBuffers struct {
	buf  []byte
	recs []filters.Record
}
