package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/metaq-go/metaq/filters"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/stretchr/testify/require"
)

// TestCompile checks the predicate on records as a plugin process sees
// them (properties decoded) and the config errors. The binary itself runs
// under a broker in filters' TestBrokerFilterPluginProperties.
func TestCompile(t *testing.T) {
	recs := []filters.Record{
		{Headers: message.Headers{{Key: "region", Value: []byte("eu")}}},
		{Headers: message.Headers{{Key: "region", Value: []byte("eu")}, {Key: "region", Value: []byte("us")}}},
		{Headers: message.Headers{{Key: "region", Value: nil}}},
		{},
	}
	for _, c := range []struct {
		cfg  map[string]string
		want []bool
	}{
		{map[string]string{"header": "region", "equals": "eu"}, []bool{true, false, false, false}},
		{map[string]string{"header": "region"}, []bool{true, true, true, false}},
		{map[string]string{"header": "region", "equals": "us", "keep_missing": "true"}, []bool{false, true, false, true}},
	} {
		keep, bodies, err := compile(&filters.InitRequest{Config: c.cfg})
		if err != nil || bodies {
			t.Fatalf("%v: bodies %v, %v", c.cfg, bodies, err)
		}
		for i := range recs {
			if got := keep(&recs[i]); got != c.want[i] {
				t.Errorf("%v: record %d kept %v", c.cfg, i, got)
			}
		}
	}
	for _, cfg := range []map[string]string{nil, {"equals": "x"}, {"header": "h", "keep_missing": "perhaps"}, {"header": "h", "other": "1"}} {
		if _, _, err := compile(&filters.InitRequest{Config: cfg}); err == nil {
			t.Errorf("config %v accepted", cfg)
		}
	}
}

// TestDocsShowMain: the Go block of docs/plugins.md marked
// "<!-- example: header-filter-plugin -->" is this plugin's main as
// main.go has it, so the docs show code that builds (and runs under a
// broker in filters' TestBrokerFilterPluginProperties).
func TestDocsShowMain(t *testing.T) {
	doc, err := os.ReadFile("../../docs/plugins.md")
	require.NoError(t, err)
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- example: header-filter-plugin -->\n```go\n(.*?\n)```\n").FindSubmatch(doc)
	require.NotNil(t, m, "no marked header-filter-plugin block in docs/plugins.md")
	require.True(t, strings.HasPrefix(string(m[1]), "func main() {"), "the block shows %q", m[1])
	require.Contains(t, string(src), string(m[1]), "docs/plugins.md's block differs from main.go")
}
