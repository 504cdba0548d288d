// Command header-filter-plugin is an example metaq-go filter plugin that
// reads message properties: it keeps the messages whose header has a given
// value. Its InitResponse asks for properties (filters.WithProperties), so
// the broker sends each record's key, create time, tags and headers, and
// the plugin reads them from filters.Record. Build it into the plugins
// folder and name it in server.toml; see docs/plugins.md, "Properties
// for filter plugins".
package main

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/metaq-go/metaq/filters"
)

func main() {
	// Nothing may be printed to stdout before (or instead of) Serve.
	filters.Serve(filters.WithProperties(filters.NewRecordFilter(compile)))
}

// compile builds one instance (one topic and group) from its config:
//
//	header       = "<name>"    the header to test (required)
//	equals       = "<value>"   keep messages whose last header of that name
//	                           has this value (without it: that have the header)
//	keep_missing = "true"      also keep messages without the header (default false)
//
// It reads metadata and properties only, never bodies.
func compile(req *filters.InitRequest) (func(*filters.Record) bool, bool, error) {
	var (
		name, equals string
		hasEquals    bool
		keepMissing  bool
	)
	for k, v := range req.Config {
		switch k {
		case "header":
			name = v
		case "equals":
			equals, hasEquals = v, true
		case "keep_missing":
			var err error
			if keepMissing, err = strconv.ParseBool(v); err != nil {
				return nil, false, fmt.Errorf("%w: keep_missing = %q is not a boolean", filters.ErrBadConfig, v)
			}
		default:
			return nil, false, fmt.Errorf("%w: unknown key %q (want header, equals, keep_missing)", filters.ErrBadConfig, k)
		}
	}
	if name == "" {
		return nil, false, fmt.Errorf("%w: config needs header", filters.ErrBadConfig)
	}
	want := []byte(equals)
	return func(r *filters.Record) bool {
		v, ok := r.Headers.Get(name)
		if !ok {
			return keepMissing
		}
		return !hasEquals || (v != nil && bytes.Equal(v, want))
	}, false, nil
}
