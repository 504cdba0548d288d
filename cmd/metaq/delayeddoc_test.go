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

// TestDelayedDocs runs the walkthrough of docs/delayed.md command by command as
// written, in a scratch directory with bin/metaq built from this tree and
// METAQ_ADDR naming a broker with the topic orders, and compares every
// output the docs show.
func TestDelayedDocs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the CLI and runs it")
	}
	src, err := os.ReadFile("../../docs/delayed.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := doctest.Parse("docs/delayed.md", src)
	if err != nil {
		t.Fatal(err)
	}
	cmds := doctest.Walkthrough(blocks, "delayed")
	if len(cmds) == 0 {
		t.Fatal("docs/delayed.md has no delayed walkthrough")
	}
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.Topics("orders"))
	bin := testsvc.GoBuild(t, "github.com/metaq-go/metaq/cmd/metaq")
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(dir, "bin", "metaq")); err != nil {
		t.Fatal(err)
	}
	outDir := t.TempDir()
	sh, err := doctest.StartShell(dir, outDir, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "METAQ_ADDR=" + b.Addr(), "LC_ALL=C"})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close(5 * time.Second)
	for _, c := range cmds {
		res, err := sh.Run(c.Text, time.Minute)
		if err != nil {
			t.Fatalf("%s: %s: %v", c.Where(), c.Text, err)
		}
		if res.Exit != 0 {
			t.Fatalf("%s: %s: exit %d\n%s", c.Where(), c.Text, res.Exit, res.Output)
		}
		if c.Output != nil {
			if err := doctest.Match(c.Output, res.Output); err != nil {
				t.Fatalf("%s: %s: %v\noutput:\n%s", c.Where(), c.Text, err, res.Output)
			}
		}
	}
}
