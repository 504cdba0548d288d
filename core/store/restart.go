package store

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
)

// trustPoint is what journal recovery vouches for in one partition that
// the last durable checkpoint names (docs/storage.md, "Why restart time is
// bounded by the checkpoint interval"): every byte before ckEnd was
// fsynced at that checkpoint, and the bytes from ckEnd to end were just
// compared with (or rewritten from) the journal and fsynced by replay,
// which cut the partition at end.
type trustPoint struct {
	ckEnd  int64 // the checkpoint's end of the partition: a record boundary
	end    int64 // the journaled end after replay
	lastID int64 // id of the last record before ckEnd (0: none)
	haveID bool  // lastID is known (checkpoints of the older format have none)
}

// noteTrusted records a trust point for every partition the last
// checkpoint names, in its ends or its closed table, or a register record
// after it names (the latest one: the partition's registration in the
// run that wrote it, newer than the checkpoint), once replay has made the
// partitions durable; ends are the journaled ends replay cut them at, and
// tails, for the trusted partitions whose record boundaries replay
// followed from the trusted end (recWalk), the end of the last whole
// record it wrote and that record's id.
//
// Every trusted partition whose whole journaled end is vouched for with
// its last id also goes into the closed table of the checkpoints to come,
// until it registers: a crash before it does finds it trusted again. That
// is one with nothing after the trusted end, or one replay made durable
// up to its journaled end (replay fsynced every byte from the trusted end
// on, the checkpoint or registration every byte before it): without that
// entry, the recovery checkpoint and those after it named a replayed
// partition nowhere until it registered, and a second crash before then
// found it untrusted (dropPastGap refused a roll's gap with bytes after
// the replayed end).
func (j *Journal) noteTrusted(last *checkpoint, regs []regRef, ends map[string]int64, tails map[string]closedEnd) {
	if last == nil && len(regs) == 0 {
		return
	}
	trusted := trustBases(last, regs)
	for name, t := range trusted {
		if end, ok := ends[name]; ok {
			t.end = end
			trusted[name] = t
		}
	}
	closed := make(map[string]closedEnd)
	for name, t := range trusted {
		switch tl, ok := tails[name]; {
		case t.haveID && t.end == t.ckEnd:
			closed[name] = closedEnd{end: t.end, lastID: t.lastID}
		case ok && tl.end == t.end && t.end >= t.ckEnd:
			// Replayed up to its journaled end (not one a damaged record
			// kept or a truncate cut moved).
			closed[name] = tl
		}
	}
	j.mu.Lock()
	j.trusted, j.closedEnds = trusted, closed
	j.mu.Unlock()
}

// forgetAbsent drops the trust points and closed-table entries of the
// partitions whose directories are not in the data directory after
// replay: a deleted topic's, removed after the checkpoint that last named
// them (a crash before ForgetRemoved's checkpoint, or a binary from
// before it, whose checkpoints carried them on). A topic created again
// under that name must not inherit them.
// Only a directory known to be gone is dropped: any other error keeps
// the entry, as before, rather than refusing the start.
func (j *Journal) forgetAbsent() {
	j.mu.Lock()
	defer j.mu.Unlock()
	names := make(map[string]bool, len(j.trusted)+len(j.closedEnds))
	for name := range j.trusted {
		names[name] = true
	}
	for name := range j.closedEnds {
		names[name] = true
	}
	for name := range names {
		if _, err := os.Lstat(filepath.Join(j.dataDir, name)); isNotExist(err) {
			delete(j.trusted, name)
			delete(j.closedEnds, name)
		}
	}
}

// trustBases returns the trust points the last checkpoint (its ends and
// closed table) and the register records after it give, before replay:
// each one's end is its checkpointed end, which replay may raise
// (noteTrusted). Every ckEnd is a record boundary.
func trustBases(last *checkpoint, regs []regRef) map[string]trustPoint {
	trusted := make(map[string]trustPoint)
	if last != nil {
		for name, ck := range last.ends {
			id, ok := last.lastIDs[name]
			trusted[name] = trustPoint{ckEnd: ck, end: ck, lastID: id, haveID: ok}
		}
		for name, c := range last.closed {
			trusted[name] = trustPoint{ckEnd: c.end, end: c.end, lastID: c.lastID, haveID: true}
		}
	}
	// A register record is a checkpoint entry of its own partition: every
	// byte before its end was fsynced when the partition registered (its
	// Open's recovery made the last segment durable), and its last id is
	// that of the record before the end.
	for _, r := range regs {
		trusted[r.name] = trustPoint{ckEnd: r.end, end: r.end, lastID: r.lastID, haveID: true}
	}
	return trusted
}

// recWalk follows the record boundaries of one partition through the
// data records replay writes, in journal order, from a known boundary (its
// trust point's checkpointed end): a data record holds whole records,
// except that one whose bytes did not fit in a journal file continues in
// the next file's first data record, so a record, even its header, may
// span two data records. It ends up with the end of the last whole record
// walked and its id.
type recWalk struct {
	next    int64                    // partition offset of the next record's header
	covered int64                    // the bytes from next up to here were walked
	hdr     [message.HeaderSize]byte // the next record's header bytes seen so far
	have    int                      // how many
	end, id int64                    // the last whole record walked (end -1: none)
	lost    bool                     // a data record left a gap: the boundary is lost
}

func newRecWalk(t trustPoint) *recWalk {
	w := &recWalk{next: t.ckEnd, covered: t.ckEnd, end: -1}
	if t.haveID {
		w.end, w.id = t.ckEnd, t.lastID
	}
	return w
}

