package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/metaq-go/metaq/sdk/message"
)

// scanBufferSize is the read buffer used to scan segments, in bytes.
const scanBufferSize = 1 << 20

// scanReaders recycles the read buffers of recovery scans and background
// counts: a new one per Open costs a megabyte of zeroed memory per
// partition, which dominated the start of a broker with 1000 partitions.
var scanReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, scanBufferSize) }}

func getScanReader() *bufio.Reader { return scanReaders.Get().(*bufio.Reader) }

func putScanReader(br *bufio.Reader) {
	br.Reset(nil) // drop the segment file
	scanReaders.Put(br)
}

// scrubPool runs the background counts (countSealed) of every log of the
// process on at most GOMAXPROCS (up to 4) goroutines, in the order the
// logs opened: after a restart every partition has one, and a thousand
// concurrent walks (or a thousand goroutines waiting for their turn) only
// compete for the CPU and the disk with the start and with the traffic.
type scrubPool struct {
	mu      sync.Mutex
	queue   []*Log // logs whose count has not started
	running int    // worker goroutines
}

var scrubs scrubPool

// add queues l's count (l.toCount, with l.wg already raised for it).
func (p *scrubPool) add(l *Log) {
	p.mu.Lock()
	p.queue = append(p.queue, l)
	start := p.running < max(1, min(runtime.GOMAXPROCS(0), 4))
	if start {
		p.running++
	}
	p.mu.Unlock()
	if start {
		go p.work()
	}
}

func (p *scrubPool) work() {
	for {
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.running--
			p.mu.Unlock()
			return
		}
		l := p.queue[0]
		p.queue[0] = nil
		p.queue = p.queue[1:]
		segs := l.toCount
		l.toCount = nil
		p.mu.Unlock()
		l.countSealed(segs)
	}
}

// remove takes l out of the queue if its count has not started, and
// reports whether it did (the caller then owns l.toCount and l.wg's count).
func (p *scrubPool) remove(l *Log) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.Index(p.queue, l)
	if i < 0 {
		return false
	}
	p.queue = slices.Delete(p.queue, i, i+1)
	return true
}

