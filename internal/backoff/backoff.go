// Package backoff is the one retry delay of the module: exponential, capped,
// with optional jitter, and context aware.
//
//	p := backoff.Policy{Min: 50 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.25}
//	for n := 1; ; n++ {
//		if err := try(); err == nil {
//			break
//		}
//		if err := p.Sleep(ctx, n); err != nil {
//			return err // ctx is done
//		}
//	}
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is an exponential backoff. The delay before retry n (n >= 1, the
// number of failures so far) is Min·2^(n-1), capped at Max, less a random
// part of it of at most Jitter (0 to 1): with Jitter 0.5 it is uniform in
// [d/2, d].
type Policy struct {
	// Min is the first delay (> 0).
	Min time.Duration
	// Max caps the delay; a Max below Min is Min.
	Max time.Duration
	// Jitter is the largest fraction of a delay removed at random, so that
	// clients failing together do not retry together. 0 is none; it is
	// clamped to [0, 1].
	Jitter float64
}

// Delay returns the wait before retry n; n < 1 counts as 1.
func (p Policy) Delay(n int) time.Duration {
	if p.Min <= 0 {
		return 0
	}
	hi := max(p.Max, p.Min)
	d := p.Min
	for i := 1; i < n && d < hi; i++ {
		if d > hi/2 {
			d = hi // and no overflow
			break
		}
		d *= 2
	}
	j := min(max(p.Jitter, 0), 1)
	if j == 0 {
		return d
	}
	if r := time.Duration(float64(d) * j); r > 0 {
		d -= rand.N(r + 1)
	}
	return d
}

// Sleep waits Delay(n), or until ctx is done, which it reports as ctx's
// error.
func (p Policy) Sleep(ctx context.Context, n int) error {
	return Sleep(ctx, p.Delay(n))
}

// Sleep waits d, or until ctx is done, which it reports as ctx's error. A
// d <= 0 returns at once (ctx's error if it is done).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
