package expr_test

import (
	"errors"
	"testing"

	"github.com/metaq-go/metaq/filters/expr"
	"github.com/metaq-go/metaq/filters/filtertest"
)

// FuzzParseExpr checks that Parse never panics, and that whatever it
// accepts prints to a canonical form that parses back to the same form and
// the same verdicts.
func FuzzParseExpr(f *testing.F) {
	for _, s := range []string{
		`attribute == "red" && size < 1024`,
		`attribute in ("a","b")`,
		`!(has_attribute) || msgid >= 0`,
		`attribute not in ("x", "y\n") && offset != -5`,
		`((true)) && !false`,
		`flag == 1 || size > 2`,
	} {
		f.Add(s)
	}
	recs := filtertest.Sample()
	f.Fuzz(func(t *testing.T, src string) {
		e, err := expr.Parse(src)
		if err != nil {
			return
		}
		canon := e.String()
		if len(canon) > expr.MaxLen {
			// Quoting can make the canonical form longer than the source
			// (an invalid byte becomes \xNN): it is then refused for its
			// length, never misparsed.
			_, err := expr.Parse(canon)
			var se *expr.SyntaxError
			if !errors.As(err, &se) || se.Pos != expr.MaxLen {
				t.Fatalf("overlong canonical form: %v", err)
			}
			return
		}
		e2, err := expr.Parse(canon)
		if err != nil {
			t.Fatalf("canonical form %q of %q does not parse: %v", canon, src, err)
		}
		if got := e2.String(); got != canon {
			t.Fatalf("canonical form not stable: %q -> %q", canon, got)
		}
		for i := range recs {
			if e.Match(&recs[i]) != e2.Match(&recs[i]) {
				t.Fatalf("%q and its canonical form %q disagree on record %d", src, canon, i)
			}
		}
	})
}
