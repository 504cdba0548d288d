package conf

import (
	"errors"
	"os"
	"testing"
)

// FuzzParse checks that Parse never panics and either fails with a non-empty
// *Error or returns a config that passes Validate and resolves every topic.
// The seed corpus is in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile("server.toml"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.toml")
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) || c != nil || len(ce.Problems) == 0 || ce.Error() == "" {
				t.Fatalf("Parse error is not a non-empty *Error (config %v): %#v", c, err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that fails Validate: %v", err)
		}
		for _, name := range c.TopicNames() {
			tc, ok := c.TopicConfig(name)
			if !ok || tc.Name != name || tc.NumPartitions < 1 || tc.RetainFor <= 0 || tc.UnflushInterval < 0 {
				t.Fatalf("bad TopicConfig(%q) = %+v, %v", name, tc, ok)
			}
		}
		for _, p := range c.Plugins {
			if q, ok := c.PluginByName(p.Kind, p.Name); !ok || c.PluginPath(q) == "" {
				t.Fatalf("PluginByName(%q, %q) = %+v, %v", p.Kind, p.Name, q, ok)
			}
		}
		for _, name := range c.TopicNames() {
			tc, _ := c.TopicConfig(name)
			for _, f := range tc.Filters {
				if _, ok := c.PluginByName(PluginKindFilter, f.Filter); !ok && !IsBuiltinFilter(f.Filter) {
					t.Fatalf("topic %q: filter %q is neither builtin nor a filter plugin", name, f.Filter)
				}
				if p := c.FilterFailurePolicy(f); p != FailureOpen && p != FailureClosed {
					t.Fatalf("topic %q: failure policy %q", name, p)
				}
			}
		}
		if c.OffsetStore != OffsetStoreBuiltin {
			if _, ok := c.PluginByName(PluginKindOffsetStore, c.OffsetStore); !ok {
				t.Fatalf("offset_store %q is not an offsetstore plugin", c.OffsetStore)
			}
		}
		if string(c.Raw()) != string(data) {
			t.Fatal("Raw() differs from the input")
		}
	})
}
