// Package attr is the builtin "attribute" filter: it keeps the messages
// whose attribute matches the instance's config.
//
// Config keys (every key given must hold; at least one is required):
//
//	equals = "red"    the attribute is exactly "red"
//	prefix = "eu-"    the attribute starts with "eu-"
//	exists = "true"   the message has an attribute ("false": has none)
//
// equals and prefix never match a message without an attribute. The filter
// reads metadata only (it never asks for bodies).
package attr

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/metaq-go/metaq/filters"
)

// Name is the builtin's name in server.toml.
const Name = "attribute"

// New returns an attribute filter with no instances.
func New() filters.Filter { return filters.NewRecordFilter(Compile) }

// Compile builds one instance's predicate from its config.
func Compile(req *filters.InitRequest) (func(*filters.Record) bool, bool, error) {
	var (
		equals, prefix       string
		hasEquals, hasPrefix bool
		exists               = -1 // -1 unset, 0 must not exist, 1 must exist
	)
	for k, v := range req.Config {
		switch k {
		case "equals":
			equals, hasEquals = v, true
		case "prefix":
			prefix, hasPrefix = v, true
		case "exists":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, false, fmt.Errorf("%w: attribute: exists = %q is not a boolean", filters.ErrBadConfig, v)
			}
			exists = 0
			if b {
				exists = 1
			}
		default:
			return nil, false, fmt.Errorf("%w: attribute: unknown key %q (want equals, prefix or exists)", filters.ErrBadConfig, k)
		}
	}
	if !hasEquals && !hasPrefix && exists < 0 {
		return nil, false, fmt.Errorf("%w: attribute: config needs equals, prefix or exists", filters.ErrBadConfig)
	}
	if exists == 0 && (hasEquals || hasPrefix) {
		return nil, false, fmt.Errorf("%w: attribute: exists = false contradicts equals/prefix", filters.ErrBadConfig)
	}
	return func(r *filters.Record) bool {
		switch {
		case exists == 1 && !r.HasAttribute, exists == 0 && r.HasAttribute:
			return false
		case hasEquals && (!r.HasAttribute || r.Attribute != equals):
			return false
		case hasPrefix && (!r.HasAttribute || !strings.HasPrefix(r.Attribute, prefix)):
			return false
		}
		return true
	}, false, nil
}
