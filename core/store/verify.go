package store

import (
	"bufio"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/metaq-go/metaq/sdk/message"
)

// integrity is a segment's verification state. The zero value is a
// verified segment without damage: one written by this process, or the
// last segment, which recovery verifies before Open returns.
type integrity struct {
	// unverified is set, before the segment is published, on sealed
	// segments found at Open; the background scrub clears it once it has
	// checked every record (after storing bad). Until then Read verifies
	// what it returns.
	unverified atomic.Bool
	// prefix, if non-zero, limits what is unverified to bytes [0, prefix):
	// the last segment recovered from a journal trust point, whose bytes
	// from prefix on recovery verified (restart.go). Set before the
	// segment is published; lowered by a Truncate that cuts into it (the
	// bytes from the cut on are new).
	prefix atomic.Int64
	// bad holds the segment's damaged ranges not repaired, ascending; nil
	// if there are none. Written once, before unverified is cleared.
	bad atomic.Pointer[[]DamagedRange]
}

// verifyBufs recycles the buffers Read uses to check unverified ranges.
var verifyBufs sync.Pool

// checkRead is Read's corruption check of bytes [pos, pos+n) of seg (the
// caller holds a reference on it). It returns how many of them may be
// served: n, or fewer so that the view ends where damage starts. An
// offset inside a damaged range is refused with a *CorruptError. In a
// segment not verified yet the range is read and its records are checked
// first (see the package documentation, Corruption).
func (l *Log) checkRead(seg *segment, pos, n int64) (int64, error) {
	if seg.integ.unverified.Load() {
		if p := seg.integ.prefix.Load(); p == 0 || pos < p {
			return l.verifyRead(seg, pos, n)
		}
	}
	bad := seg.integ.bad.Load()
	if bad == nil {
		return n, nil
	}
	for i := range *bad {
		r := &(*bad)[i]
		switch {
		case pos >= r.Pos && pos < r.End:
			return 0, &CorruptError{Partition: l.partition(), Dir: l.dir, Ranges: []DamagedRange{*r}, Read: true, Offset: seg.start + pos}
		case pos < r.Pos && pos+n > r.Pos:
			return r.Pos - pos, nil
		}
	}
	return n, nil
}

// verifyRead reads bytes [pos, pos+n) of seg and checks their whole
// records. It returns n if they are all valid (a trailing partial record
// is left to the client, as always, unless the range ends at the end of
// the segment, where no record may be partial), the length up to the first invalid
// one, or, if the first is invalid, a *CorruptError: the offset is
// damaged or is not a record start, which cannot be told apart before the
// scrub has walked the segment.
func (l *Log) verifyRead(seg *segment, pos, n int64) (int64, error) {
	bp, _ := verifyBufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	defer verifyBufs.Put(bp)
	if int64(cap(*bp)) < n {
		*bp = make([]byte, n)
	}
	b := (*bp)[:n]
	if m, err := seg.f.ReadAt(b, pos); int64(m) < n {
		return 0, fmt.Errorf("store: read %s at %d: %w", filepath.Base(seg.path), pos, err)
	}
	for at := 0; at < len(b); {
		var err error
		var size int
		if len(b)-at >= message.HeaderSize && zeroHeader(b[at:]) {
			err = errors.New("zero-filled record header")
		} else if _, size, err = message.ParseRecord(b[at:], l.maxMsg); errors.Is(err, message.ErrShortRecord) {
			if pos+n < seg.size.Load() {
				break // the rest is beyond the read: left to the client
			}
			err = errors.New("record runs past the end of the sealed segment")
		}
		if err == nil {
			at += size
			continue
		}
		if at > 0 {
			return int64(at), nil
		}
		return 0, &CorruptError{Partition: l.partition(), Dir: l.dir, Read: true, Offset: seg.start + pos,
			Reason: fmt.Sprintf("segment %s is not verified yet and no valid record starts at byte %d (damaged, or not a record start): %v",
				seg.path, pos, err)}
	}
	return n, nil
}

// scrub verifies every record of the sealed segment s (or of the prefix
// of the last segment that recovery left to it, restart.go), copies its damaged
// ranges to the quarantine directory, repairs those the Repairer has,
// records the others for Read to refuse, and marks s verified. It returns
// the count of valid records and the id of the last one. A close of stop
// interrupts it with errStopped, leaving s unverified.
func (l *Log) scrub(br *bufio.Reader, s *segment, buf *[]byte, stop <-chan struct{}) (count, lastID int64, err error) {
	size := s.scanEnd()
	for attempt := 0; ; attempt++ {
		res, err := scanSegmentFrom(br, s, 0, l.maxMsg, true, buf, stop)
		if err != nil {
			return 0, 0, err
		}
		if res.good == size {
			s.cidx.complete(size, res.count, res.idx) // count.go
			s.integ.unverified.Store(false)
			return res.count, res.lastID, nil
		}
		w, err := walkDamage(br, s, res, l.maxMsg, buf, stop)
		if err != nil {
			return 0, 0, err
		}
		// In a sealed segment damage at the end is damage too: the next
		// segment continues the log.
		var ranges []DamagedRange
		if attempt == 0 {
			ranges = l.handleDamage(s, w.damage)
		} else {
			ranges = l.describeDamage(s, w.damage)
		}
		// So is damage at the end of a last segment's prefix: recovery
		// verified the records from there on.
		kind := "sealed segment"
		if s.integ.prefix.Load() > 0 {
			kind = "last segment"
		}
		var bad []DamagedRange
		for _, r := range ranges {
			if r.End == size {
				r.Next = true // the next segment (or verified record) starts there
			}
			if !r.Repaired {
				bad = append(bad, r)
				l.logf("store: %s: %s %s has an invalid record at byte %d: %s; reads of offsets %d..%d are refused",
					l.dir, kind, filepath.Base(s.path), r.Pos, r.describe(), r.Offset, r.Offset+r.End-r.Pos)
			}
		}
		if len(bad) == len(ranges) || attempt > 0 {
			s.integ.bad.Store(&bad)
			s.integ.unverified.Store(false)
			return w.count, w.lastID, nil
		}
		// Something was repaired: walk the segment again.
	}
}
