package testsvc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// MountTmpfs mounts a tmpfs of size bytes on a fresh directory and
// unmounts it when the test ends (after the test's later cleanups, such as
// closing a broker that uses it). Where it cannot (not root, no mount) the
// test is skipped with the reason, or fails in CI.
func MountTmpfs(t testing.TB, size int) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		if InCI() {
			t.Fatalf("mount tmpfs on %s (required in CI): %v: %s", dir, err, out)
		}
		t.Skipf("cannot mount a tmpfs (set CI=true to make this a failure): %v: %s", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		out, err := exec.Command("umount", dir).CombinedOutput()
		if err == nil {
			return
		}
		// A descriptor still open on the mount keeps it busy; detach it
		// anyway so the directory can be removed.
		t.Logf("umount %s: %v: %s; detaching it lazily", dir, err, bytes.TrimSpace(out))
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount -l %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// UsedRatio is the used fraction of the file system holding path, as df
// counts it: used / (used + available) blocks.
func UsedRatio(t testing.TB, path string) float64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		t.Fatalf("statfs %s: %v", path, err)
	}
	used := st.Blocks - st.Bfree
	if used+st.Bavail == 0 {
		return 0
	}
	return float64(used) / float64(used+st.Bavail)
}

// Fill writes the file path (created or appended to) until the file
// system holding it is more than upTo used (UsedRatio), or is full (1
// fills it up to ENOSPC), and returns the file's size.
func Fill(t testing.TB, path string, upTo float64) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("fill: %v", err)
	}
	defer f.Close()
	block := bytes.Repeat([]byte{0xAA}, 4096)
	for i := 0; i < 1<<20; i++ { // 4 GiB: far more than a test file system holds
		if upTo < 1 && UsedRatio(t, path) > upTo {
			break
		}
		_, err := f.Write(block)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatalf("fill %s: %v", path, err)
		}
		if i == 1<<20-1 {
			t.Fatalf("fill %s: the file system never filled up", path)
		}
	}
	fi, err := f.Stat()
	if err != nil {
		t.Fatalf("fill: %v", err)
	}
	return fi.Size()
}
