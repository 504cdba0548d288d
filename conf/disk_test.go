package conf

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDiskMaxUsedRatio(t *testing.T) {
	c, err := Parse([]byte(oneTopic), "server.toml")
	require.NoError(t, err)
	require.Equal(t, 0.90, c.DiskMaxUsedRatio)

	for src, want := range map[string]float64{
		"disk_max_used_ratio = 0.75\n": 0.75,
		"disk_max_used_ratio = 1\n":    1, // an integer is a number too
		"disk_max_used_ratio = 1.0\n":  1,
		"disk_max_used_ratio = 1e-2\n": 0.01,
	} {
		c, err := Parse([]byte(src+oneTopic), "server.toml")
		require.NoError(t, err, src)
		require.Equal(t, want, c.DiskMaxUsedRatio, src)
	}

	for src, msg := range map[string]string{
		"disk_max_used_ratio = 90\n":      "server.toml:1: disk_max_used_ratio: must be a fraction greater than 0 and at most 1 (0.90 = 90%; 1 = never refuse puts), got 90",
		"disk_max_used_ratio = 0\n":       "server.toml:1: disk_max_used_ratio: must be a fraction greater than 0 and at most 1 (0.90 = 90%; 1 = never refuse puts), got 0",
		"disk_max_used_ratio = -0.5\n":    "server.toml:1: disk_max_used_ratio: must be a fraction greater than 0 and at most 1 (0.90 = 90%; 1 = never refuse puts), got -0.5",
		"disk_max_used_ratio = 1.01\n":    "server.toml:1: disk_max_used_ratio: must be a fraction greater than 0 and at most 1 (0.90 = 90%; 1 = never refuse puts), got 1.01",
		"disk_max_used_ratio = nan\n":     "server.toml:1: disk_max_used_ratio: must be a finite number, got NaN",
		"disk_max_used_ratio = -inf\n":    "server.toml:1: disk_max_used_ratio: must be a finite number, got -Inf",
		"disk_max_used_ratio = \"90%\"\n": `server.toml:1: disk_max_used_ratio: must be a number, got string "90%"`,
	} {
		require.Equal(t, msg, parseErr(t, src+oneTopic).Error(), src)
	}

	// A flag-style override is validated too.
	c.DiskMaxUsedRatio = 2
	require.ErrorContains(t, c.Validate(), "disk_max_used_ratio: must be a fraction greater than 0 and at most 1")

	// The effective configuration shows it.
	c.DiskMaxUsedRatio = 0.85
	require.Contains(t, string(c.Redacted()), "disk_max_used_ratio = 0.85\n")
}
