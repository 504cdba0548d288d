package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
)

// logRound is a journaled log's part of one commit round, owned by the
// journal's round pipeline: the appends taken from the log and the chunks
// of them written to the segment. A log has roundSlots of them, one per
// round that can be in flight (staged, synced, completed) at once.
type logRound struct {
	buf []byte
	// own says buf is the round's own array rather than a window of the
	// log's pending-records arena (takeRound, stageGroups).
	own   bool
	comps []completion
	acks  []ackChunk
	// reg and regAcks count the comps and acks of the log's own appends;
	// those of atomic groups (atomic.go) follow them.
	reg, regAcks int
}

// ackChunk is a chunk of a journaled log's appends written to its segment
// in the current round, waiting for the journal's fdatasync.
type ackChunk struct {
	seg     *segment
	base    int64 // partition offset of the chunk's first byte
	end     int64 // partition offset just past it
	i, k    int   // its completions: comps[i:k] of its logRound
	bufFrom int   // where the chunk starts in the logRound's buf
}

// takeRound is the first step of the log's part of a journal round, run
// by the committer: it takes the pending appends into the round's buffers
// and returns the journal bytes their records need at most (for
// Journal.reserve) and the number of appends taken.
func (l *Log) takeRound(slot int) (int64, int) {
	rs := &l.rounds[slot]
	l.mu.Lock()
	// The round takes the pending bytes as they lie in the arena and the
	// next appends continue after them: rs.buf is never written again
	// (the segment tails hold it, appendTail), so it is not recycled. Its
	// capacity runs on over the bytes the next appends write, so that a
	// tail chunk can extend over the next round's (appendTail); whoever
	// appends to rs.buf clips it first (stageGroups).
	n := len(l.pend)
	rs.buf, rs.own, l.pend = l.pend[:n], false, l.pend[n:]
	rs.comps, l.pendComps = l.pendComps, rs.comps[:0]
	l.queued = false
	l.committing++
	l.spaceCond.Broadcast()
	l.mu.Unlock()
	rs.acks = rs.acks[:0]
	rs.reg, rs.regAcks = len(rs.comps), 0
	chunks := int64(len(rs.buf)/maxWriteChunk + len(rs.comps)/1024 + 2)
	return int64(len(rs.buf)) + chunks*int64(jHeaderSize+2+len(l.jname)+jDataFixed), len(rs.comps)
}

// failRound fails every append taken by takeRound with err.
func (l *Log) failRound(slot int, err error) {
	rs := &l.rounds[slot]
	for c := range rs.comps {
		done(rs.comps[c].w, rs.comps[c].token, 0, 0, err)
	}
	rs.comps = rs.comps[:0] // finishJournaled has nothing left to do
	rs.reg = 0
}

// writeRound writes the taken appends to the segment with write() (no
// fsync) in chunks of at most maxWriteChunk. A chunk whose write or roll
// fails fails its appends at once and leaves nothing behind; the next
// chunk goes where it would have gone. If failed is set (the journal or
// the log has failed), every append fails with it. It touches only the
// log, so the committer runs it for several logs at once.
func (l *Log) writeRound(slot int, failed error) {
	rs := &l.rounds[slot]
	if failed == nil {
		failed = l.Err()
	}
	comps, buf := rs.comps[:rs.reg], rs.buf
	defer func() { rs.regAcks = len(rs.acks) }()
	from := 0 // start in buf of comps[i]
	for i := 0; i < len(comps); {
		k := i + 1
		for k < len(comps) && comps[k].end-from <= maxWriteChunk {
			k++
		}
		b := buf[from:comps[k-1].end]
		err := failed
		if err == nil {
			var seg *segment
			var pos int64
			seg, pos, err = l.writeSegment(b)
			if errors.Is(err, ErrFailed) {
				failed = err
			}
			if err == nil {
				rs.acks = append(rs.acks, ackChunk{seg: seg, base: seg.start + pos, end: seg.start + pos + int64(len(b)), i: i, k: k, bufFrom: from})
				l.stagedID = comps[k-1].lastID
			}
		}
		if err != nil {
			for c := i; c < k; c++ {
				done(comps[c].w, comps[c].token, 0, 0, err)
			}
		}
		from = comps[k-1].end
		i = k
	}
}

