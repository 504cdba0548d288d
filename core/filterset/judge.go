package filterset

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/filters"
	"github.com/metaq-go/metaq/filters/expr"
	"github.com/metaq-go/metaq/sdk/message"
)

// A filtered get (docs/filters.md): the broker reads the view of a get
// whose group has a filter, and Scratch.Judge walks its whole records (a
// record failing its checksum stops the walk), asks the topic's filter once
// for the whole batch and matches the consumer's expression against each
// record. The broker then answers from the Batch (Batch.Layout) or, per
// Judge's result, with the plain value or an error; it alone writes the
// reply. For a remote filter the batch may have been read and judged ahead
// of the get (ahead.go).

// MaxScratch is the largest read buffer a connection keeps between
// filtered gets, in bytes.
const MaxScratch = 4 << 20

// Counters count the filtered gets of a broker.
type Counters struct {
	// Calls and Errors count Accept calls made by gets, for every filter.
	Calls, Errors atomic.Int64
	// Taken and Dropped count read-ahead batches that a get used and that
	// were discarded (ahead.go).
	Taken, Dropped atomic.Int64
}

// Scratch is a connection's reusable state for filtered gets (used by its
// read loop only).
type Scratch struct {
	cnt  *Counters
	buf  []byte
	recs []filters.Record
	// ahead are the batches being judged ahead of the gets expected next,
	// oldest first, for a remote filter (ahead.go); spare are buffers for
	// the next ones.
	ahead []*readAhead
	spare []aheadBuffers
	// keep holds the verdicts of a get judged by a consumer's filter only.
	keep []bool
	// batch is the last Judge's result.
	batch Batch
}

// NewScratch returns a connection's scratch, counting into cnt.
func NewScratch(cnt *Counters) Scratch { return Scratch{cnt: cnt} }

// Batch is a judged batch: the bytes read (Buf, from offset Base), its
// whole records, the verdicts (Keep[i] for Recs[i]) and Next, the offset
// after the records scanned. Valid until the connection's next Judge.
type Batch struct {
	Buf  []byte
	Base int64
	Recs []filters.Record
	Keep []bool
	Next int64

	ahead *readAhead // the read-ahead it came from, recycled by Done
}

// ErrUnavailable is Judge's error when the topic's filter failed and its
// failure policy is closed (the broker answers 503).
var ErrUnavailable = errors.New("filter unavailable")

// Outcome says how Judge's get is answered.
type Outcome int

const (
	// Judged: answer from the returned Batch; v was released.
	Judged Outcome = iota
	// Plain: send v as it is, a plain value holding Msgs whole records (no
	// whole record; or the topic's filter failed open with no consumer
	// filter); the caller sends and releases v.
	Plain
	// Failed: answer the error (a read's, or ErrUnavailable); v was
	// released.
	Failed
)

// Judge judges the get of partition whose view v was read from log l with
// maxSize: in, the topic's filter for the group, and cf, the one the
// consumer chose on its connection; either may be nil, and with both a
// record is kept when both keep it. With in failing, its failure policy
// applies: open keeps what cf keeps (with no cf: Plain), closed is
// ErrUnavailable. msgs is Plain's count of whole records.
func (s *Scratch) Judge(in *filters.Instance, cf *expr.Expr, partition int32, l *store.Log, v store.View, maxSize int) (out Outcome, b *Batch, msgs int, err error) {
	if in == nil {
		s.cnt.Dropped.Add(int64(len(s.ahead))) // read-aheads serve a topic filter's gets
		s.dropAhead()
	} else if a := s.takeAhead(in, partition, l, v, maxSize); a != nil {
		v.Release()
		s.cnt.Calls.Add(1)
		matchAll(cf, a.recs, a.keep)
		s.batch = Batch{Buf: a.buf, Base: a.offset, Recs: a.recs, Keep: a.keep, Next: a.next, ahead: a}
		return Judged, &s.batch, 0, nil
	}
	buf, err := v.ReadAll(s.buf[:0])
	if err != nil {
		v.Release()
		return Failed, nil, 0, err
	}
	if cap(buf) <= MaxScratch {
		s.buf = buf[:0]
	} else {
		s.buf = nil
	}
	recs, next := ScanRecords(s.recs[:0], buf, v.Offset, in != nil && in.NeedBodies())
	s.recs = recs
	if len(recs) == 0 {
		return Plain, nil, 0, nil // no whole record
	}
	var keep []bool
	if in != nil {
		var err error
		keep, err = in.Accept(context.Background(), partition, recs)
		s.cnt.Calls.Add(1)
		if err != nil {
			s.cnt.Errors.Add(1)
			if in.Policy() != filters.FailOpen {
				v.Release()
				return Failed, nil, 0, ErrUnavailable
			}
			if cf == nil {
				return Plain, nil, len(recs), nil
			}
			keep = nil // open: as if it kept every record
		}
	}
	if keep == nil {
		s.keep = s.keep[:0]
		for range recs {
			s.keep = append(s.keep, true)
		}
		keep = s.keep
	}
	matchAll(cf, recs, keep)
	v.Release()
	s.batch = Batch{Buf: buf, Base: v.Offset, Recs: recs, Keep: keep, Next: next}
	return Judged, &s.batch, 0, nil
}

// Done is called once the broker has answered from b (Judge's): a
// read-ahead's buffers are kept for the next one.
func (s *Scratch) Done(b *Batch) {
	if b.ahead != nil {
		s.recycle(b.ahead)
		b.ahead = nil
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

// Layout is what a reply of b's kept records holds when it stays within
// the get's maxSize (plus one offset prefix), so that it fits the client's
// reply limit even for tiny records: kept records past that are left for
// the next get, which starts at them. total is the reply's bytes (each
// record prefixed by its int64 offset; 0: nothing kept), end the index in
// Recs the kept records stop before, next the offset the reply announces
// (Next, or the offset of the first kept record left out).
func (b *Batch) Layout(maxSize int) (total, end int, next int64) {
	total, end, next = 0, len(b.Keep), b.Next
	for i, k := range b.Keep {
		if !k {
			continue
		}
		n := 8 + message.HeaderSize + b.Recs[i].Size
		if total > 0 && total+n > maxSize+8 {
			end, next = i, b.Recs[i].Offset
			break
		}
		total += n
	}
	return total, end, next
}
