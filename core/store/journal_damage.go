package store

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// jHole is a damaged stretch [pos, end) of the journal found by the
// recovery scan: the record at pos is invalid and the next valid record
// starts at end, or (framed) starts the next file and end is where the
// record ends, less than a record header before its file's end: that
// short tail holds no record (docs/storage.md, "Damaged journal records").
type jHole struct {
	f        *jfile // the file holding pos
	pos, end int64  // journal positions
	reason   string // why the record at pos is invalid
	hdr      jHeader
	// framed: the header at pos names pos, its epoch lies between the
	// records around it, and its length ends exactly where the next valid
	// record starts (or, when that record starts the next file, at its
	// file's end or less than a record header before it): the stretch is
	// that one record, and only its crc failed.
	framed bool
}

// fileBytes returns where the hole starts in its file.
func (h *jHole) fileBytes() int64 { return h.pos - h.f.start }

// PartitionRange is a range of partition offsets [From, To).
type PartitionRange struct {
	Partition string // the partition directory's base name
	From, To  int64
}

// JournalDamage is a damaged stretch of the journal, in the replay range,
// with valid records after it, that recovery could not account for.
type JournalDamage struct {
	File     string // journal file path
	FilePos  int64  // byte position of Pos in File
	Pos, End int64  // journal positions [Pos, End): the invalid records
	Reason   string // why the record at Pos is invalid
	// Lost are the partition ranges the damaged records held that the
	// segments do not hold valid records for.
	Lost []PartitionRange
	// Unattributed: the bytes of the stretch are not exactly the records
	// of the ranges found, so records of other partitions may have been
	// in it.
	Unattributed bool
}

// JournalCorruptError is returned by OpenJournal when a damaged journal
// record has valid records after it (it is not a torn tail) and the
// acknowledged data it held is not in the partition segments either
// (RecoverQuarantine), or when the journal's checkpoint is damaged and
// no earlier one is left to replay from. Nothing was changed.
type JournalCorruptError struct {
	Dir    string // the journal directory
	Damage []JournalDamage
	// Checkpoint is set when the journal holds no valid checkpoint although
	// it does not start at position 0: replay cannot know where to start.
	Checkpoint string
}

func (e *JournalCorruptError) Error() string {
	var b strings.Builder
	if e.Checkpoint != "" {
		fmt.Fprintf(&b, "store: journal %s: %s. Not starting: replaying from a wrong position could skip acknowledged puts. "+
			"Restore the data directory from a replica or a backup; or move %s aside to start without it, "+
			"which loses the acknowledged puts that are not yet in their fsynced segments", e.Dir, e.Checkpoint, e.Dir)
		return b.String()
	}
	fmt.Fprintf(&b, "store: journal %s: damaged records followed by valid ones: ", e.Dir)
	for i, d := range e.Damage {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "file %s bytes %d..%d (journal positions %d..%d): %s", d.File, d.FilePos, d.FilePos+d.End-d.Pos, d.Pos, d.End, d.Reason)
		for _, r := range d.Lost {
			fmt.Fprintf(&b, "; partition %q offsets %d..%d were in it and are not in the segment either", r.Partition, r.From, r.To)
		}
		if d.Unattributed {
			b.WriteString("; the records in it cannot all be attributed to partitions (their framing is damaged)")
		}
	}
	b.WriteString(". Not starting, so that no acknowledged message is deleted. Restore the data directory from a replica or a backup, " +
		"or set recovery = \"truncate\" to replay the valid records and cut each partition above at the start of its lost range " +
		"(every record of it from there on is deleted)")
	return b.String()
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *JournalCorruptError) Is(target error) bool { return target == ErrCorrupt }

// isJRecordType reports whether typ is a record type this version reads.
func isJRecordType(typ byte) bool {
	return typ == recData || typ == recCheckpoint || typ == recSkip || typ == recGroup || typ == recRegister || typ == recMark
}

