// Package index is the broker's on-disk index of message keys and ids
// (docs/storage.md, "Key and id index"), after RocketMQ's IndexFile: per
// partition, a run of chunk files next to the log's segments, each
// covering a range of offsets of one segment. A chunk holds a hash and an
// offset per indexed record, sorted, behind a fan-out table; a lookup
// reads two small ranges of each chunk and then the records its
// candidates name. The index is never trusted over the log: every
// candidate is read back and its key or id compared, and a chunk that
// fails its checksum is set aside (a lookup scans its range of the log
// instead) and rebuilt from the log.
package index

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
)

// ChunkSuffix is the file name suffix of an index chunk; its name is the
// zero-padded first offset it covers, like a segment's.
const ChunkSuffix = ".kidx"

// chunkNameDigits is the width of a chunk name's offset (a segment's).
const chunkNameDigits = 20

// chunkName returns the file name of the chunk starting at from.
func chunkName(from int64) string {
	return fmt.Sprintf("%0*d%s", chunkNameDigits, from, ChunkSuffix)
}

// parseChunkName returns the start offset in name, false if name is not a
// chunk file name.
func parseChunkName(name string) (int64, bool) {
	digits, ok := strings.CutSuffix(name, ChunkSuffix)
	if !ok || len(digits) != chunkNameDigits {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	return n, err == nil
}

// The chunk file format, big-endian:
//
//	header (64 bytes):
//	  [0:4]   magic "MQKX"
//	  [4]     version (1)
//	  [5]     fan-out bits b (0..24): the table has 2^b buckets
//	  [6:8]   zero
//	  [8:16]  from: first offset covered
//	  [16:24] to: offset just past the last record covered
//	  [24:32] segment: start offset of the segment the range lies in
//	  [32:40] min id, [40:48] max id of the records covered (0, 0: none)
//	  [48:52] n: number of entries
//	  [52:56] CRC32-C of header bytes [0:52] then everything after the header
//	  [56:64] zero
//	fan-out: 2^b + 1 uint32, fan[i] the index of bucket i's first entry
//	  (fan[0] = 0, fan[2^b] = n, never decreasing)
//	entries: n x [uint32 hash][uint32 offset - from], ascending
//
// A hash's bucket is its top b bits. Key hashes have the top bit clear and
// id hashes have it set: the two never share an entry.
const (
	headerSize   = 64
	entrySize    = 8
	chunkVersion = 1
	maxFanBits   = 24
)

var (
	chunkMagic = [4]byte{'M', 'Q', 'K', 'X'}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// ErrBadChunk means a chunk file is not a valid chunk: short, a wrong
// magic, version or checksum, or a table or entry out of order or range.
var ErrBadChunk = errors.New("index: bad chunk file")

// entry is one indexed record: its hash and its offset from the chunk's
// start.
type entry struct {
	hash uint32
	rel  uint32
}

// chunkHeader is a chunk's header.
type chunkHeader struct {
	bits           uint8
	from, to, seg  int64
	minID, maxID   int64
	n              uint32
	crc            uint32
	validatedBytes int64 // the file's size, as the header implies it
}

// KeyHash is the hash a key is indexed under (top bit clear).
func KeyHash(key []byte) uint32 {
	h := fnv.New32a()
	_, _ = h.Write(key)
	return h.Sum32() & 0x7FFFFFFF
}

// IDHash is the hash a message id is indexed under (top bit set).
func IDHash(id int64) uint32 {
	x := uint64(id)
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return uint32(x) | 0x80000000
}

// fanBits returns the fan-out bits for n entries: about 8 entries a bucket.
func fanBits(n int) uint8 {
	b := uint8(0)
	for b < maxFanBits && (1<<b)*8 < n {
		b++
	}
	return b
}

// encodeChunk returns the file bytes of a chunk of ents (sorted here).
func encodeChunk(h chunkHeader, ents []entry) []byte {
	sortEntries(ents)
	bits := fanBits(len(ents))
	buckets := 1 << bits
	size := headerSize + 4*(buckets+1) + entrySize*len(ents)
	b := make([]byte, size)
	copy(b[0:4], chunkMagic[:])
	b[4] = chunkVersion
	b[5] = bits
	binary.BigEndian.PutUint64(b[8:], uint64(h.from))
	binary.BigEndian.PutUint64(b[16:], uint64(h.to))
	binary.BigEndian.PutUint64(b[24:], uint64(h.seg))
	binary.BigEndian.PutUint64(b[32:], uint64(h.minID))
	binary.BigEndian.PutUint64(b[40:], uint64(h.maxID))
	binary.BigEndian.PutUint32(b[48:], uint32(len(ents)))
	fan := b[headerSize:]
	ep := headerSize + 4*(buckets+1)
	k := 0
	for i := 0; i < buckets; i++ {
		for k < len(ents) && bucketOf(ents[k].hash, bits) <= uint32(i) {
			k++
		}
		binary.BigEndian.PutUint32(fan[4*(i+1):], uint32(k))
	}
	for i, e := range ents {
		binary.BigEndian.PutUint32(b[ep+entrySize*i:], e.hash)
		binary.BigEndian.PutUint32(b[ep+entrySize*i+4:], e.rel)
	}
	binary.BigEndian.PutUint32(b[52:], chunkCRC(b))
	return b
}

// sortEntries sorts ents by hash, then rel. The indexer adds entries in
// offset order (rel never falls), so a stable sort by hash alone is
// enough: a radix sort, four passes of a byte each (a pass whose byte
// all entries share is skipped), several times cheaper than a comparison
// sort (which was 3% of a broker's CPU at one partition, perf). Entries
// not in rel order, and few entries, take the comparison sort.
func sortEntries(ents []entry) {
	if len(ents) < radixMin || !slices.IsSortedFunc(ents, func(a, b entry) int { return cmp.Compare(a.rel, b.rel) }) {
		slices.SortFunc(ents, compareEntries)
		return
	}
	src, dst := ents, make([]entry, len(ents))
	for shift := 0; shift < 32; shift += 8 {
		var count [256]int
		for _, e := range src {
			count[byte(e.hash>>shift)]++
		}
		if count[byte(src[0].hash>>shift)] == len(src) {
			continue // every entry has this byte
		}
		pos := 0
		for i, c := range count {
			count[i] = pos
			pos += c
		}
		for _, e := range src {
			d := byte(e.hash >> shift)
			dst[count[d]] = e
			count[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &ents[0] {
		copy(ents, src)
	}
}

// radixMin is the fewest entries sortEntries radix-sorts.
const radixMin = 256

// compareEntries orders entries by hash, then rel.
func compareEntries(a, b entry) int {
	if c := cmp.Compare(a.hash, b.hash); c != 0 {
		return c
	}
	return cmp.Compare(a.rel, b.rel)
}

// bucketOf returns hash's bucket in a table of 2^bits buckets.
func bucketOf(hash uint32, bits uint8) uint32 {
	if bits == 0 {
		return 0
	}
	return hash >> (32 - bits)
}

// chunkCRC is the checksum of file b (header field excluded).
func chunkCRC(b []byte) uint32 {
	c := crc32.Update(0, castagnoli, b[:52])
	return crc32.Update(c, castagnoli, b[headerSize:])
}

// parseHeader decodes and checks a chunk's header (not its checksum).
func parseHeader(b []byte) (chunkHeader, error) {
	if len(b) < headerSize {
		return chunkHeader{}, fmt.Errorf("%w: %d bytes, shorter than its header", ErrBadChunk, len(b))
	}
	if [4]byte(b[0:4]) != chunkMagic {
		return chunkHeader{}, fmt.Errorf("%w: magic %q", ErrBadChunk, b[0:4])
	}
	if b[4] != chunkVersion {
		return chunkHeader{}, fmt.Errorf("%w: version %d", ErrBadChunk, b[4])
	}
	h := chunkHeader{
		bits:  b[5],
		from:  int64(binary.BigEndian.Uint64(b[8:])),
		to:    int64(binary.BigEndian.Uint64(b[16:])),
		seg:   int64(binary.BigEndian.Uint64(b[24:])),
		minID: int64(binary.BigEndian.Uint64(b[32:])),
		maxID: int64(binary.BigEndian.Uint64(b[40:])),
		n:     binary.BigEndian.Uint32(b[48:]),
		crc:   binary.BigEndian.Uint32(b[52:]),
	}
	switch {
	case b[6] != 0 || b[7] != 0 || binary.BigEndian.Uint64(b[56:]) != 0:
		return chunkHeader{}, fmt.Errorf("%w: reserved header bytes set", ErrBadChunk)
	case h.bits > maxFanBits:
		return chunkHeader{}, fmt.Errorf("%w: fan-out bits %d", ErrBadChunk, h.bits)
	case h.seg < 0 || h.from < h.seg || h.to < h.from || h.to-h.from > 1<<32:
		return chunkHeader{}, fmt.Errorf("%w: range %d..%d in segment %d", ErrBadChunk, h.from, h.to, h.seg)
	case h.n > 1<<28:
		return chunkHeader{}, fmt.Errorf("%w: %d entries", ErrBadChunk, h.n)
	}
	h.validatedBytes = headerSize + 4*(int64(1)<<h.bits+1) + entrySize*int64(h.n)
	return h, nil
}

// parseChunk checks a whole chunk file: header, size, checksum, fan-out
// table and entry order and range. It returns the header and the
// entries' bytes.
func parseChunk(b []byte) (chunkHeader, error) {
	h, err := parseHeader(b)
	if err != nil {
		return h, err
	}
	if int64(len(b)) != h.validatedBytes {
		return h, fmt.Errorf("%w: %d bytes, its header says %d", ErrBadChunk, len(b), h.validatedBytes)
	}
	if c := chunkCRC(b); c != h.crc {
		return h, fmt.Errorf("%w: checksum %08x, header says %08x", ErrBadChunk, c, h.crc)
	}
	buckets := 1 << h.bits
	fan := b[headerSize : headerSize+4*(buckets+1)]
	ents := b[headerSize+4*(buckets+1):]
	prev := uint32(0)
	if binary.BigEndian.Uint32(fan) != 0 || binary.BigEndian.Uint32(fan[4*buckets:]) != h.n {
		return h, fmt.Errorf("%w: fan-out table ends", ErrBadChunk)
	}
	for i := 0; i <= buckets; i++ {
		v := binary.BigEndian.Uint32(fan[4*i:])
		if v < prev || v > h.n {
			return h, fmt.Errorf("%w: fan-out table at bucket %d", ErrBadChunk, i)
		}
		for k := prev; k < v; k++ {
			hash := binary.BigEndian.Uint32(ents[entrySize*k:])
			if bucketOf(hash, h.bits) != uint32(i-1) {
				return h, fmt.Errorf("%w: entry %d in the wrong bucket", ErrBadChunk, k)
			}
		}
		prev = v
	}
	var last entry
	for k := uint32(0); k < h.n; k++ {
		e := entry{binary.BigEndian.Uint32(ents[entrySize*k:]), binary.BigEndian.Uint32(ents[entrySize*k+4:])}
		if k > 0 && (e.hash < last.hash || (e.hash == last.hash && e.rel <= last.rel)) {
			return h, fmt.Errorf("%w: entry %d out of order", ErrBadChunk, k)
		}
		if int64(e.rel) >= h.to-h.from {
			return h, fmt.Errorf("%w: entry %d past the chunk's range", ErrBadChunk, k)
		}
		last = e
	}
	return h, nil
}

// candidates returns the offsets of the entries of hash in a valid chunk
// file read through readAt (two reads: the bucket's bounds, its entries).
func candidates(readAt func(b []byte, off int64) (int, error), h chunkHeader, hash uint32) ([]int64, error) {
	bk := int64(bucketOf(hash, h.bits))
	var fb [8]byte
	if _, err := readAt(fb[:], headerSize+4*bk); err != nil {
		return nil, err
	}
	lo, hi := binary.BigEndian.Uint32(fb[:]), binary.BigEndian.Uint32(fb[4:])
	if hi < lo || hi > h.n {
		return nil, fmt.Errorf("%w: fan-out table at bucket %d", ErrBadChunk, bk)
	}
	if hi == lo {
		return nil, nil
	}
	eb := make([]byte, entrySize*int(hi-lo))
	if _, err := readAt(eb, headerSize+4*(int64(1)<<h.bits+1)+entrySize*int64(lo)); err != nil {
		return nil, err
	}
	var out []int64
	for k := 0; k < len(eb); k += entrySize {
		if binary.BigEndian.Uint32(eb[k:]) == hash {
			out = append(out, h.from+int64(binary.BigEndian.Uint32(eb[k+4:])))
		}
	}
	return out, nil
}
