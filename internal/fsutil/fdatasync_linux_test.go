//go:build linux

package fsutil

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFdatasyncHoldingP: the raw call syncs a file, and its errors are
// fdatasync's, as Fdatasync gives them.
func TestFdatasyncHoldingP(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	require.NoError(t, err)
	for i := 0; i < 20; i++ {
		_, err := f.Write(make([]byte, 4096))
		require.NoError(t, err)
		require.NoError(t, FdatasyncHoldingP(f))
	}

	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	defer pr.Close()
	defer pw.Close()
	var pe *os.PathError
	err = FdatasyncHoldingP(pw)
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "fdatasync", pe.Op)
	require.ErrorIs(t, err, syscall.EINVAL)
	require.Equal(t, Fdatasync(pw).Error(), err.Error())

	require.NoError(t, f.Close())
	require.ErrorContains(t, FdatasyncHoldingP(f), "closed")
}
