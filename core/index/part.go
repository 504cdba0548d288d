package index

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
)

// DefaultMaxEntries is the most entries a chunk holds (a message with a
// key has two, one without one): 1 Mi entries, 8 MiB of entries in the
// file and in memory while the chunk is the partition's open one.
const DefaultMaxEntries = 1 << 20

// maxChunkSpan bounds a chunk's range of offsets (an entry's offset is a
// uint32 from the chunk's start).
const maxChunkSpan = 1 << 31

// readSize is how much of the log the indexer and a lookup's scans read
// at a time.
const readSize = 1 << 20

// Options configures a partition's index.
type Options struct {
	// MaxEntries bounds a chunk; default DefaultMaxEntries.
	MaxEntries int
	// MaxMessageSize is the largest record data length the log holds;
	// default message.DefaultMaxMessageSize.
	MaxMessageSize int
	// Logf receives rebuilds and damage; nil discards them.
	Logf func(format string, args ...any)
}

// chunk is a sealed chunk file.
type chunk struct {
	hdr  chunkHeader
	path string
	// state: chunkUnchecked until its whole file was read and checked
	// (validate), then chunkValid or chunkBad.
	state atomic.Int32
	vmu   sync.Mutex // serialises validate
}

const (
	chunkUnchecked = iota
	chunkValid
	chunkBad
)

// open is the partition's chunk still in memory: the records indexed
// from its from to the partition's indexed mark.
type open struct {
	started      bool
	from, seg    int64
	ents         []entry
	minID, maxID int64
}

// Part is the index of one partition log. The indexer (Advance) follows
// the log; Lookup may run concurrently with it.
type Part struct {
	dir     string
	log     *store.Log
	maxEnts int
	maxMsg  int
	logf    func(format string, args ...any)

	advMu sync.Mutex // serialises Advance and Close

	mu      sync.Mutex // guards what follows
	chunks  []*chunk   // sealed, ascending, tiling [first from, last to)
	open    open
	indexed int64     // the log is indexed below this offset
	stopped error     // indexing stopped at indexed (a record that does not parse, a failed write)
	retryAt time.Time // when indexing tries again after stopped
	cuts    int64     // the log's Cuts count the index follows
	closed  bool
}

// Open loads the index of log l in dir: the chunk files that tile the
// log's offsets from its min offset onwards (headers only; each file is
// checked in full by the indexer before it is trusted, or by a lookup
// that needs it first). Chunk files that do not fit (below the min
// offset, past the log's end, after a gap) are removed.
func Open(dir string, l *store.Log, opts Options) (*Part, error) {
	p := &Part{dir: dir, log: l, maxEnts: opts.MaxEntries, maxMsg: opts.MaxMessageSize, logf: opts.Logf}
	if p.maxEnts <= 0 {
		p.maxEnts = DefaultMaxEntries
	}
	if p.maxEnts < 2 {
		p.maxEnts = 2
	}
	if p.maxMsg <= 0 {
		p.maxMsg = message.DefaultMaxMessageSize
	}
	if p.logf == nil {
		p.logf = func(string, ...any) {}
	}
	// The log's open listed the directory: its listing is used when it
	// is of this directory (no chunk file is written before Open).
	ents := l.TakeListing()
	if ents == nil || filepath.Clean(dir) != filepath.Clean(l.Dir()) {
		var err error
		if ents, err = os.ReadDir(dir); err != nil {
			return nil, fmt.Errorf("index: list %s: %w", dir, err)
		}
	}
	var found []*chunk
	for _, e := range ents {
		name := e.Name()
		if t, ok := cutTmp(name); ok {
			if _, ok := parseChunkName(t); ok {
				_ = os.Remove(filepath.Join(dir, name)) // an interrupted seal
			}
			continue
		}
		from, ok := parseChunkName(name)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, name)
		h, err := readHeader(path)
		if err != nil || h.from != from {
			p.logf("index %s: %s is damaged (%v): removed, its range is indexed again", dir, name, err)
			_ = os.Remove(path)
			continue
		}
		found = append(found, &chunk{hdr: h, path: path})
	}
	slices.SortFunc(found, func(a, b *chunk) int { return cmp.Compare(a.hdr.from, b.hdr.from) })
	min, max := l.MinOffset(), l.MaxOffset()
	next := min
	for _, c := range found {
		switch {
		case c.hdr.to <= min:
			_ = os.Remove(c.path) // its segment is gone (retention)
		case c.hdr.from == next && c.hdr.to <= max:
			p.chunks = append(p.chunks, c)
			next = c.hdr.to
		default:
			p.logf("index %s: %s does not continue the index at offset %d: removed, its range is indexed again", dir, filepath.Base(c.path), next)
			_ = os.Remove(c.path)
		}
	}
	p.indexed = next
	p.cuts, _ = l.Cuts()
	return p, nil
}

