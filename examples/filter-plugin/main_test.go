package main

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/metaq-go/metaq/filters"
	"github.com/metaq-go/metaq/filters/filtertest"
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
)

// TestConformance builds the example into a temporary folder and runs the
// conformance suite against it as a real plugin process.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "filter-plugin")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	sup := host.NewSupervisor(host.Options{})
	t.Cleanup(func() { sup.Close() })
	p, err := filters.LaunchPlugin(sup, host.Spec{Kind: plugins.KindFilter, Name: "filter-plugin", Path: bin})
	if err != nil {
		t.Fatal(err)
	}
	s := filtertest.Sample()
	filtertest.Run(t, func(*testing.T) filters.Filter { return filters.NewRemote(p) },
		filtertest.Case{Name: "eu", Config: map[string]string{"match": "^eu-"}, Records: s,
			Want: []bool{false, false, false, false, true, true, false, false}},
		filtertest.Case{Name: "red-or-none", Config: map[string]string{"match": "^red$", "keep_missing": "true"}, Records: s,
			Want: []bool{true, false, true, false, false, false, true, true}},
	)
	// The unit under test in process, for its config errors.
	for _, cfg := range []map[string]string{nil, {"match": "("}, {"match": "x", "keep_missing": "perhaps"}, {"other": "1"}} {
		if _, _, err := compile(&filters.InitRequest{Config: cfg}); err == nil {
			t.Errorf("config %v accepted", cfg)
		}
	}
}
