package store

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
)

// writer is the group-commit goroutine. It takes everything pending (by
// swapping buffers with the appenders), writes it in chunks of at most
// maxWriteChunk bytes cut at append boundaries, with one write() and one
// fdatasync per chunk, raises the readable mark, and completes the chunk's
// appends. Appends arriving meanwhile accumulate in the other buffer, so
// one fsync covers every producer waiting at that moment. After Close it
// drains what is pending and exits.
func (l *Log) writer() {
	defer l.wg.Done()
	var buf []byte
	var comps []completion
	for {
		l.mu.Lock()
		for len(l.pendComps) == 0 && !l.closed {
			l.workCond.Wait()
		}
		if len(l.pendComps) == 0 {
			l.mu.Unlock()
			return
		}
		buf, l.pend = l.pend, buf[:0]
		comps, l.pendComps = l.pendComps, comps[:0]
		failed := l.failErr
		l.spaceCond.Broadcast()
		l.mu.Unlock()

		l.commit(buf, comps, failed)

		clear(comps) // drop Waiter references
		comps = comps[:0]
		if cap(buf) > maxRetainedBuffer {
			buf = nil
		}
	}
}

// commit writes buf, whose records belong to comps, and completes them.
// If failed is non-nil (or becomes so: a failed fsync) the remaining
// appends fail with it. A chunk that fails otherwise (a failed write or
// roll) fails only its own appends: the next chunk is written where the
// failed one would have gone.
func (l *Log) commit(buf []byte, comps []completion, failed error) {
	from := 0 // start in buf of comps[i]
	for i := 0; i < len(comps); {
		j := i + 1
		for j < len(comps) && comps[j].end-from <= maxWriteChunk {
			j++
		}
		chunk := comps[i:j]
		err := failed
		var base int64
		if err == nil {
			base, err = l.writeChunk(buf[from:comps[j-1].end], chunk)
			if errors.Is(err, ErrFailed) {
				failed = err
			}
		}
		start := from // of chunk[k] in buf
		for k := range chunk {
			c := &chunk[k]
			if err != nil {
				done(c.w, c.token, 0, 0, err)
			} else {
				done(c.w, c.token, c.firstID, base+int64(start-from), nil)
			}
			start = c.end
		}
		from = comps[j-1].end
		i = j
	}
}

// writeChunk writes the records of comps (b) to the active segment, rolling
// first if it is full, fsyncs them and makes them readable. It returns the
// offset b was written at. A failed fsync fails the log (the error wraps
// ErrFailed); a failed roll or write leaves the log as it was.
func (l *Log) writeChunk(b []byte, comps []completion) (int64, error) {
	seg, pos, err := l.writeSegment(b)
	if err != nil {
		return 0, err
	}
	err = l.syncFile(seg.f)
	l.nFsyncs.Add(1)
	if err != nil {
		return 0, l.fail(fmt.Errorf("fsync %s: %w", filepath.Base(seg.path), err))
	}
	l.noteFlushed(seg.start+pos+int64(len(b)), false)
	l.completeChunk(seg, seg.start+pos+int64(len(b)), comps)
	return seg.start + pos, nil
}

// writeSegment writes b to the active segment with write() and no fsync
// (a journaled log keeps it in the segment's in-memory tail instead),
// rolling first if the segment is full, and returns the segment and the
// file position b went to. A failed roll or write leaves the log as it
// was (the file is cut back); a failed directory fsync after creating the
// new segment fails the log. Only the writer (or the journal's committer)
// calls it.
func (l *Log) writeSegment(b []byte) (*segment, int64, error) {
	if err := l.makeRoom(); err != nil {
		return nil, 0, err
	}
	seg := l.active
	pos := seg.size.Load()
	if l.j != nil {
		// Journaled: the bytes stay in memory until a checkpoint writes
		// them (segment.appendTail).
		seg.appendTail(b, pos)
		seg.size.Store(pos + int64(len(b)))
		return seg, pos, nil
	}
	n, err := l.writeAt(seg.f, b, pos)
	l.nWrites.Add(1)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return nil, 0, l.writeFailed(seg, pos, err)
	}
	seg.size.Store(pos + int64(n))
	l.nBytes.Add(int64(n))
	return seg, pos, nil
}

// makeRoom readies the active segment for a write: it retries the cut of
// a torn segment and rolls a full one. A failed roll leaves the log as it
// was; a failed directory fsync after creating the new segment fails the
// log. Only the writer (or the journal's committer) calls it.
func (l *Log) makeRoom() error {
	seg := l.active
	if err := l.untear(seg); err != nil {
		return err
	}
	if seg.size.Load() < l.maxSeg {
		return nil
	}
	// Every chunk is durable before it completes (fsynced, or in the
	// journal), so the old segment needs nothing more here: only the new
	// file and its directory entry remain.
	next, err := l.createSegment(seg.end())
	if err != nil {
		if isSyncError(err) {
			return l.fail(err)
		}
		return err
	}
	l.mu.Lock()
	l.publish(next)
	l.mu.Unlock()
	return nil
}

// completeChunk accounts for the durable records of comps in seg, ending
// at end, and makes them readable.
func (l *Log) completeChunk(seg *segment, end int64, comps []completion) {
	msgs := 0
	for i := range comps {
		msgs += comps[i].n
	}
	last := &comps[len(comps)-1]
	l.lastID.Store(last.lastID)
	l.nMessages.Add(int64(msgs))
	l.msgCount.Add(int64(msgs))
	seg.count.Add(int64(msgs))
	seg.cidx.noteChunk(end-seg.start, comps) // count.go
	l.readable.Store(end)
}
