package broker

import (
	"sync"
	"time"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/core/timer"
)

// timerKeep is the timer log's retention (docs/delayed.md): the age rule
// of 2 × max_delay, and never a segment at or after the first one that
// holds a delayed message not delivered yet (core/timer's Keeper), so
// that a lowered max_delay deletes no pending message. A slave applies
// the same rule to its copy: it keeps what its promotion needs.
type timerKeep struct {
	mu      sync.Mutex
	keepers map[*store.Log]*timer.Keeper
	held    map[*store.Log]int
}

// retainTimer applies the timer topic's retention to t's partitions.
func (b *Broker) retainTimer(t *topic, now time.Time) (deleted bool) {
	k := &b.timerKeep
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keepers == nil {
		k.keepers, k.held = map[*store.Log]*timer.Keeper{}, map[*store.Log]int{}
	}
	live := make(map[*store.Log]bool, len(t.parts))
	for _, l := range t.parts {
		live[l] = true
	}
	for l := range k.keepers { // a log closed (the topic reopened): start again
		if !live[l] {
			delete(k.keepers, l)
			delete(k.held, l)
		}
	}
	deleted, held := b.logs().RetainBelow(t.name, t.parts, t.conf().RetainFor, now, func(_ int, l *store.Log) (int64, error) {
		kp := k.keepers[l]
		if kp == nil {
			kp = timer.NewKeeper()
			k.keepers[l] = kp
		}
		return kp.KeepFrom(l)
	})
	for p, h := range held {
		if l := t.parts[p]; h != k.held[l] {
			k.held[l] = h
			if h > 0 {
				b.logf("retention %s-%d: %d segment(s) older than %v kept: they hold delayed messages not delivered yet (from offset %d)",
					t.name, p, h, t.conf().RetainFor, l.MinOffset())
			}
		}
	}
	return deleted
}