// recover loads the segments of l.dir (see Open) and returns the sealed
// segments whose records still need counting, each with a reference held.
func (l *Log) recover() (toCount []*segment, err error) {
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, fmt.Errorf("store: list %s: %w", l.dir, err)
	}
	l.listing.Store(&ents)
	var starts []int64
	hasMark := false
	for _, e := range ents {
		if start, ok := parseSegmentName(e.Name()); ok && e.Type().IsRegular() {
			starts = append(starts, start)
		} else if e.Name() == FlushMarkName {
			hasMark = true
		}
	}
	slices.Sort(starts)
	mark := int64(-1)
	if l.j == nil {
		// Not journaled: its flush mark tells a torn tail from damage
		// (flushmark.go). Opened before the directory's fsync below.
		mark = l.openFlushMark()
	} else if hasMark {
		// Only when listed: no unlink attempt per journaled partition at every open.
		if err := l.dropFlushMark(); err != nil {
			return nil, err
		}
	}

	if len(starts) == 0 {
		if err := l.resetFlushed(0); err != nil {
			return nil, err
		}
		seg, err := l.createSegment(0)
		if err != nil {
			return nil, err
		}
		l.segs = []*segment{seg}
		l.active = seg
		return nil, nil
	}

	var segs []*segment
	defer func() {
		if err != nil {
			for _, s := range segs {
				s.release()
			}
		}
	}()
	last := len(starts) - 1
	for i, start := range starts {
		path := filepath.Join(l.dir, segmentName(start))
		flag := os.O_RDONLY
		if i == last {
			flag = os.O_RDWR
		}
		f, err := os.OpenFile(path, flag, 0)
		if err != nil {
			return nil, fmt.Errorf("store: open segment: %w", err)
		}
		fi, err := f.Stat()
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("store: stat segment: %w", err)
		}
		seg := newSegment(start, path, f, fi.Size())
		seg.readAt = l.readAt
		segs = append(segs, seg)
		if i > 0 {
			prev := segs[i-1]
			if prev.end() != start {
				if mended, err := l.dropPastGap(prev, starts[i:]); err != nil || mended {
					if err != nil {
						return nil, err
					}
					for _, s := range segs {
						s.release()
					}
					segs = nil
					return l.recover() // the chain ends before the gap now
				}
				what := "gap"
				if prev.end() > start {
					what = "overlap"
				}
				return nil, fmt.Errorf("%w: %s (start %d, size %d, end %d) and %s (start %d): %s of %d bytes",
					ErrBrokenChain, prev.path, prev.start, prev.size.Load(), prev.end(), path, start, what, abs(start-prev.end()))
			}
		}
	}

	tail := segs[last]
	var buf []byte
	br := getScanReader()
	defer putScanReader(br)
	if l.j != nil && l.recovery == RecoverQuarantine {
		if t, ok := l.j.takeTrusted(l.jname); ok {
			tt, ok, err := l.recoverTrusted(br, segs, t, &buf) // restart.go
			if err != nil {
				return nil, err
			}
			if ok {
				return l.installTrusted(segs, tt), nil
			}
		}
	}
	res, err := scanSegment(br, tail, l.maxMsg, true, &buf, nil)
	if err == nil && res.good < tail.size.Load() && l.recovery == RecoverQuarantine {
		res, err = l.recoverDamage(br, tail, res, mark, &buf) // quarantine.go
	}
	if err != nil {
		return nil, err
	}
	if res.good < tail.size.Load() {
		if res, err = dropTornEmpty(br, tail, res, mark, l.maxMsg, &buf); err != nil {
			return nil, err
		}
		l.logf("store: %s: cutting last segment %s from %d to %d bytes (%d bytes, offsets %d..%d): %s",
			l.dir, filepath.Base(tail.path), tail.size.Load(), res.good, tail.size.Load()-res.good,
			tail.start+res.good, tail.end(), res.stop)
		if err := tail.f.Truncate(res.good); err != nil {
			return nil, fmt.Errorf("store: truncate %s: %w", tail.path, err)
		}
		tail.size.Store(res.good)
	}
	// Make the recovered tail durable before serving it: the bytes may be
	// unflushed writes of a process that crashed, and the cut must not be
	// undone by a power loss.
	if err := tail.f.Sync(); err != nil {
		return nil, fmt.Errorf("store: fsync %s: %w", tail.path, err)
	}
	if err := l.syncDir(); err != nil {
		return nil, err
	}
	if err := l.resetFlushed(tail.end()); err != nil { // everything before it is durable now
		return nil, err
	}
	tail.count.Store(res.count)
	tail.cidx.setReady(0, res.good, res.count, res.idx)
	l.msgCount.Store(res.count)
	l.lastID.Store(res.lastID)

	sealed := segs[:last]
	if res.count == 0 && len(sealed) > 0 {
		// An empty tail (a crash right after a roll): the highest id is the
		// last record of the previous segment. Walk its headers once.
		prev := sealed[len(sealed)-1]
		count, lastID, err := l.scrub(br, prev, &buf, nil) // verify.go
		if err != nil {
			return nil, err
		}
		prev.count.Store(count)
		l.msgCount.Add(count)
		l.lastID.Store(lastID)
		sealed = sealed[:len(sealed)-1]
	}
	l.installRecovered(segs, sealed)
	return slices.Clone(sealed), nil
}

// installTrusted installs segs as recovered by recoverTrusted and
// returns the segments the background count must scrub: the sealed ones,
// then the last one's prefix that the journal vouched for, which reads
// verify until the scrub has (verify.go).
func (l *Log) installTrusted(segs []*segment, tt trustedTail) []*segment {
	tail := segs[len(segs)-1]
	tail.count.Store(tt.count)
	tail.cidx.setReady(tt.prefix, tail.size.Load(), tt.count, tt.idx)
	l.msgCount.Store(tt.count)
	l.lastID.Store(tt.lastID)
	sealed := segs[:len(segs)-1]
	l.installRecovered(segs, sealed)
	toCount := slices.Clone(sealed)
	if tt.prefix > 0 {
		tail.integ.prefix.Store(tt.prefix)
		tail.acquire()
		tail.integ.unverified.Store(true)
		tail.uncounted = true
		toCount = append(toCount, tail)
	}
	return toCount
}

// installRecovered installs the recovered chain segs: its last segment becomes the
// active one and sealed (a prefix of segs) are marked unverified until
// countSealed has scrubbed them, each with a reference for it.
func (l *Log) installRecovered(segs, sealed []*segment) {
	tail := segs[len(segs)-1]
	l.segs = segs
	l.active = tail
	l.readable.Store(tail.end())
	l.minOffset.Store(segs[0].start)
	for _, s := range sealed {
		s.acquire()
		s.integ.unverified.Store(true) // until countSealed has scrubbed it
		s.uncounted = true
	}
}

