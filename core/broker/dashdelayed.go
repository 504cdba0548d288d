package broker

import (
	"context"
	"strings"
	"time"

	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/core/timer"
)

// The dashboard's delayed page (core/httpapi dlq.go): the pending delayed
// messages by due-time bucket. A wheel belongs to its timer loop, so the
// page asks each loop (delayStats.ask) and waits for the answers, bounded
// by the request's context.

// dueAsk is one request for a wheel's counts by due time.
type dueAsk struct {
	now    int64
	bounds []int64
	reply  chan []int64 // buffered: the loop never blocks on it
}

// answer replies with w's counts, nil when the loop has no wheel (a
// slave, or a timer never used).
func (a dueAsk) answer(w *timer.Wheel) {
	if w == nil {
		a.reply <- nil
		return
	}
	a.reply <- w.DueCounts(a.now, a.bounds)
}

// DelayedPage is the delayed page's data.
func (h httpBackend) DelayedPage(ctx context.Context) httpapi.DelayedPage {
	b := h.b
	pg := httpapi.DelayedPage{Pending: b.delay.Pending()}
	b.writeDelayedStats(func(l string) {
		k, v, _ := strings.Cut(l, " ")
		pg.Counters = append(pg.Counters, [2]string{k, v})
	})
	bounds := make([]int64, len(httpapi.DelayedBuckets))
	for i, d := range httpapi.DelayedBuckets {
		bounds[i] = d.Milliseconds()
	}
	total := make([]int64, len(bounds)+1)
	now := time.Now().UnixMilli()
	answered := 0
	for i := range b.delay.ask {
		a := dueAsk{now: now, bounds: bounds, reply: make(chan []int64, 1)}
		select {
		case b.delay.ask[i] <- a:
		case <-ctx.Done():
			continue
		}
		select {
		case c := <-a.reply:
			if c != nil {
				answered++
				for k := range total {
					total[k] += c[k]
				}
			}
		case <-ctx.Done():
		}
	}
	pg.Buckets = httpapi.BucketsOf(total)
	if answered < len(b.delay.ask) && pg.Pending > 0 {
		pg.Note = "Some timer partitions did not answer (not running here: a slave, or starting): their messages are not in the buckets."
	}
	return pg
}

// CountMessages counts partition p of topic from offset from to its end.
func (h httpBackend) CountMessages(topic string, p int, from int64) (int64, bool) {
	b := h.b
	b.mu.RLock()
	t := b.topics[topic]
	b.mu.RUnlock()
	if t == nil || p < 0 || p >= len(t.parts) {
		return 0, false
	}
	l := t.parts[p]
	n, exact, err := l.CountRecords(from, l.MaxOffset())
	return n, exact && err == nil
}
