package security

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/logx"
)

// TestAdmission checks the admission policy on its own: the oldest of an
// address, then of all, makes room; max_connections evicts the oldest
// other than the new one; expired takes out those past the cutoff.
func TestAdmission(t *testing.T) {
	t.Parallel()
	logs := &testLog{}
	s := NewAdmission[int](slog.New(logx.PrintfHandler(logs.Logf)))
	t0 := time.Unix(1000, 0)
	require.Empty(t, s.admit(1, "10.0.0.1:1", t0, 3, 2))
	require.Empty(t, s.admit(2, "10.0.0.1:2", t0.Add(time.Second), 3, 2))
	ev := s.admit(3, "10.0.0.1:3", t0.Add(2*time.Second), 3, 2)
	require.Equal(t, []Eviction[int]{{1, "max_unauthenticated_per_address 2"}}, ev)
	require.Empty(t, s.admit(4, "10.0.0.2:1", t0.Add(3*time.Second), 3, 2))
	ev = s.admit(5, "10.0.0.3:1", t0.Add(4*time.Second), 3, 2)
	require.Equal(t, []Eviction[int]{{2, "max_unauthenticated_connections 3"}}, ev)
	require.Equal(t, 3, s.Len())

	e, ok := s.evictOldest(3, 10)
	require.True(t, ok)
	require.Equal(t, Eviction[int]{4, "max_connections 10"}, e)
	require.True(t, s.Remove(5))
	require.False(t, s.Remove(5))
	_, ok = s.evictOldest(3, 10)
	require.False(t, ok, "only the kept one is left")

	require.Empty(t, s.expired(t0.Add(2*time.Second)))
	require.Equal(t, []int{3}, s.expired(t0.Add(2*time.Second+1)))
	require.Zero(t, s.Len())

	err := s.Evicted("10.0.0.1:3", "max_connections 10")
	require.EqualError(t, err, "unauthenticated connection closed to make room for a newer one (max_connections 10)")
	s.TimedOut("10.0.0.1:4", &AuthTimeoutError{Timeout: 50})
	require.EqualValues(t, 1, s.Evictions())
	require.EqualValues(t, 1, s.Timeouts())
	require.Contains(t, logs.String(), "conn 10.0.0.1:3: unauthenticated connection closed to make room for a newer one (max_connections 10)\n")
	require.NotContains(t, logs.String(), "10.0.0.1:4", "throttled: one line per address and minute")

	// Enter: max_connections evicts the oldest unauthenticated connection;
	// when every slot is authenticated, the new one is refused.
	conns := map[int]struct{}{}
	l := Limits{MaxConnections: 2, Total: 5, PerAddr: 5}
	for i, tc := range []struct {
		unauth  bool
		evicted []Eviction[int]
		ok      bool
	}{
		{false, nil, true},
		{true, nil, true},
		{true, []Eviction[int]{{2, "max_connections 2"}}, true},
		{false, []Eviction[int]{{3, "max_connections 2"}}, true},
		{true, nil, false},
	} {
		ev, ok := s.Enter(conns, i+1, tc.unauth, "10.0.0.9:1", t0.Add(time.Duration(i)*time.Second), l)
		require.Equal(t, tc.evicted, ev, "connection %d", i+1)
		require.Equal(t, tc.ok, ok, "connection %d", i+1)
	}
	require.Equal(t, map[int]struct{}{1: {}, 4: {}}, conns)
	require.Zero(t, s.Len())
}