// scanResult is the outcome of walking a segment's records.
type scanResult struct {
	good    int64  // bytes of whole valid records from the segment start
	count   int64  // records in [0, good)
	lastID  int64  // id of the last of them (0 if none)
	lastPos int64  // where the last of them starts (if count > 0)
	lastLen int64  // its data length
	stop    string // why the walk stopped before the end ("" if it did not)
	// idx are record-count index entries for [from, good), about every
	// countStep bytes, counting records from the scan's start (count.go).
	idx []countEntry
}

// errStopped means the scan was interrupted by stop.
var errStopped = errors.New("store: scan stopped")

// scanSegment walks seg's records from byte 0 with br (reset onto the
// file) and stops at the first record whose header is incomplete, whose
// length is negative or above maxMsg, that runs past the end, or (if
// verify) whose checksum does not match. Without verify the data is
// skipped unread. buf is scratch space. Read errors are returned: they are
// never mistaken for a torn record. A close of stop interrupts the walk
// with errStopped.
func scanSegment(br *bufio.Reader, seg *segment, maxMsg int, verify bool, buf *[]byte, stop <-chan struct{}) (scanResult, error) {
	return scanSegmentFrom(br, seg, 0, maxMsg, verify, buf, stop)
}

// scanSegmentFrom is scanSegment starting at byte from, which must be a
// record start; res.good is then a position in the file (from if the
// first record is invalid) and res.count counts from there. With verify,
// an all-zero header (a zero-filled tail: no record has id 0 and crc 0)
// is invalid too.
func scanSegmentFrom(br *bufio.Reader, seg *segment, from int64, maxMsg int, verify bool, buf *[]byte, stop <-chan struct{}) (scanResult, error) {
	return scanSegmentRange(br, seg, from, seg.scanEnd(), maxMsg, verify, buf, stop)
}

// scanSegmentRange is scanSegmentFrom over the bytes [from, size) of seg.
func scanSegmentRange(br *bufio.Reader, seg *segment, from, size int64, maxMsg int, verify bool, buf *[]byte, stop <-chan struct{}) (scanResult, error) {
	br.Reset(io.NewSectionReader(seg.reader(), from, size-from))
	res := scanResult{good: from}
	var hdr [message.HeaderSize]byte
	marks := newCountMarker(from)
	for pos := from; ; {
		res.idx = marks.mark(res.idx, pos, res.count)
		if stop != nil && res.count&1023 == 1023 {
			select {
			case <-stop:
				return res, errStopped
			default:
			}
		}
		if pos == size {
			return res, nil
		}
		if size-pos < message.HeaderSize {
			res.stop = fmt.Sprintf("%d bytes left, less than a record header", size-pos)
			return res, nil
		}
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return res, fmt.Errorf("store: read %s at %d: %w", seg.path, pos, err)
		}
		n := int64(int32(binary.BigEndian.Uint32(hdr[:])))
		switch {
		case n < 0 || n > int64(maxMsg):
			res.stop = fmt.Sprintf("record length %d out of range [0, %d]", n, maxMsg)
			return res, nil
		case pos+message.HeaderSize+n > size:
			res.stop = fmt.Sprintf("record of %d bytes runs past the end", message.HeaderSize+n)
			return res, nil
		case verify && zeroHeader(hdr[:]):
			res.stop = "zero-filled record header"
			return res, nil
		}
		var id int64
		if verify {
			need := message.HeaderSize + int(n)
			if cap(*buf) < need {
				*buf = make([]byte, need)
			}
			b := (*buf)[:need]
			copy(b, hdr[:])
			if _, err := io.ReadFull(br, b[message.HeaderSize:]); err != nil {
				return res, fmt.Errorf("store: read %s at %d: %w", seg.path, pos, err)
			}
			rec, _, err := message.ParseRecord(b, maxMsg)
			if err != nil {
				res.stop = err.Error()
				return res, nil
			}
			id = rec.ID
		} else {
			if _, err := br.Discard(int(n)); err != nil {
				return res, fmt.Errorf("store: read %s at %d: %w", seg.path, pos, err)
			}
			id = int64(binary.BigEndian.Uint64(hdr[8:]))
		}
		res.lastPos, res.lastLen = pos, n
		pos += message.HeaderSize + n
		res.good = pos
		res.count++
		res.lastID = id
	}
}

