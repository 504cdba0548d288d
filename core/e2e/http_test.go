package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/brokertest"
)

var httpLine = regexp.MustCompile(`serving HTTP on http://(\S+) `)

// TestServerHTTP runs the real metaq-server: with port 0 and no http_port
// its HTTP listener is on a free port (logged) and serves /readyz and
// /metrics; --http-port 0 turns it off; SIGINT stops it cleanly.
func TestServerHTTP(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	config := filepath.Join(dir, "server.toml")
	require.NoError(t, os.WriteFile(config, []byte(fmt.Sprintf("data_dir = %q\n[[topic]]\nname = \"h\"\n", filepath.Join(dir, "data"))), 0o644))
	bin := brokertest.ServerBinary(t)

	p, err := brokertest.Launch(bin, nil, "--config", config, "--port", "0", "--host", "127.0.0.1")
	require.NoError(t, err)
	defer p.Kill()
	m := httpLine.FindStringSubmatch(p.Logs.String())
	require.NotNil(t, m, "no HTTP line in:\n%s", p.Logs.String())
	hc := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (int, string) {
		resp, err := hc.Get("http://" + m[1] + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/readyz")
	require.Equal(t, 200, code, body)
	code, body = get("/metrics")
	require.Equal(t, 200, code)
	require.Contains(t, body, `metaq_topic_partitions{topic="h"} 1`)
	p.Stop(t)

	p, err = brokertest.Launch(bin, nil, "--config", config, "--port", "0", "--host", "127.0.0.1", "--http-port", "0")
	require.NoError(t, err)
	defer p.Kill()
	require.False(t, strings.Contains(p.Logs.String(), "serving HTTP"), "HTTP on with --http-port 0:\n%s", p.Logs.String())
	p.Stop(t)
}
