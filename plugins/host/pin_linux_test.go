//go:build linux

package host

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/plugins"
)

// writeBinary writes the test binary, followed by extra, to path through a
// rename, as an operator (or an attacker) swapping the file would.
func writeBinary(t *testing.T, path, extra string) string {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	b, err := os.ReadFile(exe)
	require.NoError(t, err)
	tmp := path + ".new"
	require.NoError(t, os.WriteFile(tmp, append(b, extra...), 0o755))
	require.NoError(t, os.Rename(tmp, path))
	return fileSHA256(path)
}

// TestSwappedBinaryIsRefused: with a sha256 pin the plugin runs a verified
// private copy. Swapping the file at the configured path right after the
// check changes nothing (the copy runs, with the pinned bytes); a restart
// copies the path again and refuses the swapped binary, naming both
// hashes; so does a new launch; restoring the binary lets it start again.
func TestSwappedBinaryIsRefused(t *testing.T) {
	dir, copies := t.TempDir(), t.TempDir()
	path := filepath.Join(dir, "plugin")
	sumA := writeBinary(t, path, "")
	s, logs := newSup(t, Options{TempDir: copies, RestartMin: 20 * time.Millisecond, RestartMax: 100 * time.Millisecond})
	spec := selfSpec(t, "pinned")
	spec.Path, spec.SHA256 = path, sumA

	// B is a different build: the same program with bytes appended, so it
	// would run (and serve) if the pin did not hold.
	var sumB string
	afterPinCheck = func(Spec) { sumB = writeBinary(t, path, "swapped after the check") }
	p, err := s.Launch(spec, &testPlugin{})
	afterPinCheck = nil
	require.NoError(t, err)
	require.NotEqual(t, sumA, sumB)
	require.Equal(t, sumB, fileSHA256(path), "the path now holds B")

	pid := p.Info().PID
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	require.NoError(t, err)
	private := filepath.Dir(exe)
	require.Equal(t, copies, filepath.Dir(private), "the process runs a copy in a private directory, not %s", path)
	require.True(t, strings.HasPrefix(filepath.Base(private), "metaq-plugin-"), private)
	st, err := os.Stat(private)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm())
	got, err := echo(t, p, "exesum")
	require.NoError(t, err)
	require.Equal(t, sumA, got, "what runs is what was hashed")

	// A restart copies from the path again, and refuses B.
	wantMsg := "plugin pinned: sha256 mismatch: refusing to run " + path + " (want " + sumA + ", got " + sumB + ")"
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.Eventually(t, func() bool { return p.Info().LastError == wantMsg }, 10*time.Second, 10*time.Millisecond, logs.String())
	require.Equal(t, StateRestarting, p.Info().State)
	_, _, err = p.Client()
	require.ErrorIs(t, err, plugins.ErrUnavailable)
	require.NoDirExists(t, private, "the stopped process's copy is removed")
	// The supervisor sets LastError before it logs the failure.
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), wantMsg) }, 10*time.Second, 10*time.Millisecond, logs.String())

	// A new launch is refused the same way.
	_, err = s.Launch(withSHA(spec, strings.ToUpper(sumA)), &testPlugin{})
	require.ErrorIs(t, err, ErrChecksum)
	require.ErrorContains(t, err, "(want "+sumA+", got "+sumB+")")

	// Restoring A: the next restart verifies the new copy and runs it.
	writeBinary(t, path, "")
	require.Eventually(t, func() bool {
		_, gen, err := p.Client()
		return err == nil && gen == 2
	}, 10*time.Second, 10*time.Millisecond, logs.String())
	got, err = echo(t, p, "exesum")
	require.NoError(t, err)
	require.Equal(t, sumA, got)

	// Nothing is left behind once the supervisor is closed.
	require.NoError(t, s.Close())
	left, err := os.ReadDir(copies)
	require.NoError(t, err)
	require.Empty(t, left, "private copies left in %s", copies)
}