// validJRecord reads the record at rel of f (its header is hdr) and
// reports whether it is a valid record at journal position pos: position
// field, epoch at least minEpoch, inside the file, crc, a known type and
// a payload that parses. rec is scratch space.
func validJRecord(f *jfile, rel int64, hdr []byte, minEpoch uint32, rec *[]byte) (jHeader, bool, error) {
	h := parseJHeader(hdr)
	if h.pos != f.start+rel || h.epoch < minEpoch || !isJRecordType(h.typ) || int64(h.n) > f.size-rel-jHeaderSize {
		return h, false, nil
	}
	b := slices.Grow((*rec)[:0], jHeaderSize+int(h.n))[:jHeaderSize+int(h.n)]
	*rec = b
	if _, err := f.f.ReadAt(b, rel); err != nil && !errors.Is(err, io.EOF) {
		return h, false, fmt.Errorf("store: read journal file %s at %d: %w", journalName(f.start), rel, err)
	}
	if !verifyJRecord(b) {
		return h, false, nil
	}
	switch h.typ {
	case recData:
		_, err := parseDataPayload(b[jHeaderSize:])
		return h, err == nil, nil
	case recCheckpoint:
		c, err := parseCheckpointPayload(b[jHeaderSize:])
		return h, err == nil && c.from <= h.pos, nil
	case recGroup:
		g, err := parseGroupPayload(b[jHeaderSize:])
		return h, err == nil && g.end > h.pos, nil
	case recRegister:
		_, err := parseRegisterPayload(b[jHeaderSize:])
		return h, err == nil, nil
	}
	return h, h.n == 0, nil // a skip or mark record is empty
}

// jSearchChunk is how much of a journal file the resync search reads at a
// time.
const jSearchChunk = 1 << 20

// jResyncWindow bounds the resync search: the journal bytes after an
// invalid record that are searched for the next valid one. It is twice
// the largest data record (a 4 MiB chunk, its name and header), so damage
// confined to a record or two, or to a bad sector, is always searched
// past, and a restart after a power cut (whose zero-filled or stale tail
// is searched too) reads at most this much more of the journal.
const jResyncWindow = 2*maxWriteChunk + 1<<20

// jZeroRun is the run of zero bytes the search skips at once.
const jZeroRun = 512

var jZeros [jZeroRun + jHeaderSize]byte

// findNextJRecord searches for the first valid record after the invalid
// one at journal position p of files[fi]: in the jResyncWindow bytes that
// follow it, in that file and then in the next ones if they follow. Only
// a record whose position field equals where it lies can be valid, so the
// search compares 8 bytes per byte position (skipping zero runs, which
// hold none) and checksums only those candidates; stale records of
// recycled files and of earlier runs (epoch below minEpoch) never match.
func findNextJRecord(files []*jfile, fi int, p int64, minEpoch uint32, buf, rec *[]byte) (int, int64, jHeader, bool, error) {
	if cap(*buf) < jSearchChunk+jHeaderSize {
		*buf = make([]byte, jSearchChunk+jHeaderSize)
	}
	left := int64(jResyncWindow)
	for k := fi; k < len(files) && left > 0; k++ {
		f := files[k]
		if k > fi && f.start != files[k-1].end() {
			break
		}
		rel := int64(0)
		if k == fi {
			rel = p + 1 - f.start
		}
		stop := min(f.size, rel+left) // candidates start before stop
		left -= stop - rel
		for ; rel < stop && rel+jHeaderSize <= f.size; rel += jSearchChunk {
			b := (*buf)[:min(int64(jSearchChunk+jHeaderSize), f.size-rel)]
			if n, err := f.f.ReadAt(b, rel); n < len(b) {
				return 0, 0, jHeader{}, false, fmt.Errorf("store: read journal file %s at %d: %w", journalName(f.start), rel, err)
			}
			lim := int(min(int64(jSearchChunk), stop-rel))
			for i := 0; i+jHeaderSize <= len(b) && i < lim; i++ {
				if i%jZeroRun == 0 && i+len(jZeros) <= len(b) && bytes.Equal(b[i:i+len(jZeros)], jZeros[:]) {
					i += jZeroRun - 1 // no position field lies inside a zero run
					continue
				}
				if binary.BigEndian.Uint64(b[i+8:]) != uint64(f.start+rel+int64(i)) {
					continue
				}
				h, ok, err := validJRecord(f, rel+int64(i), b[i:i+jHeaderSize], minEpoch, rec)
				if err != nil {
					return 0, 0, jHeader{}, false, err
				}
				if ok {
					return k, f.start + rel + int64(i), h, true, nil
				}
			}
		}
	}
	return 0, 0, jHeader{}, false, nil
}

// jRecordSize is the journal size of a data record of name holding n
// bytes.
func jRecordSize(name string, n int64) int64 {
	return jHeaderSize + 2 + int64(len(name)) + jDataFixed + n
}

