package main

import "testing"

// TestTailDocs runs the walkthrough of docs/tail.md command by command as
// written, in a scratch directory with bin/metaq built from this tree and
// METAQ_ADDR naming a broker with the topic logs, and compares every
// output the docs show.
func TestTailDocs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the CLI and runs it")
	}
	runCLIWalkthrough(t, "docs/tail.md", "tail", "logs")
}
