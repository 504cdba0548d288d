package e2e

import (
	"fmt"
	"github.com/metaq-go/metaq/internal/testsvc"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBrokerSIGKILLLeavesNoPlugins runs the real metaq-server with a filter
// plugin and an offset-store plugin, SIGKILLs the broker, and checks that no
// plugin process outlives it (Pdeathsig, with the plugins' parent watch as
// the backstop).
func TestBrokerSIGKILLLeavesNoPlugins(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pluginDir := filepath.Join(dir, "plugins")
	require.NoError(t, os.MkdirAll(pluginDir, 0o755))
	for _, name := range []string{"filter-plugin", "offsetstore-plugin"} {
		testsvc.GoBuildTo(t, "github.com/metaq-go/metaq/examples/"+name, filepath.Join(pluginDir, name))
	}
	config := filepath.Join(dir, "server.toml")
	require.NoError(t, os.WriteFile(config, []byte(fmt.Sprintf(`
plugin_dir = %q
offset_store = "jsonl"

[[plugin]]
kind = "filter"
name = "attr-regexp"
path = "filter-plugin"

[[plugin]]
kind = "offsetstore"
name = "jsonl"
path = "offsetstore-plugin"
[plugin.config]
path = %q

[[topic]]
name = "t"
  [[topic.filter]]
  group = "eu"
  filter = "attr-regexp"
  [topic.filter.config]
  match = "^eu-"
`, pluginDir, filepath.Join(dir, "offsets.jsonl"))), 0o644))

	p := startServer(t, config, filepath.Join(dir, "data"))
	c := dial(t, p.Addr)
	r := ok(t)(c.stats("plugins"))
	var pids []int
	for _, line := range statsLines(t, r.Body) {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "pid" {
				pid, err := strconv.Atoi(f[i+1])
				require.NoError(t, err, line)
				pids = append(pids, pid)
			}
		}
	}
	require.Len(t, pids, 2, "stats plugins:\n%s", r.Body)
	for _, pid := range pids {
		require.True(t, alive(pid), "plugin %d not running", pid)
	}
	c.close()

	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGKILL))
	select {
	case <-p.Exited:
	case <-time.After(20 * time.Second):
		t.Fatal("broker did not exit after SIGKILL")
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("plugin process %d still alive 5s after the broker was SIGKILLed", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