// checkDamage decides what recovery does with the damaged stretches the
// scan found (docs/storage.md, "Damaged journal records"). Stretches
// wholly before the replay start are harmless and only logged. For the
// others it works out the partition ranges their records held:
//   - a gap: a partition's valid records before and after damaged
//     stretches do not join up (its records are contiguous in the
//     journal); the gap belongs to the stretches between the two records
//     (if several, they are judged together);
//   - a stretch's own payload, read as one data record that ends where
//     the next valid record starts (the framing, not the header's length
//     field, gives its extent), for a partition without a gap there, if
//     it joins the records of that partition around it.
//
// If the ranges account for every byte of the stretches (one record per
// range, or a framed checkpoint or skip record) and the segments hold
// valid records over all of them, nothing is lost (a range past a
// partition's last record raises its journaled end, so the cut keeps
// it). Otherwise, in RecoverQuarantine mode, it returns a
// *JournalCorruptError before anything is changed; in RecoverTruncate
// mode it sets sc.cuts so that replay cuts each partition at the start of
// its lost range, and logs what is dropped.
func (j *Journal) checkDamage(sc *journalScan, files []*jfile) error {
	return j.checkDamageLog(sc, files, j.logf)
}

// checkDamageLog is checkDamage logging with logf.
func (j *Journal) checkDamageLog(sc *journalScan, files []*jfile, logf func(format string, args ...any)) error {
	if sc.last == nil && files[0].start > 0 {
		why := "it holds no valid checkpoint"
		if len(sc.holes) > 0 {
			h := sc.holes[0]
			why = fmt.Sprintf("it holds no valid checkpoint: the record at position %d (file %s byte %d) is damaged (%s), and the journal no longer holds an earlier checkpoint",
				h.pos, filepath.Join(j.dir, journalName(h.f.start)), h.fileBytes(), h.reason)
		} else if sc.stopped != "" {
			why += " (" + sc.stopped + ")"
		}
		err := &JournalCorruptError{Dir: j.dir, Checkpoint: why + ", so the position to replay from is not known"}
		logf("%v", err)
		return err
	}
	from := files[0].start
	var ckEnds map[string]int64
	strict := false
	if sc.last != nil {
		from, ckEnds, strict = sc.last.from, sc.last.ends, sc.last.registers
	}
	var holes []*jHole // those in the replay range
	for i := range sc.holes {
		h := &sc.holes[i]
		if h.end > from {
			holes = append(holes, h)
			continue
		}
		logf("store: journal %s: damaged records at %s: %s; they lie before the last checkpoint's replay start %d, so their data is in fsynced segments: nothing lost",
			j.dir, j.holeWhere(h.pos, h.end, h), h.reason, from)
	}
	if len(holes) == 0 {
		return nil
	}

	// Walk the records in journal order: each partition's state before
	// each hole, and the gaps. A register record sets its partition's
	// state as a checkpoint entry does (its data records follow it).
	type pstate struct{ end, pos int64 } // journaled end, and the position of the record that set it
	state := map[string]pstate{}
	for name, end := range ckEnds {
		state[name] = pstate{end, -1}
	}
	regs := sc.regs
	register := func(before int64) { // the register records before position before
		for ; len(regs) > 0 && regs[0].pos < before; regs = regs[1:] {
			state[regs[0].name] = pstate{regs[0].end, regs[0].pos}
		}
	}
	group := make([]int, len(holes)) // union-find: holes judged together
	for i := range group {
		group[i] = i
	}
	root := func(i int) int {
		for group[i] != i {
			i = group[i]
		}
		return i
	}
	beforeHole := make([]map[string]int64, len(holes))
	snap := func(k int) {
		m := make(map[string]int64, len(state))
		for name, st := range state {
			m[name] = st.end
		}
		beforeHole[k] = m
	}
	type gap struct {
		hole int
		r    PartitionRange
	}
	var gaps []gap
	next := 0
	for _, r := range sc.refs {
		for ; next < len(holes) && holes[next].end <= r.pos; next++ {
			register(holes[next].pos)
			snap(next)
		}
		register(r.pos)
		st, ok := state[r.name]
		if ok && r.offset > st.end {
			first := -1
			for k, h := range holes {
				if h.pos > st.pos && h.end <= r.pos {
					if first < 0 {
						first = k
					} else {
						group[root(k)] = root(first)
					}
				}
			}
			if first >= 0 {
				gaps = append(gaps, gap{first, PartitionRange{r.name, st.end, r.offset}})
			}
		}
		if !ok || r.end > st.end {
			st.end = r.end
		}
		st.pos = r.pos
		state[r.name] = st
	}
	for ; next < len(holes); next++ {
		register(holes[next].pos)
		snap(next)
	}
	firstAfter := func(name string, pos int64) (int64, bool) {
		k := slices.IndexFunc(sc.refs, func(r dataRef) bool { return r.pos >= pos && r.name == name })
		if k < 0 {
			return 0, false
		}
		return sc.refs[k].offset, true
	}

	var bad []JournalDamage
	var rec []byte
	for g := range holes {
		if root(g) != g {
			continue
		}
		var members []*jHole
		var hidx []int
		for k := range holes {
			if root(k) == g {
				members = append(members, holes[k])
				hidx = append(hidx, k)
			}
		}
		var ranges []PartitionRange
		for _, gp := range gaps {
			if root(gp.hole) == g {
				ranges = append(ranges, gp.r)
			}
		}
		var size, covered int64 // bytes of the stretches, and of the records found for them
		var coins []int64       // a gap may span several records: each adds its header
		for _, r := range ranges {
			covered += jRecordSize(r.Partition, r.To-r.From)
			coins = append(coins, jRecordSize(r.Partition, 0))
		}
		var notes []string
		var data []int // members that may be data records
		for i, h := range members {
			size += h.end - h.pos
			kind, err := holdsNoData(h, &rec)
			if err != nil {
				return err
			}
			if kind != 0 {
				covered += h.end - h.pos
				switch kind {
				case recCheckpoint:
					notes = append(notes, fmt.Sprintf("the record at %d was a checkpoint: replay starts from the checkpoint before it", h.pos))
				case recRegister:
					notes = append(notes, fmt.Sprintf("the record at %d was a register record", h.pos))
				}
				continue
			}
			data = append(data, i)
		}
		// A stretch that runs to its file's end (the next valid record
		// starts the next file) may end in the short tail nextFile leaves
		// when no skip record fits: under a record header, it can hold no
		// record, so up to that many bytes need no range.
		tail := int64(0)
		if l := members[len(members)-1]; l.end == l.f.end() {
			tail = jHeaderSize - 1
		}
		accounted := func() bool {
			for t := range min(tail, size-covered) + 1 {
				if sums(size-covered-t, coins) {
					return true
				}
			}
			return false
		}
		for _, i := range data {
			if accounted() {
				break // the gaps explain every byte: no need to trust a payload
			}
			h := members[i]
			d, ok, err := holeAsRecord(h, &rec)
			if err != nil {
				return err
			}
			if !ok || slices.ContainsFunc(ranges, func(r PartitionRange) bool { return r.Partition == d.name }) {
				continue
			}
			hint := PartitionRange{d.name, d.offset, d.offset + int64(len(d.bytes))}
			b, okb := beforeHole[hidx[i]][d.name]
			a, oka := firstAfter(d.name, h.end)
			// Since register records, every partition with a data record
			// after the checkpoint has a state before it (the checkpoint's
			// entry or its register record): a payload naming one that
			// has none has a damaged name (or offset) and is not used.
			if hint.To > hint.From && (okb || !strict) && (!okb || b == hint.From) && (!oka || a == hint.To) {
				ranges = append(ranges, hint)
				covered += jRecordSize(hint.Partition, hint.To-hint.From)
			}
		}
		slices.SortFunc(ranges, func(a, b PartitionRange) int {
			if c := strings.Compare(a.Partition, b.Partition); c != 0 {
				return c
			}
			return cmpInt64(a.From, b.From)
		})
		first, last := members[0], members[len(members)-1]
		where := j.holeWhere(first.pos, last.end, first)
		reasons := make([]string, len(members))
		for i, h := range members {
			reasons[i] = h.reason
		}
		dmg := JournalDamage{File: filepath.Join(j.dir, journalName(first.f.start)), FilePos: first.fileBytes(), Pos: first.pos, End: last.end,
			Reason: strings.Join(reasons, "; "), Unattributed: !accounted()}
		var held []string
		for _, r := range ranges {
			ok, why, err := j.segmentHolds(r)
			if err != nil {
				return err
			}
			if !ok {
				dmg.Lost = append(dmg.Lost, r)
				logf("store: journal %s: damaged records at %s: partition %q offsets %d..%d are not in the segment either: %s", j.dir, where, r.Partition, r.From, r.To, why)
				continue
			}
			held = append(held, fmt.Sprintf("%q offsets %d..%d", r.Partition, r.From, r.To))
			if r.To > sc.keep[r.Partition] {
				if sc.keep == nil {
					sc.keep = map[string]int64{}
				}
				sc.keep[r.Partition] = r.To
			}
		}
		what := "no partition data"
		if len(held) > 0 {
			what = "partition " + strings.Join(held, ", ") + ", intact in the segments"
		}
		if len(notes) > 0 {
			what += "; " + strings.Join(notes, "; ")
		}
		if len(dmg.Lost) == 0 && !dmg.Unattributed {
			logf("store: journal %s: damaged record at %s: %s; valid records follow; it held %s: nothing lost", j.dir, where, dmg.Reason, what)
			continue
		}
		if j.recovery != RecoverTruncate {
			bad = append(bad, dmg)
			continue
		}
		for _, r := range dmg.Lost {
			if c, ok := sc.cuts[r.Partition]; !ok || r.From < c {
				if sc.cuts == nil {
					sc.cuts = map[string]int64{}
				}
				sc.cuts[r.Partition] = r.From
			}
		}
		if dmg.Unattributed {
			logf("store: journal %s: recovery = \"truncate\": damaged records at %s: %s; what they held beyond %s is dropped",
				j.dir, where, dmg.Reason, what)
		}
	}
	if len(bad) > 0 {
		err := &JournalCorruptError{Dir: j.dir, Damage: bad}
		logf("%v", err)
		return err
	}
	for _, name := range sortedKeys(sc.cuts) {
		logf("store: journal %s: recovery = \"truncate\": cutting partition %q at offset %d: the damaged journal records that held it are not in its segment; every later record of it is dropped",
			j.dir, name, sc.cuts[name])
	}
	return nil
}

