package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// Journal record types (docs/storage.md). A record of any other type, or
// of type 0 (a zero-filled, never written tail), ends the journal.
const (
	// recData holds bytes of one partition: where they belong (the
	// partition directory's name, the start of the segment file and the
	// partition byte offset) and the exact bytes written to the segment.
	recData = 1
	// recCheckpoint says that every record before its From position is in
	// fsynced segments, and lists the durable end of every group-commit
	// partition at that moment.
	recCheckpoint = 2
	// recSkip says that the rest of its file is unused: the next record
	// is at the start of the next file. Its payload is empty.
	recSkip = 3
	// recRegister names a partition that registered (a group-commit Log
	// opened) and what recovery needs to know of it until a checkpoint
	// lists it: its end and last record id at that moment. It comes right
	// before the partition's first data record after the registration,
	// in the same round (docs/storage.md, "Register records").
	recRegister = 4
	// recMark holds no payload: its header's durable mark covers every
	// round synced when it was written. A round's completion writes one
	// (not synced) before it acknowledges the round's appends when no
	// record written since the round's fdatasync returned carries a mark
	// past it, so that every acknowledged round is under a later mark
	// (docs/storage.md, "Mark records").
	recMark = 5

	// recGroup starts an atomic group (AppendAtomic, atomic.go): the data
	// records after it up to the journal position it gives are one unit,
	// replayed only if the journal reaches that position.
	recGroup = 16

	// Types 17 to 19 stay reserved (they were kept for transactions,
	// which chose a journal of their own); a record of one of these types
	// ends the journal like any unknown type.
)

// jHeaderSize is the size of a journal record header:
//
//	[u32 crc32c][u32 payload length][u64 journal position][u32 epoch][u8 type][u24 durable mark]
//
// all big-endian. The crc (Castagnoli) covers header bytes 4..24 and the
// payload. The position is where the record itself starts in the
// journal, so a stale record in a recycled file (renamed forward to a new
// position) never verifies. The epoch rises by one on every open; a
// record with a lower epoch than one before it is a stale tail of an
// earlier run and ends the journal. The durable mark says how far the
// journal was known durable when the record's round was staged (see
// markField); 0, as binaries before it wrote, says nothing.
const jHeaderSize = 24

// The durable mark of a record header (bytes 21..24) is the distance from
// the record's position back to the end of the last round whose
// fdatasync had returned when the record's round was staged, in units of
// markUnit bytes rounded up, plus one; 0 is no mark. Rounding up the
// distance rounds the mark down by less than markUnit, less than a
// record header: a damaged record that starts before the true mark still
// starts before the decoded one. A distance the field cannot hold
// (markMax-1 units, about 256 MiB, or more) is written as markMax, which
// says only that the record carries a mark, somewhere before the record
// by at least about 256 MiB: it is decoded as markCapped, "a mark, no
// position" (decoding it as a distance would give a mark higher than the
// true one, and a torn tail inside such a round would be refused as
// damage). Recovery tells a torn tail from damage by the marks
// (tornCandidate, docs/storage.md "Torn tails"); a capped mark neither
// raises the highest mark nor counts as a record without one.
const (
	markUnit = 16
	markMax  = 1<<24 - 1
)

// markCapped is the mark of a header whose field is markMax: it carries
// a mark, too far back for the field to say where.
const markCapped = -2

// markField encodes mark m (a journal position, -1: none, markCapped: a
// mark too far back to say) for a record at pos.
func markField(pos, m int64) uint32 {
	if m == markCapped {
		return markMax
	}
	if m < 0 || m > pos {
		return 0
	}
	return uint32(min((pos-m+markUnit-1)/markUnit+1, markMax))
}

// minDataRecord is the size of the smallest data record (a one-byte
// name, one byte of data): a damaged stretch shorter than it held no
// partition data, nor a register record (one byte shorter).
const minDataRecord = jHeaderSize + 2 + 1 + jDataFixed + 1

// jDataFixed is the fixed part of a data record's payload after the name:
// [u64 segment start][u64 partition offset].
const jDataFixed = 16

