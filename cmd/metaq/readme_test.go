package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReadmeSnippet builds the README's Go program, complete as it is
// printed there (package, imports, main), against this module, then runs
// it against a broker: it must print what it sent and end by itself.
func TestReadmeSnippet(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs go build")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "```go\n")
	src, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("no ```go block in README.md")
	}
	if !strings.HasPrefix(src, "package main\n") {
		t.Fatalf("the README's Go block is not a whole program (package main first):\n%s", src)
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mod := "module readmesnippet\n\ngo 1.26\n\nrequire github.com/metaq-go/metaq v0.0.0\n\nreplace github.com/metaq-go/metaq => " + repo + "\n"
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"main.go": []byte(src), "go.mod": []byte(mod), "go.sum": sum} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "snippet")
	cmd := exec.Command("go", "build", "-mod=mod", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false", "GOPROXY=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's Go snippet does not build: %v\n%s\n%s", err, out, src)
	}
	addr, _ := testServer(t)
	for run := 1; run <= 2; run++ { // the second run starts at the group's committed position
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, bin)
		cmd.Env = append(os.Environ(), "METAQ_ADDR="+addr)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil || !strings.Contains(string(out), "stored at offset") || !strings.Contains(string(out), "hello\n") {
			t.Fatalf("run %d of the README's program: %v (it must end by itself)\n%s", run, err, out)
		}
	}
}