// sums reports whether n is a sum of coins (each any number of times):
// the headers of the further records a gap's bytes were split into.
// Larger n than 1 MiB is not searched (false).
func sums(n int64, coins []int64) bool {
	if n == 0 {
		return true
	}
	if n < 0 || n > 1<<20 || len(coins) == 0 {
		return false
	}
	ok := make([]bool, n+1)
	ok[0] = true
	for v := int64(1); v <= n; v++ {
		for _, c := range coins {
			if c <= v && ok[v-c] {
				ok[v] = true
				break
			}
		}
	}
	return ok[n]
}

// holeWhere describes journal positions [pos, end) starting in h's file.
func (j *Journal) holeWhere(pos, end int64, h *jHole) string {
	return fmt.Sprintf("file %s bytes %d..%d (journal positions %d..%d)",
		filepath.Join(j.dir, journalName(h.f.start)), pos-h.f.start, end-h.f.start, pos, end)
}

// holdsNoData reports whether the hole h is one record that held no
// partition data, and of which type (0: it may have held data): a
// checkpoint, group, skip or register record whose header frames it, or
// a register record whose header is damaged but whose payload, over the
// extent the framing gives, is one. The type byte is not trusted (the
// crc failed): a payload that reads as a data record holding bytes is
// data whatever the type byte says (a data record's type flipped to skip
// must not hide its bytes), a skip record is empty, a group record has
// its fixed size; otherwise the record is damage that may have held data.
//
// A stretch inside one file shorter than the smallest data record
// (minDataRecord) held none whatever its header says, nor a register
// record: it was a mark record (or a skip or group record), and is
// reported as a mark record.
func holdsNoData(h *jHole, rec *[]byte) (byte, error) {
	kind, err := holdsNoDataKind(h, rec)
	if kind == 0 && err == nil && h.end <= h.f.end() && h.end-h.pos < minDataRecord {
		kind = recMark
	}
	return kind, err
}