// journalRound adds a data record for each chunk writeRound wrote to the
// round (the journal space was reserved, so this cannot run out of
// files) and notes the segments for the next checkpoint.
func (l *Log) journalRound(j *Journal, slot int) error {
	rs := &l.rounds[slot]
	if rs.regAcks > 0 {
		if err := j.addRegister(l); err != nil {
			return err
		}
	}
	for _, a := range rs.acks[:rs.regAcks] {
		b := rs.buf[a.bufFrom : a.bufFrom+int(a.end-a.base)]
		if err := j.addData(l.jname, a.seg.start, a.base, b); err != nil {
			return err
		}
		l.markDirty(a.seg)
	}
	return nil
}

// markDirty notes that seg has bytes the next checkpoint must fsync.
func (l *Log) markDirty(seg *segment) {
	l.mu.Lock()
	if n := len(l.dirty); n == 0 || l.dirty[n-1] != seg {
		seg.acquire()
		l.dirty = append(l.dirty, seg)
	}
	l.mu.Unlock()
}

// redirty puts seg back on the dirty list after a checkpoint could not
// write its tail, unless the log is closing (closeJournaled writes every
// tail itself).
func (l *Log) redirty(seg *segment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if n := len(l.dirty); n == 0 || l.dirty[n-1] != seg {
		seg.acquire()
		l.dirty = append(l.dirty, seg)
	}
}

// finishJournaled completes the round for the log once the journal
// fdatasync is done (err nil: readable marks rise, appends succeed) or
// has failed (every staged append fails with err).
func (l *Log) finishJournaled(err error, slot int) {
	rs := &l.rounds[slot]
	for _, a := range rs.acks {
		chunk := rs.comps[a.i:a.k]
		if err == nil {
			l.completeChunk(a.seg, a.end, chunk)
		}
		start := a.bufFrom
		for c := range chunk {
			cp := &chunk[c]
			if err != nil {
				done(cp.w, cp.token, 0, 0, err)
			} else {
				done(cp.w, cp.token, cp.firstID, a.base+int64(start-a.bufFrom), nil)
			}
			start = cp.end
		}
	}
	clear(rs.acks)
	rs.acks = rs.acks[:0]
	clear(rs.comps) // drop Waiter references
	rs.comps = rs.comps[:0]
	rs.buf = nil // the segment tails own it (takeRound)
	l.mu.Lock()
	l.committing--
	if l.closed {
		l.workCond.Broadcast()
	}
	l.mu.Unlock()
}

// closeJournaled waits until the committer has completed every append of
// the closing log, fsyncs the segments written since the last checkpoint
// and leaves the journal.
func (l *Log) closeJournaled() error {
	l.mu.Lock()
	for l.queued || l.committing > 0 || l.atomicPending > 0 {
		l.workCond.Wait()
	}
	dirty := l.dirty
	l.dirty = nil
	c := &closedEnd{end: l.active.end(), lastID: l.stagedID}
	if l.failErr != nil {
		c = nil
	}
	l.mu.Unlock()
	// Every segment's tail goes to its file first, including those of
	// segments a checkpoint in progress took from the dirty list and has
	// not written yet (segment.fmu orders the two writers; the second
	// finds nothing left to write).
	var err error
	l.segMu.RLock()
	segs := slices.Clone(l.segs)
	for _, s := range segs {
		s.acquire()
	}
	l.segMu.RUnlock()
	for _, s := range segs {
		writes, n, werr := s.flushTail(s.size.Load(), l.writeAt, nil)
		l.nWrites.Add(int64(writes))
		l.nBytes.Add(n)
		if werr != nil && err == nil {
			err = l.fail(werr)
			c = nil
		}
		if writes > 0 && !slices.Contains(dirty, s) {
			s.acquire()
			dirty = append(dirty, s)
		}
		s.release()
	}
	for _, s := range dirty {
		if err == nil {
			if serr := l.syncFile(s.f); serr != nil {
				err = l.fail(fmt.Errorf("fsync %s: %w", filepath.Base(s.path), serr))
				c = nil
			}
		}
		s.release()
	}
	l.j.unregister(l, c)
	return err
}
