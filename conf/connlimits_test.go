package conf

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUnauthLimits checks auth_timeout and the caps on unauthenticated
// connections: defaults, auto values, and clear errors for caps that
// would leave no slot to an authenticated client.
func TestUnauthLimits(t *testing.T) {
	parse := func(src string) (*Config, error) {
		return Parse([]byte(src+"\n[[topic]]\nname = \"t\"\n"), "s.toml")
	}
	c, err := parse("")
	require.NoError(t, err)
	require.Equal(t, DefaultAuthTimeout, c.AuthTimeout)
	total, per := c.UnauthLimits()
	require.Equal(t, [2]int{1000, 100}, [2]int{total, per}, "auto: max_connections/10, then a tenth of that")

	for _, tc := range []struct {
		src        string
		total, per int
	}{
		{"max_connections = 1", 1, 1},
		{"max_connections = 50", 5, 1},
		{"max_connections = 100\nmax_unauthenticated_connections = 99", 99, 9},
		{"max_connections = 100\nmax_unauthenticated_per_address = 7", 10, 7},
		{"max_connections = 100\nmax_unauthenticated_connections = 40\nmax_unauthenticated_per_address = 40", 40, 40},
		{"auth_timeout = 0", 1000, 100},
	} {
		c, err := parse(tc.src)
		require.NoError(t, err, tc.src)
		total, per := c.UnauthLimits()
		require.Equal(t, [2]int{tc.total, tc.per}, [2]int{total, per}, tc.src)
	}

	for _, tc := range []struct{ src, want string }{
		{"auth_timeout = -1", "auth_timeout: must be between 0 and 3600000"},
		{"auth_timeout = 3600001", "auth_timeout: must be between 0 and 3600000"},
		{"max_unauthenticated_connections = -1", "max_unauthenticated_connections: must be >= 0"},
		{"max_unauthenticated_per_address = -5", "max_unauthenticated_per_address: must be >= 0"},
		{"max_connections = 100\nmax_unauthenticated_connections = 100", "max_unauthenticated_connections: must be below max_connections (at most 99"},
		{"max_connections = 1\nmax_unauthenticated_connections = 1", "max_unauthenticated_connections: must be below max_connections (at most 0"},
		{"max_connections = 100\nmax_unauthenticated_per_address = 100", "max_unauthenticated_per_address: must be below max_connections (at most 99"},
		{"max_connections = 100\nmax_unauthenticated_connections = 20\nmax_unauthenticated_per_address = 21", "max_unauthenticated_per_address: must be at most max_unauthenticated_connections (20 here), got 21"},
		{"max_connections = 100\nmax_unauthenticated_per_address = 11", "max_unauthenticated_per_address: must be at most max_unauthenticated_connections (10 here), got 11"},
	} {
		_, err := parse(tc.src)
		require.Error(t, err, tc.src)
		require.Contains(t, err.Error(), tc.want, tc.src)
	}
}