// holdsNoDataKind is holdsNoData but for the stretches too short for data.
func holdsNoDataKind(h *jHole, rec *[]byte) (byte, error) {
	if h.framed && h.hdr.typ == recSkip && h.hdr.n == 0 {
		return recSkip, nil
	}
	if h.framed && h.hdr.typ == recData {
		return 0, nil
	}
	n := min(h.end, h.f.end()) - h.pos - jHeaderSize
	if n < 0 {
		return 0, nil
	}
	var b []byte
	if n <= maxDataPayload || (h.framed && h.hdr.typ == recSkip) {
		b = slices.Grow((*rec)[:0], int(n))[:n]
		*rec = b
		if _, err := h.f.f.ReadAt(b, h.fileBytes()+jHeaderSize); err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("store: read journal file %s at %d: %w", journalName(h.f.start), h.fileBytes(), err)
		}
		if d, err := parseDataPayload(b); err == nil && len(d.bytes) > 0 {
			return 0, nil
		}
	}
	if !h.framed {
		if _, err := parseRegisterPayload(b); err == nil {
			return recRegister, nil
		}
		return 0, nil
	}
	switch h.hdr.typ {
	case recCheckpoint:
		return recCheckpoint, nil
	case recRegister:
		if registerShaped(b) {
			return recRegister, nil
		}
	case recGroup:
		if h.hdr.n == jGroupPayload {
			return recGroup, nil
		}
	case recSkip:
		// A skip record with a payload is corruption; a checkpoint's
		// (or a register record's) whose type was flipped reads as one.
		if c, err := parseCheckpointPayload(b); err == nil && c.from <= h.pos {
			return recCheckpoint, nil
		}
		if _, err := parseRegisterPayload(b); err == nil {
			return recRegister, nil
		}
	}
	return 0, nil
}