// maxPartitionName bounds a partition directory name in a record.
const maxPartitionName = 1 << 10

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// jHeader is a decoded record header.
type jHeader struct {
	crc   uint32
	n     uint32 // payload length
	pos   int64
	epoch uint32
	typ   byte
	markv uint32 // the durable mark field (markField)
}

// mark returns the durable mark the header carries (a journal position:
// the journal before it was durable when the record was staged), -1
// when it carries none, or markCapped when its field is capped (markMax:
// a mark about 256 MiB or more before the record, position unknown).
func (h jHeader) mark() int64 {
	if h.markv == 0 || h.pos < 0 { // (no valid record has a negative position)
		return -1
	}
	if h.markv == markMax {
		return markCapped
	}
	return max(h.pos-markUnit*int64(h.markv-1), 0)
}

// sealJRecord fills in the header of rec, a record whose payload follows
// jHeaderSize reserved bytes, and its crc; mark is the durable mark of
// its round (-1: none).
func sealJRecord(rec []byte, pos int64, epoch uint32, mark int64, typ byte) {
	binary.BigEndian.PutUint32(rec[4:], uint32(len(rec)-jHeaderSize))
	binary.BigEndian.PutUint64(rec[8:], uint64(pos))
	binary.BigEndian.PutUint32(rec[16:], epoch)
	v := markField(pos, mark)
	rec[20] = typ
	rec[21], rec[22], rec[23] = byte(v>>16), byte(v>>8), byte(v)
	binary.BigEndian.PutUint32(rec[0:], crc32.Checksum(rec[4:], castagnoli))
}

// parseJHeader decodes a header; it does not check the crc.
func parseJHeader(b []byte) jHeader {
	return jHeader{
		crc:   binary.BigEndian.Uint32(b[0:]),
		n:     binary.BigEndian.Uint32(b[4:]),
		pos:   int64(binary.BigEndian.Uint64(b[8:])),
		epoch: binary.BigEndian.Uint32(b[16:]),
		typ:   b[20],
		markv: uint32(b[21])<<16 | uint32(b[22])<<8 | uint32(b[23]),
	}
}

// verifyJRecord checks rec (header and payload) against its crc.
func verifyJRecord(rec []byte) bool {
	return crc32.Checksum(rec[4:], castagnoli) == binary.BigEndian.Uint32(rec)
}

// dataRecord is a decoded data record.
type dataRecord struct {
	name     string // partition directory name
	segStart int64
	offset   int64
	bytes    []byte
}

// appendDataPayload appends a data record's payload.
func appendDataPayload(dst []byte, name string, segStart, offset int64, b []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(name)))
	dst = append(dst, name...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(segStart))
	dst = binary.BigEndian.AppendUint64(dst, uint64(offset))
	return append(dst, b...)
}

var errBadJRecord = errors.New("malformed journal record")

func parseDataPayload(p []byte) (dataRecord, error) {
	if len(p) < 2 {
		return dataRecord{}, errBadJRecord
	}
	n := int(binary.BigEndian.Uint16(p))
	p = p[2:]
	if len(p) < n+jDataFixed {
		return dataRecord{}, errBadJRecord
	}
	d := dataRecord{name: string(p[:n])}
	p = p[n:]
	d.segStart = int64(binary.BigEndian.Uint64(p))
	d.offset = int64(binary.BigEndian.Uint64(p[8:]))
	d.bytes = p[jDataFixed:]
	if !validPartitionName(d.name) || d.segStart < 0 || d.offset < d.segStart {
		return dataRecord{}, fmt.Errorf("%w: partition %q, segment %d, offset %d", errBadJRecord, d.name, d.segStart, d.offset)
	}
	return d, nil
}

// validPartitionName reports whether name is a single path element that
// can name a partition directory.
func validPartitionName(name string) bool {
	return name != "" && name != "." && name != ".." && len(name) <= maxPartitionName &&
		!strings.ContainsAny(name, "/\\\x00")
}

// registerRecord is a decoded register record: partition name registered
// with its segments ending at end (every byte before it fsynced), the id
// of its last record before end being lastID (0: none).
type registerRecord struct {
	name        string
	end, lastID int64
}

