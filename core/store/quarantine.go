package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/metaq-go/metaq/sdk/message"
)

// RecoveryMode selects what Open does when the last segment holds an
// invalid record with valid records after it, and what OpenJournal does
// when a damaged journal record with valid records after it held data
// that is not in its segment either (see the package documentation,
// Corruption).
type RecoveryMode int

const (
	// RecoverQuarantine, the default, repairs the damaged bytes through
	// Options.Repairer when it can and otherwise copies them to the
	// partition's quarantine directory and fails Open with a *CorruptError:
	// nothing after the damage is deleted.
	RecoverQuarantine RecoveryMode = iota
	// RecoverTruncate cuts the last segment at its first invalid record,
	// deleting whatever follows it.
	RecoverTruncate
)

// Repairer supplies good copies of damaged partition bytes, for example
// from the broker's journal. Bytes returns bytes [from, to) (absolute
// offsets) of the partition whose directory's base name is partition
// ("<topic>-<p>"), and false if it does not hold all of them. The bytes
// are used only if they are exactly to-from bytes of whole records whose
// checksums match; the caller does not keep them. Bytes is called from
// Open and from the background verification of sealed segments, possibly
// for several partitions at once.
type Repairer interface {
	Bytes(partition string, from, to int64) ([]byte, bool)
}

// ErrCorrupt is matched (errors.Is) by *CorruptError.
var ErrCorrupt = errors.New("store: corrupt data")

// QuarantineDir is the directory, inside a partition directory, that
// damaged bytes are copied to, one file per damaged range named
// <segment file name>.<absolute offset of the range>.bad.
const QuarantineDir = "quarantine"

// DamagedRange is a run of bytes of a segment file that does not hold
// valid records: it starts at an invalid record and ends where the next
// valid record starts (or at the end of the file).
type DamagedRange struct {
	File       string // segment file path
	Pos, End   int64  // byte positions in the file: [Pos, End)
	Offset     int64  // absolute partition offset of Pos
	Reason     string // why the record at Pos is invalid
	Next       bool   // a valid record (or, in a sealed segment, the next segment) starts at End
	Quarantine string // path of the copy of the bytes ("" if the copy failed)
	Repaired   bool   // rewritten from the Repairer's copy
}

func (r *DamagedRange) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "segment %s bytes %d..%d (offsets %d..%d, %d bytes): %s",
		r.File, r.Pos, r.End, r.Offset, r.Offset+r.End-r.Pos, r.End-r.Pos, r.Reason)
	if r.Quarantine != "" {
		fmt.Fprintf(&b, "; copied to %s", r.Quarantine)
	} else {
		b.WriteString("; could not be copied aside")
	}
	return b.String()
}

// CorruptError reports damaged bytes in a partition. Open returns it (in
// RecoverQuarantine mode) when the last segment has damaged ranges with
// valid records after them that no Repairer could restore; Read returns it
// for an offset inside a damaged range of a sealed segment.
type CorruptError struct {
	Partition string // the partition directory's base name, "<topic>-<p>"
	Dir       string // the partition directory
	// Ranges are the damaged ranges not repaired (Open), or the one the
	// read fell in (Read).
	Ranges []DamagedRange
	// Read is set for an error of Read; Offset is then the offset asked for.
	Read   bool
	Offset int64
	// Reason explains a Read error without Ranges (a segment not verified
	// yet whose bytes at Offset are not a valid record).
	Reason string
}

