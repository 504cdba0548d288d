package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/broker"
	"github.com/metaq-go/metaq/internal/brokertest"
)

// TestServerPortZero checks that port 0 picks a free port, as
// cmd/metaq-server's --port flag and Broker.Start document.
func TestServerPortZero(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	toml := fmt.Sprintf("data_dir = %q\n[[topic]]\nname = \"z\"\n", filepath.Join(dir, "data"))

	t.Run("metaq-server --port 0", func(t *testing.T) {
		config := filepath.Join(dir, "server.toml")
		require.NoError(t, os.WriteFile(config, []byte(toml), 0o644))
		p, err := brokertest.Launch(brokertest.ServerBinary(t), nil, "--config", config, "--port", "0", "--host", "127.0.0.1")
		require.NoError(t, err)
		defer p.Kill()
		c := dial(t, p.Addr)
		ok(t)(c.stats(""))
	})

	t.Run("broker.Start with port 0", func(t *testing.T) {
		cfg, err := conf.Parse([]byte(toml), "server.toml")
		require.NoError(t, err)
		cfg.Port = 0
		cfg.DataDir = filepath.Join(dir, "data2")
		b, err := broker.New(cfg, broker.Options{Logf: (&logBuf{}).Logf})
		require.NoError(t, err)
		defer b.Close()
		require.NoError(t, b.Start())
		c := dial(t, b.Addr())
		ok(t)(c.stats(""))
	})
}
