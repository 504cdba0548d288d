package httpapi

import (
	"context"
	"reflect"
	"testing"
	"time"
)

// fakeDelayed is a DelayedSource: its counts, and how many of its timer
// loops answered.
type fakeDelayed struct {
	pending         int64
	total           []int64
	answered, asked int
	gotNow          int64
	gotBounds       []int64
}

func (f *fakeDelayed) Pending() int64 { return f.pending }

func (f *fakeDelayed) StatsLines(line func(string)) {
	line("delayed_pending 7")
	line("delayed_cancels 2")
}

func (f *fakeDelayed) DueCounts(_ context.Context, now int64, bounds []int64) ([]int64, int, int) {
	f.gotNow, f.gotBounds = now, bounds
	return f.total, f.answered, f.asked
}

// TestBuildDelayedPage: the page's buckets are the source's counts under
// DelayedBuckets' bounds in milliseconds from now, its counters the stats
// lines split at the first space, and a note only when a timer loop did
// not answer while messages are pending.
func TestBuildDelayedPage(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_123)
	src := &fakeDelayed{pending: 7, total: []int64{1, 2, 0, 3, 1}, answered: 2, asked: 2}
	pg := BuildDelayedPage(context.Background(), src, now)
	if src.gotNow != now.UnixMilli() || !reflect.DeepEqual(src.gotBounds, []int64{60_000, 600_000, 3_600_000, 86_400_000}) {
		t.Fatalf("DueCounts(%d, %v)", src.gotNow, src.gotBounds)
	}
	if pg.Pending != 7 || pg.Note != "" || len(pg.Buckets) != len(DelayedLabels) {
		t.Fatalf("%+v", pg)
	}
	for i, b := range pg.Buckets {
		if b.Label != DelayedLabels[i] || b.Messages != src.total[i] {
			t.Fatalf("bucket %d: %+v", i, b)
		}
	}
	if want := [][2]string{{"delayed_pending", "7"}, {"delayed_cancels", "2"}}; !reflect.DeepEqual(pg.Counters, want) {
		t.Fatalf("counters %v", pg.Counters)
	}
	src.answered = 1
	if pg := BuildDelayedPage(context.Background(), src, now); pg.Note == "" {
		t.Fatal("no note with a timer loop silent")
	}
	src.pending = 0
	if pg := BuildDelayedPage(context.Background(), src, now); pg.Note != "" {
		t.Fatalf("note %q with nothing pending", pg.Note)
	}
}
