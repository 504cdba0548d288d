package main

import (
	"bytes"
	"regexp"
)

// recordSplitter cuts the bytes read from a file into records: one per
// line, or with a start pattern one per multi-line record (a line that
// matches start begins a record, the lines that do not join the record
// before them). A record is at most max bytes: a longer one is cut into
// pieces of max bytes (split reports it).
type recordSplitter struct {
	start *regexp.Regexp // nil: every line is a record
	max   int
}

// next returns the first record of buf and how many bytes of buf it
// consumed (its line ends included); n == 0 means buf holds no complete
// record yet. A record is complete at its line's "\n" (one record per
// line), or when the next line that matches start is complete. final
// says no more bytes will follow (the end of the file in --once mode, a
// rotated file drained): the rest is a record even without a "\n".
// idle says nothing was added for a while: a multi-line record whose
// last line is complete ends there (a partial line still waits for its
// "\n"). split reports a record cut at max bytes. The record has no
// trailing "\n" nor "\r" before it; it aliases buf.
func (s *recordSplitter) next(buf []byte, final, idle bool) (rec []byte, n int, split bool) {
	if len(buf) == 0 {
		return nil, 0, false
	}
	i := bytes.IndexByte(buf, '\n')
	if i < 0 {
		switch {
		case len(buf) > s.max:
			return buf[:s.max], s.max, true
		case final:
			return trimCR(buf), len(buf), false
		}
		return nil, 0, false
	}
	if i > s.max {
		return buf[:s.max], s.max, true
	}
	if s.start == nil {
		return trimCR(buf[:i]), i + 1, false
	}
	// The first line begins the record, whatever it is; continuation
	// lines follow until a complete line matching start.
	pos := i + 1
	for {
		if pos-1 > s.max {
			return buf[:s.max], s.max, true
		}
		j := bytes.IndexByte(buf[pos:], '\n')
		if j < 0 {
			switch {
			case final && pos < len(buf) && s.start.Match(trimCR(buf[pos:])):
				return trimNL(buf[:pos]), pos, false // the last line begins a record
			case final:
				if len(buf) > s.max {
					return buf[:s.max], s.max, true
				}
				return trimNL(buf), len(buf), false
			case idle && pos == len(buf):
				return trimNL(buf[:pos]), pos, false
			case len(buf)-pos > s.max:
				// A partial line longer than the bound: whether it begins
				// a record or continues this one, this record ends within
				// buf[:s.max] or is cut there. (A shorter partial line may
				// still begin the next record: wait for its line end.)
				return buf[:s.max], s.max, true
			}
			return nil, 0, false
		}
		line := trimCR(buf[pos : pos+j])
		if s.start.Match(line) {
			return trimNL(buf[:pos]), pos, false
		}
		pos += j + 1
	}
}

func trimCR(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\r' {
		return b[:n-1]
	}
	return b
}

// trimNL drops one trailing "\n" (or "\r\n").
func trimNL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	return trimCR(b)
}
