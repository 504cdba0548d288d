package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeSnippet builds the README's Go snippet against this module,
// so that it keeps compiling as the SDK changes.
func TestReadmeSnippet(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "```go\n")
	snippet, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("no ```go block in README.md")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := "package main\n\nimport (\n\t\"context\"\n\t\"fmt\"\n\t\"log\"\n\n" +
		"\t\"github.com/metaq-go/metaq/sdk/client\"\n\t\"github.com/metaq-go/metaq/sdk/message\"\n)\n\n" +
		"func main() {\n" + snippet + "}\n"
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
	cmd := exec.Command("go", "build", "-mod=mod", "-o", os.DevNull, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false", "GOPROXY=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's Go snippet does not build: %v\n%s\n%s", err, out, src)
	}
}
