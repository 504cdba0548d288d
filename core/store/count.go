package store

import (
	"encoding/binary"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	"github.com/metaq-go/metaq/sdk/message"
)

// countStep is the spacing in bytes of a segment's record-count index:
// an entry at the first append boundary (or, from a scan, record start)
// at least countStep bytes after the previous one. CountRecords walks at
// most countStep plus one append's bytes of record headers past an entry.
const countStep = 64 << 10

// countEntry says that n records start in [base, pos) of a segment
// (countIndex.base); pos is a record start or the end of the records.
type countEntry struct{ pos, n int64 }

// countMarker places the record-count index entries of a walk over a
// segment's records (recovery's scans, Truncate): one at the first record
// start at least countStep bytes after the previous entry, or after the
// walk's start.
type countMarker struct{ next int64 }

func newCountMarker(from int64) countMarker { return countMarker{from + countStep} }

// mark appends to ents the entry due at pos, with n records before it.
func (m *countMarker) mark(ents []countEntry, pos, n int64) []countEntry {
	if pos >= m.next {
		ents = append(ents, countEntry{pos, n})
		m.next = pos + countStep
	}
	return ents
}

// countIndex is a segment's sparse record-count index (docs/storage.md,
// "Counting records"). The log's writer extends it when appends complete
// (the completions give the records of each append, so nothing is parsed
// for it); recovery's scans and the background scrub, which walk the
// records anyway, build it for the segments found at Open. Until then it
// is not ready and counts over the segment are not exact.
type countIndex struct {
	mu sync.Mutex
	// ready: the entries cover [base, end). A sealed segment found at
	// Open is not ready until the scrub has walked it.
	ready bool
	// base is where the counts start: 0, or the prefix of a last segment
	// recovered from a trust point until the scrub has walked the prefix.
	base int64
	end  int64 // position after the last noted record
	n    int64 // records in [base, end)
	next int64 // where the next entry may go
	ents []countEntry
	// memo caches walks (position -> counts from base), cleared when full
	// and when base moves.
	memo map[int64]rankAt
}

// rankAt is what a walk found at a position p: the records starting
// before p and those ending at or before it, counted from base.
type rankAt struct{ starts, ended int64 }

// maxCountMemo bounds countIndex.memo.
const maxCountMemo = 256

// setReady (re)initialises x from a scan of [base, end) that found n
// records and the entries ents (counts from base). Called before the
// segment is published, or under x.mu by complete.
func (x *countIndex) setReady(base, end, n int64, ents []countEntry) {
	x.ready, x.base, x.end, x.n, x.ents, x.memo = true, base, end, n, ents, nil
	x.next = base + countStep
	if k := len(ents); k > 0 {
		x.next = ents[k-1].pos + countStep
	}
}

// note accounts for k records ending at pos (an append or a chunk of
// appends). Only the log's writer calls it, in offset order.
func (x *countIndex) note(pos int64, k int) {
	x.mu.Lock()
	x.noteLocked(pos, k)
	x.mu.Unlock()
}

func (x *countIndex) noteLocked(pos int64, k int) {
	x.n += int64(k)
	x.end = pos
	if pos >= x.next {
		x.ents = append(x.ents, countEntry{pos, x.n})
		x.next = pos + countStep
	}
}

// noteChunk accounts for the appends comps, whose records end at segEnd
// in the segment; their ends are positions in a buffer whose last one
// (comps[len-1].end) lies at segEnd.
func (x *countIndex) noteChunk(segEnd int64, comps []completion) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.ready {
		return
	}
	last := comps[len(comps)-1].end
	if segEnd < x.next { // no entry due: the common case
		for i := range comps {
			x.n += int64(comps[i].n)
		}
		x.end = segEnd
		return
	}
	for i := range comps {
		x.noteLocked(segEnd-int64(last-comps[i].end), comps[i].n)
	}
}

// reset (re)initialises a published segment's index, as setReady.
func (x *countIndex) reset(base, end, n int64, ents []countEntry) {
	x.mu.Lock()
	x.setReady(base, end, n, ents)
	x.mu.Unlock()
}

