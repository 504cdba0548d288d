package store

import (
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
// If failed is non-nil (or becomes so) the remaining appends fail with it.
func (l *Log) commit(buf []byte, comps []completion, failed error) {
	from := 0 // start in buf of comps[i]
	for i := 0; i < len(comps); {
		j := i + 1
		for j < len(comps) && comps[j].end-from <= maxWriteChunk {
			j++
		}
		chunk := comps[i:j]
		err := failed
		if err == nil {
			err = l.writeChunk(buf[from:comps[j-1].end], chunk)
			failed = err
		}
		for k := range chunk {
			c := &chunk[k]
			if err != nil {
				done(c.w, c.token, 0, 0, err)
			} else {
				done(c.w, c.token, c.firstID, c.firstOffset, nil)
			}
		}
		from = comps[j-1].end
		i = j
	}
}

// writeChunk writes the records of comps (b) to the active segment, rolling
// first if it is full, fsyncs them and makes them readable. On failure it
// fails the log and returns the log's error.
func (l *Log) writeChunk(b []byte, comps []completion) error {
	seg := l.active
	if seg.size.Load() >= l.maxSeg {
		// Every chunk is fsynced before it completes, so the old segment
		// is already durable: only the new file and its entry remain.
		next, err := l.createSegment(seg.end())
		if err != nil {
			return l.fail(err)
		}
		l.mu.Lock()
		l.publish(next)
		l.mu.Unlock()
		seg = next
	}
	pos := seg.size.Load()
	if got := seg.start + pos; got != comps[0].firstOffset {
		return l.fail(fmt.Errorf("internal error: batch for offset %d at segment end %d", comps[0].firstOffset, got))
	}
	n, err := l.writeAt(seg.f, b, pos)
	l.nWrites.Add(1)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return l.fail(fmt.Errorf("write %s at %d: %w", filepath.Base(seg.path), pos, err))
	}
	seg.size.Store(pos + int64(n))
	l.nBytes.Add(int64(n))
	err = l.syncFile(seg.f)
	l.nFsyncs.Add(1)
	if err != nil {
		return l.fail(fmt.Errorf("fsync %s: %w", filepath.Base(seg.path), err))
	}
	msgs := 0
	for i := range comps {
		msgs += comps[i].n
	}
	last := &comps[len(comps)-1]
	l.lastID.Store(last.firstID + int64(last.n) - 1)
	l.nMessages.Add(int64(msgs))
	l.msgCount.Add(int64(msgs))
	seg.count.Add(int64(msgs))
	l.readable.Store(seg.start + pos + int64(n))
	return nil
}
