package admin_test

import (
	"reflect"
	"testing"

	"github.com/metaq-go/metaq/sdk/admin"
)

func TestParsePlugins(t *testing.T) {
	body := "STATS\r\n" +
		"filter colour version 1 pid 4242 state running restarts 2 calls 100 errors 3\r\n" +
		"offsetstore zk version 1 pid 0 state restarting restarts 7 calls 5 errors 5 extra 9\r\n" +
		"END\r\n"
	rows, err := admin.ParsePlugins(body)
	if err != nil {
		t.Fatal(err)
	}
	want := []admin.Plugin{
		{Kind: "filter", Name: "colour", Version: 1, PID: 4242, State: "running", Restarts: 2, Calls: 100, Errors: 3},
		{Kind: "offsetstore", Name: "zk", Version: 1, State: "restarting", Restarts: 7, Calls: 5, Errors: 5},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("got %+v", rows)
	}
	if rows, err := admin.ParsePlugins("STATS\r\nEND\r\n"); err != nil || rows == nil || len(rows) != 0 {
		t.Fatalf("empty: %v %v", rows, err)
	}
	for _, bad := range []string{
		"STATS\r\ntopic plugins\r\nresult_code 1\r\nEND\r\n", // a broker without `stats plugins`
		"STATS\r\nfilter x version\r\nEND\r\n",
		"STATS\r\nfilter x pid abc\r\nEND\r\n",
	} {
		if _, err := admin.ParsePlugins(bad); err == nil {
			t.Fatalf("%q: want an error", bad)
		}
	}
}

func TestParseStats(t *testing.T) {
	st := admin.ParseStats("STATS\r\npid 12\r\nbroker_id 3\r\nversion metaq-go 0.1\r\nEND\r\n")
	want := []admin.StatsLine{{Name: "pid", Value: "12"}, {Name: "broker_id", Value: "3"}, {Name: "version", Value: "metaq-go 0.1"}}
	if !reflect.DeepEqual(st.Lines, want) {
		t.Fatalf("lines %+v", st.Lines)
	}
	if v, ok := st.Value("version"); !ok || v != "metaq-go 0.1" {
		t.Fatalf("version %q %t", v, ok)
	}
	if _, err := st.Int("version"); err == nil {
		t.Fatal("Int of a text value: no error")
	}
	if _, err := st.Int("nope"); err == nil {
		t.Fatal("Int of a missing value: no error")
	}
}
