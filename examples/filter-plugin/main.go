// Command filter-plugin is an example metaq-go filter plugin: it keeps the
// messages whose attribute matches a regular expression from the topic's
// filter config. Build it into the plugins folder and name it in
// server.toml; see README.md.
package main

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/metaq-go/metaq/filters"
)

func main() {
	// Nothing may be printed to stdout before (or instead of) Serve.
	filters.Serve(filters.NewRecordFilter(compile))
}

// compile builds one instance (one topic and group) from its config:
//
//	match        = "<regexp>"  keep messages whose attribute matches (required)
//	keep_missing = "true"      also keep messages without an attribute (default false)
//
// It reads metadata only, so the broker never sends it message bodies.
func compile(req *filters.InitRequest) (func(*filters.Record) bool, bool, error) {
	var (
		re          *regexp.Regexp
		keepMissing bool
	)
	for k, v := range req.Config {
		switch k {
		case "match":
			var err error
			if re, err = regexp.Compile(v); err != nil {
				return nil, false, fmt.Errorf("%w: match: %v", filters.ErrBadConfig, err)
			}
		case "keep_missing":
			var err error
			if keepMissing, err = strconv.ParseBool(v); err != nil {
				return nil, false, fmt.Errorf("%w: keep_missing = %q is not a boolean", filters.ErrBadConfig, v)
			}
		default:
			return nil, false, fmt.Errorf("%w: unknown key %q (want match, keep_missing)", filters.ErrBadConfig, k)
		}
	}
	if re == nil {
		return nil, false, fmt.Errorf("%w: config needs match", filters.ErrBadConfig)
	}
	return func(r *filters.Record) bool {
		if !r.HasAttribute {
			return keepMissing
		}
		return re.MatchString(r.Attribute)
	}, false, nil
}
