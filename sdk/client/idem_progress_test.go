package client

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestIdemProgressWait: a store of sequence s wakes the retry of s + 1 of
// its producer only (not s + 2, nor another producer's); a store since a
// retry's last attempt (mark) that made it its turn skips one pause, not
// more; ctx ends a wait; waiting leaves nothing behind.
func TestIdemProgressWait(t *testing.T) {
	var g idemProgress
	const id, other = 7, 8
	long := time.Minute
	woke := func(seq, seen int64) chan error {
		ch := make(chan error, 1)
		go func() { ch <- g.wait(context.Background(), id, seq, seen, long) }()
		return ch
	}
	waiting := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			e := g.at[id]
			return e != nil && len(e.waiting) == n
		}, 10*time.Second, time.Millisecond)
	}
	w3, w4 := woke(3, noMark), woke(4, noMark)
	waiting(2)
	g.stored(other, 1, time.Now())
	g.stored(id, 1, time.Now()) // not 3's turn yet
	g.stored(id, 2, time.Now())
	require.NoError(t, <-w3)
	select {
	case err := <-w4:
		t.Fatalf("sequence 4 woken by the store of 2: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	g.stored(id, 3, time.Now())
	require.NoError(t, <-w4)

	// Stored since the last attempt (mark 2), and it is 4's turn: no
	// pause; marked again after it (3), a pause.
	require.Equal(t, int64(3), g.mark(id))
	start := time.Now()
	require.NoError(t, g.wait(context.Background(), id, 4, 2, long))
	require.Less(t, time.Since(start), 10*time.Second)
	require.NoError(t, g.wait(context.Background(), id, 4, 3, 10*time.Millisecond))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.wait(ctx, id, 9, noMark, long) }()
	waiting(1)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)

	// A producer only waited for leaves no entry; a stored one keeps
	// its time, without waiters.
	require.NoError(t, g.wait(context.Background(), 99, 5, noMark, time.Millisecond))
	g.mu.Lock()
	defer g.mu.Unlock()
	require.NotContains(t, g.at, int64(99))
	require.Empty(t, g.at[id].waiting)
	require.False(t, g.at[id].at.IsZero())
}
