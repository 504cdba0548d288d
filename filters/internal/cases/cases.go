// Package cases holds the conformance cases of the builtin filters, shared
// by their own tests and by the remote-adapter tests that serve them from a
// plugin process.
package cases

import "github.com/metaq-go/metaq/filters/filtertest"

// Attr are the "attribute" filter's cases over filtertest.Sample.
func Attr() []filtertest.Case {
	s := filtertest.Sample()
	return []filtertest.Case{
		{Name: "equals", Config: map[string]string{"equals": "red"}, Records: s,
			Want: []bool{true, false, false, false, false, false, true, false}},
		{Name: "prefix", Config: map[string]string{"prefix": "eu-"}, Records: s,
			Want: []bool{false, false, false, false, true, true, false, false}},
		{Name: "exists", Config: map[string]string{"exists": "true"}, Records: s,
			Want: []bool{true, true, false, true, true, true, true, false}},
		{Name: "not-exists", Config: map[string]string{"exists": "false"}, Records: s,
			Want: []bool{false, false, true, false, false, false, false, true}},
		{Name: "equals-empty", Config: map[string]string{"equals": ""}, Records: s,
			Want: []bool{false, false, false, true, false, false, false, false}},
		{Name: "prefix-and-equals", Config: map[string]string{"prefix": "eu", "equals": "eu-west"}, Records: s,
			Want: []bool{false, false, false, false, true, false, false, false}},
	}
}

// Expr are the "expr" filter's cases over filtertest.Sample.
func Expr() []filtertest.Case {
	s := filtertest.Sample()
	c := func(name, expr string, want ...bool) filtertest.Case {
		return filtertest.Case{Name: name, Config: map[string]string{"expr": expr}, Records: s, Want: want}
	}
	return []filtertest.Case{
		c("red-small", `attribute == "red" && size < 1024`, true, false, false, false, false, false, false, false),
		c("in", `attribute in ("blue", "eu-west")`, false, true, false, false, true, false, false, false),
		c("not-in-or-none", `attribute not in ("red") && has_attribute || size == 0`, false, true, false, true, true, true, false, true),
		c("no-attribute", `!has_attribute`, false, false, true, false, false, false, false, true),
		c("size-range", `size >= 100 && size <= 2000`, false, true, false, false, true, false, true, false),
		c("msgid", `msgid > 7005 || offset == 1000`, true, false, false, false, false, false, true, true),
		c("grouping", `!(attribute == "red" || attribute == "blue") && (size > 4 || flag == 1)`, false, false, true, true, true, true, false, false),
	}
}
