package timer

import (
	"errors"
	"fmt"
	"math"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
)

// KeepSource is a timer log as its Keeper reads it (a *store.Log).
type KeepSource interface {
	Source
	SegmentStarts() []int64
	Cuts() (n, lastFrom int64)
}

// Keeper says how much of a timer log its retention may delete: the
// segments below the first one holding a message that the log's last
// delivered mark does not cover (a message not delivered yet, or
// delivered by a round whose mark was lost: its intent must stay). What
// a wheel's rebuild needs stays: every pending message, the last mark
// and the intents and cancels after it (a cancel of a pending message
// follows it in the log). The rule reads only the log, so a slave (which
// runs no wheel) applies it too and keeps what its promotion needs.
//
// It reads the log incrementally: each call reads what was appended since
// the last one. Not safe for concurrent use (the retention loop owns it).
type Keeper struct {
	cursor int64 // the log is read to here
	cuts   int64 // the log's Truncate count when the state was built
	mark   Mark  // the last delivered mark read
	maxDue int64 // the latest due time of the messages below cursor
	// bounds are the segment starts read past, each with the latest due
	// time of the messages below it, ascending; those below the keep
	// offset are pruned.
	bounds []keepBound
	keep   int64
	size   int
	buf    []byte
}

type keepBound struct{ off, maxDue int64 }

// NewKeeper returns a Keeper for a timer log whose records are at most
// maxRecord bytes of data.
func NewKeeper(maxRecord int) *Keeper {
	k := &Keeper{size: max(maxRecord+message.HeaderSize, 1<<20)}
	k.reset(0)
	return k
}

func (k *Keeper) reset(from int64) {
	k.cursor, k.mark, k.maxDue, k.bounds, k.keep = from, Mark{}, math.MinInt64, k.bounds[:0], from
}

// KeepFrom reads what l gained since the last call and returns the
// offset below which l's segments hold nothing a rebuild of its wheel
// needs: l's retention deletes no segment ending after it.
func (k *Keeper) KeepFrom(l KeepSource) (int64, error) {
	if n, _ := l.Cuts(); n != k.cuts || l.MaxOffset() < k.cursor {
		k.cuts = n
		k.reset(l.MinOffset())
	}
	if min := l.MinOffset(); k.cursor < min {
		k.cursor = min // deleted under us: what was there was covered
	}
	starts := l.SegmentStarts()
	si := 0
	pass := func(upTo int64) { // note the segment starts at or below upTo
		for ; si < len(starts) && starts[si] <= upTo; si++ {
			if s := starts[si]; s > k.keep && (len(k.bounds) == 0 || s > k.bounds[len(k.bounds)-1].off) {
				k.bounds = append(k.bounds, keepBound{s, k.maxDue})
			}
		}
	}
	end := l.MaxOffset()
	off := k.cursor
	for off < end {
		v, err := l.Read(off, k.size)
		if err != nil {
			var oor *store.OffsetOutOfRangeError
			if errors.As(err, &oor) && oor.Min > off {
				off = oor.Min
				continue
			}
			if errors.Is(err, store.ErrNoData) {
				break
			}
			return k.keep, err
		}
		k.buf, err = v.ReadAll(k.buf[:0])
		v.Release()
		if err != nil {
			return k.keep, err
		}
		it := message.NewIterator(k.buf, off, k.size)
		n := 0
		for it.Next() {
			r := it.Record()
			pass(r.Offset)
			rec, perr := Parse(r.Data)
			if perr != nil {
				return k.keep, fmt.Errorf("timer log at %d: %w", r.Offset, perr)
			}
			switch rec.Kind {
			case KindMessage:
				k.maxDue = max(k.maxDue, rec.Msg.Due)
			case KindMark:
				if rec.Mark.DueUpTo >= k.mark.DueUpTo {
					k.mark = rec.Mark
				}
			}
			n++
		}
		if err := it.Err(); err != nil {
			return k.keep, fmt.Errorf("timer log at %d: %w", it.NextOffset(), err)
		}
		if n == 0 {
			return k.keep, fmt.Errorf("timer log at %d: no whole record in %d bytes", off, len(k.buf))
		}
		off = it.NextOffset()
	}
	k.cursor = max(off, k.cursor)
	pass(k.cursor)
	// The last bound whose messages below are all covered by the mark:
	// the latest due times below a bound only grow with it.
	i := 0
	for i < len(k.bounds) && k.bounds[i].off <= k.mark.IndexedTo && k.bounds[i].maxDue <= k.mark.DueUpTo {
		k.keep = k.bounds[i].off
		i++
	}
	k.bounds = append(k.bounds[:0], k.bounds[i:]...)
	return k.keep, nil
}
