package broker

import (
	"context"
	"strings"
	"time"

	"github.com/metaq-go/metaq/core/httpapi"
)

// The dashboard's delayed page (core/httpapi dlq.go): the pending delayed
// messages by due-time bucket, from each timer loop (timer.Service's
// DueCounts), bounded by the request's context.

// DelayedPage is the delayed page's data.
func (h httpBackend) DelayedPage(ctx context.Context) httpapi.DelayedPage {
	b := h.b
	pg := httpapi.DelayedPage{Pending: b.delay.Pending()}
	b.delay.StatsLines(func(l string) {
		k, v, _ := strings.Cut(l, " ")
		pg.Counters = append(pg.Counters, [2]string{k, v})
	})
	bounds := make([]int64, len(httpapi.DelayedBuckets))
	for i, d := range httpapi.DelayedBuckets {
		bounds[i] = d.Milliseconds()
	}
	total, answered, asked := b.delay.DueCounts(ctx, time.Now().UnixMilli(), bounds)
	pg.Buckets = httpapi.BucketsOf(total)
	if answered < asked && pg.Pending > 0 {
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
