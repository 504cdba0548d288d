package store

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMkdirAllDurable(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b", "c")
	require.NoError(t, MkdirAllDurable(dir, 0o755))
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	require.True(t, fi.IsDir())
	require.NoError(t, MkdirAllDurable(dir, 0o755), "an existing directory is fine")
	f := filepath.Join(root, "file")
	require.NoError(t, os.WriteFile(f, nil, 0o644))
	require.ErrorContains(t, MkdirAllDurable(f, 0o755), "not a directory")
	require.Error(t, MkdirAllDurable(filepath.Join(f, "x"), 0o755))
}
