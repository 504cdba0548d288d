package testsvc

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMakeFuzzCoversEveryTarget: make fuzz names every fuzz target of the
// module in the package that holds it (a target moved or added without a
// Makefile line would silently not be fuzzed).
func TestMakeFuzzCoversEveryTarget(t *testing.T) {
	root, err := filepath.Abs("../..") // internal/testsvc
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`-fuzz '?"?\^?(Fuzz\w+)\$?\$?'?"? -fuzztime \S+ \./(\S+)/`)
	listed := map[string]bool{}
	for _, m := range line.FindAllStringSubmatch(string(mk), -1) {
		listed[m[2]+"."+m[1]] = true
	}
	decl := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(`)
	var missing []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bin" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			if !listed[filepath.ToSlash(dir)+"."+m[1]] {
				missing = append(missing, filepath.ToSlash(dir)+": "+m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Fatalf("make fuzz does not run %v", missing)
	}
}
