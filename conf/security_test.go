package conf

import (
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/stretchr/testify/require"
)

const securitySrc = `
tls_port = 8443
[zookeeper]
connect = "zk1:2181"
auth_user = "broker"
auth_password = "zk-secret"
[tls]
cert_file = "c.pem"
key_file = "k.pem"
[auth]
enabled = true
[[auth.user]]
name = "alice"
password_hash = "$2a$10$abcdefghijklmnopqrstuv"
publish = ["orders*"]
subscribe = ["*"]
[[plugin]]
kind = "offsetstore"
name = "mysql"
env = ["MYSQL_PWD=hunter2"]
[plugin.config]
dsn = "u:pw@tcp(127.0.0.1:3306)/db"
[[topic]]
name = "orders"
  [[topic.filter]]
  group = "g"
  filter = "attribute"
  [topic.filter.config]
  equals = "red"
`

func TestRedacted(t *testing.T) {
	c, err := Parse([]byte(securitySrc), "s.toml")
	require.NoError(t, err)
	c.Port = 9999 // a flag override shows up
	out := string(c.Redacted())
	for _, secret := range []string{"zk-secret", "hunter2", "u:pw@", "abcdefghijklmnop", "zk1:2181"} {
		require.NotContains(t, out, secret)
	}
	require.Contains(t, out, `"MYSQL_PWD=<redacted>"`)
	require.Contains(t, out, `"<redacted>"`)
	require.Contains(t, out, "port = 9999")
	require.Contains(t, out, `auth_user = "broker"`)
	require.Contains(t, out, `equals = "red"`, "filter config is not secret")
	// The redacted rendering is TOML that names the same keys.
	var m map[string]any
	_, err = toml.Decode(out, &m)
	require.NoError(t, err)
	require.Contains(t, m, "max_buffered_bytes")
}

func TestSecurityValidate(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[tls]\nkey_file = \"k\"", "tls.cert_file: is required"},
		{"[tls]\ncert_file = \"c\"\nkey_file = \"k\"", "tls_port: must be set"},
		{"tls_port = 1\n", "tls_port: needs [tls]"},
		{"[tls]\ncert_file = \"c\"\nkey_file = \"k\"\nmin_version = \"1.1\"\n", `tls.min_version: must be "1.2" or "1.3"`},
		{"[auth]\nenabled = true", "at least one [[auth.user]]"},
		{"[[auth.user]]\nname = \"a\"\npassword_hash = \"plain\"", "must be a bcrypt hash"},
		{"[[auth.user]]\nname = \"a\"\npublish = [\"a*b\"]", `may only end a pattern`},
		{"[[auth.user]]\nname = \"a\"\n[[auth.user]]\nname = \"a\"", "duplicate user"},
		{"[auth]\nenabld = true", `did you mean "enabled"`},
		{"max_connections = 0", "max_connections: must be >= 1"},
		{"max_buffered_bytes = 10", "max_buffered_bytes: must be >="},
		{"[zookeeper]\nauth_user = \"u\"", "auth_user and auth_password go together"},
		{"[auth]\nmax_failures = -1", "auth.max_failures: must be between 0 and 1000"},
		{"[auth]\nmax_failures = 1001", "auth.max_failures: must be between 0 and 1000"},
		{"[auth]\nlockout = 0", "auth.lockout: must be >= 1 when max_failures is set"},
		{"[auth]\nlockout = 3600001", "auth.lockout: must be between 0 and 3600000"},
		{"[auth]\nlockout = 5000\nmax_lockout = 4000", "auth.max_lockout: must be >= auth.lockout (5000), got 4000"},
		{"[auth]\nmax_lockout = 3600001", "auth.max_lockout: must be between 0 and 3600000"},
		{"[auth]\nfailure_window = 1000", "auth.failure_window: must be >= auth.max_lockout (60000), got 1000"},
		{"[auth]\nfailure_window = -1", "auth.failure_window: must be between 0 and 86400000"},
	} {
		_, err := Parse([]byte(tc.src+"\n[[topic]]\nname = \"t\"\n"), "s.toml")
		require.Error(t, err, tc.src)
		require.Contains(t, err.Error(), tc.want, tc.src)
	}
}

// TestAuthLimiterKeys checks the [auth] limiter keys: defaults, and values
// that pass (0 turns the limiter off, other keys then unchecked but in range).
func TestAuthLimiterKeys(t *testing.T) {
	c, err := Parse([]byte("[[topic]]\nname = \"t\"\n"), "s.toml")
	require.NoError(t, err)
	limits := func(a Auth) [4]int { return [4]int{a.MaxFailures, a.Lockout, a.MaxLockout, a.FailureWindow} }
	require.Equal(t, [4]int{5, 1000, 60000, 900000}, limits(c.Auth))
	c, err = Parse([]byte("[auth]\nmax_failures = 3\nlockout = 50\nmax_lockout = 50\nfailure_window = 50\n[[topic]]\nname = \"t\"\n"), "s.toml")
	require.NoError(t, err)
	require.Equal(t, [4]int{3, 50, 50, 50}, limits(c.Auth))
	c, err = Parse([]byte("[auth]\nmax_failures = 0\nlockout = 0\nmax_lockout = 0\nfailure_window = 0\n[[topic]]\nname = \"t\"\n"), "s.toml")
	require.NoError(t, err)
	require.Zero(t, c.Auth.MaxFailures)
}

func TestMatchName(t *testing.T) {
	u := User{Publish: []string{"orders*", "audit"}, Groups: []string{"*"}}
	require.True(t, u.CanPublish("orders"))
	require.True(t, u.CanPublish("orders-eu"))
	require.True(t, u.CanPublish("audit"))
	require.False(t, u.CanPublish("audit2"))
	require.False(t, u.CanSubscribe("orders"))
	require.True(t, u.CanUseGroup("anything"))
	require.True(t, (&User{Admin: true}).CanSubscribe("x"))
	require.False(t, strings.Contains(string(Default().Redacted()), Redacted), "defaults hold no secret")
}