// dropTornEmpty moves the cut of a torn tail (res, a verifying scan from
// byte 0 that stopped before the end) back over the empty records just
// before it that lie at or past mark, the durable end (all of them when
// mark < 0: no mark says what was synced). An empty record is a bare
// header whose length and checksum are 0, and its checksum proves
// nothing: a header torn across a page boundary, its first page an
// earlier write-back (zeros from the header on) and the next page a later
// one, reads as such a record, with the id's low bytes and the flag of
// the record that was written there. Its "body" is the real record's data
// read as the next header, so it is always the last valid record before a
// torn tail. An empty record that was really sent and is cut with it was
// never synced: the loss threshold mode allows.
//
// Each record dropped is walked back from the last record-count index
// entry before it (at most countStep bytes), not from the segment's start:
// the count marker is deterministic, so the entries of that walk are
// those a whole walk would place there.
func dropTornEmpty(br *bufio.Reader, tail *segment, res scanResult, mark int64, maxMsg int, buf *[]byte) (scanResult, error) {
	stop := res.stop
	dropped := 0
	for res.count > 0 && res.lastLen == 0 && (mark < 0 || tail.start+res.lastPos >= mark) {
		dropped++
		keep, from, before := 0, int64(0), int64(0)
		for i, e := range res.idx {
			if e.pos < res.lastPos {
				keep, from, before = i+1, e.pos, e.n
			}
		}
		r, err := scanSegmentRange(br, tail, from, res.lastPos, maxMsg, true, buf, nil)
		if err != nil {
			return res, err
		}
		if r.good != res.lastPos {
			return res, fmt.Errorf("store: rescan of %s stopped at %d, not at %d where it stopped before (%s)", tail.path, r.good, res.lastPos, r.stop)
		}
		idx := res.idx[:keep]
		for _, e := range r.idx {
			idx = append(idx, countEntry{e.pos, before + e.n})
		}
		r.count += before
		r.idx = idx
		res = r
	}
	if dropped > 0 {
		res.stop = fmt.Sprintf("%s (and %d empty record(s) before it: a header torn at a page boundary reads as one)", stop, dropped)
	}
	return res, nil
}

// countSealed counts the records of the sealed segments found at Open, one
// after another, and adds them to the message count; scrubs runs it. It
// holds a reference on each segment in segs and releases it when done
// with it.
func (l *Log) countSealed(segs []*segment) {
	defer l.wg.Done()
	if l.scrubHook != nil {
		l.scrubHook()
	}
	defer func() {
		for _, s := range segs {
			s.release()
		}
	}()
	var buf []byte
	for len(segs) > 0 {
		s := segs[0]
		l.segMu.RLock()
		// Truncate may have cut a last segment's whole prefix: nothing is
		// left to verify or count.
		done := s.deleted || !s.uncounted && !s.integ.unverified.Load()
		l.segMu.RUnlock()
		if done {
			s.release()
			segs = segs[1:]
			continue
		}
		br := getScanReader()
		count, _, err := l.scrub(br, s, &buf, l.done) // verify.go: logs damage
		putScanReader(br)
		if errors.Is(err, errStopped) {
			return
		}
		if err != nil {
			l.logf("store: %s: counting %s: %v", l.dir, filepath.Base(s.path), err)
		}
		l.segMu.Lock()
		// Not if Truncate counted the segment meanwhile.
		if !s.deleted && s.uncounted {
			s.uncounted = false
			if s.count.Load() >= 0 {
				// The last segment's prefix (installTrusted): its count
				// already holds the records after the prefix and appends.
				s.count.Add(count)
			} else {
				s.count.Store(count)
			}
			l.msgCount.Add(count)
		}
		l.segMu.Unlock()
		s.release()
		segs = segs[1:]
	}
	l.counted.Store(true)
}

// createSegment creates the (empty) segment file starting at start and
// makes its directory entry durable. An empty file of that name, left by
// an earlier attempt whose directory fsync could not start, is reused. A
// failed directory fsync is a *syncError; other errors (ENOSPC, EMFILE,
// ...) leave nothing that needs undoing.
func (l *Log) createSegment(start int64) (*segment, error) {
	path := filepath.Join(l.dir, segmentName(start))
	f, err := l.openFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		f, err = l.openEmpty(path)
	}
	if err != nil {
		return nil, fmt.Errorf("store: create segment %s: %w", filepath.Base(path), err)
	}
	if err := l.syncDir(); err != nil {
		_ = f.Close()
		return nil, err
	}
	s := newSegment(start, path, f, 0)
	s.count.Store(0)
	s.cidx.setReady(0, 0, 0, nil)
	return s, nil
}

