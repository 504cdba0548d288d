package store

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
)

// ErrNotBoundary is Truncate's error for an offset that is not the start
// of a record (or the log's end).
var ErrNotBoundary = errors.New("store: offset is not a record boundary")

// Cut is what Truncate removed: bytes From..To (To the old end) holding
// Records records; LastID is the log's last id afterwards.
type Cut struct {
	From, To int64
	Records  int64
	LastID   int64
}

// Bytes is the number of bytes cut.
func (c Cut) Bytes() int64 { return c.To - c.From }

// truncateWait bounds how long Truncate waits for the log's appends in
// flight to complete.
const truncateWait = 10 * time.Second

// Truncate cuts the log's tail at offset: every record at or after it is
// removed, durably, and the last id becomes that of the record before it.
// A replica whose source changed (a former failover master rejoining as a
// slave) uses it to drop records the new source never had. offset must be
// a record boundary between MinOffset and MaxOffset (else ErrNotBoundary,
// or an error for an offset out of range), and nothing is changed then.
// The caller must be the log's only appender and append nothing until
// Truncate returns; Truncate waits (at most 10 s) for appends in flight.
//
// The segment holding offset is cut there and fsynced (a sealed one
// becomes the active segment again), the later segments are removed and
// the directory fsynced. A journaled log then waits for a journal
// checkpoint taken after the cut, so that a restart does not replay the
// cut records from the journal into the segments.
func (l *Log) Truncate(offset int64) (Cut, error) {
	if err := l.lockIdle(); err != nil {
		return Cut{}, err
	}
	c, err := l.truncateLocked(offset)
	if err == nil && c.Bytes() > 0 {
		n := int64(1)
		if m := l.cut.Load(); m != nil {
			n = m.n + 1
		}
		l.cut.Store(&cutMark{n: n, from: c.From}) // under mu: one Truncate at a time
	}
	l.mu.Unlock()
	if err != nil || c.Bytes() == 0 || l.j == nil {
		return c, err
	}
	j := l.j
	j.mu.Lock()
	j.closeSeq++ // CheckpointClosed waits for a snapshot taken after this
	j.tableCh = true
	j.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := j.CheckpointClosed(ctx); err != nil {
		return c, fmt.Errorf("store: truncate %s: waiting for the journal checkpoint after the cut: %w", l.dir, err)
	}
	return c, nil
}

// Cuts returns how many times Truncate removed records since Open, and
// where the last of them cut the log: a reader that keeps its own view of
// the log (core/index) drops what lies past the cut when the count moved.
func (l *Log) Cuts() (n int64, lastFrom int64) {
	if m := l.cut.Load(); m != nil {
		return m.n, m.from
	}
	return 0, 0
}

// cutMark is a count of Truncate's cuts and the offset of the last one.
type cutMark struct{ n, from int64 }

// Settle waits (at most 10 s) until no append of the log is in flight
// (threshold mode: flushed) and returns its end: a failover member that
// becomes the holder records it as where its epoch starts.
func (l *Log) Settle() (int64, error) {
	if err := l.lockIdle(); err != nil {
		return 0, err
	}
	defer l.mu.Unlock()
	return l.readable.Load(), nil
}

