package testsvc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
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

// PrebuiltEnv names the environment variable that lists, separated by
// colons, directories of binaries built from this checkout just before the
// tests (make test sets it to bin and bin/plugins after make build). GoBuild
// takes a binary named like the package's last element from there instead
// of linking it again in every test package.
const PrebuiltEnv = "METAQ_TEST_PREBUILT"

// Prebuilt returns the binary of pkg from PrebuiltEnv's directories, or "".
func Prebuilt(pkg string) string {
	v := os.Getenv(PrebuiltEnv)
	if v == "" || !strings.HasPrefix(pkg, modulePath+"/") {
		return ""
	}
	for _, dir := range filepath.SplitList(v) {
		p := filepath.Join(dir, path.Base(pkg))
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// modulePath is this module's import path: only its own commands are
// taken prebuilt.
const modulePath = "github.com/metaq-go/metaq"

// GoBuildTo puts the binary of the main package pkg (see GoBuild) at dst,
// a copy, for tests that need it at a given path (a plugin directory).
func GoBuildTo(t testing.TB, pkg, dst string) {
	t.Helper()
	src := GoBuild(t, pkg)
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// GoBuild builds the main package pkg (an import path, for example
// "github.com/metaq-go/metaq/cmd/metaq-offsetstore-zk") and returns the
// binary's path; with PrebuiltEnv set, the binary make built. Plugin tests launch the real binary the way the broker
// does. Under Main a package is built once per test binary (and removed
// at the end); otherwise into t's temp directory.
func GoBuild(t testing.TB, pkg string) string {
	t.Helper()
	if p := Prebuilt(pkg); p != "" {
		return p
	}
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
