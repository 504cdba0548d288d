package broker

import (
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
)

// Messages out (metaq_topic_messages_out_total, docs/http.md).
//
// An unfiltered get is sent without being parsed (sendfile, or the
// segment's in-memory tail), so the get path only notes the byte range it
// sent, per connection and partition, and the records are counted off the
// hot path with store.Log.CountRecords: at each scrape, every
// outCountEvery, and before retention deletes segments. A consumer's next
// get starts where the whole records of its previous one ended, inside
// the range already noted (at the partial last record it re-fetches), so
// its ranges coalesce into one: [a, b) plus [a2, b2) with a <= a2 <= b is
// [a, max(b, b2)). A count of the coalesced range counts each record sent
// whole once; what the two ranges have in common, [a2, min(b, b2)), was
// sent twice, and its whole records (none for a consumer reading on: it
// holds only the partial record) are counted a second time from a note
// of the overlap. A final partial record of a range is not a message out:
// MetaQ clients drop it and fetch it again.

// outCountEvery is how often the noted ranges are counted without a scrape.
const outCountEvery = 2 * time.Second

// outSpan is a sent range to count: a closed range, or an overlap sent
// twice.
type outSpan struct {
	from, to int64
	overlap  bool
}

// outStream is what one connection sent of one partition. The connection's
// read loop notes gets (note); the counter takes the spans (take).
type outStream struct {
	mu   sync.Mutex
	l    *store.Log
	pc   *partCounters
	a, b int64 // the open range [a, b); a == b: empty
	todo []outSpan
	dead bool // the connection closed: count what is left, then forget it
}

// note records that [off, off+n) was sent.
func (s *outStream) note(pc *partCounters, off int64, n int) {
	end := off + int64(n)
	s.mu.Lock()
	s.pc = pc
	switch {
	case s.a <= off && off <= s.b:
		if ov := min(end, s.b); off < ov {
			s.todo = append(s.todo, outSpan{off, ov, true})
		}
		s.b = max(s.b, end)
	default:
		if s.a < s.b {
			s.todo = append(s.todo, outSpan{s.a, s.b, false})
		}
		s.a, s.b = off, end
	}
	s.mu.Unlock()
}

// outLedger is the broker's set of streams.
type outLedger struct {
	mu      sync.Mutex
	streams map[*outStream]struct{}
	// countMu serialises counting passes.
	countMu sync.Mutex
	// pending are spans whose segments are not indexed yet (after a
	// restart, until the background scrub has walked them): tried again
	// at the next pass.
	pending []pendingSpan
}

type pendingSpan struct {
	l  *store.Log
	pc *partCounters
	sp outSpan
}

// maxPendingSpans bounds outLedger.pending; past it the oldest are
// counted by their bytes over the partition's mean record size.
const maxPendingSpans = 1 << 16

// stream returns the connection's stream of partition l, registering a new
// one. Only the connection's read loop calls it.
func (c *conn) outStream(l *store.Log) *outStream {
	if s := c.outs[l]; s != nil {
		return s
	}
	s := &outStream{l: l}
	if c.outs == nil {
		c.outs = make(map[*store.Log]*outStream)
	}
	c.outs[l] = s
	led := &c.b.outs
	led.mu.Lock()
	if led.streams == nil {
		led.streams = make(map[*outStream]struct{})
	}
	led.streams[s] = struct{}{}
	led.mu.Unlock()
	return s
}

// noteSent records a get's sent range [off, off+n) of partition l.
func (c *conn) noteSent(l *store.Log, pc *partCounters, off int64, n int) {
	if n > 0 {
		c.outStream(l).note(pc, off, n)
	}
}

// closeOuts marks the connection's streams dead (conn.close); the next
// counting pass counts what they hold and drops them.
func (c *conn) closeOuts() {
	for _, s := range c.outs {
		s.mu.Lock()
		s.dead = true
		s.mu.Unlock()
	}
}

// countOut counts every noted range (and closes the open ranges: a later
// get continuing one starts a new range, which counts the same). It runs
// at scrapes, every outCountEvery and before retention.
func (b *Broker) countOut() {
	led := &b.outs
	led.countMu.Lock()
	defer led.countMu.Unlock()
	led.mu.Lock()
	streams := make([]*outStream, 0, len(led.streams))
	for s := range led.streams {
		streams = append(streams, s)
	}
	led.mu.Unlock()

	retry := led.pending
	led.pending = nil
	for _, p := range retry {
		b.countSpan(p.l, p.pc, p.sp)
	}
	var todo []outSpan
	for _, s := range streams {
		s.mu.Lock()
		todo = append(todo[:0], s.todo...)
		s.todo = s.todo[:0]
		if s.a < s.b {
			todo = append(todo, outSpan{s.a, s.b, false})
			s.a = s.b
		}
		dead, pc := s.dead, s.pc
		s.mu.Unlock()
		for _, sp := range todo {
			b.countSpan(s.l, pc, sp)
		}
		if dead {
			led.mu.Lock()
			delete(led.streams, s)
			led.mu.Unlock()
		}
	}
	if n := len(led.pending) - maxPendingSpans; n > 0 {
		for _, p := range led.pending[:n] {
			p.pc.msgsOut.Add(estimateRecords(p.l, p.sp.to-p.sp.from))
		}
		led.pending = append(led.pending[:0], led.pending[n:]...)
	}
}

// countSpan adds the whole records of sp to its partition's messages out,
// or queues it while its segments are not indexed.
func (b *Broker) countSpan(l *store.Log, pc *partCounters, sp outSpan) {
	if sp.overlap && !overlapHasRecord(l, sp) {
		return
	}
	n, exact, err := l.CountRecords(sp.from, sp.to)
	switch {
	case errors.Is(err, store.ErrClosed): // the topic was deleted
		return
	case err != nil:
		b.warnf("messages out: counting offsets %d..%d of %s: %v", sp.from, sp.to, l.Dir(), err)
		return
	case !exact:
		b.outs.pending = append(b.outs.pending, pendingSpan{l, pc, sp})
		return
	}
	pc.msgsOut.Add(n)
}

// overlapHasRecord reports whether an overlap may hold a whole record:
// false when the record at its start (the one a consumer reading on
// fetches again) ends past it, read from the record's header alone.
func overlapHasRecord(l *store.Log, sp outSpan) bool {
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

// outCountLoop runs countOut every outCountEvery until the broker closes.
func (b *Broker) outCountLoop() {
	defer b.wg.Done()
	t := time.NewTicker(outCountEvery)
	defer t.Stop()
	for {
		select {
		case <-b.done:
			return
		case <-t.C:
			b.countOut()
		}
	}
}