// cut drops what the index holds from keep on, cutRecords records
// (Truncate; no append is in flight). Positions in a prefix that the
// scrub has not counted (keep below base) are not covered: then the
// index is rebuilt from keptIdx, the entries of a walk of [0, keep) that
// found kept records.
func (x *countIndex) cut(keep, cutRecords, kept int64, keptIdx []countEntry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.ready || keep < x.base {
		x.setReady(0, keep, kept, keptIdx)
		return
	}
	k := sort.Search(len(x.ents), func(i int) bool { return x.ents[i].pos > keep })
	x.setReady(x.base, keep, x.n-cutRecords, slices.Clip(x.ents[:k]))
}

// complete installs what the scrub found in [0, end): n records, entries
// ents. A last segment whose index starts at its prefix (base == end)
// gets its counts rebased to 0; anything else not ready becomes ready.
func (x *countIndex) complete(end, n int64, ents []countEntry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	switch {
	case !x.ready:
		x.setReady(0, end, n, ents)
	case x.base == end && end > 0:
		merged := make([]countEntry, 0, len(ents)+len(x.ents)+1)
		merged = append(merged, ents...)
		merged = append(merged, countEntry{end, n})
		for _, e := range x.ents {
			merged = append(merged, countEntry{e.pos, e.n + n})
		}
		x.ents, x.base, x.n, x.memo = merged, 0, x.n+n, nil
	}
}

// CountRecords returns the number of whole records in [from, to) of the
// log: those that start at or after from and end at or before to (a
// range that starts inside a record does not count it; one that ends
// inside a record does not count that one either). from is raised to
// MinOffset and to lowered to MaxOffset. exact is false, with n 0, while
// a segment the range touches is not indexed yet: a sealed segment found
// at Open (or the part of the last one before the journal's trust point)
// that the background scrub has not walked, or one whose damage it found.
// Offsets must be record starts for the count to mean "messages"; the
// cost is a binary search per bound and a walk of at most about countStep
// bytes of headers (from the in-memory tail or the page cache).
func (l *Log) CountRecords(from, to int64) (n int64, exact bool, err error) {
	to = min(to, l.readable.Load())
	from = max(from, l.minOffset.Load())
	if from >= to {
		return 0, true, nil
	}
	l.segMu.RLock()
	segs := l.segs
	if len(segs) == 0 {
		l.segMu.RUnlock()
		return 0, false, ErrClosed
	}
	if from < segs[0].start {
		from = segs[0].start
	}
	i := findSegment(segs, from)
	var held []*segment
	for ; i < len(segs) && segs[i].start < to; i++ {
		segs[i].acquire()
		held = append(held, segs[i])
	}
	last := segs[len(segs)-1]
	l.segMu.RUnlock()
	defer func() {
		for _, s := range held {
			s.release()
		}
	}()
	for _, s := range held {
		lo := max(from, s.start) - s.start
		hi := min(to, s.end()) - s.start
		if lo >= hi {
			continue
		}
		if s != last && lo == 0 && hi == s.size.Load() {
			if c := s.count.Load(); c >= 0 && s.cidx.isReady() {
				n += c
				continue
			}
		}
		a, ok, err := l.rank(s, lo)
		if err != nil || !ok {
			return 0, false, err
		}
		b, ok, err := l.rank(s, hi)
		if err != nil || !ok {
			return 0, false, err
		}
		n += max(b.ended-a.starts, 0)
	}
	return n, true, nil
}

func (x *countIndex) isReady() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.ready && x.base == 0
}

