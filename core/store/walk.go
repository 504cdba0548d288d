package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/metaq-go/metaq/sdk/message"
)

// ErrDamagedRecord is Walk's error for bytes that are no whole record.
var ErrDamagedRecord = errors.New("store: damaged record")

// Walk calls fn with each record of l from offset from (a record start)
// up to end, in order, reading a MiB at a time (more for a longer
// record). A segment retention deleted meanwhile is skipped. It returns
// the offset past the last record it gave fn (where a later walk goes
// on) and stops early, with that offset, when the log ends before end
// (no error), at bytes that are no whole record (an error wrapping
// ErrDamagedRecord), on a read error, or when fn returns an error. The
// record passed to fn, its Data included, is valid only during the call.
func (l *Log) Walk(from, end int64, fn func(r *message.Record) error) (next int64, err error) {
	chunk := 1 << 20
	var buf []byte
	off := from
	for off < end {
		v, err := l.Read(off, chunk)
		if err != nil {
			var below *OffsetOutOfRangeError
			switch {
			case errors.As(err, &below) && below.Min > off: // retention deleted the segment meanwhile
				off = below.Min
				continue
			case errors.Is(err, ErrNoData):
				return off, nil
			}
			return off, err
		}
		buf, err = v.ReadAll(buf[:0])
		v.Release()
		if err != nil {
			return off, err
		}
		it := message.NewIterator(buf, off, 0)
		for it.Next() {
			if err := fn(it.Record()); err != nil {
				return it.Record().Offset, err
			}
		}
		if err := it.Err(); err != nil {
			return it.NextOffset(), fmt.Errorf("%w at %d: %w", ErrDamagedRecord, it.NextOffset(), err)
		}
		if it.Consumed() == 0 { // a record longer than the chunk
			need := 0
			if len(buf) >= message.HeaderSize {
				need = message.HeaderSize + int(binary.BigEndian.Uint32(buf))
			}
			if need <= chunk {
				return off, fmt.Errorf("%w at %d: no whole record in %d bytes", ErrDamagedRecord, off, len(buf))
			}
			chunk = need
			continue
		}
		off += int64(it.Consumed())
	}
	return off, nil
}