const tmpSuffix = ".tmp"

func cutTmp(name string) (string, bool) {
	if len(name) > len(tmpSuffix) && name[len(name)-len(tmpSuffix):] == tmpSuffix {
		return name[:len(name)-len(tmpSuffix)], true
	}
	return "", false
}

// readHeader reads and checks a chunk file's header and its size.
func readHeader(path string) (chunkHeader, error) {
	f, err := os.Open(path)
	if err != nil {
		return chunkHeader{}, err
	}
	defer f.Close()
	var b [headerSize]byte
	if _, err := io.ReadFull(f, b[:]); err != nil {
		return chunkHeader{}, fmt.Errorf("%w: %v", ErrBadChunk, err)
	}
	h, err := parseHeader(b[:])
	if err != nil {
		return h, err
	}
	fi, err := f.Stat()
	if err != nil {
		return h, err
	}
	if fi.Size() != h.validatedBytes {
		return h, fmt.Errorf("%w: %d bytes, its header says %d", ErrBadChunk, fi.Size(), h.validatedBytes)
	}
	return h, nil
}

// validate reads c's whole file and checks it, once.
func (p *Part) validate(c *chunk) bool {
	if s := c.state.Load(); s != chunkUnchecked {
		return s == chunkValid
	}
	c.vmu.Lock()
	defer c.vmu.Unlock()
	if s := c.state.Load(); s != chunkUnchecked {
		return s == chunkValid
	}
	b, err := os.ReadFile(c.path)
	if err == nil {
		var h chunkHeader
		h, err = parseChunk(b)
		if err == nil && (h.from != c.hdr.from || h.to != c.hdr.to) {
			err = fmt.Errorf("%w: header changed", ErrBadChunk)
		}
	}
	if err != nil {
		p.logf("index %s: %s is damaged (%v): lookups scan its range of the log until it is rebuilt", p.dir, filepath.Base(c.path), err)
		c.state.Store(chunkBad)
		return false
	}
	c.state.Store(chunkValid)
	return true
}

// Indexed returns the offset below which the log is indexed.
func (p *Part) Indexed() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.indexed
}

// Stats is a partition index's size.
type Stats struct {
	Chunks  int   // sealed chunk files
	Bytes   int64 // their bytes
	Entries int64 // entries, sealed and open
	Indexed int64 // the log is indexed below this offset
	Lag     int64 // bytes of the log not indexed yet
}

// Stats returns the index's size.
func (p *Part) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Stats{Chunks: len(p.chunks), Indexed: p.indexed, Entries: int64(len(p.open.ents))}
	for _, c := range p.chunks {
		s.Bytes += c.hdr.validatedBytes
		s.Entries += int64(c.hdr.n)
	}
	s.Lag = max(0, p.log.MaxOffset()-p.indexed)
	return s
}

// Advance indexes up to budget bytes of the log past the indexed mark,
// checks (and rebuilds) chunk files not checked yet, and follows
// retention and truncation. It returns the bytes of the log it indexed.
func (p *Part) Advance(budget int64) (int64, error) {
	p.advMu.Lock()
	defer p.advMu.Unlock()
	if p.isClosed() {
		return 0, nil
	}
	p.follow()
	if err := p.checkChunks(); err != nil {
		return 0, err
	}
	return p.index(budget)
}

func (p *Part) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// follow drops what retention and truncation took from the log.
func (p *Part) follow() {
	cuts, cutFrom := p.log.Cuts()
	min, max := p.log.MinOffset(), p.log.MaxOffset()
	p.mu.Lock()
	cut := max // the index must not go past it
	if cuts != p.cuts {
		cut = cutFrom
		if cuts != p.cuts+1 { // more than one cut: where the lowest was is unknown
			cut = min
		}
		p.cuts = cuts
	}
	var gone []*chunk
	k := 0
	for k < len(p.chunks) && p.chunks[k].hdr.to <= min {
		k++
	}
	gone = append(gone, p.chunks[:k]...)
	p.chunks = slices.Delete(p.chunks, 0, k)
	if cut < p.indexed { // truncated
		k = len(p.chunks)
		for k > 0 && p.chunks[k-1].hdr.to > cut {
			k--
		}
		gone = append(gone, p.chunks[k:]...)
		p.chunks = p.chunks[:k]
		p.open = open{ents: p.open.ents[:0]}
		p.indexed = min
		if k > 0 {
			p.indexed = p.chunks[k-1].hdr.to
		}
		p.stopped = nil
	}
	if p.open.started && p.open.from < min {
		p.open = open{ents: p.open.ents[:0]}
	}
	if p.indexed < min || (len(p.chunks) == 0 && !p.open.started && p.indexed != min) {
		p.indexed = min
		p.stopped = nil
	}
	p.mu.Unlock()
	for _, c := range gone {
		if err := os.Remove(c.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			p.logf("index %s: remove %s: %v", p.dir, filepath.Base(c.path), err)
		}
	}
}

