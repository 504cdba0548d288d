package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/metaq-go/metaq/sdk/message"
)

// scanBufferSize is the read buffer used to scan segments, in bytes.
const scanBufferSize = 1 << 20

// recover loads the segments of l.dir (see Open) and returns the sealed
// segments whose records still need counting, each with a reference held.
func (l *Log) recover() (toCount []*segment, err error) {
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, fmt.Errorf("store: list %s: %w", l.dir, err)
	}
	var starts []int64
	for _, e := range ents {
		if start, ok := parseSegmentName(e.Name()); ok && e.Type().IsRegular() {
			starts = append(starts, start)
		}
	}
	slices.Sort(starts)

	if len(starts) == 0 {
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
		segs = append(segs, newSegment(start, path, f, fi.Size()))
		if i > 0 {
			prev := segs[i-1]
			if prev.end() != start {
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
	br := bufio.NewReaderSize(nil, scanBufferSize)
	res, err := scanSegment(br, tail, l.maxMsg, true, &buf, nil)
	if err != nil {
		return nil, err
	}
	if res.good < tail.size.Load() {
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
	if err := syncDir(l.dir); err != nil {
		return nil, err
	}
	tail.count.Store(res.count)
	l.msgCount.Store(res.count)
	l.lastID.Store(res.lastID)

	sealed := segs[:last]
	if res.count == 0 && len(sealed) > 0 {
		// An empty tail (a crash right after a roll): the highest id is the
		// last record of the previous segment. Walk its headers once.
		prev := sealed[len(sealed)-1]
		pr, err := scanSegment(br, prev, l.maxMsg, false, &buf, nil)
		if err != nil {
			return nil, err
		}
		if pr.good != prev.size.Load() {
			l.logf("store: %s: sealed segment %s has an invalid record at byte %d: %s",
				l.dir, filepath.Base(prev.path), pr.good, pr.stop)
		}
		prev.count.Store(pr.count)
		l.msgCount.Add(pr.count)
		l.lastID.Store(pr.lastID)
		sealed = sealed[:len(sealed)-1]
	}

	l.segs = segs
	l.active = tail
	l.readable.Store(tail.end())
	l.minOffset.Store(segs[0].start)
	for _, s := range sealed {
		s.acquire()
	}
	return slices.Clone(sealed), nil
}

// scanResult is the outcome of walking a segment's records.
type scanResult struct {
	good   int64  // bytes of whole valid records from the segment start
	count  int64  // records in [0, good)
	lastID int64  // id of the last of them (0 if none)
	stop   string // why the walk stopped before the end ("" if it did not)
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
	size := seg.size.Load()
	br.Reset(io.NewSectionReader(seg.f, 0, size))
	var res scanResult
	var hdr [message.HeaderSize]byte
	for pos := int64(0); ; {
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
		pos += message.HeaderSize + n
		res.good = pos
		res.count++
		res.lastID = id
	}
}

// countSealed counts the records of the sealed segments found at Open, one
// after another, and adds them to the message count. It holds a reference
// on each segment in segs and releases it when done with it.
func (l *Log) countSealed(segs []*segment) {
	defer l.wg.Done()
	defer func() {
		for _, s := range segs {
			s.release()
		}
	}()
	var buf []byte
	br := bufio.NewReaderSize(nil, scanBufferSize)
	for len(segs) > 0 {
		s := segs[0]
		l.segMu.RLock()
		deleted := s.deleted
		l.segMu.RUnlock()
		if deleted {
			s.release()
			segs = segs[1:]
			continue
		}
		res, err := scanSegment(br, s, l.maxMsg, false, &buf, l.done)
		if errors.Is(err, errStopped) {
			return
		}
		if err != nil {
			l.logf("store: %s: counting %s: %v", l.dir, filepath.Base(s.path), err)
		} else if res.good != s.size.Load() {
			l.logf("store: %s: sealed segment %s has an invalid record at byte %d: %s",
				l.dir, filepath.Base(s.path), res.good, res.stop)
		}
		l.segMu.Lock()
		if !s.deleted {
			s.count.Store(res.count)
			l.msgCount.Add(res.count)
		}
		l.segMu.Unlock()
		s.release()
		segs = segs[1:]
	}
	l.counted.Store(true)
}

// createSegment creates the (empty) segment file starting at start and
// makes its directory entry durable.
func (l *Log) createSegment(start int64) (*segment, error) {
	path := filepath.Join(l.dir, segmentName(start))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("store: create segment: %w", err)
	}
	if err := syncDir(l.dir); err != nil {
		_ = f.Close()
		return nil, err
	}
	s := newSegment(start, path, f, 0)
	s.count.Store(0)
	return s, nil
}

// syncDir fsyncs a directory so that entries created or removed in it are
// durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("store: open dir for fsync: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("store: fsync dir %s: %w", dir, err)
	}
	return nil
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