// lockIdle waits (at most truncateWait) until no append is in flight and
// returns with mu held, or an error without it.
func (l *Log) lockIdle() error {
	if !l.groupCommit {
		if err := l.Flush(); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(truncateWait)
	for {
		l.mu.Lock()
		if err := l.checkLocked(); err != nil {
			l.mu.Unlock()
			return err
		}
		// atomicPending: a part of an AppendAtomic waiting for its round
		// is an append in flight too (its ids are taken).
		if len(l.pendComps) == 0 && !l.queued && l.committing == 0 && l.atomicPending == 0 && l.unflushed == 0 && len(l.pend) == 0 {
			return nil
		}
		l.mu.Unlock()
		if time.Now().After(deadline) {
			return fmt.Errorf("store: %s: appends still in flight after %v", l.dir, truncateWait)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// truncateLocked is Truncate with mu held and no append in flight.
func (l *Log) truncateLocked(offset int64) (Cut, error) {
	end := l.readable.Load()
	if l.active.end() != end {
		return Cut{}, fmt.Errorf("store: truncate %s: written end %d is not the readable end %d", l.dir, l.active.end(), end)
	}
	if offset < l.minOffset.Load() || offset > end {
		return Cut{}, fmt.Errorf("store: truncate %s at %d: outside the log's offsets %d..%d", l.dir, offset, l.minOffset.Load(), end)
	}
	if offset == end {
		return Cut{From: end, To: end, LastID: l.lastID.Load()}, nil
	}
	l.segMu.RLock()
	segs := append([]*segment(nil), l.segs...)
	l.segMu.RUnlock()
	i := findSegment(segs, offset)
	if i < 0 || i >= len(segs) {
		return Cut{}, fmt.Errorf("store: truncate %s at %d: no segment holds it", l.dir, offset)
	}
	seg := segs[i]
	// Every cut segment's bytes are in its file from here on (a journaled
	// segment holds its last bytes in memory until a checkpoint; one that
	// runs later finds nothing left to write).
	for _, s := range segs[i:] {
		if _, _, err := s.flushTail(s.size.Load(), l.writeAt, nil); err != nil {
			return Cut{}, fmt.Errorf("store: truncate %s: %w", l.dir, err)
		}
	}
	keep := offset - seg.start
	var keptIdx []countEntry
	kept, lastID, landed, err := hopRecords(seg, 0, keep, l.maxMsg, &keptIdx)
	if err != nil {
		return Cut{}, fmt.Errorf("store: truncate %s: %w", l.dir, err)
	}
	if landed != keep {
		return Cut{}, fmt.Errorf("%w: %s at %d (the record before it ends at %d)", ErrNotBoundary, l.dir, offset, seg.start+landed)
	}
	if kept == 0 {
		lastID = 0
		if i > 0 {
			prev := segs[i-1]
			if _, lastID, _, err = hopRecords(prev, 0, prev.size.Load(), l.maxMsg, nil); err != nil {
				return Cut{}, fmt.Errorf("store: truncate %s: %w", l.dir, err)
			}
		}
	}
	cutHere, _, _, err := hopRecords(seg, keep, seg.size.Load(), l.maxMsg, nil)
	if err != nil {
		return Cut{}, fmt.Errorf("store: truncate %s: %w", l.dir, err)
	}
	records := cutHere
	for _, s := range segs[i+1:] {
		l.segMu.RLock()
		n := s.count.Load()
		if s.uncounted {
			n = -1 // not all counted yet
		}
		l.segMu.RUnlock()
		if n < 0 {
			if n, _, _, err = hopRecords(s, 0, s.size.Load(), l.maxMsg, nil); err != nil {
				return Cut{}, fmt.Errorf("store: truncate %s: %w", l.dir, err)
			}
		}
		records += n
	}

	// The kept segment, cut and fsynced; a sealed one is opened for
	// writing as the new active segment.
	f := seg.f
	if seg != l.active {
		if f, err = l.openFile(seg.path, os.O_RDWR, 0); err != nil {
			return Cut{}, fmt.Errorf("store: truncate %s: %w", l.dir, err)
		}
	}
	seg.fmu.Lock()
	err = l.truncate(f, keep)
	if err == nil {
		err = l.syncFile(f)
	}
	seg.fmu.Unlock()
	if err != nil {
		if f != seg.f {
			_ = f.Close()
		}
		return Cut{}, l.failLocked(fmt.Errorf("store: truncate %s at %d: %w", l.dir, offset, err))
	}
	// Bytes written from here on are new; the lowered mark is fdatasynced.
	if err := l.resetFlushed(offset); err != nil {
		l.logf("store: %s: %v (a torn tail past %d may be refused as damage after a power cut)", l.dir, err, offset)
	}
	nseg := seg
	if f != seg.f {
		// The background count skips the replaced segment: nseg's
		// records are counted here.
		nseg = newSegment(seg.start, seg.path, f, keep)
		nseg.readAt = l.readAt
		nseg.cidx.setReady(0, keep, kept, keptIdx)
	}
	prefix := seg.integ.prefix.Load()
	l.segMu.Lock()
	victims := append([]*segment(nil), l.segs[i+1:]...)
	if nseg != seg {
		victims = append(victims, seg) // its file lives on as nseg's
	}
	clear(l.segs[i+1:])
	l.segs = l.segs[:i+1]
	l.segs[i] = nseg
	switch {
	case keep < prefix && keep > 0:
		// The cut took part of the prefix the scrub has not verified
		// yet: it verifies [0, keep), the bytes after are new.
		seg.integ.prefix.Store(keep)
	case keep < prefix:
		seg.integ.unverified.Store(false) // nothing is left of it
	}
	switch c := seg.count.Load(); {
	case nseg != seg:
		// What the message count holds of seg (all, some or none of its
		// records) becomes kept.
		nseg.count.Store(kept)
		l.msgCount.Add(kept - max(c, 0))
	case seg.uncounted && keep < prefix:
		// Cut inside the prefix the background count has not counted:
		// count the kept records here instead (its scrub still verifies
		// them).
		seg.uncounted = false
		seg.count.Store(kept)
		l.msgCount.Add(kept - c)
		seg.cidx.reset(0, keep, kept, keptIdx)
	default:
		// The cut records are all counted (after any prefix still to
		// count, which the background count adds later).
		seg.count.Add(-cutHere)
		l.msgCount.Add(-cutHere)
		seg.cidx.cut(keep, cutHere, kept, keptIdx)
	}
	for _, s := range victims {
		s.deleted = true
		if s != seg {
			if c := s.count.Load(); c >= 0 {
				l.msgCount.Add(-c)
			}
		}
	}
	nseg.size.Store(keep)
	l.active = nseg
	l.torn = false
	l.readable.Store(offset)
	l.lastID.Store(lastID)
	l.stagedID = lastID
	l.segMu.Unlock()
	for _, s := range victims {
		if s != seg {
			if rerr := os.Remove(s.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				l.logf("store: %s: truncate: removing %s: %v", l.dir, filepath.Base(s.path), rerr)
			}
		}
		s.release()
	}
	if err := l.syncDir(); err != nil {
		return Cut{}, l.failLocked(err)
	}
	return Cut{From: offset, To: end, Records: records, LastID: lastID}, nil
}

// hopRecords walks the record headers of seg's bytes [from, to): it
// returns the number of whole records, the id of the last one (0 if none)
// and where the walk ended (to, unless a record runs past it or a header
// is invalid). If idx is not nil, it gets the record-count index entries
// of the walk, counted from from (count.go).
func hopRecords(seg *segment, from, to int64, maxMsg int, idx *[]countEntry) (n, lastID, pos int64, err error) {
	br := bufio.NewReaderSize(io.NewSectionReader(seg.reader(), from, to-from), 64<<10)
	var hdr [message.HeaderSize]byte
	pos = from
	marks := newCountMarker(from)
	for to-pos >= message.HeaderSize {
		if idx != nil {
			*idx = marks.mark(*idx, pos, n)
		}
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return n, lastID, pos, fmt.Errorf("read %s at %d: %w", filepath.Base(seg.path), pos, err)
		}
		size := int64(int32(binary.BigEndian.Uint32(hdr[:])))
		if size < 0 || size > int64(maxMsg) || pos+message.HeaderSize+size > to {
			return n, lastID, pos, nil
		}
		if _, err := br.Discard(int(size)); err != nil {
			return n, lastID, pos, fmt.Errorf("read %s at %d: %w", filepath.Base(seg.path), pos, err)
		}
		n++
		lastID = int64(binary.BigEndian.Uint64(hdr[8:]))
		pos += message.HeaderSize + size
	}
	return n, lastID, pos, nil
}
