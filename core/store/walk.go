package store

import (
	"encoding/binary"
	"errors"

	"github.com/metaq-go/metaq/sdk/message"
)

// Walk calls fn with each record of l from offset from (a record start)
// up to end, in order, reading a MiB at a time (more for a longer
// record). A segment retention deleted meanwhile is skipped. A damaged
// record, or the log ending before end, stops the walk: complete reports
// that the records ran back to back up to end. The record passed to fn,
// its Data included, is valid only during the call.
func (l *Log) Walk(from, end int64, fn func(r *message.Record)) (complete bool, err error) {
	chunk := 1 << 20
	var buf []byte
	for off := from; off < end; {
		v, err := l.Read(off, chunk)
		if err != nil {
			var below *OffsetOutOfRangeError
			switch {
			case errors.As(err, &below): // retention deleted the segment meanwhile
				off = below.Min
				continue
			case errors.Is(err, ErrNoData):
				return off >= end, nil
			}
			return false, err
		}
		buf, err = v.ReadAll(buf[:0])
		v.Release()
		if err != nil {
			return false, err
		}
		it := message.NewIterator(buf, off, 0)
		for it.Next() {
			fn(it.Record())
		}
		if it.Err() != nil {
			return false, nil
		}
		if it.Consumed() == 0 { // a record longer than the chunk
			if len(buf) < message.HeaderSize {
				return false, nil
			}
			need := message.HeaderSize + int(binary.BigEndian.Uint32(buf))
			if need <= chunk {
				return false, nil
			}
			chunk = need
			continue
		}
		off += int64(it.Consumed())
	}
	return true, nil
}
