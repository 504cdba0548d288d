package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/metaq-go/metaq/sdk/admin"
)

func TestPluginsCommand(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and starts a broker")
	}
	addr, _ := testServer(t)
	a := "--addr=" + addr

	// The sample config runs no plugin processes: a header, no rows.
	r := cli("", a, "plugins")
	mustOK(t, r, "plugins")
	if strings.TrimSpace(r.stdout) != "KIND  NAME  VERSION  PID  STATE  RESTARTS  CALLS  ERRORS" {
		t.Fatalf("plugins: %q", r.stdout)
	}
	r = cli("", a, "plugins", "--json")
	mustOK(t, r, "plugins --json")
	var rows []admin.Plugin
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || rows == nil || len(rows) != 0 {
		t.Fatalf("plugins --json: %q %v", r.stdout, err)
	}
	r = cli("", a, "stats", "plugins")
	mustOK(t, r, "stats plugins")
	if r.stdout != "STATS\r\nEND\r\n" {
		t.Fatalf("stats plugins: %q", r.stdout)
	}
	r = cli("", a, "stats", "help")
	mustOK(t, r, "stats help")
	if !strings.Contains(r.stdout, "stats plugins") {
		t.Fatalf("stats help lacks plugins: %q", r.stdout)
	}
	if r := cli("", a, "plugins", "extra"); r.code != 2 {
		t.Fatalf("plugins extra: exit %d", r.code)
	}
	if r := cli("", "help"); !strings.Contains(r.stdout, "plugins ") {
		t.Fatalf("help lacks plugins: %q", r.stdout)
	}
}
