package timer

import (
	"slices"
	"testing"
)

// TestDueCounts: the window's messages by their due time and the slots'
// by their start, overdue ones in the first bucket, the sum Pending.
func TestDueCounts(t *testing.T) {
	now := int64(100 * SlotMs)
	w := &Wheel{counts: map[int64]int64{}}
	w.window = entryHeap{{Due: now - 5000}, {Due: now + 30_000}, {Due: now + 59_000}}
	for s, n := range map[int64]int64{101: 2, 105: 3, 130: 4, 2000: 5} {
		w.slots = append(w.slots, s)
		w.counts[s] = n
	}
	slices.Sort(w.slots)
	bounds := []int64{60_000, 600_000, 3_600_000, 86_400_000}
	got := w.DueCounts(now, bounds)
	// slot 101 starts 1 min from now: the 1-10 min bucket; 105 too; 130
	// (30 min) the 10 min-1 h one; 2000 (31 h) the last.
	want := []int64{3, 5, 4, 0, 5}
	if !slices.Equal(got, want) {
		t.Fatalf("DueCounts = %v, want %v", got, want)
	}
	var sum int64
	for _, n := range got {
		sum += n
	}
	if sum != w.Pending() {
		t.Fatalf("the buckets hold %d, Pending %d", sum, w.Pending())
	}
}