// checkChunks validates the first chunk not checked yet (one a pass, so
// that a restart's checks do not hold up the indexing of new records) and
// rebuilds the bad ones.
func (p *Part) checkChunks() error {
	p.mu.Lock()
	cs := slices.Clone(p.chunks)
	p.mu.Unlock()
	checked := false
	for _, c := range cs {
		switch c.state.Load() {
		case chunkValid:
			continue
		case chunkUnchecked:
			if checked {
				continue
			}
			checked = true
		}
		if p.validate(c) {
			continue
		}
		nc, err := p.rebuild(c.hdr)
		if err != nil {
			p.logf("index %s: rebuild of %s: %v", p.dir, filepath.Base(c.path), err)
			continue
		}
		p.mu.Lock()
		if i := slices.Index(p.chunks, c); i >= 0 {
			p.chunks[i] = nc
		}
		p.mu.Unlock()
		p.logf("index %s: rebuilt %s from the log (offsets %d..%d)", p.dir, filepath.Base(c.path), c.hdr.from, c.hdr.to)
	}
	return nil
}

// rebuild indexes [h.from, h.to) of the log again into a new chunk file.
func (p *Part) rebuild(h chunkHeader) (*chunk, error) {
	var o open
	o.started, o.from, o.seg = true, h.from, h.seg
	buf := make([]byte, 0, readSize)
	cur := h.from
	for cur < h.to {
		recs, next, err := p.readRecords(cur, h.to, &buf, nil, false)
		if err != nil {
			return nil, err
		}
		for i := range recs {
			o.add(&recs[i], recs[i].Offset-h.from)
		}
		cur = next
	}
	return p.writeChunk(&o, h.to)
}

// add indexes rec, at rel from the chunk's start.
func (o *open) add(rec *message.Record, rel int64) {
	o.ents = append(o.ents, entry{IDHash(rec.ID), uint32(rel)})
	if k, ok := RecordKey(rec.Flag, rec.Data); ok {
		o.ents = append(o.ents, entry{KeyHash(k), uint32(rel)})
	}
	if o.minID == 0 || rec.ID < o.minID {
		o.minID = rec.ID
	}
	if rec.ID > o.maxID {
		o.maxID = rec.ID
	}
}

// readRecords reads the whole records of the log from cur (a record
// boundary) up to at most end, one read's worth, appending them to
// recs[:0]; next is where the next read starts. Records alias *buf, or
// the log's in-memory tail (read-only, never reused) when they are there. With
// verify, each record's checksum is checked (a lookup's scan); without,
// only its framing (the indexer: the log checked the records when they
// were appended or recovered, and every entry is checked at lookup).
func (p *Part) readRecords(cur, end int64, buf *[]byte, recs []message.Record, verify bool) (_ []message.Record, next int64, err error) {
	recs = recs[:0]
	size := readSize
	for {
		want := int(min(int64(size), end-cur))
		v, err := p.log.Read(cur, want)
		if err != nil {
			return recs, cur, err
		}
		// A tail still in memory is parsed where it lies, not copied:
		// its bytes are read-only and never reused, so records may
		// alias them after the release. *buf must not become them (it
		// is appended to).
		b := v.Mem
		if b == nil {
			b, err = v.ReadAll((*buf)[:0])
			*buf = b
		}
		v.Release()
		if err != nil {
			return recs, cur, err
		}
		pos := 0
		for {
			r, n, err := p.parse(b[pos:], verify)
			if err != nil {
				if errors.Is(err, message.ErrShortRecord) {
					break
				}
				if len(recs) == 0 {
					return recs, cur, fmt.Errorf("offset %d: %w", cur+int64(pos), err)
				}
				break // report it at the next read
			}
			r.Offset = cur + int64(pos)
			recs = append(recs, r)
			pos += n
		}
		if len(recs) > 0 {
			return recs, cur + int64(pos), nil
		}
		// The record at cur is longer than what was read, or cut by the
		// segment's end (a record never spans two segments).
		if len(b) < want || size >= p.maxMsg+message.HeaderSize {
			return recs, cur, fmt.Errorf("offset %d: %w", cur, message.ErrCorruptRecord)
		}
		size = min(size*4, p.maxMsg+message.HeaderSize)
	}
}

