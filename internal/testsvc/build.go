package testsvc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// BuildTimeout bounds one `go build` of a plugin binary.
const BuildTimeout = 5 * time.Minute

var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]string{} // package -> binary, shared builds
)

// GoBuild builds the main package pkg (an import path, for example
// "github.com/metaq-go/metaq/cmd/metaq-offsetstore-zk") and returns the
// binary's path. Plugin tests launch the real binary the way the broker
// does. Under Main a package is built once per test binary (and removed
// at the end); otherwise into t's temp directory.
func GoBuild(t testing.TB, pkg string) string {
	t.Helper()
	if !sharing() {
		p, err := goBuild(pkg, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	if buildDir == "" {
		dir, err := os.MkdirTemp("", "metaq-build-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = dir
		onShutdown(func() { os.RemoveAll(dir) })
	}
	dir, err := os.MkdirTemp(buildDir, "pkg-")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goBuild(pkg, dir)
	if err != nil {
		t.Fatal(err)
	}
	built[pkg] = p
	return p
}

func goBuild(pkg, dir string) (string, error) {
	goBin, err := exec.LookPath("go") // go test puts its GOROOT/bin first on PATH
	if err != nil {
		return "", fmt.Errorf("go build %s: %v", pkg, err)
	}
	out := filepath.Join(dir, path.Base(pkg))
	ctx, cancel := context.WithTimeout(context.Background(), BuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", out, pkg)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, buf.String())
	}
	return out, nil
}
