package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metaq-go/metaq/internal/doctest"
)

// TestConsumeFilterDocs runs the consumer-filter walkthrough of
// docs/filters.md against a broker (the metaq-server binary) as written,
// with `metaq` the CLI binary on PATH talking to that broker, and checks
// the output it shows; then --filter's errors and a filtered group.
func TestConsumeFilterDocs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and starts a broker")
	}
	addr, bin := testServer(t)
	binDir := t.TempDir()
	wrapper := "#!/bin/sh\nexec '" + bin + "' --addr=" + addr + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(binDir, "metaq"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	cmds := docWalkthrough(t, "docs/filters.md", "consumer-filter")
	if len(cmds) < 4 {
		t.Fatalf("docs/filters.md: %d commands in the consumer-filter walkthrough", len(cmds))
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+binDir+":"+os.Getenv("PATH"))
	sh, err := doctest.StartShell(t.TempDir(), t.TempDir(), env)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close(5 * time.Second)
	runWalkthrough(t, sh, cmds, 60*time.Second)

	a := "--addr=" + addr
	r := cliWithin(t, 60*time.Second, "", a, "consume", "--topic", "meta-test", "--partition", "0", "--filter", "paid ||")
	if r.code == 0 || !strings.Contains(r.stderr, "bad filter expression") || !strings.Contains(r.stderr, "col 8: expected a field") {
		t.Fatalf("a bad --filter: %+v", r)
	}
	// A group member (the broker coordinates the group) with a filter.
	r = cliWithin(t, 60*time.Second, "", a, "consume", "--topic", "meta-test", "--partition", "0", "--group", "fg", "--filter", "created", "--count", "3")
	mustOK(t, r, "consume --group --filter")
	if r.stdout != "order 1\norder 2\norder 3\n" {
		t.Fatalf("consume --group fg --filter created: %q", r.stdout)
	}

	// The benchmark of issue 26: a tag filter passing 10% against
	// unfiltered gets, in one run.
	r = cliWithin(t, 60*time.Second, "", a, "bench", "consume", "--partition", "1", "--filter-pass", "10", "--messages", "2000",
		"--size", "100", "--rounds", "1", "--json")
	mustOK(t, r, "bench consume --filter-pass")
	var res filterBenchResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Delivered != 200 || res.PlainPerS <= 0 || res.FiltPerS <= 0 || res.Ratio <= 0 {
		t.Fatalf("bench consume --filter-pass: %v %s", err, r.stdout)
	}
}