// parse decodes the record at the start of b: message.ParseRecord with
// verify, else its framing only (length in range, the whole record there).
func (p *Part) parse(b []byte, verify bool) (message.Record, int, error) {
	if verify {
		return message.ParseRecord(b, p.maxMsg)
	}
	if len(b) < message.HeaderSize {
		return message.Record{}, 0, message.ErrShortRecord
	}
	l := int32(binary.BigEndian.Uint32(b))
	if l < 0 || int(l) > p.maxMsg {
		return message.Record{}, 0, fmt.Errorf("%w: length %d", message.ErrCorruptRecord, l)
	}
	n := message.HeaderSize + int(l)
	if len(b) < n {
		return message.Record{}, 0, message.ErrShortRecord
	}
	return message.Record{
		CRC:  binary.BigEndian.Uint32(b[4:]),
		ID:   int64(binary.BigEndian.Uint64(b[8:])),
		Flag: int32(binary.BigEndian.Uint32(b[16:])),
		Data: b[message.HeaderSize:n:n],
	}, n, nil
}

// index indexes up to budget bytes past the indexed mark.
func (p *Part) index(budget int64) (int64, error) {
	p.mu.Lock()
	cur, stopped, retryAt := p.indexed, p.stopped, p.retryAt
	if stopped != nil && !time.Now().Before(retryAt) {
		p.stopped = nil // try again
	}
	p.mu.Unlock()
	if stopped != nil && time.Now().Before(retryAt) {
		return 0, nil
	}
	n, err := p.indexFrom(cur, budget)
	if err != nil {
		p.mu.Lock()
		p.stopped, p.retryAt = err, time.Now().Add(stopRetry)
		p.mu.Unlock()
		p.logf("index %s: indexing stopped at offset %d (%v): lookups scan the log from there; trying again in %v", p.dir, cur+n, err, stopRetry)
	}
	return n, nil
}

// readBuf is the indexer's read buffer and the records of a read, reused
// across passes and partitions (a pass of many partitions allocated a
// buffer each).
type readBuf struct {
	b    []byte
	recs []message.Record
}

var readBufs = sync.Pool{New: func() any { return &readBuf{b: make([]byte, 0, readSize)} }}

// stopRetry is how long indexing waits after it stopped on an error.
var stopRetry = 30 * time.Second

// indexFrom indexes up to budget bytes from cur, the indexed mark.
func (p *Part) indexFrom(cur, budget int64) (int64, error) {
	if cur >= p.log.MaxOffset() {
		return 0, nil
	}
	rb := readBufs.Get().(*readBuf)
	buf := rb.b
	defer func() {
		if cap(buf) <= readSize {
			rb.b = buf[:0]
		}
		clear(rb.recs[:cap(rb.recs)]) // drop the references to buf
		readBufs.Put(rb)
	}()
	start := cur
	var batch open
	for cur-start < budget {
		end := p.log.MaxOffset()
		if cur >= end {
			break
		}
		seg := p.log.NearestOffset(cur)
		p.mu.Lock()
		started, oseg, from, n := p.open.started, p.open.seg, p.open.from, len(p.open.ents)
		p.mu.Unlock()
		if started && oseg != seg {
			if err := p.seal(cur); err != nil {
				return cur - start, err
			}
			started = false
		}
		if !started {
			p.restart(cur, seg)
			from, n = cur, 0
		}
		var recs []message.Record
		var next int64
		var err error
		recs, next, err = p.readRecords(cur, end, &buf, rb.recs, false)
		rb.recs = recs
		if err != nil {
			if errors.Is(err, store.ErrNoData) || errors.Is(err, store.ErrBelowMin) {
				break // truncated or retained meanwhile: follow sees it next time
			}
			return cur - start, err
		}
		batch = open{ents: batch.ents[:0]}
		for i := range recs {
			r := &recs[i]
			if n+len(batch.ents)+2 > p.maxEnts || r.Offset+int64(r.Size())-from > maxChunkSpan {
				p.appendOpen(&batch, r.Offset)
				batch = open{ents: batch.ents[:0]}
				if err := p.seal(r.Offset); err != nil {
					return cur - start, err
				}
				p.restart(r.Offset, seg)
				from, n = r.Offset, 0
			}
			batch.add(r, r.Offset-from)
		}
		p.appendOpen(&batch, next)
		cur = next
	}
	return cur - start, nil
}

