package timer

import (
	"fmt"
	"math"

	"github.com/metaq-go/metaq/sdk/message"
)

// KeepSource is a timer log as its Keeper reads it (a *store.Log).
type KeepSource interface {
	MinOffset() int64
	MaxOffset() int64
	Walk(from, end int64, fn func(r *message.Record) error) (next int64, err error)
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
}

type keepBound struct{ off, maxDue int64 }

// NewKeeper returns a Keeper for a timer log.
func NewKeeper() *Keeper {
	k := &Keeper{}
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
	off, err := l.Walk(k.cursor, l.MaxOffset(), func(r *message.Record) error {
		pass(r.Offset)
		rec, err := Parse(r.Data)
		if err != nil {
			return fmt.Errorf("record at %d: %w", r.Offset, err)
		}
		switch rec.Kind {
		case KindMessage:
			k.maxDue = max(k.maxDue, rec.Msg.Due)
		case KindMark:
			if rec.Mark.DueUpTo >= k.mark.DueUpTo {
				k.mark = rec.Mark
			}
		}
		return nil
	})
	if err != nil {
		return k.keep, fmt.Errorf("timer log: %w", err)
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
