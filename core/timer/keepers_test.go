package timer

import (
	"fmt"
	"testing"
	"time"

	"github.com/metaq-go/metaq/core/store"
)

// TestKeepers: Retain asks each partition's Keeper for its keep offset,
// logs a partition's held segments once per change, and forgets the
// Keeper of a log that closed.
func TestKeepers(t *testing.T) {
	t.Parallel()
	tl := openTestLog(t, t.TempDir())
	defer tl.l.Close()
	tl.message(1 << 50) // pending: the keep offset stays at 0
	var lines []string
	logf := func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) }
	held := 2
	var keeps []int64
	retain := func(name string, parts []*store.Log, retainFor time.Duration, now time.Time,
		keep func(p int, l *store.Log) (int64, error)) (bool, []int) {
		if name != "_timer" || len(parts) != 1 || retainFor != time.Hour {
			t.Fatalf("retain(%s, %d parts, %v)", name, len(parts), retainFor)
		}
		k, err := keep(0, parts[0])
		if err != nil {
			t.Fatal(err)
		}
		keeps = append(keeps, k)
		return true, []int{held}
	}
	var k Keepers
	for range 2 {
		if !k.Retain("_timer", []*store.Log{tl.l}, time.Hour, time.Now(), retain, logf) {
			t.Fatal("Retain = false, want retain's true")
		}
	}
	if len(keeps) != 2 || keeps[0] != 0 || keeps[1] != 0 {
		t.Fatalf("keep offsets %v, want [0 0] (a pending message at 0)", keeps)
	}
	want := "retention _timer-0: 2 segment(s) older than 1h0m0s kept: they hold delayed messages not delivered yet (from offset 0)"
	if len(lines) != 1 || lines[0] != want {
		t.Fatalf("lines %q, want once %q", lines, want)
	}
	held = 0
	k.Retain("_timer", []*store.Log{tl.l}, time.Hour, time.Now(), retain, logf)
	if len(lines) != 1 {
		t.Fatalf("held back to 0 logged %q", lines[1:])
	}
	k.Retain("_timer", nil, time.Hour, time.Now(), func(string, []*store.Log, time.Duration, time.Time,
		func(int, *store.Log) (int64, error)) (bool, []int) {
		return false, nil
	}, logf)
	if len(k.keepers) != 0 || len(k.held) != 0 {
		t.Fatalf("a closed log's keeper kept: %d keepers, %d held", len(k.keepers), len(k.held))
	}
}
