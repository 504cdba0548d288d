package timer

import "sort"

// DueCounts counts the pending messages (as Pending does) by due time
// from now: counts[i] those due before now+bounds[i] and not in an
// earlier bucket, counts[len(bounds)] the later ones; overdue messages
// fall in the first. bounds (ms, ascending) apply to each message in the
// window and to each slot on disk by the slot's start, so the buckets are
// exact to the minute. It costs one pass over the window and the slot
// numbers: call it on demand, from the wheel's goroutine.
func (w *Wheel) DueCounts(now int64, bounds []int64) []int64 {
	counts := make([]int64, len(bounds)+1)
	bucket := func(due int64) int {
		return sort.Search(len(bounds), func(i int) bool { return due < now+bounds[i] })
	}
	for _, e := range w.window {
		counts[bucket(e.Due)]++
	}
	for _, s := range w.slots {
		counts[bucket(max(s*SlotMs, now))] += w.counts[s]
	}
	return counts
}