// appendRegisterPayload appends a register record's payload:
// [u16 n][n bytes: partition directory name][u64 end][u64 last id].
func appendRegisterPayload(dst []byte, r registerRecord) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(r.name)))
	dst = append(dst, r.name...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.end))
	return binary.BigEndian.AppendUint64(dst, uint64(r.lastID))
}

// jRegisterSize is the journal size of a register record of name.
func jRegisterSize(name string) int64 { return jHeaderSize + 2 + int64(len(name)) + 16 }

func parseRegisterPayload(p []byte) (registerRecord, error) {
	name, rest, ok := cutName(p, 16)
	if !ok || len(rest) != 16 {
		return registerRecord{}, fmt.Errorf("%w: register record of %d bytes", errBadJRecord, len(p))
	}
	r := registerRecord{name: name, end: int64(binary.BigEndian.Uint64(rest)), lastID: int64(binary.BigEndian.Uint64(rest[8:]))}
	if r.end < 0 || r.lastID < 0 {
		return registerRecord{}, fmt.Errorf("%w: register record of %q: end %d, last id %d", errBadJRecord, name, r.end, r.lastID)
	}
	return r, nil
}

// registerShaped reports whether p has the shape of a register payload
// (its name length and size agree), whatever its bytes: a data record's
// payload never has it, since it holds at least one byte more.
func registerShaped(p []byte) bool {
	return len(p) >= 2 && len(p) == 2+int(binary.BigEndian.Uint16(p))+16
}

// checkpoint is a decoded checkpoint record.
type checkpoint struct {
	from int64            // replay starts here
	ends map[string]int64 // durable end of each group-commit partition
	// lastIDs holds the id of the last record before each partition's end
	// (0 for an empty partition), for the partitions of ends; nil in a
	// checkpoint written before it was added.
	lastIDs map[string]int64
	// closed lists the partitions closed in this run since they last
	// registered: fsynced up to end by their Close. Unlike ends, recovery
	// does not cut them there (a partition may reopen in threshold mode
	// and grow); it only trusts their bytes before end (restart.go).
	closed map[string]closedEnd
	// registers: the run that wrote the checkpoint writes a register
	// record before the first data record of every partition that
	// registers after it, so every partition with data records after it
	// is in ends or named by an earlier register record (checkDamage
	// relies on it). False in a checkpoint written before them.
	registers bool
}

// closedEnd is a closed partition's end and the id of its last record.
type closedEnd struct{ end, lastID int64 }

// Optional sections that follow a checkpoint's ends, each
// [u8 tag][u32 length][length bytes]; readers skip tags they do not know,
// and readers that predate the sections stop after the ends.
const (
	// ckptLastIDs is lastIDs: one u64 per entry of ends, in entry order.
	ckptLastIDs = 1
	// ckptClosed is closed: [u32 count] then count ×
	// [u16 n][name][u64 end][u64 last id].
	ckptClosed = 2
	// ckptRegisters is registers: an empty section.
	ckptRegisters = 3
)

func appendCheckpointPayload(dst []byte, c checkpoint) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.from))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(c.ends)))
	names := make([]string, 0, len(c.ends))
	for name, end := range c.ends {
		names = append(names, name)
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(name)))
		dst = append(dst, name...)
		dst = binary.BigEndian.AppendUint64(dst, uint64(end))
	}
	if c.lastIDs != nil {
		dst = append(dst, ckptLastIDs)
		dst = binary.BigEndian.AppendUint32(dst, uint32(8*len(names)))
		for _, name := range names {
			dst = binary.BigEndian.AppendUint64(dst, uint64(c.lastIDs[name]))
		}
	}
	if c.closed != nil {
		dst = append(dst, ckptClosed, 0, 0, 0, 0)
		at := len(dst)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(c.closed)))
		for name, e := range c.closed {
			dst = binary.BigEndian.AppendUint16(dst, uint16(len(name)))
			dst = append(dst, name...)
			dst = binary.BigEndian.AppendUint64(dst, uint64(e.end))
			dst = binary.BigEndian.AppendUint64(dst, uint64(e.lastID))
		}
		binary.BigEndian.PutUint32(dst[at-4:], uint32(len(dst)-at))
	}
	if c.registers {
		dst = append(dst, ckptRegisters, 0, 0, 0, 0)
	}
	return dst
}

