package conf

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHTTPAllowedHosts: http_allowed_hosts takes names, IP addresses and
// "*"; entries with a scheme, a port, a path or a wildcard label are
// refused (TestValidationErrors has the messages).
func TestHTTPAllowedHosts(t *testing.T) {
	c, err := Parse([]byte(`http_allowed_hosts = ["broker1.example.com", "Broker2.Example.COM.", "10.0.0.5", "::1", "fe80::1%eth0", "*", "my_host"]`+"\n"+oneTopic), "s.toml")
	require.NoError(t, err)
	require.Len(t, c.HTTPAllowedHosts, 7)
	require.Empty(t, Default().HTTPAllowedHosts)
	for _, h := range []string{"", "a b", "a.example:80", "[::1]", "http://a", "a/b", "*.a", "a..b", ".a", strings.Repeat("a", 64) + ".b", strings.Repeat("a.", 127) + "bc", "é.example"} {
		require.False(t, ValidAllowedHost(h), "%q", h)
	}
	for _, h := range []string{"a", "a.b", "a-b.c.", "127.0.0.1", "::1", "*", strings.Repeat("a", 63)} {
		require.True(t, ValidAllowedHost(h), "%q", h)
	}
}
