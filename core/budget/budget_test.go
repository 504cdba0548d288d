package budget

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBudget(t *testing.T) {
	t.Parallel()
	bg := New(1 << 20) // shared 768 KiB, reserve 256 KiB
	closed := make(chan struct{})
	big := &Conn{bg: bg, wait: time.Minute, closed: closed}
	small := &Conn{bg: bg, wait: 50 * time.Millisecond, closed: closed}

	// A large holder fills the shared part and then waits.
	require.NoError(t, big.Grow(700<<10))
	require.False(t, big.MayRead() && bg.used.Load() > bg.shared.Load())
	got := make(chan error, 1)
	go func() { got <- big.Grow(100 << 10) }()
	select {
	case err := <-got:
		t.Fatalf("grow past the shared part returned %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	// A small holder still gets memory from the reserve.
	require.NoError(t, small.Grow(32<<10))
	small.Queued(16 << 10)
	require.True(t, small.MayRead())
	// Freeing wakes the waiting large holder.
	big.Shrink(300 << 10)
	require.NoError(t, <-got)
	require.Equal(t, int64(500<<10+48<<10), bg.used.Load())

	// Nothing fits: a small holder gives up after its wait.
	big.Queued(int(bg.limit.Load() - bg.used.Load()))
	require.ErrorIs(t, small.Grow(4096), ErrWait)
	// A closed connection stops waiting.
	go func() { got <- big.Grow(4096) }()
	close(closed)
	require.ErrorIs(t, <-got, ErrClosed)

	// The large holder may not read its next request while the budget
	// is spent; it may once memory is freed.
	require.False(t, big.MayRead())
	big.Shrink(int(big.held.Load()))
	small.Shrink(int(small.held.Load()))
	require.Zero(t, bg.used.Load())
	require.True(t, big.MayRead())
}
