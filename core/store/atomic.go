package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/metaq-go/metaq/sdk/message"
)

// AtomicPart is one partition's entries of an AppendAtomic: appended to
// Log as one Log.Append of Entries would be (contiguous, in order, with
// their own ids or new ones), reported to the Waiter with Token.
type AtomicPart struct {
	Log     *Log
	Entries []Entry
	Token   uint64
}

// atomicGroup is an AppendAtomic waiting for (or in) a journal round.
type atomicGroup struct {
	parts []atomicPart
}

// atomicPart is a part of an atomicGroup: its framed records, and where
// the round put them.
type atomicPart struct {
	l    *Log
	bp   *[]byte    // from atomicBufs, holding buf
	buf  []byte     // framed records
	comp completion // end is relative to buf until the round copies it
	ci   int        // index of comp in the log's logRound.comps
	from int        // where buf starts in the logRound's buf
	ai   int        // index of its ack in the logRound's acks (-1: not written)
}

// ErrNotAtomic is returned by AppendAtomic for parts it cannot append as
// one unit: logs that are not group-commit logs of the journal, or the
// same log twice.
var ErrNotAtomic = errors.New("store: not appendable atomically")

// AppendAtomic appends every part's entries, each to its Log as
// Log.Append would, in one commit round of the journal: the data records
// of all the parts are written contiguously behind a group record that
// says where they end, and one fdatasync covers them. After a crash at
// any point either every part is in its partition or none is (recovery
// drops a group whose end the journal does not reach; docs/storage.md,
// "Atomic groups"), and none is readable before all are durable. Every
// Log must be a group-commit Log of this journal, each named once.
//
// w.AppendDone(part.Token, ...) is called exactly once per part, on the
// journal's goroutines, after the round's fdatasync: with the part's
// first id and offset, or with an error; a round that cannot stage one
// part (a segment roll that fails, a failed log) fails every part. Like
// Append, it returns an error, and then never calls AppendDone, when the
// parts are refused up front (a closed or failed log or journal, an
// empty part, an entry over MaxMessageSize, ErrNotAtomic). Entries are
// not retained.
func (j *Journal) AppendAtomic(parts []AtomicPart, w Waiter) error {
	if len(parts) == 0 {
		return ErrEmptyBatch
	}
	for i := range parts {
		p := &parts[i]
		l := p.Log
		if l == nil || l.j != j {
			return fmt.Errorf("%w: part %d is not a log of journal %s", ErrNotAtomic, i, j.dir)
		}
		for k := range i { // groups are small: a transaction's partitions
			if parts[k].Log == l {
				return fmt.Errorf("%w: log %s named twice", ErrNotAtomic, l.dir)
			}
		}
		if len(p.Entries) == 0 {
			return ErrEmptyBatch
		}
		for k := range p.Entries {
			if n := len(p.Entries[k].Data); n > l.maxMsg {
				return fmt.Errorf("%w: %s: entry %d has %d bytes, limit %d", ErrTooLarge, l.dir, k, n, l.maxMsg)
			}
			if (p.Entries[k].ID == 0) != (p.Entries[0].ID == 0) {
				return fmt.Errorf("store: %s: entry %d: ids given for some entries only", l.dir, k)
			}
		}
	}
	if err := j.refuse(); err != nil {
		return err
	}
	j.waitCheckpoint() // restart.go, as Append
	g := &atomicGroup{parts: make([]atomicPart, len(parts))}
	undo := func(n int) {
		for _, ap := range g.parts[:n] {
			ap.release()
			ap.l.mu.Lock()
			ap.l.atomicPending--
			ap.l.workCond.Broadcast()
			ap.l.mu.Unlock()
		}
	}
	for i := range parts {
		p := &parts[i]
		l := p.Log
		l.mu.Lock()
		if err := l.checkLocked(); err != nil {
			l.mu.Unlock()
			undo(i)
			return err
		}
		firstID, lastID := l.takeIDs(p.Entries)
		l.atomicPending++
		l.mu.Unlock()
		size := 0
		for k := range p.Entries {
			size += message.HeaderSize + len(p.Entries[k].Data)
		}
		bp := atomicBufs.Get().(*[]byte)
		buf := appendRecords(slices.Grow((*bp)[:0], size), p.Entries, firstID)
		g.parts[i] = atomicPart{l: l, bp: bp, buf: buf, ai: -1, comp: completion{
			w: w, token: p.Token, firstID: firstID, lastID: lastID, end: len(buf), n: len(p.Entries)}}
		l.nAppends.Add(1)
	}
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		undo(len(parts))
		return fmt.Errorf("%w: journal %s closed", ErrClosed, j.dir)
	}
	j.groups = append(j.groups, g)
	if len(j.groups) == 1 && len(j.ready) == 0 {
		j.cond.Signal()
	}
	j.mu.Unlock()
	return nil
}

// atomicBufs holds the buffers AppendAtomic frames the parts' records in
// until the committer copies them into the round.
var atomicBufs = sync.Pool{New: func() any { return new([]byte) }}

// release gives the part's framing buffer back.
func (p *atomicPart) release() {
	if p.bp == nil {
		return
	}
	if cap(p.buf) <= maxRetainedBuffer {
		*p.bp = p.buf[:0]
		atomicBufs.Put(p.bp)
	}
	p.bp, p.buf = nil, nil
}

// Journal returns the journal a group-commit log commits through, or nil
// (threshold mode, or group commit with fsyncs of its own).
func (l *Log) Journal() *Journal { return l.j }

// jGroupPayload is the payload size of a group record:
// [u64 end][u32 data records].
const jGroupPayload = 12

// groupRecord is a decoded group record: the data records from the group
// record up to journal position end (count of them) form one atomic unit.
type groupRecord struct {
	end     int64
	records uint32
}

