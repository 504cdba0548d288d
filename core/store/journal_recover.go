package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// dataRef locates a data record found by the recovery scan.
type dataRef struct {
	f   *jfile
	off int64 // file offset of the payload
	n   int   // payload length
	pos int64 // journal position of the record

	name        string // partition directory name
	offset, end int64  // partition offsets of the record's bytes
}

// regRef is a register record found by the recovery scan.
type regRef struct {
	pos int64 // journal position of the record
	registerRecord
}

// scanResult of a journal: where it ends, the last checkpoint and the data
// records after it.
type journalScan struct {
	end     int64
	endFile *jfile
	epoch   uint32 // highest epoch seen
	last    *checkpoint
	refs    []dataRef // data records at or after last.from
	// regs are the register records at or after last.from: they name the
	// partitions that registered after the checkpoint's snapshot.
	regs []regRef
	// sawNewer: the journal files hold a register or mark record
	// (anywhere), which a binary from before them takes for the end of
	// the journal.
	sawNewer bool
	records  int
	stopped  string // why the scan stopped
	firstPos int64
	// holes are the damaged stretches with valid records after them, in
	// journal order (checkDamage decides what they mean).
	holes []jHole
	// keep raises a partition's journaled end: a damaged record held
	// bytes up to there that its segment holds intact.
	keep map[string]int64
	// cuts (recovery = "truncate") cut a partition at an offset: the
	// damaged records that held it are not in its segment. Its records
	// at or past the offset are not replayed.
	cuts map[string]int64
	// dropped are the data records of an atomic group whose end the
	// journal does not reach (a torn round): not replayed; each names its
	// partition's journaled end at its offset (the cut).
	dropped []dataRef
	// maxMark is the highest durable mark of the valid records (-1:
	// none), lastUnmarked the position of the last valid record that
	// carries no mark (-1: none), for tornCandidate.
	maxMark, lastUnmarked int64
}

// openGroup is an atomic group the scan is inside of.
type openGroup struct {
	pos, end int64
	epoch    uint32
	records  uint32
}

// recover scans the journal, replays it and writes a checkpoint; see
// OpenJournal.
func (j *Journal) recover() error {
	files, err := listJournalFiles(j.dir, j.logf)
	if errors.Is(err, errNoJournalFiles) {
		j.prepMu.Lock()
		f, err := j.createFileLocked(0)
		j.prepMu.Unlock()
		if err != nil {
			return err
		}
		j.cur, j.pos, j.epoch = f, 0, 1
		j.synced.Store(0)
		return j.writeRecoveryCheckpoint()
	}
	if err != nil {
		return err
	}
	// The files chain (each starts where the one before it ends); keep
	// the last run if a gap splits them. Freed files are renamed forward
	// one at a time with a directory fsync after each, so a power loss
	// never leaves a gap: a gap means someone removed a file.
	run := 0
	for i := 1; i < len(files); i++ {
		if files[i].start != files[i-1].end() {
			j.logf("store: journal %s: files %s and %s do not chain; ignoring the files before %s",
				j.dir, journalName(files[i-1].start), journalName(files[i].start), journalName(files[i].start))
			run = i
		}
	}
	closeJFiles(files[:run])
	files = files[run:]
	j.files = files

	sc, err := scanJournal(files)
	if err != nil {
		return err
	}
	if err := j.judgeDamage(&sc, files); err != nil {
		return err
	}
	from := files[0].start
	if sc.last != nil {
		from = sc.last.from
	}
	if len(sc.holes) == 0 {
		// The common case, after a clean stop or a crash alike: the scan
		// ends where the journal was last written (what follows is unwritten
		// space or an earlier lap's records), which is not damage, so the
		// line says nothing that reads as such (issue 23).
		end := ""
		if !plainJournalEnd(sc.stopped) {
			// A crash's torn last write: said, as what it is.
			end = " (it ends at a write the crash left unfinished: " + sc.stopped + ")"
		}
		j.logf("store: journal %s: %d records from %d to %d, no damage; replaying %d data records from the checkpoint at %d, %d partitions registered since%s",
			j.dir, sc.records, files[0].start, sc.end, len(sc.refs), from, len(sc.regs), end)
	} else {
		j.logf("store: journal %s: %d records from %d to %d, last checkpoint replays from %d: %d data records to replay, %d partitions registered since (%s; %d damaged stretches)",
			j.dir, sc.records, files[0].start, sc.end, from, len(sc.refs), len(sc.regs), sc.stopped, len(sc.holes))
	}
	j.newerInFiles = sc.sawNewer
	if err := j.replay(sc, j.replayLimit); err != nil {
		return err
	}
	j.epoch = sc.epoch + 1
	j.pos = sc.end
	j.cur = sc.endFile
	if j.pos == j.cur.end() {
		j.wfile = j.cur
		next, err := j.fileAfter(j.cur)
		if err != nil {
			return err
		}
		j.cur, j.pos = next, next.start
	}
	// Everything before j.pos is in fsynced segments now: the recovery
	// checkpoint's round carries it as its durable mark.
	j.synced.Store(j.pos)
	return j.writeRecoveryCheckpoint()
}

