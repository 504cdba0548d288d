//go:build linux

package host

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHostSIGKILLLeavesNoPlugin re-runs the test binary as a host that
// launches a plugin, SIGKILLs the host, and checks that the plugin is gone
// within 2 s: through Pdeathsig, and through plugins.Serve's parent watch
// alone.
func TestHostSIGKILLLeavesNoPlugin(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"pdeathsig", nil},
		{"parent watch", []string{envNoPdeath + "=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exe, err := os.Executable()
			require.NoError(t, err)
			hostLog := filepath.Join(t.TempDir(), "host.log")
			cmd := exec.Command(exe)
			cmd.Env = append(os.Environ(), append([]string{envRole + "=host", envHostLog + "=" + hostLog}, tc.env...)...)
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			var pid int
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				if pid > 0 && alive(pid) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				if t.Failed() {
					b, _ := os.ReadFile(hostLog)
					t.Logf("host log:\n%s", b)
				}
			})

			got := make(chan error, 1)
			go func() {
				var err error
				pid, err = readPIDLine(bufio.NewReader(out))
				got <- err
			}()
			select {
			case err := <-got:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Fatal("host did not report its plugin")
			}
			require.True(t, alive(pid))

			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			_ = cmd.Wait()
			killed := time.Now()
			require.Eventually(t, func() bool { return !alive(pid) }, 2*time.Second, 10*time.Millisecond,
				"plugin %d outlived its SIGKILLed host", pid)
			t.Logf("plugin gone %v after its host", time.Since(killed))
		})
	}
}
