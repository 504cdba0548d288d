package timer

import (
	"sync"
	"time"

	"github.com/metaq-go/metaq/core/store"
)

// RetainBelow applies a delete policy of retainFor to topic name's logs
// parts, deleting no segment of partition p past keep(p) (core/partition
// Logs.RetainBelow); held[p] is how many segments old enough to go keep
// held back.
type RetainBelow func(name string, parts []*store.Log, retainFor time.Duration, now time.Time,
	keep func(p int, l *store.Log) (int64, error)) (deleted bool, held []int)

// Keepers is the timer log's retention (docs/delayed.md): the age rule
// of 2 × max_delay, and never a segment at or after the first one that
// holds a delayed message not delivered yet (a Keeper per partition log),
// so that a lowered max_delay deletes no pending message. A slave applies
// the same rule to its copy: it keeps what its promotion needs. The zero
// value is ready to use.
type Keepers struct {
	mu      sync.Mutex
	keepers map[*store.Log]*Keeper
	held    map[*store.Log]int
}

// Retain applies the timer topic's retention (retainFor, through
// retain) to its partition logs parts, and logs (logf) a partition whose
// count of segments held back for pending messages changed to more than
// none. It reports whether any segment went.
func (k *Keepers) Retain(name string, parts []*store.Log, retainFor time.Duration, now time.Time, retain RetainBelow,
	logf func(format string, args ...any)) (deleted bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keepers == nil {
		k.keepers, k.held = map[*store.Log]*Keeper{}, map[*store.Log]int{}
	}
	live := make(map[*store.Log]bool, len(parts))
	for _, l := range parts {
		live[l] = true
	}
	for l := range k.keepers { // a log closed (the topic reopened): start again
		if !live[l] {
			delete(k.keepers, l)
			delete(k.held, l)
		}
	}
	deleted, held := retain(name, parts, retainFor, now, func(_ int, l *store.Log) (int64, error) {
		kp := k.keepers[l]
		if kp == nil {
			kp = NewKeeper()
			k.keepers[l] = kp
		}
		return kp.KeepFrom(l)
	})
	for p, h := range held {
		if l := parts[p]; h != k.held[l] {
			k.held[l] = h
			if h > 0 {
				logf("retention %s-%d: %d segment(s) older than %v kept: they hold delayed messages not delivered yet (from offset %d)",
					name, p, h, retainFor, l.MinOffset())
			}
		}
	}
	return deleted
}
