package main

import (
	"os"
	"testing"
	"time"

	"github.com/metaq-go/metaq/internal/doctest"
)

// docWalkthrough returns the commands of the walkthrough name in doc (a
// path from the repository's root, e.g. "docs/cli.md"); none fails t.
func docWalkthrough(t *testing.T, doc, name string) []doctest.Command {
	t.Helper()
	src, err := os.ReadFile("../../" + doc)
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := doctest.Parse(doc, src)
	if err != nil {
		t.Fatal(err)
	}
	cmds := doctest.Walkthrough(blocks, name)
	if len(cmds) == 0 {
		t.Fatalf("%s has no %s walkthrough", doc, name)
	}
	return cmds
}

// runWalkthrough runs cmds in sh in order, each within timeout: each
// must exit 0 and print what the docs show, where they show output. It
// returns how many commands' output it compared.
func runWalkthrough(t *testing.T, sh *doctest.Shell, cmds []doctest.Command, timeout time.Duration) int {
	t.Helper()
	compared := 0
	for _, c := range cmds {
		res, err := sh.Run(c.Text, timeout)
		if err != nil {
			t.Fatalf("%s: %s: %v", c.Where(), c.Text, err)
		}
		if res.Exit != 0 {
			t.Fatalf("%s: %s: exit %d\n%s", c.Where(), c.Text, res.Exit, res.Output)
		}
		if c.Output == nil {
			continue
		}
		compared++
		if err := doctest.Match(c.Output, res.Output); err != nil {
			t.Fatalf("%s: %s: %v\noutput:\n%s", c.Where(), c.Text, err, res.Output)
		}
	}
	return compared
}
