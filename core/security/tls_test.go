package security

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
)

// TestTLSErrors: material that cannot be loaded is a *TLSError naming the
// setting, with the text the broker has always logged.
func TestTLSErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := NewTLS(conf.TLS{CertFile: filepath.Join(dir, "c.pem"), KeyFile: filepath.Join(dir, "k.pem")})
	var te *TLSError
	require.True(t, errors.As(err, &te), "%v", err)
	require.Equal(t, "cert_file", te.Setting)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.Contains(t, err.Error(), "tls: load cert_file "+filepath.Join(dir, "c.pem")+" and key_file ")
}