// judgeDamage decides what the damaged stretches of sc mean
// (checkDamage), telling a torn unsynced tail from damage first: when
// checkDamage would refuse the start and a stretch lies past every
// durable mark (tornCandidate), that stretch is where a power cut's torn
// tail begins, and the journal is taken to end there, silently as at any
// torn tail (the recovery line says so); the stretches before it are
// judged again as damage. Without such a stretch, or when the damage
// before it still refuses, the start is refused as before.
func (j *Journal) judgeDamage(sc *journalScan, files []*jfile) error {
	var held []string
	err := j.checkDamageLog(sc, files, func(format string, args ...any) {
		held = append(held, fmt.Sprintf(format, args...))
	})
	var je *JournalCorruptError
	if errors.As(err, &je) {
		if h, ok := sc.tornCandidate(); ok {
			sc2, serr := scanJournalTo(files, h.pos)
			if serr != nil {
				return serr
			}
			sc2.stopped = fmt.Sprintf("a torn unsynced tail at %d (%s): the %d valid records after it were written past the last durable mark %d, not known synced",
				h.pos, h.reason, sc.records-sc2.records, max(sc.maxMark, 0))
			if err := j.checkDamage(&sc2, files); err != nil {
				return err
			}
			*sc = sc2
			return nil
		}
	}
	for _, m := range held {
		j.logf("%s", m)
	}
	return err
}

// tornCandidate returns the first damaged stretch of sc in the replay
// range that lies past every durable mark: every valid record of the
// journal carries a durable mark at or before the stretch's start, or a
// capped one (markCapped: too far back for its field, which says
// nothing of where), and every record after it carries one. No record
// says such a stretch was covered by a completed fdatasync (a mark is
// the end of the last round synced when a record was staged, so any
// round synced before the records after the stretch were staged ends at
// or before it): a power cut may have torn it, the disk keeping later
// unsynced pages and losing an earlier one, and it is taken for torn. A
// stretch some mark lies past was durable: damage. Marks are rounded
// down by less than a record header, and the stretch starts at a record
// boundary, so a stretch starting before a round's end is never taken
// for torn.
//
// The converse holds for every acknowledged round since mark records: a
// record carries the mark as it stood when its round was staged, so the
// last rounds staged before a crash are covered by no mark of their own;
// but before a round's appends are acknowledged (or readable), a record
// written after its fdatasync returned carries a mark past it (a later
// round's, or a mark record's: Journal.cover). So after a kill -9 a flip
// in acknowledged data is always under a mark: damage, refused when the
// segments do not hold it. What lies past every mark is the rounds not
// yet acknowledged (synced or not), and, after a power cut only, the
// last acknowledged rounds when the power cut lost their mark record,
// which is not fdatasynced itself (a next round's records carry the mark
// themselves, made durable by its fdatasync): a bit flip in those is taken for a torn tail, and their
// puts are lost without a refusal, like a flip in the last record
// (docs/storage.md, "Mark records").
func (sc *journalScan) tornCandidate() (jHole, bool) {
	from := sc.firstPos
	if sc.last != nil {
		from = sc.last.from
	}
	for _, h := range sc.holes {
		if h.end > from && h.pos >= sc.maxMark && h.pos > sc.lastUnmarked {
			return h, true
		}
	}
	return jHole{}, false
}

