//go:build unix

package file_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/txn/file"
)

// TestReopenWhileForking: a closed log can be reopened at once while other
// goroutines start processes. A forked child shares the log's open file
// description (and so its flock) until its exec closes it; the lock must
// not outlive Close because of that (TestBuiltinConformance/Durable failed
// with "decision log ... is in use by another process" under load).
func TestReopenWhileForking(t *testing.T) {
	t.Parallel()
	truePath, err := exec.LookPath("true")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "decisions.log")
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				_ = exec.Command(truePath).Run()
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()
	for i := range 500 {
		c, err := file.Open(path)
		require.NoError(t, err, "reopen %d", i)
		require.NoError(t, c.Close())
	}
	_ = os.Remove(path)
}
