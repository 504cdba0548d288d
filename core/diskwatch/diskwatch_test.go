package diskwatch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
)

// TestDiskWatchWakeOnENOSPC: a write failing with ENOSPC (wrapped, as the
// store wraps it) makes the watcher measure at once, not at its next tick
// (set to an hour here); other errors do not.
func TestDiskWatchWakeOnENOSPC(t *testing.T) {
	t.Parallel()
	dir := testsvc.MountTmpfs(t, 4<<20)
	w := New(0.9, t.Logf)
	w.every = time.Hour
	d := w.Disk(dir)
	require.False(t, d.full.Load())
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() { defer close(stopped); w.Run(done) }()
	defer func() { close(done); <-stopped }()

	testsvc.Fill(t, filepath.Join(dir, "filler"), 1)
	w.WakeOn(fmt.Errorf("store: write x: %w", syscall.EIO))
	w.WakeOn(errors.New("no space left on device")) // text is not enough
	time.Sleep(50 * time.Millisecond)
	require.False(t, d.full.Load(), "measured without an ENOSPC")

	w.WakeOn(fmt.Errorf("store: write x: %w", &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}))
	start := time.Now()
	for !d.full.Load() {
		require.Less(t, time.Since(start), 20*time.Second, "ENOSPC did not wake the watcher")
		time.Sleep(time.Millisecond)
	}
	t.Logf("full %v after the ENOSPC", time.Since(start))
	require.Regexp(t, `^disk full: data_dir .* is 100\.0% used, over disk_max_used_ratio 0\.90; puts resume when space is freed$`, w.Refusal(d))
}

func TestDiskRatioFormat(t *testing.T) {
	t.Parallel()
	for r, want := range map[float64]string{0.9: "0.90", 0.5: "0.50", 1: "1.00", 0.955: "0.955", 0.01: "0.01"} {
		require.Equal(t, want, ratio(r))
	}
	require.Equal(t, "93.1%", percent(0.93149))
	require.Equal(t, "/data/x", showDir("/data/x"))
	require.Equal(t, `"/data/a b\x1b"`, showDir("/data/a b\x1b"))
}
