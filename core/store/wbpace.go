package store

import (
	"sync"
	"time"
)

// Checkpoint write-back pacing (docs/storage.md, "Checkpoint write-back";
// the finding in docs/benchmarks.md, "What the journal's fdatasyncs wait
// behind"). A journal fdatasync ends with a device cache flush, and on a
// disk with a volatile write cache that flush writes out everything the
// device took in since the last one: the journal's round, and whatever
// segment write-back was issued meanwhile. A checkpoint that issues its
// tails' write-back as fast as the device takes it (or leaves 60 MB of
// small tails to one syncfs, whose flusher does) puts tens of MB ahead of
// the next few journal flushes, 20 to 90 ms each. So the checkpoint's
// write-back is issued in steps that each wait for credit, which every
// completed journal fdatasync grants in proportion to the bytes it made
// durable: between two journal flushes the device takes in about
// paceFactor times the journal's own bytes of segment data, not megabytes.
const (
	// paceFactor: credit per journal byte made durable. A checkpoint
	// starts when the journal is journal_checkpoint_bytes past the last
	// one and has to write those bytes back before the journal is three
	// quarters of its lag bound (two checkpoints' bytes) past it, when
	// the checkpoint hurries: half a checkpoint of journal for one
	// checkpoint of segment bytes, a factor of 2; 4 leaves a margin.
	paceFactor = 4
	// paceMinGrant is the least credit one journal fdatasync grants, so
	// that small rounds do not starve a checkpoint.
	paceMinGrant = 128 << 10
	// paceMaxCredit bounds the credit a quiet stretch builds up.
	paceMaxCredit = 2 << 20
	// paceIdleWait: a step waits at most this long for credit; then it
	// goes on anyway (no round completed meanwhile: the journal is idle
	// or its device stalled, and the checkpoint must not stop).
	paceIdleWait = 5 * time.Millisecond
)

// wbPacer hands write-back credit from the journal's fdatasyncs to the
// checkpoint's write-back steps.
type wbPacer struct {
	mu     sync.Mutex
	credit int64
	ch     chan struct{} // closed and replaced by each grant
	// idle reports that no journal round is staged and not yet synced: no
	// flush to keep short, so a step goes on at once.
	idle func() bool
	wait time.Duration
}

func newWBPacer(idle func() bool) *wbPacer {
	return &wbPacer{ch: make(chan struct{}), idle: idle, wait: paceIdleWait}
}

// grant adds the credit of a journal fdatasync that made n bytes durable.
func (p *wbPacer) grant(n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.credit = min(p.credit+max(n*paceFactor, paceMinGrant), paceMaxCredit)
	ch := p.ch
	p.ch = make(chan struct{})
	p.mu.Unlock()
	close(ch)
}

// take waits until there is credit (or the journal is idle, or hurry says
// the checkpoint is falling behind, or paceIdleWait passed without a
// grant), then takes n bytes of it, going into debt if there is less.
func (p *wbPacer) take(n int64, hurry func() bool) {
	if p == nil {
		return
	}
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		p.mu.Lock()
		if p.credit > 0 {
			p.credit = max(p.credit-n, -paceMaxCredit)
			p.mu.Unlock()
			return
		}
		ch := p.ch
		p.mu.Unlock()
		if (hurry != nil && hurry()) || (p.idle != nil && p.idle()) {
			break
		}
		if t == nil {
			t = time.NewTimer(p.wait)
		}
		select {
		case <-ch:
			continue
		case <-t.C:
		}
		break
	}
	p.mu.Lock()
	p.credit = max(p.credit-n, -paceMaxCredit)
	p.mu.Unlock()
}