// openEmpty opens the existing segment file path for writing if it is
// empty.
func (l *Log) openEmpty(path string) (*os.File, error) {
	f, err := l.openFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && fi.Size() != 0 {
		err = fmt.Errorf("%w and holds %d bytes", fs.ErrExist, fi.Size())
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// syncDir fsyncs the log's directory so that entries created or removed
// in it are durable. A failure to open it is returned as is; a failed
// fsync as a *syncError.
func (l *Log) syncDir() error {
	d, err := l.openFile(l.dir, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("store: open dir for fsync: %w", err)
	}
	err = d.Sync()
	_ = d.Close() // read-only: the fsync's result is what counts
	if err != nil {
		return &syncError{fmt.Errorf("store: fsync dir %s: %w", l.dir, err)}
	}
	return nil
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// dropPastGap handles a chain that a power cut broke at a roll: the
// segment before a gap (prev) lost its unsynced end while the next
// segment's directory entry survived. If the journal vouches for every
// byte of the partition it holds (its trust point's end) before the gap,
// the segments from the gap on (later) hold only bytes written after the
// last durable journal round: never acknowledged, never readable. They are
// removed (one line says so) and mended is true; the rest of recovery
// cuts the new last segment's torn end as after any crash. Any other break
// (an overlap, a gap inside what the journal vouches for, a log without a
// journal or in truncate mode) is left for the chain check to refuse.
//
// A partition replayed by a restart that was killed before it registered
// again has a trust point too: the closed table of that restart's
// checkpoints carries its replayed end (noteTrusted).
//
// Without a trust point (no journal record names the partition: a new
// journal, a checkpoint of the format without register records, or a
// restart before whose replay did not write up to the partition's
// journaled end and left it out of its closed table), the later segments
// are removed only when every one is empty: a roll creates the next
// segment's file as soon as the journaled tail before it, held in memory
// until a checkpoint writes it, passes the threshold, so a crash before
// that round's journal write leaves the new, empty file behind a segment
// that never got the bytes.
// Removing empty files loses nothing; a later segment with bytes is left
// for the chain check to refuse.
func (l *Log) dropPastGap(prev *segment, later []int64) (mended bool, err error) {
	end := prev.end()
	if l.j == nil || l.recovery != RecoverQuarantine || end > later[0] {
		return false, nil
	}
	t, ok := l.j.peekTrusted(l.jname)
	if ok && t.end > end {
		return false, nil
	}
	if !ok {
		if empty, err := l.allEmpty(later); err != nil || !empty {
			return false, err
		}
	}
	for _, start := range later {
		path := filepath.Join(l.dir, segmentName(start))
		if err := os.Remove(path); err != nil {
			return false, fmt.Errorf("store: remove %s: %w", path, err)
		}
	}
	if err := l.syncDir(); err != nil {
		return false, err
	}
	if !ok {
		l.logf("store: %s: removed %d empty segment(s) from %s on: %s ends at %d, a gap of %d bytes before them "+
			"(a crash kept a roll but not the journaled end before it, which no journal record holds; nothing there was acknowledged)",
			l.dir, len(later), segmentName(later[0]), filepath.Base(prev.path), end, later[0]-end)
		return true, nil
	}
	l.logf("store: %s: removed %d segment(s) from %s on: %s ends at %d, a gap of %d bytes before them, "+
		"past the journal's durable end %d (a power cut kept a roll but not the unsynced end before it; nothing there was acknowledged)",
		l.dir, len(later), segmentName(later[0]), filepath.Base(prev.path), end, later[0]-end, t.end)
	return true, nil
}

// allEmpty reports whether the segment files starting at starts are all
// empty.
func (l *Log) allEmpty(starts []int64) (bool, error) {
	for _, start := range starts {
		fi, err := os.Stat(filepath.Join(l.dir, segmentName(start)))
		if err != nil {
			return false, fmt.Errorf("store: stat segment: %w", err)
		}
		if fi.Size() != 0 {
			return false, nil
		}
	}
	return true, nil
}