func (e *CorruptError) Error() string {
	var b strings.Builder
	if e.Read {
		fmt.Fprintf(&b, "store: partition %s: offset %d is in damaged data", e.Partition, e.Offset)
		if e.Reason != "" {
			b.WriteString(": " + e.Reason)
		}
		for i := range e.Ranges {
			r := &e.Ranges[i]
			fmt.Fprintf(&b, " (%s)", r.describe())
			if r.Next {
				fmt.Fprintf(&b, "; the next valid record is at offset %d", r.Offset+r.End-r.Pos)
			}
		}
		return b.String()
	}
	fmt.Fprintf(&b, "store: partition %s (%s): the last segment has damaged records followed by valid ones: ", e.Partition, e.Dir)
	for i := range e.Ranges {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e.Ranges[i].describe())
	}
	r := &e.Ranges[0]
	fmt.Fprintf(&b, ". Not starting, so that no acknowledged message is deleted. "+
		"Restore the partition directory from a replica or a backup, or set recovery = \"truncate\" "+
		"to cut %s at byte %d (offset %d), which deletes every record after it", filepath.Base(r.File), r.Pos, r.Offset)
	return b.String()
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// resyncCRCBudget bounds the data bytes checksummed while searching for
// the next valid record after an invalid one.
const resyncCRCBudget = 64 << 20

// maxDamagedRanges bounds the damaged ranges recorded for one segment;
// past it the rest of the file is one range whose end is not searched.
const maxDamagedRanges = 16

// damage is a damaged range [pos, end) of a segment file found by
// walkDamage.
type damage struct {
	pos, end int64
	reason   string
	next     bool // a valid record starts at end
	maybe    bool // the search for the next valid record gave up: some may follow
}

// followed reports whether valid records follow (or may follow) d.
func (d *damage) followed() bool { return d.next || d.maybe }

// walkResult is the outcome of walkDamage.
type walkResult struct {
	count, lastID int64 // valid records of the whole file, and the last one's id
	damage        []damage
}

// walkDamage continues a verifying scan of seg that stopped at first.good
// (an invalid record): it searches for the next valid record
// (findNextRecord), scans the chain from there, and so on to the end of
// the file. Only the last range can be followed by nothing valid
// (followed() false): in the last segment, that is a torn tail.
func walkDamage(br *bufio.Reader, seg *segment, first scanResult, maxMsg int, buf *[]byte, stop <-chan struct{}) (walkResult, error) {
	size := seg.scanEnd()
	w := walkResult{count: first.count, lastID: first.lastID}
	res := first
	for res.good < size {
		p := res.good
		if len(w.damage) == maxDamagedRanges {
			w.damage = append(w.damage, damage{pos: p, end: size, reason: res.stop + " (too many damaged ranges: the rest is not searched)", maybe: true})
			return w, nil
		}
		q, ok, why, err := findNextRecord(seg, p, size, maxMsg, buf, stop)
		if err != nil {
			return w, err
		}
		reason := res.stop
		if why != "" {
			reason += " (" + why + ")"
		}
		if !ok {
			w.damage = append(w.damage, damage{pos: p, end: size, reason: reason, maybe: why != ""})
			return w, nil
		}
		w.damage = append(w.damage, damage{pos: p, end: q, reason: reason, next: true})
		if res, err = scanSegmentFrom(br, seg, q, maxMsg, true, buf, stop); err != nil {
			return w, err
		}
		w.count += res.count
		w.lastID = res.lastID // q holds a valid record, so res.count >= 1
	}
	return w, nil
}