// writeRecoveryCheckpoint writes the checkpoint that ends recovery: every
// earlier record is in fsynced segments. Its table is empty: a partition
// is listed again only once a group-commit Log has registered it in this
// run (a partition may have changed to threshold mode).
func (j *Journal) writeRecoveryCheckpoint() error {
	j.mu.Lock()
	closed := j.closedTableLocked() // restart.go
	j.mu.Unlock()
	if err := j.commitNow(&ckptJob{c: checkpoint{from: j.pos, ends: map[string]int64{}, closed: closed, registers: !j.noRegisters}}); err != nil {
		return err
	}
	j.sinceCkpt = 0
	return nil
}

// scanJournal walks the records of files from the first one's start. At
// a record that does not verify it searches for the next valid one
// (findNextJRecord): if there is none, the invalid record starts a torn,
// zero-filled or stale tail, which ends the journal; otherwise the
// stretch up to it is recorded as a hole and the walk goes on from there.
// A valid record of a type this version does not read ends the journal.
func scanJournal(files []*jfile) (journalScan, error) {
	return scanJournalTo(files, -1)
}

// scanJournalTo is scanJournal ending the journal at position limit (-1:
// no limit): the start of a torn tail (judgeDamage).
func scanJournalTo(files []*jfile, limit int64) (journalScan, error) {
	sc := journalScan{firstPos: files[0].start, maxMark: -1, lastUnmarked: -1}
	var open *openGroup // the earliest group whose end the scan has not reached
	var hdr [jHeaderSize]byte
	var payload, sbuf, srec []byte
	names := map[string]string{} // interned partition names
	fi := 0
	pos := files[0].start
	next := func() bool { // move to the next file, if it follows
		f := files[fi]
		if fi+1 < len(files) && files[fi+1].start == f.end() {
			fi++
			pos = files[fi].start
			return true
		}
		pos = f.end()
		return false
	}
	for {
		if limit >= 0 && pos >= limit {
			sc.stopped = fmt.Sprintf("torn tail at %d", pos)
			break
		}
		f := files[fi]
		rel := pos - f.start
		if f.size-rel < jHeaderSize {
			if !next() {
				sc.stopped = "end of the last file"
				break
			}
			continue
		}
		if _, err := f.f.ReadAt(hdr[:], rel); err != nil {
			return sc, fmt.Errorf("store: read journal file %s at %d: %w", journalName(f.start), rel, err)
		}
		h := parseJHeader(hdr[:])
		bad, final := "", false
		switch {
		case h.typ == 0 && h.n == 0 && h.pos == 0:
			bad = fmt.Sprintf("zero-filled at %d", pos)
		case h.pos != pos:
			bad = fmt.Sprintf("record at %d claims position %d (torn or stale)", pos, h.pos)
		case h.epoch < sc.epoch:
			bad = fmt.Sprintf("record at %d of an earlier run (epoch %d < %d)", pos, h.epoch, sc.epoch)
		case int64(h.n) > f.size-rel-jHeaderSize:
			bad = fmt.Sprintf("record at %d of %d bytes runs past its file", pos, h.n)
		}
		var c checkpoint
		var d dataRecord
		var g groupRecord
		var rg registerRecord
		if bad == "" {
			rec := slices.Grow(payload[:0], jHeaderSize+int(h.n))[:jHeaderSize+int(h.n)]
			copy(rec, hdr[:])
			if _, err := f.f.ReadAt(rec[jHeaderSize:], rel+jHeaderSize); err != nil && !errors.Is(err, io.EOF) {
				return sc, fmt.Errorf("store: read journal file %s at %d: %w", journalName(f.start), rel, err)
			}
			payload = rec
			p := rec[jHeaderSize:]
			var err error
			switch {
			case !verifyJRecord(rec):
				bad = fmt.Sprintf("checksum mismatch at %d", pos)
			case h.typ == recData:
				if d, err = parseDataPayload(p); err != nil {
					bad = fmt.Sprintf("data record at %d: %v", pos, err)
				}
			case h.typ == recCheckpoint:
				if c, err = parseCheckpointPayload(p); err != nil || c.from > pos {
					bad = fmt.Sprintf("checkpoint record at %d: malformed", pos)
				}
			case h.typ == recGroup:
				if g, err = parseGroupPayload(p); err != nil || g.end <= pos {
					bad = fmt.Sprintf("group record at %d: malformed", pos)
				}
			case h.typ == recRegister:
				if rg, err = parseRegisterPayload(p); err != nil {
					bad = fmt.Sprintf("register record at %d: %v", pos, err)
				}
			case h.typ == recSkip:
				if h.n != 0 {
					bad = fmt.Sprintf("skip record at %d with a payload of %d bytes", pos, h.n)
				}
			case h.typ == recMark:
				if h.n != 0 {
					bad = fmt.Sprintf("mark record at %d with a payload of %d bytes", pos, h.n)
				}
			default:
				bad, final = fmt.Sprintf("record type %d at %d", h.typ, pos), true
			}
		}
		if h.typ == recRegister || h.typ == recMark {
			sc.sawNewer = true // even a damaged one: a binary from before them stops there too
		}
		if bad != "" {
			if final {
				sc.stopped = bad
				break
			}
			k, q, qh, ok, err := findNextJRecord(files, fi, pos, sc.epoch, &sbuf, &srec)
			if err != nil {
				return sc, err
			}
			if !ok {
				sc.stopped = bad
				break
			}
			end := pos + jHeaderSize + int64(h.n)
			// A record followed by the next file's first record ends its
			// file, or leaves a tail too short for a record header there
			// (nextFile writes no skip record into it, and the next record
			// starts the next file).
			endsFile := k > fi && q == files[k].start && end <= f.end() && f.end()-end < jHeaderSize
			framed := h.pos == pos && h.epoch >= sc.epoch && h.epoch <= qh.epoch && isJRecordType(h.typ) &&
				(end == q || endsFile || (k > fi && q == files[k].start && h.typ == recSkip && h.n == 0))
			hole := jHole{f: f, pos: pos, end: q, reason: bad, hdr: h, framed: framed}
			if framed && endsFile && h.typ != recSkip {
				// The stretch is the record: the short tail after it
				// held nothing.
				hole.end = end
			}
			sc.holes = append(sc.holes, hole)
			fi, pos = k, q
			continue
		}
		if open != nil && (pos >= open.end || h.epoch != open.epoch || h.typ == recCheckpoint) {
			open = nil // reached its end (or, never written so, left it): whole
		}
		switch h.typ {
		case recGroup:
			if open == nil {
				open = &openGroup{pos: pos, end: g.end, epoch: h.epoch, records: g.records}
			}
		case recData:
			name, ok := names[d.name]
			if !ok {
				name = d.name
				names[name] = name
			}
			sc.refs = append(sc.refs, dataRef{f: f, off: rel + jHeaderSize, n: int(h.n), pos: pos,
				name: name, offset: d.offset, end: d.offset + int64(len(d.bytes))})
		case recRegister:
			sc.regs = append(sc.regs, regRef{pos: pos, registerRecord: rg})
		case recCheckpoint:
			sc.last = &c
			k := sort.Search(len(sc.refs), func(i int) bool { return sc.refs[i].pos >= c.from })
			sc.refs = append(sc.refs[:0], sc.refs[k:]...)
			k = sort.Search(len(sc.regs), func(i int) bool { return sc.regs[i].pos >= c.from })
			sc.regs = append(sc.regs[:0], sc.regs[k:]...)
		}
		sc.records++
		sc.epoch = h.epoch
		// A capped mark (markCapped) is a mark without a position: it
		// neither raises maxMark nor makes the record unmarked.
		if m := h.mark(); m == -1 {
			sc.lastUnmarked = pos
		} else if m > sc.maxMark {
			sc.maxMark = m
		}
		if h.typ == recSkip {
			if !next() {
				sc.stopped = "skip record in the last file"
				break
			}
			continue
		}
		pos += jHeaderSize + int64(h.n)
	}
	if open != nil && pos >= open.end {
		open = nil
	}
	if open != nil {
		// The journal ends inside an atomic group: its round's fdatasync
		// did not finish, so none of it was acknowledged, and none of it
		// is replayed. The journal ends at the group record (the next run
		// writes over it), and damage found inside it is part of the torn
		// round.
		k := sort.Search(len(sc.refs), func(i int) bool { return sc.refs[i].pos >= open.pos })
		sc.dropped = append(sc.dropped, sc.refs[k:]...)
		sc.refs = sc.refs[:k]
		// (Register records precede group records, never inside one.)
		k = sort.Search(len(sc.regs), func(i int) bool { return sc.regs[i].pos >= open.pos })
		sc.regs = sc.regs[:k]
		sc.holes = slices.DeleteFunc(sc.holes, func(h jHole) bool { return h.pos >= open.pos })
		sc.stopped = fmt.Sprintf("%s, inside the atomic group at %d (ending at %d, %d data records): its %d records are dropped",
			sc.stopped, open.pos, open.end, open.records, len(sc.dropped))
		pos = open.pos
		for fi > 0 && files[fi].start > pos {
			fi--
		}
	}
	sc.end = pos
	sc.endFile = files[fi]
	if pos == files[fi].end() && fi+1 < len(files) && files[fi+1].start == pos {
		sc.endFile = files[fi+1]
	}
	return sc, nil
}

