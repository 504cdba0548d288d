package store

import (
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
)

// Append assigns ids (one IDs.Next call) and offsets to entries, copies
// them, and arranges that w.AppendDone(token, ...) is called exactly once
// (w may be nil). In group-commit mode that happens on the log's writer
// goroutine after an fsync covering the entries; in threshold mode after
// the write (and the fsync, if this append triggered one), synchronously
// before Append returns. An I/O failure is reported through AppendDone:
// a failed write or segment roll (ENOSPC, EMFILE, ...) fails only the
// appends it covers, which leave nothing behind (offsets do not move, no
// part of them is ever read), and the next append tries again; a failed
// fsync also fails the log (ErrFailed).
//
// Append returns an error, and then never calls AppendDone, for a closed
// or failed log (ErrClosed, ErrFailed), an empty batch (ErrEmptyBatch) or
// an entry longer than MaxMessageSize (ErrTooLarge). Entries is not
// retained.
func (l *Log) Append(entries []Entry, w Waiter, token uint64) error {
	if err := l.checkEntries(entries); err != nil {
		return err
	}
	if l.groupCommit {
		return l.appendGroup(entries, w, token, false)
	}
	return l.appendThreshold(entries, w, token)
}

// AppendLead is Append for a caller that can wait for the commit: on an
// idle journal (group-commit mode, nothing else in flight) it runs the
// commit round itself, so w.AppendDone is called before AppendLead
// returns, on the caller's goroutine, after the fdatasync; this spares a
// lone synchronous put two goroutine handoffs. Under load, or when the
// log is not journaled, it is Append. The caller must hold no lock that
// a Waiter of the log (its own or another append's, completed in the
// same round) takes.
func (l *Log) AppendLead(entries []Entry, w Waiter, token uint64) error {
	if !l.groupCommit || l.j == nil {
		return l.Append(entries, w, token)
	}
	if err := l.checkEntries(entries); err != nil {
		return err
	}
	return l.appendGroup(entries, w, token, true)
}

// checkEntries returns why entries cannot be appended, if they cannot.
func (l *Log) checkEntries(entries []Entry) error {
	if len(entries) == 0 {
		return ErrEmptyBatch
	}
	for i := range entries {
		if n := len(entries[i].Data); n > l.maxMsg {
			return fmt.Errorf("%w: entry %d has %d bytes, limit %d", ErrTooLarge, i, n, l.maxMsg)
		}
		if (entries[i].ID == 0) != (entries[0].ID == 0) {
			return fmt.Errorf("store: entry %d: ids given for some entries only", i)
		}
	}
	return nil
}

// takeIDs returns the first and last ids of entries: their own, or n new
// ones.
func (l *Log) takeIDs(entries []Entry) (first, last int64) {
	if entries[0].ID != 0 {
		return entries[0].ID, entries[len(entries)-1].ID
	}
	first = l.ids.Next(len(entries))
	return first, first + int64(len(entries)) - 1
}

// appendRecords frames entries onto dst, with their own ids or ids from
// firstID onwards.
func appendRecords(dst []byte, entries []Entry, firstID int64) []byte {
	for i := range entries {
		e := &entries[i]
		id := firstID + int64(i)
		if e.ID != 0 {
			id = e.ID
		}
		dst = message.AppendRecordCRC(dst, id, e.Flag, e.CRC, e.Data)
	}
	return dst
}

// checkLocked returns why appends are refused, if they are. Callers hold mu.
func (l *Log) checkLocked() error {
	if l.closed {
		return ErrClosed
	}
	if l.failErr == nil && l.j != nil {
		return l.j.refuse()
	}
	return l.failErr
}

// appendGroup queues entries for the group-commit writer; with lead set
// it may commit them itself (AppendLead).
func (l *Log) appendGroup(entries []Entry, w Waiter, token uint64, lead bool) error {
	if l.j != nil {
		l.j.waitCheckpoint() // restart.go
	}
	l.mu.Lock()
	for {
		if err := l.checkLocked(); err != nil {
			l.mu.Unlock()
			return err
		}
		if len(l.pend) < l.pendingCap {
			break
		}
		l.spaceCond.Wait()
	}
	firstID, lastID := l.takeIDs(entries)
	if l.j != nil {
		l.reserveJournaled(entries)
	}
	l.pend = appendRecords(l.pend, entries, firstID)
	l.pendComps = append(l.pendComps, completion{
		w: w, token: token, firstID: firstID, lastID: lastID, end: len(l.pend), n: len(entries),
	})
	enqueue := false
	if l.j != nil {
		enqueue = !l.queued
		l.queued = true
	} else if len(l.pendComps) == 1 {
		l.workCond.Signal() // the writer only sleeps when nothing is pending
	}
	l.mu.Unlock()
	l.nAppends.Add(1)
	if !enqueue {
		return nil
	}
	ok, leads := l.j.enqueue(l, lead)
	switch {
	case !ok:
		l.failQueued(fmt.Errorf("%w: journal %s closed", ErrClosed, l.j.dir))
	case leads:
		l.j.leadRound(l)
	}
	return nil
}

