package partition

import (
	"testing"
	"time"
)

// TestRealtime: a statistic renders as MetaQ's realtime value, the topics
// sum, and a reset clears them.
func TestRealtime(t *testing.T) {
	var a, b, sum Realtime
	if got := a.Put.Format(time.Second); got != "null" {
		t.Fatalf("no events: %q", got)
	}
	a.Put.Add(10)
	a.Put.Add(20)
	b.Put.Add(30)
	b.GetMiss.Add(1)
	a.AddTo(&sum)
	b.AddTo(&sum)
	if got, want := sum.Put.Format(2*time.Second), "Count=3,Value=60,Value/Count=20,Count/Duration=1,Duration=2"; got != want {
		t.Fatalf("put: %q, want %q", got, want)
	}
	if got, want := sum.All()[3].Format(0), "Count=1,Value=1,Value/Count=1,Count/Duration=1,Duration=1"; got != want {
		t.Fatalf("%s: %q, want %q", RealtimeNames[3], got, want)
	}
	sum.Reset()
	for i, s := range sum.All() {
		if got := s.Format(time.Second); got != "null" {
			t.Fatalf("%s after reset: %q", RealtimeNames[i], got)
		}
	}
}
