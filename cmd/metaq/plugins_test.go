package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestParsePluginStats(t *testing.T) {
	body := "STATS\r\n" +
		"filter colour version 1 pid 4242 state running restarts 2 calls 100 errors 3\r\n" +
		"offsetstore zk version 1 pid 0 state restarting restarts 7 calls 5 errors 5 extra 9\r\n" +
		"END\r\n"
	rows, err := parsePluginStats(body)
	if err != nil {
		t.Fatal(err)
	}
	want := []pluginRow{
		{Kind: "filter", Name: "colour", Version: 1, PID: 4242, State: "running", Restarts: 2, Calls: 100, Errors: 3},
		{Kind: "offsetstore", Name: "zk", Version: 1, State: "restarting", Restarts: 7, Calls: 5, Errors: 5},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("got %+v", rows)
	}
	if rows, err := parsePluginStats("STATS\r\nEND\r\n"); err != nil || rows == nil || len(rows) != 0 {
		t.Fatalf("empty: %v %v", rows, err)
	}
	for _, bad := range []string{
		"STATS\r\ntopic plugins\r\nresult_code 1\r\nEND\r\n", // a broker without `stats plugins`
		"STATS\r\nfilter x version\r\nEND\r\n",
		"STATS\r\nfilter x pid abc\r\nEND\r\n",
	} {
		if _, err := parsePluginStats(bad); err == nil {
			t.Fatalf("%q: want an error", bad)
		}
	}
}

func TestPluginsCommand(t *testing.T) {
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
	var rows []pluginRow
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