// pendArenaSize is the smallest size of a journaled log's pending-records
// arena.
const pendArenaSize = 64 << 10

// maxPendArena bounds the arena size chosen for a busy partition.
const maxPendArena = 4 << 20

// reserveJournaled makes room in a journaled log's pending buffer for the
// records of entries without moving bytes a round has taken: l.pend is the
// unused end of an arena whose front the segment tails hold (a round takes
// l.pend and leaves the rest of the arena to the next appends, see
// takeRound), so when the records do not fit a new arena takes the
// pending bytes and the old one stays with the tails. Callers hold mu.
func (l *Log) reserveJournaled(entries []Entry) {
	need := 0
	for i := range entries {
		need += message.HeaderSize + len(entries[i].Data)
	}
	if cap(l.pend)-len(l.pend) >= need {
		return
	}
	// Several times what is needed (up to maxPendArena), so that a busy
	// partition, whose pending bytes move to each new arena, moves few of
	// its bytes; a quiet one keeps small arenas.
	size := min(8*(len(l.pend)+need), maxPendArena)
	nb := make([]byte, len(l.pend), max(pendArenaSize, size, len(l.pend)+need))
	copy(nb, l.pend)
	l.pend = nb
}

// failQueued fails the pending appends of a journaled log whose journal
// closed before the committer took them.
func (l *Log) failQueued(err error) {
	l.mu.Lock()
	comps := l.pendComps
	l.pendComps = nil
	l.pend = l.pend[:0]
	l.queued = false
	l.workCond.Broadcast()
	l.spaceCond.Broadcast()
	l.mu.Unlock()
	for i := range comps {
		done(comps[i].w, comps[i].token, 0, 0, err)
	}
}

// appendThreshold writes entries under the append lock and fsyncs when the
// unflushed count passes the threshold or the interval has elapsed.
func (l *Log) appendThreshold(entries []Entry, w Waiter, token uint64) error {
	l.mu.Lock()
	if err := l.checkLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	l.nAppends.Add(1)
	seg := l.active
	err := l.untear(seg)
	if err == nil && seg.size.Load() >= l.maxSeg {
		err = l.rollThresholdLocked()
		seg = l.active
	}
	if err != nil {
		l.mu.Unlock()
		done(w, token, 0, 0, err)
		return nil
	}
	firstID, lastID := l.takeIDs(entries)
	buf := appendRecords(l.wbuf[:0], entries, firstID)
	if cap(buf) <= maxRetainedBuffer {
		l.wbuf = buf
	} else {
		l.wbuf = nil
	}
	pos := seg.size.Load()
	n, err := l.writeAt(seg.f, buf, pos)
	l.nWrites.Add(1)
	if err == nil && n < len(buf) {
		err = io.ErrShortWrite
	}
	if err != nil {
		err = l.writeFailed(seg, pos, err)
		l.mu.Unlock()
		done(w, token, 0, 0, err)
		return nil
	}
	seg.size.Store(pos + int64(n))
	l.nBytes.Add(int64(n))
	l.nMessages.Add(int64(len(entries)))
	l.msgCount.Add(int64(len(entries)))
	seg.count.Add(int64(len(entries)))
	seg.cidx.note(pos+int64(n), len(entries)) // count.go
	l.lastID.Store(lastID)
	l.unflushed += len(entries)
	sync := l.unflushed > l.threshold || (l.interval > 0 && time.Since(l.lastFlush) >= l.interval)
	l.mu.Unlock()

	if sync {
		if err := l.flush(); err != nil {
			done(w, token, 0, 0, err)
			return nil
		}
	}
	done(w, token, firstID, seg.start+pos, nil)
	return nil
}

func done(w Waiter, token uint64, firstID, firstOffset int64, err error) {
	if w != nil {
		w.AppendDone(token, firstID, firstOffset, err)
	}
}

// rollThresholdLocked fsyncs the active segment, publishes it as readable
// and starts a new one named after its end. If the new segment cannot be
// created the old one stays active (it only overshoots MaxSegmentSize) and
// the next append tries again; a failed fsync fails the log. Callers hold
// mu.
func (l *Log) rollThresholdLocked() error {
	old := l.active
	if err := l.syncFile(old.f); err != nil {
		l.nFsyncs.Add(1)
		return l.failLocked(fmt.Errorf("fsync %s: %w", filepath.Base(old.path), err))
	}
	l.nFsyncs.Add(1)
	l.noteFlushed(old.end(), true)
	if end := old.end(); end > l.readable.Load() {
		l.readable.Store(end)
	}
	l.unflushed = 0
	l.lastFlush = time.Now()
	seg, err := l.createSegment(old.end())
	if err != nil {
		if isSyncError(err) {
			return l.failLocked(err)
		}
		return err
	}
	l.publish(seg)
	return nil
}

