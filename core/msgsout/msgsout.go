// Package msgsout counts the messages gets sent
// (metaq_topic_messages_out_total, docs/http.md).
//
// An unfiltered get is sent without being parsed (sendfile, or the
// segment's in-memory tail), so the get path only notes the byte range it
// sent, per connection and partition (Stream.Note), and the records are
// counted off the hot path with store.Log.CountRecords (Ledger.Count): at
// each scrape, every CountEvery, and before retention deletes segments. A
// consumer's next get starts where the whole records of its previous one
// ended, inside the range already noted (at the partial last record it
// re-fetches), so its ranges coalesce into one: [a, b) plus [a2, b2) with
// a <= a2 <= b is [a, max(b, b2)). A count of the coalesced range counts
// each record sent whole once; what the two ranges have in common, [a2,
// min(b, b2)), was sent twice, and its whole records (none for a consumer
// reading on: it holds only the partial record) are counted a second time
// from a note of the overlap. A final partial record of a range is not a
// message out: MetaQ clients drop it and fetch it again.
package msgsout

import (
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
)

// CountEvery is how often the noted ranges are counted without a scrape
// (Ledger.Run).
const CountEvery = 2 * time.Second

// span is a sent range to count: a closed range, or an overlap sent
// twice.
type span struct {
	from, to int64
	overlap  bool
}

// Stream is what one connection sent of one partition. The connection's
// read loop notes gets (Note); the ledger's counting pass takes the spans.
type Stream struct {
	mu   sync.Mutex
	l    *store.Log
	out  *atomic.Int64 // the partition's messages out
	a, b int64         // the open range [a, b); a == b: empty
	todo []span
	dead bool // the connection closed: count what is left, then forget it
}

// Note records that [off, off+n) was sent; its whole records will be
// added to out. It does not allocate once the stream's span list has
// grown to what a counting pass takes.
func (s *Stream) Note(out *atomic.Int64, off int64, n int) {
	end := off + int64(n)
	s.mu.Lock()
	s.out = out
	switch {
	case s.a <= off && off <= s.b:
		if ov := min(end, s.b); off < ov {
			s.todo = append(s.todo, span{off, ov, true})
		}
		s.b = max(s.b, end)
	default:
		if s.a < s.b {
			s.todo = append(s.todo, span{s.a, s.b, false})
		}
		s.a, s.b = off, end
	}
	s.mu.Unlock()
}

// Close marks the stream dead (its connection closed); the next counting
// pass counts what it holds and drops it.
func (s *Stream) Close() {
	s.mu.Lock()
	s.dead = true
	s.mu.Unlock()
}

// Ledger is the broker's set of streams. The zero Ledger is ready.
type Ledger struct {
	mu      sync.Mutex
	streams map[*Stream]struct{}
	// countMu serialises counting passes.
	countMu sync.Mutex
	// pending are spans whose segments are not indexed yet (after a
	// restart, until the background scrub has walked them): tried again
	// at the next pass.
	pending []pendingSpan
}

type pendingSpan struct {
	l   *store.Log
	out *atomic.Int64
	sp  span
}

// maxPendingSpans bounds Ledger.pending; past it the oldest are counted
// by their bytes over the partition's mean record size.
const maxPendingSpans = 1 << 16

// Open registers a new stream of partition l (a connection's first get
// of it).
func (led *Ledger) Open(l *store.Log) *Stream {
	s := &Stream{l: l}
	led.mu.Lock()
	if led.streams == nil {
		led.streams = make(map[*Stream]struct{})
	}
	led.streams[s] = struct{}{}
	led.mu.Unlock()
	return s
}

// Count counts every noted range (and closes the open ranges: a later
// get continuing one starts a new range, which counts the same). warnf
// logs a range that could not be counted.
func (led *Ledger) Count(warnf func(format string, args ...any)) {
	led.countMu.Lock()
	defer led.countMu.Unlock()
	led.mu.Lock()
	streams := make([]*Stream, 0, len(led.streams))
	for s := range led.streams {
		streams = append(streams, s)
	}
	led.mu.Unlock()

	retry := led.pending
	led.pending = nil
	for _, p := range retry {
		led.countSpan(p.l, p.out, p.sp, warnf)
	}
	var todo []span
	for _, s := range streams {
		s.mu.Lock()
		todo = append(todo[:0], s.todo...)
		s.todo = s.todo[:0]
		if s.a < s.b {
			todo = append(todo, span{s.a, s.b, false})
			s.a = s.b
		}
		dead, out := s.dead, s.out
		s.mu.Unlock()
		for _, sp := range todo {
			led.countSpan(s.l, out, sp, warnf)
		}
		if dead {
			led.mu.Lock()
			delete(led.streams, s)
			led.mu.Unlock()
		}
	}
	if n := len(led.pending) - maxPendingSpans; n > 0 {
		for _, p := range led.pending[:n] {
			p.out.Add(estimateRecords(p.l, p.sp.to-p.sp.from))
		}
		led.pending = append(led.pending[:0], led.pending[n:]...)
	}
}

// countSpan adds the whole records of sp to out, or queues it while its
// segments are not indexed.
func (led *Ledger) countSpan(l *store.Log, out *atomic.Int64, sp span, warnf func(format string, args ...any)) {
	if sp.overlap && !overlapHasRecord(l, sp) {
		return
	}
	n, exact, err := l.CountRecords(sp.from, sp.to)
	switch {
	case errors.Is(err, store.ErrClosed): // the topic was deleted
		return
	case err != nil:
		warnf("messages out: counting offsets %d..%d of %s: %v", sp.from, sp.to, l.Dir(), err)
		return
	case !exact:
		led.pending = append(led.pending, pendingSpan{l, out, sp})
		return
	}
	out.Add(n)
}

// overlapHasRecord reports whether an overlap may hold a whole record:
// false when the record at its start (the one a consumer reading on
// fetches again) ends past it, read from the record's header alone.
func overlapHasRecord(l *store.Log, sp span) bool {
	if sp.to-sp.from < message.HeaderSize {
		return false
	}
	v, err := l.Read(sp.from, message.HeaderSize)
	if err != nil {
		return true // let CountRecords decide (or report)
	}
	var hdr [message.HeaderSize]byte
	b, err := v.ReadAll(hdr[:0])
	v.Release()
	if err != nil || len(b) < 4 {
		return true
	}
	size := int64(int32(binary.BigEndian.Uint32(b)))
	return size < 0 || sp.from+message.HeaderSize+size <= sp.to
}

// estimateRecords is n bytes of l over its mean record size.
func estimateRecords(l *store.Log, n int64) int64 {
	msgs, size := l.MessageCount(), l.SizeBytes()
	if msgs <= 0 || size <= 0 {
		return 0
	}
	return (n*msgs + size/2) / size
}

// Run counts every CountEvery until done is closed.
func (led *Ledger) Run(done <-chan struct{}, warnf func(format string, args ...any)) {
	t := time.NewTicker(CountEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			led.Count(warnf)
		}
	}
}
