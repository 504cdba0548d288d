package store

import (
	"sync"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
)

// IDWorker hands out message ids (an IDSource) in MetaQ's layout
// ((ms − epoch) << 22) | (brokerId << 12) | seq, with ms the wall clock.
//
// Unlike MetaQ's it never goes backwards: it is seeded from the highest id
// found in the store at startup, and when the clock stands still (or steps
// back) or a batch does not fit in the current millisecond it moves its own
// millisecond forward. Ids are therefore unique across restarts of the same
// broker, and a batch of n ≤ 4096 gets n consecutive ids.
type IDWorker struct {
	mu       sync.Mutex
	brokerID int64
	lastMs   int64 // ms since message.IDEpoch of the last id handed out
	seq      int64 // next sequence within lastMs
	now      func() time.Time
}

const (
	seqBits = 12
	maxSeq  = 1 << seqBits // ids per millisecond
)

// NewIDWorker returns the id source of broker brokerID; now is the clock
// (time.Now if nil).
func NewIDWorker(brokerID int, now func() time.Time) *IDWorker {
	if now == nil {
		now = time.Now
	}
	return &IDWorker{brokerID: int64(brokerID), lastMs: -1, now: now}
}

// Observe raises the worker past an id already in use.
func (w *IDWorker) Observe(id int64) {
	if id <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ms := id >> 22
	seq := id & (maxSeq - 1)
	if ms > w.lastMs || (ms == w.lastMs && seq+1 > w.seq) {
		w.lastMs, w.seq = ms, seq+1
	}
}

// Next returns the first of n consecutive ids (1 ≤ n ≤ 4096).
func (w *IDWorker) Next(n int) int64 {
	if n < 1 {
		n = 1
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now().UnixMilli() - message.IDEpoch
	if now > w.lastMs {
		w.lastMs, w.seq = now, 0
	}
	if w.seq+int64(n) > maxSeq {
		w.lastMs++
		w.seq = 0
	}
	id := w.lastMs<<22 | w.brokerID<<seqBits | w.seq
	w.seq += int64(n)
	return id
}
