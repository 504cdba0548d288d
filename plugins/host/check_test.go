package host

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "plugin")
	data := []byte("#!/bin/sh\n")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	good := hex.EncodeToString(sum[:])
	if err := CheckBinary(bin, ""); err != nil {
		t.Fatal(err)
	}
	if err := CheckBinary(bin, strings.ToUpper(good)); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, data, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := strings.Repeat("0", 64)
	for _, c := range []struct{ path, sum, want string }{
		{filepath.Join(dir, "missing"), "", "binary " + filepath.Join(dir, "missing") + ": stat "},
		{dir, "", "binary " + dir + " is not a regular file"},
		{plain, "", "binary " + plain + " is not executable"},
		{bin, bad, "binary " + bin + ": sha256 mismatch (want " + bad + ", got " + good + ")"},
	} {
		err := CheckBinary(c.path, c.sum)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("CheckBinary(%s, %q) = %v, want %q...", c.path, c.sum, err, c.want)
		}
	}
}
