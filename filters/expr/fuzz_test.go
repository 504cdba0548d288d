package expr_test

import (
	"errors"
	"testing"
	"time"

	"github.com/metaq-go/metaq/filters"
	"github.com/metaq-go/metaq/filters/expr"
	"github.com/metaq-go/metaq/filters/filtertest"
	"github.com/metaq-go/metaq/sdk/message"
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
		`TagA || TagB`,
		`*`,
		`tag == "TagA" && header("region") == "eu"`,
		`has_tag("x") || key == "k1" || !has_key`,
		`header("n") in ("1","2") || header("n") > 3 || has_header("n")`,
		`tag not in ("a", "b") && (order-created.v1 || x:y/z)`,
	} {
		f.Add(s)
	}
	recs := append(filtertest.Sample(), propsSample()...)
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

// propsSample is records with properties blocks, for the fuzz targets.
func propsSample() []filters.Record {
	return []filters.Record{
		propsRecord(message.Message{Tags: []string{"TagA"}, Headers: message.Headers{{Key: "region", Value: []byte("eu")}}}),
		propsRecord(message.Message{Tags: []string{"TagB", "x"}, Key: []byte("k1"), Headers: message.Headers{{Key: "n", Value: []byte("1")}}}),
		propsRecord(message.Message{Key: []byte{}, Headers: message.Headers{{Key: "n", Value: []byte("7")}, {Key: "n", Value: nil}}}),
		propsRecord(message.Message{Timestamp: time.UnixMilli(1), Tags: []string{"order-created.v1"}}),
	}
}

// FuzzMatchHostile judges records whose properties block is arbitrary
// bytes (the broker validates blocks on put, but the engine must not
// trust them): Match never panics, and a block that does not decode reads
// as none.
func FuzzMatchHostile(f *testing.F) {
	for _, r := range propsSample() {
		f.Add(`TagA || tag in ("x") || key == "k1" || header("n") > 3 || has_header("region")`, r.Properties)
	}
	f.Add(`has_key`, []byte{1, 1, 0x80})
	f.Add(`header("n") == "1"`, []byte{1, 8, 1, 1, 'n', 2, '1'})
	f.Fuzz(func(t *testing.T, src string, block []byte) {
		e, err := expr.Parse(src)
		if err != nil {
			return
		}
		r := filters.Record{Properties: block, Flag: message.FlagHasProperties}
		got := e.Match(&r)
		if message.ValidateProperties(block) != nil {
			if none := e.Match(&filters.Record{Flag: message.FlagHasProperties}); got != none {
				t.Fatalf("%q: a bad block matched %v, no block %v", src, got, none)
			}
		}
	})
}
