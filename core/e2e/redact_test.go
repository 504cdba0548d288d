package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// TestStatsConfigRedacted runs the real broker with the mysql offset-store
// plugin on a real MariaDB (its DSN holds the password) and checks that
// `stats config` shows the effective configuration with every secret as
// <redacted>: the DSN, the plugin's env values.
func TestStatsConfigRedacted(t *testing.T) {
	t.Parallel()
	srv := testsvc.SharedMariaDB(t)
	dsn := srv.NewDatabase(t)
	plugin := testsvc.GoBuild(t, "github.com/metaq-go/metaq/cmd/metaq-offsetstore-mysql")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "server.toml")
	require.NoError(t, os.WriteFile(cfg, []byte(`
offset_store = "mysql"
[[plugin]]
kind = "offsetstore"
name = "mysql"
path = "`+plugin+`"
env = ["METAQ_TEST_TOKEN=tok-5ecret"]
[plugin.config]
dsn = "`+dsn+`"
[[topic]]
name = "t"
`), 0o644))
	p := startServer(t, cfg, filepath.Join(dir, "data"))
	c := dial(t, p.Addr)

	// The DSN is real: a commit goes through the plugin to MariaDB.
	op := c.nextOpaque()
	r := ok(t)(c.call(protocol.AppendCommit(nil, "g", []protocol.OffsetEntry{{Topic: "t", Offset: 0, MsgID: -1}}, op), op))
	require.Equal(t, "1", string(r.Body))

	r = ok(t)(c.stats("config"))
	body := string(r.Body)
	require.NotContains(t, body, srv.Password())
	require.NotContains(t, body, dsn)
	require.NotContains(t, body, "tok-5ecret")
	require.Contains(t, body, `dsn = "<redacted>"`)
	require.Contains(t, body, `"METAQ_TEST_TOKEN=<redacted>"`)
	// It is the effective config: the flags' port 0 and data dir show.
	require.Contains(t, body, "port = 0")
	require.Contains(t, body, filepath.Join(dir, "data"))
	require.True(t, strings.Contains(body, `name = "t"`))
}