func parseCheckpointPayload(p []byte) (checkpoint, error) {
	if len(p) < 12 {
		return checkpoint{}, errBadJRecord
	}
	c := checkpoint{from: int64(binary.BigEndian.Uint64(p)), ends: map[string]int64{}}
	count := binary.BigEndian.Uint32(p[8:])
	p = p[12:]
	names := make([]string, 0, min(count, 1<<16))
	for range count {
		name, rest, ok := cutName(p, 8)
		if !ok {
			return checkpoint{}, fmt.Errorf("%w: checkpoint entry", errBadJRecord)
		}
		c.ends[name] = int64(binary.BigEndian.Uint64(rest))
		names = append(names, name)
		p = rest[8:]
	}
	if c.from < 0 {
		return checkpoint{}, errBadJRecord
	}
	for len(p) > 0 { // the optional sections
		if len(p) < 5 || int64(binary.BigEndian.Uint32(p[1:])) > int64(len(p)-5) {
			return checkpoint{}, fmt.Errorf("%w: checkpoint section of %d bytes", errBadJRecord, len(p))
		}
		tag, sec := p[0], p[5:5+binary.BigEndian.Uint32(p[1:])]
		p = p[5+len(sec):]
		var err error
		switch tag {
		case ckptLastIDs:
			err = c.parseLastIDs(sec, names)
		case ckptClosed:
			err = c.parseClosed(sec)
		case ckptRegisters:
			if c.registers || len(sec) != 0 {
				err = fmt.Errorf("%w: checkpoint registers section of %d bytes", errBadJRecord, len(sec))
			}
			c.registers = true
		}
		if err != nil {
			return checkpoint{}, err
		}
	}
	return c, nil
}

// cutName splits [u16 n][n bytes of a partition name] off the front of p,
// which must hold at least more bytes after it.
func cutName(p []byte, more int) (name string, rest []byte, ok bool) {
	if len(p) < 2 {
		return "", nil, false
	}
	n := int(binary.BigEndian.Uint16(p))
	if len(p) < 2+n+more || !validPartitionName(string(p[2:2+n])) {
		return "", nil, false
	}
	return string(p[2 : 2+n]), p[2+n:], true
}

func (c *checkpoint) parseLastIDs(sec []byte, names []string) error {
	if c.lastIDs != nil || len(sec) != 8*len(names) || len(c.ends) != len(names) {
		return fmt.Errorf("%w: checkpoint last ids of %d bytes for %d partitions", errBadJRecord, len(sec), len(names))
	}
	c.lastIDs = make(map[string]int64, len(names))
	for i, name := range names {
		c.lastIDs[name] = int64(binary.BigEndian.Uint64(sec[8*i:]))
	}
	return nil
}

func (c *checkpoint) parseClosed(sec []byte) error {
	if c.closed != nil || len(sec) < 4 {
		return fmt.Errorf("%w: checkpoint closed partitions", errBadJRecord)
	}
	count := binary.BigEndian.Uint32(sec)
	sec = sec[4:]
	c.closed = make(map[string]closedEnd, min(count, 1<<16))
	for range count {
		name, rest, ok := cutName(sec, 16)
		if !ok {
			return fmt.Errorf("%w: checkpoint closed partition entry", errBadJRecord)
		}
		c.closed[name] = closedEnd{end: int64(binary.BigEndian.Uint64(rest)), lastID: int64(binary.BigEndian.Uint64(rest[8:]))}
		sec = rest[16:]
	}
	if len(sec) != 0 {
		return fmt.Errorf("%w: checkpoint closed partitions: %d bytes left", errBadJRecord, len(sec))
	}
	return nil
}

// journalNameDigits is the width of a journal file name: its starting
// journal position, zero-padded, with no suffix.
const journalNameDigits = 20

func journalName(start int64) string {
	return fmt.Sprintf("%0*d", journalNameDigits, start)
}

func parseJournalName(name string) (int64, bool) {
	if len(name) != journalNameDigits {
		return 0, false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(name, 10, 64)
	return v, err == nil
}