// maxDataPayload is the largest payload of a data record.
const maxDataPayload = maxWriteChunk + 2 + maxPartitionName + jDataFixed

// holeAsRecord reads the hole h as one data record whose extent the
// framing gives: from h.pos to where the next valid record starts (or
// its file's end). It reports false if the payload does not parse.
func holeAsRecord(h *jHole, rec *[]byte) (dataRecord, bool, error) {
	end := min(h.end, h.f.end())
	n := end - h.pos - jHeaderSize
	if n < 2+jDataFixed || n > maxWriteChunk+jHeaderSize+maxPartitionName+jDataFixed {
		return dataRecord{}, false, nil
	}
	b := slices.Grow((*rec)[:0], int(n))[:n]
	*rec = b
	if _, err := h.f.f.ReadAt(b, h.fileBytes()+jHeaderSize); err != nil && !errors.Is(err, io.EOF) {
		return dataRecord{}, false, fmt.Errorf("store: read journal file %s at %d: %w", journalName(h.f.start), h.fileBytes(), err)
	}
	d, err := parseDataPayload(b)
	return d, err == nil, nil
}

// sortedKeys returns the keys of m, ascending.
func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// segmentHolds reports whether the segments of partition r.Partition hold
// whole valid records (checksums match) over bytes [r.From, r.To), and
// if not, why. A range that starts inside a record (a run split at a
// journal file end) is checked from the start of its segment.
func (j *Journal) segmentHolds(r PartitionRange) (bool, string, error) {
	pdir := filepath.Join(j.dataDir, r.Partition)
	starts, sizes, err := listSegments(pdir)
	if isNotExist(err) {
		return false, "the partition directory does not exist", nil
	}
	if err != nil {
		return false, "", err
	}
	var br *bufio.Reader
	var buf []byte
	cur := r.From
	for i, start := range starts {
		end := start + sizes[i]
		if end <= cur || (i+1 < len(starts) && starts[i+1] <= cur) {
			continue
		}
		if start > cur {
			break
		}
		path := filepath.Join(pdir, segmentName(start))
		f, err := os.Open(path)
		if err != nil {
			return false, "", fmt.Errorf("store: %w", err)
		}
		seg := newSegment(start, path, f, sizes[i])
		if br == nil {
			br = bufio.NewReaderSize(nil, 64<<10)
		}
		res, err := scanSegmentFrom(br, seg, cur-start, math.MaxInt32, true, &buf, nil)
		if err == nil && res.good == cur-start && cur > start {
			res, err = scanSegmentFrom(br, seg, 0, math.MaxInt32, true, &buf, nil)
		}
		seg.release()
		if err != nil {
			return false, "", err
		}
		if start+res.good < min(r.To, end) {
			return false, fmt.Sprintf("%s has an invalid record at byte %d: %s", path, res.good, res.stop), nil
		}
		if cur = end; cur >= r.To {
			return true, "", nil
		}
	}
	return false, fmt.Sprintf("no segment of %s holds offset %d", pdir, cur), nil
}
