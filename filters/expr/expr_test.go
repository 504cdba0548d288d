package expr_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/metaq-go/metaq/filters"
	"github.com/metaq-go/metaq/filters/expr"
	"github.com/metaq-go/metaq/filters/filtertest"
	"github.com/metaq-go/metaq/filters/internal/cases"
)

func TestConformance(t *testing.T) {
	filtertest.Run(t, func(*testing.T) filters.Filter { return expr.New() }, cases.Expr()...)
}

func TestParse(t *testing.T) {
	for _, tc := range []struct{ in, canon string }{
		{`attribute == "red"`, `attribute == "red"`},
		{`attribute=="red"&&size<1024`, `attribute == "red" && size < 1024`},
		{`attribute in ("a","b")`, `attribute in ("a", "b")`},
		{`attribute not in ("a")`, `attribute not in ("a")`},
		{`!has_attribute || true`, `!has_attribute || true`},
		{`size > -1 && msgid != 3 && offset >= 0 && flag <= 1`, `size > -1 && msgid != 3 && offset >= 0 && flag <= 1`},
		{"(\tsize in (1, 2 ,3) )", `(size in (1, 2, 3))`},
		{`attribute == "tab\there \"q\" é"`, `attribute == "tab\there \"q\" é"`},
		{`!!false`, `!!false`},
	} {
		e, err := expr.Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if got := e.String(); got != tc.canon {
			t.Errorf("Parse(%q).String() = %q, want %q", tc.in, got, tc.canon)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, msg string }{
		{``, "col 1: expected a field"},
		{`attribute`, "expected a comparison"},
		{`attribute == 3`, "string literal"},
		{`size == "3"`, "integer"},
		{`colour == "red"`, `unknown field "colour"`},
		{`attribute == "red`, "unterminated string"},
		{`size < 99999999999999999999`, "out of range"},
		{`(size < 3`, `expected ")"`},
		{`size < 3)`, `unexpected ")"`},
		{`size < 3 & size > 1`, "unexpected character '&'"},
		{`attribute in ()`, "string literal"},
		{`attribute not == "a"`, `expected "in"`},
		{`size < 1 ||`, "expected a field"},
		{strings.Repeat("(", 100) + "true" + strings.Repeat(")", 100), "nested deeper"},
		{strings.Repeat("!", 100) + "true", "nested deeper"},
		{`size < 1 || ` + strings.Repeat("x", expr.MaxLen), "longer than"},
	} {
		_, err := expr.Parse(tc.in)
		var se *expr.SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Parse(%q): err = %v, want a SyntaxError", tc.in, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Parse(%q): %v, want it to mention %q", tc.in, err, tc.msg)
		}
	}
}

func TestMatchAttributeAbsent(t *testing.T) {
	// A message without an attribute compares as the empty string.
	e, err := expr.Parse(`attribute == ""`)
	if err != nil {
		t.Fatal(err)
	}
	if !e.Match(&filters.Record{}) || !e.Match(&filters.Record{HasAttribute: true}) || e.Match(&filters.Record{Attribute: "x", HasAttribute: true}) {
		t.Error(`attribute == "" should hold for no attribute and an empty one only`)
	}
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []map[string]string{nil, {"expression": "true"}, {"expr": "size <"}, {"expr": "true", "x": "y"}} {
		if _, _, err := expr.Compile(&filters.InitRequest{Config: cfg}); !errors.Is(err, filters.ErrBadConfig) {
			t.Errorf("config %v: err = %v, want ErrBadConfig", cfg, err)
		}
	}
}