// findNextRecord searches seg after the invalid record at p for the first
// position q > p where a valid record with data starts: its length n is
// in [1, maxMsg], the record ends within the file and the checksum of its
// n data bytes matches. Zero-length records do not count (an all-zero run,
// and eight zero bytes in a payload, would look like one). The work is
// bounded: at most the rest of the file is read, and at most
// resyncCRCBudget data bytes are checksummed; when the budget runs out the
// search gives up with ok false and a non-empty why, meaning valid records
// may follow. ok false with why "" means nothing valid follows.
func findNextRecord(seg *segment, p, size int64, maxMsg int, buf *[]byte, stop <-chan struct{}) (q int64, ok bool, why string, err error) {
	const hs = message.HeaderSize
	chunk := 4<<20 + hs + maxMsg // a load at q holds any whole record starting at q
	if cap(*buf) < chunk {
		*buf = make([]byte, chunk)
	}
	var b []byte // file bytes [bs, bs+len(b))
	bs := int64(0)
	load := func(at int64) error {
		select {
		case <-stop:
			return errStopped
		default:
		}
		b = (*buf)[:min(int64(chunk), size-at)]
		if n, err := seg.f.ReadAt(b, at); n < len(b) {
			return fmt.Errorf("store: read %s at %d: %w", seg.path, at, err)
		}
		bs = at
		return nil
	}
	budget := int64(resyncCRCBudget)
	for q = p + 1; q+hs < size; q++ {
		if q+hs > bs+int64(len(b)) {
			if err := load(q); err != nil {
				return 0, false, "", err
			}
		}
		h := b[q-bs:]
		n := int64(int32(binary.BigEndian.Uint32(h)))
		if n < 1 || n > int64(maxMsg) || q+hs+n > size {
			continue
		}
		if q+hs+n > bs+int64(len(b)) {
			if err := load(q); err != nil {
				return 0, false, "", err
			}
			h = b
		}
		if budget -= n; budget < 0 {
			return 0, false, fmt.Sprintf("gave up searching for the next valid record at byte %d", q), nil
		}
		if message.Checksum(h[hs:hs+n]) == binary.BigEndian.Uint32(h[4:]) {
			return q, true, "", nil
		}
	}
	return 0, false, "", nil
}

// zeroHeader reports whether a record header is all zero bytes.
func zeroHeader(h []byte) bool {
	for _, c := range h[:message.HeaderSize] {
		if c != 0 {
			return false
		}
	}
	return true
}

// partition returns the log's partition name: its directory's base name.
func (l *Log) partition() string { return filepath.Base(l.dir) }

// recoverDamage runs in RecoverQuarantine mode when the verifying scan of
// the last segment stopped at first.good before the end. A torn tail
// (nothing valid after it) is left to the caller to cut. So is a damaged
// range at or past mark, the log's durable end by its flush mark
// (flushmark.go; -1: none), although valid records follow it: those were
// written after the last fsync that returned, and a power cut kept their
// pages and lost an earlier one. Damaged ranges before mark followed by
// valid records are copied to the quarantine directory and repaired from
// the Repairer if it has them; if all are repaired the segment is scanned
// again and that result returned, otherwise a *CorruptError.
func (l *Log) recoverDamage(br *bufio.Reader, tail *segment, first scanResult, mark int64, buf *[]byte) (scanResult, error) {
	for attempt := 0; ; attempt++ {
		w, err := walkDamage(br, tail, first, l.maxMsg, buf, nil)
		if err != nil {
			return first, err
		}
		ds := w.damage
		if n := len(ds); n > 0 && !ds[n-1].followed() {
			ds = ds[:n-1] // the torn tail: cut by the caller
		}
		if mark >= 0 {
			for i, d := range ds {
				if tail.start+d.pos < mark {
					continue
				}
				if i == 0 {
					// The scan stopped here: the caller cuts the tail.
					first.stop = fmt.Sprintf("%s, a torn unsynced tail: the valid records after it were written past the durable end %d of the last flush, never fsynced",
						first.stop, mark)
					return first, nil
				}
				ds = ds[:i] // damage before it is judged first
				break
			}
		}
		if len(ds) == 0 {
			return first, nil
		}
		var ranges []DamagedRange
		if attempt == 0 {
			ranges = l.handleDamage(tail, ds)
		} else {
			ranges = l.describeDamage(tail, ds) // repaired bytes did not chain: give up
		}
		var left []DamagedRange
		for _, r := range ranges {
			if !r.Repaired {
				left = append(left, r)
			}
		}
		if len(left) > 0 {
			err := &CorruptError{Partition: l.partition(), Dir: l.dir, Ranges: left}
			l.logf("%v", err)
			return first, err
		}
		if first, err = scanSegment(br, tail, l.maxMsg, true, buf, nil); err != nil {
			return first, err
		}
		if first.good == tail.size.Load() {
			return first, nil
		}
	}
}

