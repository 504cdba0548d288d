package partition

import (
	"fmt"
	"sync/atomic"
	"time"
)

// A topic's realtime statistics (MetaQ's `stats realtime` and
// `stats <topic>`, reference §12): the put, get and offset requests, the
// misses and failures, and the message sizes since the last
// `stats reset`, counted only for topics with stat = true. The broker
// counts them on the put and get paths (atomic adds, no allocation) and
// renders them.

// Stat is one realtime statistic: how many events and the sum of their
// values.
type Stat struct{ count, value atomic.Int64 }

// Add counts one event of value v.
func (s *Stat) Add(v int64) { s.count.Add(1); s.value.Add(v) }

func (s *Stat) reset() { s.count.Store(0); s.value.Store(0) }

// Format renders MetaQ's realtime line value, since the last reset.
func (s *Stat) Format(since time.Duration) string {
	c, v := s.count.Load(), s.value.Load()
	if c == 0 {
		return "null"
	}
	secs := max(int64(since/time.Second), 1)
	return fmt.Sprintf("Count=%d,Value=%d,Value/Count=%d,Count/Duration=%d,Duration=%d", c, v, v/c, c/secs, secs)
}

// Realtime are a topic's realtime statistics.
type Realtime struct {
	Put, Get, Offset, GetMiss, PutFailed, Size Stat
}

// RealtimeNames name the statistics of All, in its order, as the stats
// lines do.
var RealtimeNames = [...]string{"put", "get", "offset", "get_miss", "put_failed", "message_size"}

// All are the statistics in RealtimeNames' order.
func (r *Realtime) All() [6]*Stat {
	return [6]*Stat{&r.Put, &r.Get, &r.Offset, &r.GetMiss, &r.PutFailed, &r.Size}
}

// Reset clears the statistics (`stats reset`).
func (r *Realtime) Reset() {
	for _, s := range r.All() {
		s.reset()
	}
}

// AddTo adds r's statistics to sum (`stats realtime` sums the topics).
func (r *Realtime) AddTo(sum *Realtime) {
	dst := sum.All()
	for i, s := range r.All() {
		dst[i].count.Add(s.count.Load())
		dst[i].value.Add(s.value.Load())
	}
}
