package store

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// segmentSuffix is the file name suffix of a segment.
const segmentSuffix = ".meta"

// segmentNameDigits is the width of the zero-padded start offset in a
// segment file name.
const segmentNameDigits = 20

// segmentName returns the file name of the segment starting at start.
func segmentName(start int64) string {
	return fmt.Sprintf("%0*d%s", segmentNameDigits, start, segmentSuffix)
}

// parseSegmentName returns the start offset encoded in name, and false if
// name is not a segment file name (exactly 20 decimal digits then ".meta").
func parseSegmentName(name string) (int64, bool) {
	digits, ok := strings.CutSuffix(name, segmentSuffix)
	if !ok || len(digits) != segmentNameDigits {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	start, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, false
	}
	return start, true
}

// segment is one file of the log. Its start never changes; size only grows,
// and only while the segment is the active (last) one.
type segment struct {
	start int64
	path  string
	f     *os.File

	// size is the number of bytes written to the file (not necessarily
	// flushed). Written by the log's writer (group commit) or under Log.mu
	// (threshold mode); read atomically by anyone.
	size atomic.Int64

	// refs counts the log's own reference (dropped when the segment is
	// deleted or the log closes) plus one per live View and per internal
	// user (counter, flush). The file is closed when it drops to zero.
	refs atomic.Int32

	// count is the number of records in the segment, -1 until known
	// (sealed segments found at Open are counted in the background). It
	// grows with appends while the segment is active.
	count atomic.Int64

	// deleted is set when retention removes the segment; guarded by
	// Log.segMu, like the first setting of a sealed segment's count.
	deleted bool

	// uncounted is set, before the segment is published, when the
	// background count (countSealed) has records of it still to add to
	// count and the log's message count: all of them (a sealed segment
	// found at Open), or those of the prefix of a last segment recovered
	// from a trust point. Cleared under Log.segMu by countSealed, or by
	// Truncate when it counts the segment itself.
	uncounted bool

	// integ is the segment's verification state (verify.go).
	integ integrity

	// cidx is the segment's record-count index (count.go).
	cidx countIndex

	// readAt, if set, replaces f.ReadAt in recovery's scans (a test hook).
	readAt func(f *os.File, b []byte, off int64) (int, error)

	// The tail of a journaled segment: its last bytes are held
	// in memory (tail, contiguous, ascending) until a checkpoint or the
	// log's Close writes them to the file (flushTail). Readers are served
	// them from memory. A journaled log's records are durable in the
	// journal when they are acknowledged, so the segment file needs them
	// only at the checkpoint that frees that journal space: writing them
	// there, in a few large write()s per partition, instead of one write()
	// per partition per commit round, is what keeps a round's cost flat
	// at hundreds of partitions. See docs/storage.md, "Segment tails".
	tmu  sync.Mutex // guards tail; a leaf lock
	tail []tailChunk
	fmu  sync.Mutex // serialises flushTail
}

// tailChunk is bytes [pos, pos+len(b)) of a segment held in memory. Bytes
// below the log's readable mark are never changed: appends only extend b
// over bytes that follow it in the same array.
type tailChunk struct {
	pos int64
	b   []byte
}

// appendTail adds b, which belongs at pos (the segment's size), to the
// in-memory tail without copying it: b is a round's part of its log's
// pending-records arena (Log.reserveJournaled), which nothing writes again
// once the round has taken it. A b that continues the last chunk both in
// the segment and in memory extends that chunk, so a partition's tail is
// a few chunks however many rounds wrote it. Only the log's writer (the
// journal's committer) calls it.
func (s *segment) appendTail(b []byte, pos int64) {
	if len(b) == 0 {
		return
	}
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if n := len(s.tail); n > 0 {
		c := &s.tail[n-1]
		if k := len(c.b); c.pos+int64(k) == pos && cap(c.b)-k >= len(b) && &c.b[:k+1][k] == &b[0] {
			c.b = c.b[:k+len(b)]
			return
		}
	}
	s.tail = append(s.tail, tailChunk{pos: pos, b: b})
}

// tailRead returns the bytes [pos, pos+n) of the segment if pos lies in
// its in-memory tail (a slice of an immutable range, clipped to the
// chunk), or nil and the number of bytes from pos that the file holds.
func (s *segment) tailRead(pos, n int64) ([]byte, int64) {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if len(s.tail) == 0 {
		return nil, n
	}
	if inFile := s.tail[0].pos; pos < inFile { // the file holds what precedes the tail
		return nil, min(n, inFile-pos)
	}
	for i := len(s.tail) - 1; i >= 0; i-- {
		c := s.tail[i]
		if pos >= c.pos {
			k := pos - c.pos
			return c.b[k:min(int64(len(c.b)), k+n):min(int64(len(c.b)), k+n)], 0
		}
	}
	return nil, 0 // cannot happen: the tail starts at written
}

