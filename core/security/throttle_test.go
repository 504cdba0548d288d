package security

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLogThrottle checks the throttle: one line per key and interval, the
// count of those held back in the next, and a bounded number of keys.
func TestLogThrottle(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	th := newLogThrottle(time.Minute, 3)
	th.now = func() time.Time { return now }
	ok, note := th.allow("a")
	require.True(t, ok)
	require.Empty(t, note)
	for range 4 {
		ok, _ = th.allow("a")
		require.False(t, ok)
	}
	ok, _ = th.allow("b")
	require.True(t, ok, "another key has its own interval")
	now = now.Add(59 * time.Second)
	ok, _ = th.allow("a")
	require.False(t, ok)
	now = now.Add(time.Second)
	ok, note = th.allow("a")
	require.True(t, ok)
	require.Equal(t, " (5 more from a not logged since 03:04:05)", note)
	ok, note = th.allow("a")
	require.False(t, ok)
	require.Empty(t, note)

	ok, _ = th.allow("b")
	require.True(t, ok)
	// Bounded: c fills the map; d and e share the overflow entry.
	ok, _ = th.allow("c")
	require.True(t, ok)
	ok, _ = th.allow("d")
	require.True(t, ok)
	ok, _ = th.allow("e")
	require.False(t, ok, "past maxKeys, new keys share one entry")
	require.Len(t, th.seen, 4) // a, b, c, overflow
	// A minute on, the old entries are pruned (their held-back lines
	// reported with the next line).
	now = now.Add(2 * time.Minute)
	ok, note = th.allow("f")
	require.True(t, ok)
	require.Contains(t, note, "2 more from other addresses not logged")
	require.LessOrEqual(t, len(th.seen), 3)
}
