package expr_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/metaq-go/metaq/filters"
	"github.com/metaq-go/metaq/filters/expr"
	"github.com/metaq-go/metaq/filters/filtertest"
	"github.com/metaq-go/metaq/filters/internal/cases"
	"github.com/metaq-go/metaq/sdk/message"
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
		{`TagA || TagB`, `has_tag("TagA") || has_tag("TagB")`},
		{` * `, `true`},
		{`order-created.v1 && !(x:y/z)`, `has_tag("order-created.v1") && !(has_tag("x:y/z"))`},
		{`tag == "TagA" && header("region") == "eu"`, `tag == "TagA" && header("region") == "eu"`},
		{`has_tag("a b") || has_key || has_header("h")`, `has_tag("a b") || has_key || has_header("h")`},
		{`key=="k1"||key in ("a","b")`, `key == "k1" || key in ("a", "b")`},
		{`header("n") in ("1","2") && header("n") not in (3, 4) && header("n")>=-1`, `header("n") in ("1", "2") && header("n") not in (3, 4) && header("n") >= -1`},
		{`tag not in ("x") && tag != "y"`, `tag not in ("x") && tag != "y"`},
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
		{`TagA TagB`, `col 1: unknown field "TagA"`},
		{`tag < "a"`, "tag compares with ==, !=, in or not in"},
		{`tag == 1`, "tag compares with a string literal"},
		{`key == 1`, "key compares with a string literal"},
		{`header == "x"`, `expected "("`},
		{`header(1) == "x"`, "header takes a string literal"},
		{`header("n") == true`, "header compares with a string literal or an integer"},
		{`header("n") in ("1", 2)`, "mixes kinds: want a string literal"},
		{`header("n") in (1, "2")`, "mixes kinds: want an integer"},
		{`has_tag(TagA)`, "has_tag takes a string literal"},
		{`has_header("h"`, `expected ")"`},
		{`* || TagA`, `unexpected character '*'`},
		{`TagA || `, "col 9: expected a field"},
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

// propsRecord is a record of m's metadata as the broker scans it.
func propsRecord(m message.Message) filters.Record {
	var block []byte
	if p := m.AppendProperties(nil); len(p) > 0 {
		block = p[4:]
	}
	return filters.Record{Attribute: m.Attribute, HasAttribute: m.HasAttribute, Properties: block}
}

func TestMatchProperties(t *testing.T) {
	recs := []filters.Record{
		0: propsRecord(message.Message{Tags: []string{"TagA"}, Headers: message.Headers{{Key: "region", Value: []byte("eu")}}}),
		1: propsRecord(message.Message{Tags: []string{"TagB", "x"}, Key: []byte("k1"), Headers: message.Headers{{Key: "n", Value: []byte("1")}}}),
		2: propsRecord(message.Message{Key: []byte{}, Headers: message.Headers{{Key: "n", Value: []byte("7")}, {Key: "n", Value: []byte("2")}}}),
		3: propsRecord(message.Message{Headers: message.Headers{{Key: "region", Value: nil}, {Key: "n", Value: []byte("x")}}}),
		4: {},                               // no properties block
		5: {Properties: []byte{1, 0xff, 0}}, // damaged: reads as none
	}
	for _, tc := range []struct {
		src  string
		want string // the records that match, by index
	}{
		{`*`, "012345"},
		{`TagA || TagB`, "01"},
		{`TagA && TagB`, ""},
		{`tag == "x"`, "1"},
		{`tag != "x"`, "02345"},
		{`tag in ("TagA", "x")`, "01"},
		{`tag not in ("TagA", "x")`, "2345"},
		{`has_tag("TagB")`, "1"},
		{`tag == "TagA" && header("region") == "eu"`, "0"},
		{`header("region") == ""`, "12345"}, // absent, and a null value, read as ""
		{`has_header("region")`, "03"},
		{`key == "k1"`, "1"},
		{`key == ""`, "02345"},
		{`has_key`, "12"},
		{`header("n") in ("1", "2")`, "12"}, // the last header of a name counts
		{`header("n") > 1`, "2"},
		{`header("n") != 5`, "12"}, // an integer comparison needs a decimal value
		{`header("n") not in (1)`, "2"},
		{`!has_header("n")`, "045"},
	} {
		e, err := expr.Parse(tc.src)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.src, err)
		}
		got := ""
		for i := range recs {
			if e.Match(&recs[i]) {
				got += strconv.Itoa(i)
			}
		}
		if got != tc.want {
			t.Errorf("%s: matched %q, want %q", tc.src, got, tc.want)
		}
	}
}

// TestMatchAllocs: judging a record allocates nothing, properties included.
func TestMatchAllocs(t *testing.T) {
	e, err := expr.Parse(`(TagA || tag in ("x", "y")) && header("region") == "eu" && key != "k" && header("n") > 3 || has_key`)
	if err != nil {
		t.Fatal(err)
	}
	r := propsRecord(message.Message{Tags: []string{"TagA", "b"}, Key: []byte("k1"),
		Headers: message.Headers{{Key: "region", Value: []byte("eu")}, {Key: "n", Value: []byte("12")}}})
	if !e.Match(&r) {
		t.Fatal("no match")
	}
	if n := testing.AllocsPerRun(100, func() { e.Match(&r) }); n != 0 {
		t.Errorf("Match allocates %v times", n)
	}
}
