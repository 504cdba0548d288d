package host

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
)

// CheckBinary says what is wrong with a plugin binary, without starting it
// (metaq-server --check-config): it must exist, be an executable regular
// file and, with sum (hex sha256) set, have that checksum. nil if nothing.
func CheckBinary(path, sum string) error {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Errorf("binary %s: %v (plugin_dir, or the plugin's path)", path, err)
	case !st.Mode().IsRegular():
		return fmt.Errorf("binary %s is not a regular file", path)
	case st.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("binary %s is not executable", path)
	}
	if sum == "" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("binary %s: %v", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("binary %s: %v", path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, sum) {
		return fmt.Errorf("binary %s: sha256 mismatch (want %s, got %s)", path, strings.ToLower(sum), got)
	}
	return nil
}