// writeFailed handles a write to seg at pos (its size) that failed, maybe
// after writing part of its bytes: it cuts the file back to pos, so no
// part of the failed records is ever read, fsynced or found by recovery,
// and the next write goes to the same place. If the cut fails too, the
// segment is marked torn and the cut is retried before the next write or
// roll (untear). It returns the error for the appends the write covered.
// The caller owns the active segment.
func (l *Log) writeFailed(seg *segment, pos int64, err error) error {
	err = fmt.Errorf("store: write %s at %d: %w", filepath.Base(seg.path), pos, err)
	if terr := l.truncate(seg.f, pos); terr != nil {
		l.torn = true
		l.logf("store: %s: %v; cutting the partial write off failed too (%v): appends fail until it succeeds", l.dir, err, terr)
	}
	return err
}

// untear retries the cut of a torn active segment (see writeFailed). The
// caller owns the active segment.
func (l *Log) untear(seg *segment) error {
	if !l.torn {
		return nil
	}
	size := seg.size.Load()
	if err := l.truncate(seg.f, size); err != nil {
		return fmt.Errorf("store: cut %s back to %d bytes after a failed write: %w", filepath.Base(seg.path), size, err)
	}
	l.torn = false
	return nil
}

// publish makes seg the active segment.
func (l *Log) publish(seg *segment) {
	l.segMu.Lock()
	l.segs = append(l.segs, seg)
	l.segMu.Unlock()
	l.active = seg
	l.nRolls.Add(1)
}

// Flush fsyncs unflushed appends now and makes them readable (threshold
// mode). In group-commit mode appends are fsynced before they complete and
// Flush does nothing. It returns the log's failure, if any.
func (l *Log) Flush() error {
	if l.groupCommit {
		return l.Err()
	}
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return l.flush()
}

// flush fsyncs the active segment outside the append lock and then raises
// the readable mark to what was written before the fsync started.
func (l *Log) flush() error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	l.mu.Lock()
	if l.failErr != nil || l.final {
		err := l.failErr
		l.mu.Unlock()
		return err
	}
	seg := l.active
	end := seg.end()
	l.unflushed = 0
	if end <= l.readable.Load() {
		l.mu.Unlock()
		return nil
	}
	l.lastFlush = time.Now()
	seg.acquire() // active, so not deletable; keeps f open past a roll and retention
	l.mu.Unlock()

	err := l.syncFile(seg.f)
	l.nFsyncs.Add(1)
	seg.release()
	if err == nil {
		l.noteFlushed(end, false)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		return l.failLocked(fmt.Errorf("fsync %s: %w", filepath.Base(seg.path), err))
	}
	if end > l.readable.Load() {
		l.readable.Store(end)
	}
	return nil
}

// flusher is the threshold-mode ticker: it flushes every interval when
// anything is unflushed.
func (l *Log) flusher() {
	defer l.wg.Done()
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-t.C:
		}
		l.mu.Lock()
		need := l.failErr == nil && l.active.end() > l.readable.Load()
		l.mu.Unlock()
		if need {
			_ = l.flush() // a failure is logged by failLocked and kept in failErr
			// The ticker's flush is the one that makes the last puts
			// of a burst durable (the threshold's come before it): its
			// flush mark is fdatasynced now, not up to
			// flushMarkSyncEvery later, so that a power cut after the
			// puts stop finds it exact. At most one fdatasync per
			// interval, so only with an interval of at least
			// flushMarkSyncEvery: no more than the timer's.
			if l.interval >= flushMarkSyncEvery {
				l.syncFlushMarkNow()
			}
		}
	}
}

// AppendSync appends entries and waits for the outcome.
func (l *Log) AppendSync(entries []Entry) (firstID, firstOffset int64, err error) {
	sw := syncWaiters.Get().(*syncWaiter)
	if err := l.Append(entries, sw, 0); err != nil {
		syncWaiters.Put(sw)
		return 0, 0, err
	}
	r := <-sw.ch
	syncWaiters.Put(sw)
	return r.id, r.off, r.err
}

type syncResult struct {
	id, off int64
	err     error
}

// syncWaiter is a reusable Waiter that hands the result to AppendSync.
type syncWaiter struct{ ch chan syncResult }

func (s *syncWaiter) AppendDone(_ uint64, id, off int64, err error) {
	s.ch <- syncResult{id, off, err}
}

var syncWaiters = sync.Pool{New: func() any { return &syncWaiter{ch: make(chan syncResult, 1)} }}
