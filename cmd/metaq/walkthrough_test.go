package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/doctest"
	"github.com/metaq-go/metaq/internal/testsvc"
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

// runCLIWalkthrough runs doc's walkthrough name as written, in a scratch
// directory whose bin/metaq is the CLI built from this tree, with
// METAQ_ADDR naming a broker that has topic, and compares every output the
// doc shows.
func runCLIWalkthrough(t *testing.T, doc, name, topic string) {
	t.Helper()
	cmds := docWalkthrough(t, doc, name)
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.Topics(topic))
	sh, _ := cliShell(t, b.Addr())
	defer sh.Close(5 * time.Second)
	runWalkthrough(t, sh, cmds, time.Minute)
}

// cliShell starts a shell in a scratch directory (returned) whose
// bin/metaq is the CLI built from this tree, with METAQ_ADDR set to addr.
func cliShell(t *testing.T, addr string) (*doctest.Shell, string) {
	t.Helper()
	bin := testsvc.GoBuild(t, "github.com/metaq-go/metaq/cmd/metaq")
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(dir, "bin", "metaq")); err != nil {
		t.Fatal(err)
	}
	sh, err := doctest.StartShell(dir, t.TempDir(), []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "METAQ_ADDR=" + addr, "LC_ALL=C"})
	if err != nil {
		t.Fatal(err)
	}
	return sh, dir
}
