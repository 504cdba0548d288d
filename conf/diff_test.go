package conf

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDiff: live top-level keys and live topic keys are reported as
// applied; restart-only ones, new and removed topics, and turning TLS or
// auth on are reported as needing a restart and keep their running value
// in Effective. Neither input is modified.
func TestDiff(t *testing.T) {
	cur := Default()
	cur.DataDir = "/var/a"
	cur.NumPartitions = 2
	cur.MaxConnections = 1
	cur.Topics = []Topic{{Name: "t"}, {Name: "gone"}}

	next := *cur
	next.MaxConnections = 3
	next.DiskMaxUsedRatio = 0.95
	next.LogLevel = "debug"
	next.DataDir = "/var/b"
	next.NumPartitions = 5
	no, four := false, 4
	next.Topics = []Topic{{Name: "t", AcceptPublish: &no, NumPartitions: &four}, {Name: "new"}}
	next.Auth = Auth{Enabled: true, Users: []User{{Name: "a", Admin: true}}}
	next.TLS.CertFile = "cert.pem"

	d := cur.Diff(&next)
	require.Equal(t, []string{
		"log_level \"info\" -> \"debug\"",
		"max_connections 1 -> 3",
		"disk_max_used_ratio 0.9 -> 0.95",
		"topic t accept_publish (unset) -> false",
	}, d.Applied)
	restart := strings.Join(d.NeedRestart, "\n")
	require.Contains(t, restart, "data_dir \"/var/a\" -> \"/var/b\"")
	require.Contains(t, restart, "num_partitions 2 -> 5")
	require.Contains(t, restart, "[tls] on/off")
	require.Contains(t, restart, "auth.enabled false -> true")
	require.Contains(t, restart, "topic t num_partitions (unset) -> 4")
	require.Contains(t, restart, "topic new is new: it needs the admin API or a restart")
	require.Contains(t, restart, "topic gone was removed: it needs the admin API or a restart (it keeps running)")
	require.True(t, d.Changed())
	require.True(t, d.Disk)
	require.False(t, d.TLS)

	eff := d.Effective
	require.Equal(t, "/var/a", eff.DataDir, "restart-only values keep running")
	require.Equal(t, 2, eff.NumPartitions)
	require.Equal(t, 3, eff.MaxConnections)
	require.False(t, eff.Auth.Enabled)
	require.False(t, eff.TLS.Enabled())
	require.Equal(t, []string{"t", "gone"}, eff.TopicNames())
	tc, _ := eff.TopicConfig("t")
	require.False(t, tc.AcceptPublish)
	require.Nil(t, eff.Topics[0].NumPartitions)
	require.Equal(t, "/var/b", next.DataDir, "next is not modified")
	require.Len(t, next.Topics, 2)

	require.False(t, cur.Diff(cur).Changed())
}

// TestDiffAuthAndTLS: with auth on in both, limiter settings and users
// (by name, never hashes) are applied; changed live [tls] settings set TLS.
func TestDiffAuthAndTLS(t *testing.T) {
	cur := Default()
	cur.Auth = Auth{Enabled: true, FailureDelay: 100, MaxFailures: 5,
		Users: []User{{Name: "a", Admin: true}, {Name: "b"}, {Name: "c"}}}
	cur.TLS.CertFile = "cert.pem"
	next := *cur
	next.Auth.FailureDelay = 200
	next.Auth.MaxFailures = 10
	next.Auth.Users = []User{{Name: "a"}, {Name: "d"}, {Name: "c"}}
	next.TLS.RequireClientCert = true

	d := cur.Diff(&next)
	require.Empty(t, d.NeedRestart)
	require.Equal(t, []string{
		"auth.failure_delay 100 -> 200",
		"auth.max_failures 5 -> 10",
		"auth users added: d",
		"auth users removed: b",
		"auth users changed: a",
	}, d.Applied)
	require.True(t, d.TLS)
	require.False(t, d.Disk)
	require.Equal(t, next.Auth, d.Effective.Auth)
	require.Equal(t, next.TLS, d.Effective.TLS)
}

// TestKeepRestartOnly: an open topic takes the live attributes of the new
// file and keeps the restart-only ones it was opened with.
func TestKeepRestartOnly(t *testing.T) {
	old := TopicConfig{Name: "t", NumPartitions: 2, UnflushThreshold: 10, UnflushInterval: 1, DataDir: "/a",
		DeletePolicy: "delete,7d", AcceptPublish: true, AcceptSubscribe: true, Stat: true,
		Filters: []TopicFilter{{}}}
	next := TopicConfig{Name: "t", NumPartitions: 5, UnflushThreshold: 20, UnflushInterval: 2, DataDir: "/b",
		DeletePolicy: "delete,1d", AcceptPublish: false, AcceptSubscribe: false, Stat: false}
	got := next.KeepRestartOnly(&old)
	require.Equal(t, TopicConfig{Name: "t", NumPartitions: 2, UnflushThreshold: 10, UnflushInterval: 1, DataDir: "/a",
		DeletePolicy: "delete,1d", Filters: old.Filters}, got)
}
