package backoff

import (
	"context"
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	p := Policy{Min: 100 * time.Millisecond, Max: time.Second}
	for n, want := range map[int]time.Duration{-1: 100 * time.Millisecond, 0: 100 * time.Millisecond,
		1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 1 << 30: time.Second} {
		if got := p.Delay(n); got != want {
			t.Errorf("Delay(%d) = %v, want %v", n, got, want)
		}
	}
	if got := (Policy{Min: time.Second, Max: time.Millisecond}).Delay(9); got != time.Second {
		t.Errorf("a Max below Min: %v, want Min", got)
	}
	if got := (Policy{}).Delay(3); got != 0 {
		t.Errorf("zero Policy: %v", got)
	}
	if got := (Policy{Min: time.Hour, Max: 1<<63 - 1}).Delay(1000); got != 1<<63-1 {
		t.Errorf("no overflow: %v", got)
	}
}

func TestJitter(t *testing.T) {
	p := Policy{Min: 100 * time.Millisecond, Max: 400 * time.Millisecond, Jitter: 0.5}
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := p.Delay(3) // 400 ms before jitter
		if d < 200*time.Millisecond || d > 400*time.Millisecond {
			t.Fatalf("Delay(3) = %v, outside [200ms, 400ms]", d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Fatalf("only %d distinct delays in 1000", len(seen))
	}
	if d := (Policy{Min: time.Second, Jitter: 7}).Delay(1); d < 0 || d > time.Second {
		t.Fatalf("Jitter is clamped to 1: %v", d)
	}
}

func TestSleep(t *testing.T) {
	if err := (Policy{Min: time.Millisecond}).Sleep(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := (Policy{Min: time.Hour}).Sleep(ctx, 1); err != context.Canceled {
		t.Fatalf("Sleep on a done ctx = %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("Sleep waited despite a done ctx")
	}
	if err := Sleep(ctx, 0); err != context.Canceled {
		t.Fatalf("Sleep(done, 0) = %v", err)
	}
}