// replayFile is a segment file recovery opened.
type replayFile struct {
	f       *os.File
	written bool
}

// replay writes every data record of sc into its segment unless the
// segment already holds those bytes, cuts what lies past each named
// partition's journaled end, and makes all of it durable. Running it
// again on the same journal gives the same files.
func (j *Journal) replay(sc journalScan, limit int) error {
	ends := map[string]int64{}
	if sc.last != nil {
		for name, end := range sc.last.ends {
			ends[name] = end
		}
	}
	// A register record names its partition as a checkpoint entry does:
	// every byte of it before its end was fsynced when it registered, and
	// every later byte was journaled.
	for _, r := range sc.regs {
		if e, ok := ends[r.name]; !ok || r.end > e {
			ends[r.name] = r.end
		}
	}
	open := map[string]*replayFile{}
	dirs := map[string]bool{} // partition directories whose entries changed
	defer func() {
		for _, rf := range open {
			_ = rf.f.Close()
		}
	}()
	// walks follow the record boundaries of every trusted partition through
	// the replayed bytes, from its checkpointed end: once replay has made
	// the partition durable, the end and id of its last whole record are
	// what the closed table of the checkpoints to come vouches for
	// (noteTrusted).
	walks := map[string]*recWalk{}
	for name, t := range trustBases(sc.last, sc.regs) {
		walks[name] = newRecWalk(t)
	}
	var buf, have []byte
	for _, r := range sc.refs {
		buf = slices.Grow(buf[:0], r.n)[:r.n]
		if _, err := r.f.f.ReadAt(buf, r.off); err != nil {
			return fmt.Errorf("store: read journal file %s at %d: %w", journalName(r.f.start), r.off, err)
		}
		d, err := parseDataPayload(buf)
		if err != nil {
			return fmt.Errorf("store: journal record at %d: %w", r.pos, err)
		}
		if c, ok := sc.cuts[d.name]; ok && d.offset >= c {
			j.logf("store: journal %s: recovery = \"truncate\": dropping %d journaled bytes of %s at offsets %d..%d (past its cut at %d)",
				j.dir, len(d.bytes), d.name, d.offset, d.offset+int64(len(d.bytes)), c)
			continue
		}
		if e := d.offset + int64(len(d.bytes)); e > ends[d.name] {
			ends[d.name] = e
		}
		pdir := filepath.Join(j.dataDir, d.name)
		path := filepath.Join(pdir, segmentName(d.segStart))
		rf := open[path]
		if rf == nil {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if isNotExist(err) {
				// A roll whose directory entry a power loss took: create
				// the segment, unless a later one exists (then retention
				// deleted this one, and its bytes are gone by design).
				if err := MkdirAllDurable(pdir, 0o755); err != nil {
					return fmt.Errorf("store: replay: create %s: %w", pdir, err)
				}
				starts, _, lerr := listSegments(pdir)
				if lerr != nil {
					return fmt.Errorf("store: replay: %w", lerr)
				}
				if len(starts) > 0 && starts[len(starts)-1] > d.segStart {
					j.logf("store: journal %s: not replaying %d bytes at %d into %s: the segment was deleted",
						j.dir, len(d.bytes), d.offset, path)
					continue
				}
				f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
				dirs[pdir] = true
			}
			if err != nil {
				return fmt.Errorf("store: replay: open segment: %w", err)
			}
			rf = &replayFile{f: f}
			open[path] = rf
		}
		at := d.offset - d.segStart
		have = slices.Grow(have[:0], len(d.bytes))[:len(d.bytes)]
		n, _ := rf.f.ReadAt(have, at)
		if n == len(have) && bytes.Equal(have, d.bytes) {
			j.nSkipped.Add(1)
			rf.written = true // in place, but maybe only in the page cache
		} else {
			if limit > 0 && j.nReplayed.Load() >= int64(limit) {
				return errReplayStopped
			}
			if _, err := rf.f.WriteAt(d.bytes, at); err != nil {
				return fmt.Errorf("store: replay: write %s at %d: %w", path, at, err)
			}
			rf.written = true
			j.nReplayed.Add(1)
		}
		if w := walks[d.name]; w != nil {
			w.feed(d.offset, d.bytes)
		}
	}

	// A partition named only by the records of a dropped atomic group is
	// cut where they start: bytes from there on (a checkpoint in progress
	// may have written them to the segment) were never acknowledged.
	for _, r := range sc.dropped {
		if _, ok := ends[r.name]; !ok {
			ends[r.name] = r.offset
		}
	}
	// Cut what no record covers: bytes past a partition's journaled end
	// were never acknowledged and never readable. A damaged record's
	// range that its segment holds stays (keep); a truncate cut wins.
	for name, end := range sc.keep {
		ends[name] = max(ends[name], end)
	}
	for name, c := range sc.cuts {
		ends[name] = c
	}
	names := make([]string, 0, len(ends))
	for name := range ends {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		end := ends[name]
		pdir := filepath.Join(j.dataDir, name)
		starts, sizes, err := listSegments(pdir)
		if isNotExist(err) {
			continue
		}
		if err != nil {
			return err
		}
		for i, start := range starts {
			path := filepath.Join(pdir, segmentName(start))
			switch {
			case start > end:
				j.logf("store: journal %s: removing %s (%d bytes): it starts past the journaled end %d", j.dir, path, sizes[i], end)
				if rf := open[path]; rf != nil {
					_ = rf.f.Close()
					delete(open, path)
				}
				if err := os.Remove(path); err != nil {
					return fmt.Errorf("store: replay: %w", err)
				}
				dirs[pdir] = true
			case start+sizes[i] > end:
				j.logf("store: journal %s: cutting %s from %d to %d bytes: past the journaled end %d", j.dir, path, sizes[i], end-start, end)
				rf := open[path]
				if rf == nil {
					f, err := os.OpenFile(path, os.O_RDWR, 0)
					if err != nil {
						return fmt.Errorf("store: replay: %w", err)
					}
					rf = &replayFile{f: f}
					open[path] = rf
				}
				if err := rf.f.Truncate(end - start); err != nil {
					return fmt.Errorf("store: replay: truncate %s: %w", path, err)
				}
				rf.written = true
			}
		}
	}
	var toSync []string
	for path, rf := range open {
		if rf.written {
			toSync = append(toSync, path)
		}
	}
	// Up to ckptSyncWorkers at once, like a checkpoint: after a kill -9 at
	// hundreds of partitions the replay rewrote every partition's tail.
	var next atomic.Int64
	errs := make([]error, len(toSync))
	var wg sync.WaitGroup
	for range min(len(toSync), ckptSyncWorkers) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(toSync); i = int(next.Add(1)) - 1 {
				if err := open[toSync[i]].f.Sync(); err != nil {
					errs[i] = fmt.Errorf("store: replay: fsync %s: %w", toSync[i], err)
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for pdir := range dirs {
		if err := syncPath(pdir); err != nil {
			return fmt.Errorf("store: replay: %w", err)
		}
	}
	tails := map[string]closedEnd{}
	for name, w := range walks {
		if !w.lost && w.end >= 0 {
			tails[name] = closedEnd{end: w.end, lastID: w.id}
		}
	}
	j.noteTrusted(sc.last, sc.regs, ends, tails) // restart.go
	j.forgetAbsent()
	return nil
}

// listSegments returns the starts and sizes of the segment files of dir,
// ascending.
func listSegments(dir string) (starts, sizes []int64, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range ents {
		start, ok := parseSegmentName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			return nil, nil, err
		}
		starts = append(starts, start)
		sizes = append(sizes, fi.Size())
	}
	// ReadDir sorts by name, and names are zero-padded offsets.
	return starts, sizes, nil
}

// plainJournalEnd reports whether the scan stopped where a journal
// ordinarily ends: unwritten (zero-filled) space, an earlier lap's records
// or the end of the last file, as after a clean stop.
func plainJournalEnd(stopped string) bool {
	return stopped == "end of the last file" || strings.HasPrefix(stopped, "zero-filled") ||
		strings.Contains(stopped, "claims position") || strings.Contains(stopped, "of an earlier run")
}