// flushTail writes the in-memory tail below upTo to the file (no fsync)
// and drops it from memory; it returns the number of write()s and bytes.
// On a write error nothing is dropped: a later flush writes the same
// bytes at the same place again. With wb set (a checkpoint's), the bytes
// go in write()s of at most wb.step, each noted to wb, which starts their
// write-back as they go (writeBehind).
func (s *segment) flushTail(upTo int64, writeAt func(f *os.File, b []byte, off int64) (int, error), wb *writeBehind) (int, int64, error) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	s.tmu.Lock()
	var todo []tailChunk
	for _, c := range s.tail {
		if c.pos >= upTo {
			break
		}
		todo = append(todo, tailChunk{pos: c.pos, b: c.b[:min(int64(len(c.b)), upTo-c.pos)]})
	}
	s.tmu.Unlock()
	var writes int
	var bytes int64
	for _, c := range todo {
		for len(c.b) > 0 {
			b := c.b
			if wb != nil {
				b = b[:min(int64(len(b)), wb.room())]
			}
			n, err := writeAt(s.f, b, c.pos)
			writes++
			bytes += int64(n)
			if err == nil && n < len(b) {
				err = io.ErrShortWrite
			}
			if err != nil {
				return writes, bytes, fmt.Errorf("write %s at %d: %w", filepath.Base(s.path), c.pos, err)
			}
			wb.wrote(s.f, c.pos, int64(n))
			c.b, c.pos = c.b[n:], c.pos+int64(n)
		}
	}
	if len(todo) == 0 {
		return 0, 0, nil
	}
	last := todo[len(todo)-1]
	end := last.pos + int64(len(last.b))
	s.tmu.Lock()
	for len(s.tail) > 0 {
		c := &s.tail[0]
		if c.pos+int64(len(c.b)) <= end {
			s.tail[0] = tailChunk{}
			s.tail = s.tail[1:]
			continue
		}
		if c.pos < end {
			k := end - c.pos
			c.b = c.b[k:]
			c.pos = end
		}
		break
	}
	if len(s.tail) == 0 {
		s.tail = nil
	}
	s.tmu.Unlock()
	return writes, bytes, nil
}

// reader returns what recovery's scans read the segment through.
func (s *segment) reader() io.ReaderAt {
	if s.readAt == nil {
		return s.f
	}
	return hookedReader{s}
}

// hookedReader reads a segment through its readAt hook.
type hookedReader struct{ s *segment }

func (r hookedReader) ReadAt(b []byte, off int64) (int, error) { return r.s.readAt(r.s.f, b, off) }

// scanEnd returns where scans of the segment stop: the end of the prefix
// still to verify of a last segment recovered from a trust point
// (restart.go), else the segment's size.
func (s *segment) scanEnd() int64 {
	if p := s.integ.prefix.Load(); p > 0 && s.integ.unverified.Load() {
		return p
	}
	return s.size.Load()
}

func newSegment(start int64, path string, f *os.File, size int64) *segment {
	s := &segment{start: start, path: path, f: f}
	s.count.Store(-1)
	s.size.Store(size)
	s.refs.Store(1)
	return s
}

// acquire adds a reference. The caller must already know the segment is
// alive: it found it in Log.segs under segMu, or it holds another reference.
func (s *segment) acquire() { s.refs.Add(1) }

// release drops a reference and closes the file with the last one.
func (s *segment) release() {
	switch n := s.refs.Add(-1); {
	case n == 0:
		_ = s.f.Close() // read side or already fsynced: nothing to report
	case n < 0:
		panic("store: segment reference released twice")
	}
}

// end returns the offset just past the segment's written bytes.
func (s *segment) end() int64 { return s.start + s.size.Load() }

// View is a readable byte range of one segment: bytes [Pos, Pos+Len) of the
// segment file at Path, whose first byte is at absolute offset Offset.
// When Mem is set the bytes are not in the file yet (the in-memory tail of
// a journaled segment): Mem holds them, and Path and File must not be
// used for them.
//
// File is the segment's shared descriptor; read it with ReadAt (or hand it
// to sendfile with an explicit position), never Seek it or Close it. The
// View holds a reference that keeps File open even if retention deletes the
// segment: call Release exactly once when done with it (not once per copy).
type View struct {
	Path   string
	File   *os.File
	Pos    int64
	Len    int
	Offset int64
	// Mem, if non-nil, is the view's bytes (len(Mem) == Len), read-only.
	Mem []byte

	seg *segment
}

// Release drops the View's hold on the segment file. After Release the View
// must not be used. Releasing the zero View is a no-op.
func (v View) Release() {
	if v.seg != nil {
		v.seg.release()
	}
}

// ReadAll appends the View's bytes to dst and returns the extended slice.
func (v View) ReadAll(dst []byte) ([]byte, error) {
	if v.Len == 0 {
		return dst, nil
	}
	if v.Mem != nil {
		return append(dst, v.Mem...), nil
	}
	n0 := len(dst)
	dst = slices.Grow(dst, v.Len)[:n0+v.Len]
	n, err := v.File.ReadAt(dst[n0:n0+v.Len], v.Pos)
	if n < v.Len {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return dst[:n0+n], fmt.Errorf("store: read %s at %d: %w", filepath.Base(v.Path), v.Pos, err)
	}
	return dst, nil
}