func appendGroupPayload(dst []byte, g groupRecord) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(g.end))
	return binary.BigEndian.AppendUint32(dst, g.records)
}

func parseGroupPayload(p []byte) (groupRecord, error) {
	if len(p) != jGroupPayload {
		return groupRecord{}, fmt.Errorf("%w: group record of %d bytes", errBadJRecord, len(p))
	}
	g := groupRecord{end: int64(binary.BigEndian.Uint64(p)), records: binary.BigEndian.Uint32(p[8:])}
	if g.end < 0 || g.records == 0 {
		return groupRecord{}, fmt.Errorf("%w: group record ending at %d with %d records", errBadJRecord, g.end, g.records)
	}
	return g, nil
}

// stageGroups is the committer's part of a round for the atomic groups
// taken with it, before the journal space is reserved: each part's
// records go at the end of its log's round buffer (a log with no other
// appends in the round joins it), and the journal bytes they need at most
// are returned.
func (j *Journal) stageGroups(r *jround, groups []*atomicGroup) int64 {
	var need int64
	for _, g := range groups {
		need += jHeaderSize + jGroupPayload
		for i := range g.parts {
			p := &g.parts[i]
			l := p.l
			rs := &l.rounds[r.slot]
			l.mu.Lock()
			l.atomicPending--
			if l.roundSeq != j.roundSeq {
				// Not in the round yet: its round buffer holds only groups.
				l.roundSeq = j.roundSeq
				l.committing++
				rs.buf, rs.own, rs.comps, rs.acks, rs.reg = nil, true, rs.comps[:0], rs.acks[:0], 0 // the tails own the old buf
				r.logs = append(r.logs, l)
			}
			l.mu.Unlock()
			p.from = len(rs.buf)
			if !rs.own {
				// Clipped: the arena past rs.buf is the log's next
				// appends' (takeRound); the copy is the round's own.
				rs.buf, rs.own = rs.buf[:p.from:p.from], true
			}
			rs.buf = append(rs.buf, p.buf...)
			p.comp.end += p.from
			p.ci = len(rs.comps)
			rs.comps = append(rs.comps, p.comp)
			p.release()
			n := int64(p.comp.end - p.from)
			need += n + (n/maxWriteChunk+2)*int64(jHeaderSize+2+len(l.jname)+jDataFixed)
			r.appends++
		}
	}
	return need
}

// writeGroups adds each group's parts to their segments' tails, or fails
// the whole group: first every part's log is checked and its segment
// rolled if full (the one step of writing a journaled log's bytes that
// can fail), then the parts are written, which cannot fail.
func (j *Journal) writeGroups(r *jround, groups []*atomicGroup, failed error) {
	for _, g := range groups {
		err := failed
		for i := range g.parts {
			if err != nil {
				break
			}
			l := g.parts[i].l
			if err = l.Err(); err == nil {
				err = l.makeRoom()
			}
			if err != nil {
				err = fmt.Errorf("store: atomic append: %s: %w", l.dir, err)
			}
		}
		for i := range g.parts {
			p := &g.parts[i]
			rs := &p.l.rounds[r.slot]
			if err != nil {
				c := &rs.comps[p.ci]
				done(c.w, c.token, 0, 0, err)
				continue
			}
			b := rs.buf[p.from:rs.comps[p.ci].end]
			seg, pos, werr := p.l.writeSegment(b)
			if werr != nil {
				// Cannot happen (makeRoom made room and nothing else
				// writes the log meanwhile); failing the journal fails
				// the whole round, so no part is acknowledged.
				err = j.fail(fmt.Errorf("atomic append to %s: %w", p.l.dir, werr))
				c := &rs.comps[p.ci]
				done(c.w, c.token, 0, 0, err)
				continue
			}
			p.ai = len(rs.acks)
			rs.acks = append(rs.acks, ackChunk{seg: seg, base: seg.start + pos, end: seg.start + pos + int64(len(b)), i: p.ci, k: p.ci + 1, bufFrom: p.from})
			p.l.stagedID = rs.comps[p.ci].lastID
		}
		if err != nil {
			for i := range g.parts {
				g.parts[i].ai = -1
			}
		}
	}
}

// journalGroups adds, for each group whose parts were written, its group
// record and then its parts' data records, contiguously; the space was
// reserved.
func (j *Journal) journalGroups(r *jround, groups []*atomicGroup) error {
	for _, g := range groups {
		if len(g.parts) == 0 || g.parts[0].ai < 0 {
			continue
		}
		// A part's log with no data record yet since it registered: its
		// register record goes before the group record, outside the
		// group (a torn group drops its members, not the registration).
		for i := range g.parts {
			if err := j.addRegister(g.parts[i].l); err != nil {
				return err
			}
		}
		const need = jHeaderSize + jGroupPayload
		if j.room() < need {
			if err := j.nextFile(); err != nil {
				return err
			}
		}
		at, pos := len(j.buf), j.wpos
		j.buf = append(j.buf, make([]byte, need)...)
		j.wpos += need
		records := 0
		for i := range g.parts {
			p := &g.parts[i]
			rs := &p.l.rounds[r.slot]
			a := rs.acks[p.ai]
			b := rs.buf[a.bufFrom : a.bufFrom+int(a.end-a.base)]
			n, err := j.addDataCount(p.l.jname, a.seg.start, a.base, b)
			if err != nil {
				return err
			}
			records += n
			p.l.markDirty(a.seg)
		}
		copy(j.buf[at+jHeaderSize:], appendGroupPayload(nil, groupRecord{end: j.wpos, records: uint32(records)}))
		sealJRecord(j.buf[at:at+need], pos, j.epoch, j.rmark, recGroup)
	}
	return nil
}