// feed walks the partition bytes b at offset off. Bytes before what was
// walked are the ones already walked (replay's overlap with the
// checkpoint) and are skipped; bytes that start past it lose the walk.
func (w *recWalk) feed(off int64, b []byte) {
	end := off + int64(len(b))
	switch {
	case w.lost || end <= w.covered:
		return
	case off > w.covered:
		w.lost = true
		return
	}
	w.covered = end
	for {
		if w.have < message.HeaderSize {
			// The header's bytes from next+have on: they start in b, at
			// or after off (the walk covered up to next+have before b).
			at := w.next + int64(w.have) - off
			w.have += copy(w.hdr[w.have:], b[at:])
			if w.have < message.HeaderSize {
				return
			}
		}
		n := int64(int32(binary.BigEndian.Uint32(w.hdr[:])))
		if n < 0 {
			w.lost = true
			return
		}
		rend := w.next + message.HeaderSize + n
		if rend > end {
			return // its data continues in a later data record
		}
		w.end, w.id = rend, int64(binary.BigEndian.Uint64(w.hdr[8:]))
		w.next, w.have = rend, 0
		if rend == end {
			return
		}
	}
}

// closedTableLocked returns a copy of the closed table for a checkpoint.
// The caller holds j.mu.
func (j *Journal) closedTableLocked() map[string]closedEnd {
	c := make(map[string]closedEnd, len(j.closedEnds))
	for name, e := range j.closedEnds {
		c[name] = e
	}
	return c
}

// takeTrusted returns and forgets the trust point of partition name. It
// holds only until the partition is first opened: a later open (after a
// close in this run, possibly in threshold mode) scans as before.
func (j *Journal) takeTrusted(name string) (trustPoint, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	t, ok := j.trusted[name]
	delete(j.trusted, name)
	return t, ok
}

// peekTrusted returns partition name's trust point without taking it.
func (j *Journal) peekTrusted(name string) (trustPoint, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	t, ok := j.trusted[name]
	return t, ok
}

// trustedTail is the outcome of recoverTrusted.
type trustedTail struct {
	count  int64        // records of the last segment from where the scan started in it
	lastID int64        // the partition's last record id
	prefix int64        // bytes of the last segment before the scan: verified in the background
	idx    []countEntry // the last segment's count index from prefix on
}

// recoverTrusted is the recovery of a journaled log's segment chain segs
// (opened, chained) from the journal's trust point t instead of a scan of
// the whole last segment: it verifies the records from t.ckEnd to the end
// (what the last checkpoint did not fsync, at most about one checkpoint
// interval of data) and leaves the bytes before t.ckEnd to the background
// scrub, so its cost does not depend on how full the segment is. ok is
// false, with nothing changed, when the segments do not match what the
// journal says (the caller then scans the last segment as before).
func (l *Log) recoverTrusted(br *bufio.Reader, segs []*segment, t trustPoint, buf *[]byte) (tt trustedTail, ok bool, err error) {
	tail := segs[len(segs)-1]
	mismatch := func(why string, args ...any) (trustedTail, bool, error) {
		l.logf("store: %s: the journal's checkpointed end %d (journaled end %d) does not match the segments: %s; scanning the last segment",
			l.dir, t.ckEnd, t.end, fmt.Sprintf(why, args...))
		return trustedTail{}, false, nil
	}
	switch {
	case tail.end() != t.end:
		return mismatch("the last segment %s ends at %d", filepath.Base(tail.path), tail.end())
	case t.ckEnd < segs[0].start || t.ckEnd > t.end:
		return mismatch("the segments hold offsets %d..%d", segs[0].start, tail.end())
	}
	tt.lastID, ok = t.lastID, t.haveID
	first := findSegment(segs, t.ckEnd)
	for i := first; i < len(segs); i++ {
		s := segs[i]
		from := int64(0)
		if i == first {
			from = t.ckEnd - s.start
		}
		res, err := scanSegmentFrom(br, s, from, l.maxMsg, true, buf, nil)
		if err != nil {
			return trustedTail{}, false, err
		}
		if res.good != s.size.Load() {
			return mismatch("%s has an invalid record at byte %d: %s", filepath.Base(s.path), res.good, res.stop)
		}
		if res.count > 0 {
			tt.lastID, ok = res.lastID, true
		}
		if s == tail {
			tt.count = res.count
			tt.prefix = from
			tt.idx = res.idx
		}
	}
	if !ok {
		return mismatch("the checkpoint does not give the last record's id")
	}
	return tt, true, nil
}

// behind returns the journal bytes written after the last durable
// checkpoint's from, up to the last round's end (mark records after it
// hold nothing to replay): what a restart would read and replay.
func (j *Journal) behind() int64 { return j.roundEnd.Load() - j.ckptFrom.Load() }

// waitCheckpoint holds an append back while the journal is more than
// maxBehind bytes (two checkpoints' worth) past the last durable
// checkpoint, until a checkpoint catches up, the journal fails or it
// closes. Without it a disk that cannot fsync the segments as fast as
// producers fill them lets the journal, and with it the replay at
// restart, grow without bound; with it restart time stays bounded by the
// checkpoint interval and puts slow down to what the disk sustains. Once
// no checkpoint has completed for stallChecks checkpoint intervals (one
// that cannot be written, say on a full disk, is skipped and not retried
// until more is written; one whose fsync hangs never completes) appends
// stop waiting until one does: a bound on the restart is not worth puts
// that hang.
func (j *Journal) waitCheckpoint() {
	for j.behind() > j.maxBehind {
		j.mu.Lock()
		wake, closed := j.ckptWake, j.closed
		j.mu.Unlock()
		wait := time.Until(time.Unix(0, j.ckptAt.Load()).Add(stallChecks * j.ckptInterval))
		if closed || j.Err() != nil || wait <= 0 || j.behind() <= j.maxBehind {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// stallChecks is how many checkpoint intervals an append waits for a
// checkpoint that makes no progress.
const stallChecks = 10