// describeDamage turns ranges into DamagedRanges without copying or
// repairing them.
func (l *Log) describeDamage(seg *segment, ds []damage) []DamagedRange {
	out := make([]DamagedRange, len(ds))
	for i, d := range ds {
		out[i] = DamagedRange{File: seg.path, Pos: d.pos, End: d.end, Offset: seg.start + d.pos, Reason: d.reason, Next: d.next}
		if q := l.quarantinePath(seg, d.pos); fileExists(q) {
			out[i].Quarantine = q
		}
	}
	return out
}

// quarantinePath returns the path of the quarantine copy of the damaged
// range starting at byte pos of seg.
func (l *Log) quarantinePath(seg *segment, pos int64) string {
	return filepath.Join(l.dir, QuarantineDir, fmt.Sprintf("%s.%d.bad", filepath.Base(seg.path), seg.start+pos))
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// handleDamage copies each damaged range of seg to the quarantine
// directory, then asks the Repairer for it and rewrites it in place
// (fdatasynced) when the copy it gets verifies.
func (l *Log) handleDamage(seg *segment, ds []damage) []DamagedRange {
	out := l.describeDamage(seg, ds)
	for i := range out {
		r := &out[i]
		q, err := l.quarantine(seg, r.Pos, r.End)
		if err != nil {
			l.logf("store: %s: copying damaged bytes %d..%d of %s aside: %v", l.dir, r.Pos, r.End, filepath.Base(seg.path), err)
		} else {
			r.Quarantine = q
		}
		if l.repairer == nil {
			continue
		}
		b, ok := l.repairer.Bytes(l.partition(), r.Offset, r.Offset+r.End-r.Pos)
		if !ok {
			continue
		}
		if err := validRecords(b, r.End-r.Pos, l.maxMsg); err != nil {
			l.logf("store: %s: the repair copy of offsets %d..%d is unusable: %v", l.dir, r.Offset, r.Offset+r.End-r.Pos, err)
			continue
		}
		if err := l.rewrite(seg, r.Pos, b); err != nil {
			l.logf("store: %s: repairing %s bytes %d..%d: %v", l.dir, filepath.Base(seg.path), r.Pos, r.End, err)
			continue
		}
		r.Repaired = true
		l.logf("store: %s: repaired %s bytes %d..%d (offsets %d..%d) from the repair copy: %s",
			l.dir, filepath.Base(seg.path), r.Pos, r.End, r.Offset, r.Offset+r.End-r.Pos, r.Reason)
	}
	return out
}

// validRecords checks that b is exactly want bytes of whole valid records.
func validRecords(b []byte, want int64, maxMsg int) error {
	if int64(len(b)) != want {
		return fmt.Errorf("%d bytes, want %d", len(b), want)
	}
	for pos := 0; pos < len(b); {
		if len(b)-pos >= message.HeaderSize && zeroHeader(b[pos:]) {
			return fmt.Errorf("zero-filled record header at byte %d", pos)
		}
		_, n, err := message.ParseRecord(b[pos:], maxMsg)
		if err != nil {
			return fmt.Errorf("record at byte %d: %w", pos, err)
		}
		pos += n
	}
	return nil
}

// rewrite writes b at pos of seg's file through a descriptor of its own
// and fdatasyncs it.
func (l *Log) rewrite(seg *segment, pos int64, b []byte) error {
	f, err := os.OpenFile(seg.path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(b, pos); err != nil {
		_ = f.Close()
		return err
	}
	err = l.syncFile(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// quarantine copies bytes [pos, end) of seg to
// <dir>/quarantine/<segment name>.<offset>.bad, fsyncs the copy and the
// quarantine directory (created durably if needed), and returns the
// copy's path. An existing copy of the same range is replaced.
func (l *Log) quarantine(seg *segment, pos, end int64) (string, error) {
	qdir := filepath.Join(l.dir, QuarantineDir)
	if err := MkdirAllDurable(qdir, 0o755); err != nil {
		return "", err
	}
	path := l.quarantinePath(seg, pos)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return "", err
	}
	_, err = io.Copy(f, io.NewSectionReader(seg.f, pos, end-pos))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncPath(qdir)
	}
	if err != nil {
		return "", err
	}
	return path, nil
}
