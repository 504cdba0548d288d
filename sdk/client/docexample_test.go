package client

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSDKDocExamples: each Go block of docs/sdk.md marked
// "<!-- example: NAME -->" is the source of the testable example NAME in
// client_example_test.go (which go test compiles and runs), so the docs
// show code that runs.
func TestSDKDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/sdk.md")
	require.NoError(t, err)
	src, err := os.ReadFile("client_example_test.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "client_example_test.go", src, 0)
	require.NoError(t, err)
	funcs := map[string]string{}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok {
			funcs[fd.Name.Name] = string(src[fset.Position(fd.Pos()).Offset:fset.Position(fd.End()).Offset])
		}
	}
	blocks := regexp.MustCompile("(?s)<!-- example: (\\w+) -->\n```go\n(.*?)\n```\n").FindAllSubmatch(doc, -1)
	require.NotEmpty(t, blocks, "no marked example in docs/sdk.md")
	for _, b := range blocks {
		name := string(b[1])
		fn, ok := funcs[name]
		require.True(t, ok, "docs/sdk.md shows %s, which client_example_test.go lacks", name)
		require.Equal(t, fn, string(b[2]), "docs/sdk.md's %s differs from client_example_test.go's", name)
	}
}
