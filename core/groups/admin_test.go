package groups

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLagMessages: the message lag is exact at the end and from the start,
// and estimated from the mean record size in between.
func TestLagMessages(t *testing.T) {
	s := PartSize{Min: 1000, Max: 11000, Msgs: 100} // 100-byte records on average
	require.Equal(t, int64(0), s.lagMessages(11000))
	require.Equal(t, int64(0), s.lagMessages(12000))
	require.Equal(t, int64(100), s.lagMessages(1000))
	require.Equal(t, int64(100), s.lagMessages(0)) // below min: every message
	require.Equal(t, int64(50), s.lagMessages(6000))
	require.Equal(t, int64(1), s.lagMessages(10900))
	require.Equal(t, int64(0), PartSize{Min: 0, Max: 500, Msgs: -1}.lagMessages(100), "count not known yet")
}