// restart starts the open chunk at from, in the segment starting at seg.
func (p *Part) restart(from, seg int64) {
	p.mu.Lock()
	p.open = open{started: true, from: from, seg: seg, ents: p.open.ents[:0]}
	p.mu.Unlock()
}

// appendOpen adds b's entries to the open chunk and moves the indexed
// mark to indexed.
func (p *Part) appendOpen(b *open, indexed int64) {
	p.mu.Lock()
	o := &p.open
	o.ents = append(o.ents, b.ents...)
	if b.minID != 0 && (o.minID == 0 || b.minID < o.minID) {
		o.minID = b.minID
	}
	o.maxID = max(o.maxID, b.maxID)
	p.indexed = indexed
	p.mu.Unlock()
}

// seal writes the open chunk, which ends at to, to its file.
func (p *Part) seal(to int64) error {
	p.mu.Lock()
	o := p.open
	o.ents = slices.Clone(o.ents)
	p.mu.Unlock()
	if !o.started || to <= o.from {
		return nil
	}
	c, err := p.writeChunk(&o, to)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.chunks = append(p.chunks, c)
	p.open = open{ents: p.open.ents[:0]}
	p.mu.Unlock()
	return nil
}

// writeChunk writes o, ending at to, to its chunk file (a temporary file
// renamed into place; not fsynced: a chunk lost or torn by a power cut
// fails its check and is rebuilt from the log).
func (p *Part) writeChunk(o *open, to int64) (*chunk, error) {
	h := chunkHeader{from: o.from, to: to, seg: o.seg, minID: o.minID, maxID: o.maxID}
	b := encodeChunk(h, o.ents)
	path := filepath.Join(p.dir, chunkName(o.from))
	if err := os.WriteFile(path+tmpSuffix, b, 0o644); err != nil {
		_ = os.Remove(path + tmpSuffix)
		return nil, fmt.Errorf("index: write %s: %w", filepath.Base(path), err)
	}
	if err := os.Rename(path+tmpSuffix, path); err != nil {
		_ = os.Remove(path + tmpSuffix)
		return nil, fmt.Errorf("index: write %s: %w", filepath.Base(path), err)
	}
	hdr, err := parseHeader(b)
	if err != nil {
		return nil, err
	}
	c := &chunk{hdr: hdr, path: path}
	c.state.Store(chunkValid)
	return c, nil
}

// OpenEntries returns the number of entries of the open chunk (memory).
func (p *Part) OpenEntries() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.open.ents)
}

// SealOpen writes the open chunk to its file now (the Indexer's bound on
// the memory of the open chunks of all partitions).
func (p *Part) SealOpen() error {
	p.advMu.Lock()
	defer p.advMu.Unlock()
	p.mu.Lock()
	to, closed := p.indexed, p.closed
	p.mu.Unlock()
	if closed {
		return nil
	}
	return p.seal(to)
}

// Close seals the open chunk, so that a restart need not index its
// records again. The log must still be open.
func (p *Part) Close() error {
	p.advMu.Lock()
	defer p.advMu.Unlock()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	to := p.indexed
	p.mu.Unlock()
	return p.seal(to)
}

// RecordKey returns the key in a record's data (flag bit 1's properties
// block), without checking the rest of the block.
func RecordKey(flag int32, data []byte) ([]byte, bool) {
	if flag&message.FlagHasProperties == 0 {
		return nil, false
	}
	b := data
	if flag&message.FlagHasAttribute != 0 {
		if len(b) < 4 {
			return nil, false
		}
		n := binary.BigEndian.Uint32(b)
		if uint64(n) > uint64(len(b)-4) {
			return nil, false
		}
		b = b[4+n:]
	}
	if len(b) < 4 {
		return nil, false
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, false
	}
	b = b[4 : 4+n]
	if len(b) < 2 || b[0] != message.PropsVersion || b[1]&1 == 0 {
		return nil, false
	}
	k, w := binary.Uvarint(b[2:])
	if w <= 0 || k > uint64(len(b)-2-w) {
		return nil, false
	}
	return b[2+w : 2+w+int(k)], true
}
