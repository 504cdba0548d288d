package queuecheck

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCheck: each kind of problem is found, and a clean history is OK.
func TestCheck(t *testing.T) {
	h := New()
	h.Send("a", "p0", "v1", Acked, 0)
	h.Send("a", "p0", "v2", Acked, 10)
	h.Send("a", "p0", "v3", Failed, 0)
	h.Send("b", "p1", "w1", Unknown, 0)
	h.Read("p0", 0, "v1")
	h.Read("p0", 10, "v2")
	h.Read("p0", 20, "v3") // a failed send may appear
	h.Read("p1", 0, "w1")
	h.ReadEnd("p0", 30)
	r := h.Check()
	require.True(t, r.OK(), r.String())
	require.Equal(t, 4, r.Sends)
	require.Equal(t, 2, r.Acked)

	h = New()
	h.Send("a", "p0", "v1", Acked, 0)
	h.Send("a", "p0", "v2", Acked, 10)  // lost in a hole
	h.Send("a", "p0", "v3", Acked, 20)  // read elsewhere
	h.Send("a", "p0", "v4", Acked, 5)   // reordered after v3... and v2
	h.Send("a", "p0", "v5", Acked, 100) // lost tail
	h.Read("p0", 0, "v1")
	h.Read("p0", 0, "x") // conflict, unexpected
	h.Read("p0", 30, "v3")
	h.Read("p0", 5, "v4")
	h.Read("p0", 40, "v4") // duplicate
	h.Read("p0", 50, "zz") // unexpected
	h.ReadEnd("p0", 60)
	r = h.Check()
	require.False(t, r.Safe(), r.String())
	require.Len(t, r.LostHoles, 1, r.String())
	require.Equal(t, "v2", r.LostHoles[0].Value)
	require.Len(t, r.LostTail, 1, r.String())
	require.Equal(t, "v5", r.LostTail[0].Value)
	require.Len(t, r.WrongOffset, 1, r.String())
	require.Len(t, r.Conflicts, 1, r.String())
	require.Len(t, r.Duplicates, 1, r.String())
	require.Len(t, r.Reordered, 1, r.String())
	require.Len(t, r.Unexpected, 1, r.String()) // "x" was never stored at a new offset
	require.Contains(t, r.String(), "lost (holes)")
}
