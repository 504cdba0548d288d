package main

import "testing"

// TestDelayedDocs runs the walkthrough of docs/delayed.md command by command as
// written, in a scratch directory with bin/metaq built from this tree and
// METAQ_ADDR naming a broker with the topic orders, and compares every
// output the docs show.
func TestDelayedDocs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the CLI and runs it")
	}
	runCLIWalkthrough(t, "docs/delayed.md", "delayed", "orders")
}