// rank returns the records of s before position p (counted from its
// index's base): ok is false when the index does not cover p.
func (l *Log) rank(s *segment, p int64) (rankAt, bool, error) {
	x := &s.cidx
	x.mu.Lock()
	if !x.ready || p < x.base || p > x.end {
		x.mu.Unlock()
		return rankAt{}, false, nil
	}
	if p == x.end {
		r := rankAt{x.n, x.n}
		x.mu.Unlock()
		return r, true, nil
	}
	if r, ok := x.memo[p]; ok {
		x.mu.Unlock()
		return r, true, nil
	}
	k := sort.Search(len(x.ents), func(i int) bool { return x.ents[i].pos > p })
	e := countEntry{x.base, 0}
	if k > 0 {
		e = x.ents[k-1]
	}
	limit := x.end // the bytes below end are written (file or tail) and never change
	base := x.base
	x.mu.Unlock()

	r := rankAt{e.n, e.n}
	if e.pos < p {
		bp := countBufs.Get().(*[]byte)
		defer countBufs.Put(bp)
		b, err := s.readRange(e.pos, min(p+message.HeaderSize, limit)-e.pos, (*bp)[:0])
		*bp = b[:0]
		if err != nil {
			return rankAt{}, false, err
		}
		for pos := e.pos; pos < p; {
			at := pos - e.pos
			if at+4 > int64(len(b)) {
				return rankAt{}, false, fmt.Errorf("store: count %s: record header at %d past the written end %d", filepath.Base(s.path), pos, limit)
			}
			size := int64(int32(binary.BigEndian.Uint32(b[at:])))
			if size < 0 || size > int64(l.maxMsg) {
				return rankAt{}, false, fmt.Errorf("store: count %s: record length %d at %d out of range", filepath.Base(s.path), size, pos)
			}
			size += message.HeaderSize
			r.starts++
			if pos+size <= p {
				r.ended++
			}
			pos += size
		}
	}
	x.mu.Lock()
	if x.base == base {
		if x.memo == nil || len(x.memo) >= maxCountMemo {
			x.memo = make(map[int64]rankAt)
		}
		x.memo[p] = r
	} else { // the scrub rebased the counts meanwhile: walk again
		x.mu.Unlock()
		return l.rank(s, p)
	}
	x.mu.Unlock()
	return r, true, nil
}

// countBufs recycles CountRecords' read buffers.
var countBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2*countStep); return &b }}

// readRange appends bytes [pos, pos+n) of s, which are written (in the
// file, or in the in-memory tail), to dst.
func (s *segment) readRange(pos, n int64, dst []byte) ([]byte, error) {
	for n > 0 {
		mem, inFile := s.tailRead(pos, n)
		if mem != nil {
			dst = append(dst, mem...)
			pos, n = pos+int64(len(mem)), n-int64(len(mem))
			continue
		}
		if inFile <= 0 {
			return dst, fmt.Errorf("store: read %s at %d: %w", filepath.Base(s.path), pos, io.ErrUnexpectedEOF)
		}
		k := len(dst)
		dst = slices.Grow(dst, int(inFile))[:k+int(inFile)]
		m, err := s.f.ReadAt(dst[k:], pos)
		if int64(m) < inFile {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return dst[:k+m], fmt.Errorf("store: read %s at %d: %w", filepath.Base(s.path), pos, err)
		}
		pos, n = pos+inFile, n-inFile
	}
	return dst, nil
}

// RecordStartBefore returns a position at or before offset where a record
// certainly starts, in the segment holding offset: the last entry of the
// segment's record-count index at or before it (entries sit at record
// starts, about countStep apart), else the segment's start. It reads no
// data, so it never takes bytes inside a record's body for a boundary (a
// body may embed whole records). An offset past the readable end gives
// that end; one before the log, its start.
func (l *Log) RecordStartBefore(offset int64) int64 {
	hwm := l.readable.Load()
	if offset >= hwm {
		return hwm
	}
	l.segMu.RLock()
	segs := l.segs
	if len(segs) == 0 {
		l.segMu.RUnlock()
		return hwm
	}
	if offset < segs[0].start {
		l.segMu.RUnlock()
		return segs[0].start
	}
	s := segs[findSegment(segs, offset)]
	l.segMu.RUnlock()
	rel := offset - s.start
	x := &s.cidx
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.ready || rel < x.base {
		return s.start
	}
	best := x.base
	if i := sort.Search(len(x.ents), func(i int) bool { return x.ents[i].pos > rel }); i > 0 {
		best = x.ents[i-1].pos
	}
	return s.start + best
}
