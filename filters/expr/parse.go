package expr

import (
	"fmt"
	"strconv"
	"strings"
)

// Limits of the parser, so that a hostile config cannot exhaust memory or
// the stack.
const (
	// MaxLen is the longest expression accepted, in bytes.
	MaxLen = 4096
	// MaxDepth is the deepest nesting of parentheses and ! accepted.
	MaxDepth = 64
)

// SyntaxError is a parse error at a byte position of the expression.
type SyntaxError struct {
	Pos int // 0-based byte offset
	Msg string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("expr: col %d: %s", e.Pos+1, e.Msg) }

type tokKind int

const (
	tEOF tokKind = iota
	tIdent
	tString
	tInt
	tPunct
)

type token struct {
	kind tokKind
	pos  int
	text string // identifier, punctuation, or the unquoted string
	n    int64
}

type parser struct {
	src   string
	pos   int
	tok   token
	depth int
}

// Parse compiles src. The grammar:
//
//	top     = "*" | expr
//	expr    = and { "||" and }
//	and     = unary { "&&" unary }
//	unary   = "!" unary | primary
//	primary = "(" expr ")" | "true" | "false" | "has_attribute" | "has_key"
//	        | "has_tag" "(" string ")" | "has_header" "(" string ")"
//	        | field op literal | field ["not"] "in" "(" literal { "," literal } ")"
//	        | word
//	field   = "attribute" | "size" | "msgid" | "offset" | "flag" | "key" | "tag"
//	        | "header" "(" string ")"
//	op      = "==" | "!=" | "<" | "<=" | ">" | ">="
//
// attribute, key and tag take double-quoted string literals (Go escapes),
// tag with == != in and not in only; header takes either strings or
// integers (all of one kind in an in list); the other fields take decimal
// integers. A word is an identifier ([A-Za-z_] then [A-Za-z0-9_.:/-]) that
// is not a field or keyword, followed by ||, &&, ) or the end: the tag test
// has_tag("word"), so that RocketMQ's `TagA || TagB` works as written. `*`
// alone matches every message.
func Parse(src string) (*Expr, error) {
	if len(src) > MaxLen {
		return nil, &SyntaxError{Pos: MaxLen, Msg: "expression longer than " + strconv.Itoa(MaxLen) + " bytes"}
	}
	if strings.TrimSpace(src) == "*" {
		return &Expr{root: constNode(true)}, nil
	}
	p := &parser{src: src}
	if err := p.next(); err != nil {
		return nil, err
	}
	n, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	if p.tok.kind != tEOF {
		return nil, p.errf("unexpected %s", p.tok.describe())
	}
	return &Expr{root: n}, nil
}

func (p *parser) errf(format string, args ...any) error {
	return &SyntaxError{Pos: p.tok.pos, Msg: fmt.Sprintf(format, args...)}
}

func (t token) describe() string {
	switch t.kind {
	case tEOF:
		return "end of expression"
	case tString:
		return strconv.Quote(t.text)
	case tInt:
		return strconv.FormatInt(t.n, 10)
	}
	return strconv.Quote(t.text)
}

// next scans the next token into p.tok.
func (p *parser) next() error {
	s := p.src
	for p.pos < len(s) && (s[p.pos] == ' ' || s[p.pos] == '\t' || s[p.pos] == '\n' || s[p.pos] == '\r') {
		p.pos++
	}
	start := p.pos
	if start >= len(s) {
		p.tok = token{kind: tEOF, pos: start}
		return nil
	}
	c := s[start]
	switch {
	case isLetter(c):
		for p.pos < len(s) && (isLetter(s[p.pos]) || isDigit(s[p.pos]) || isWordPunct(s[p.pos])) {
			p.pos++
		}
		p.tok = token{kind: tIdent, pos: start, text: s[start:p.pos]}
	case isDigit(c) || (c == '-' && start+1 < len(s) && isDigit(s[start+1])):
		p.pos++
		for p.pos < len(s) && isDigit(s[p.pos]) {
			p.pos++
		}
		n, err := strconv.ParseInt(s[start:p.pos], 10, 64)
		if err != nil {
			return &SyntaxError{Pos: start, Msg: "integer " + s[start:p.pos] + " out of range"}
		}
		p.tok = token{kind: tInt, pos: start, n: n}
	case c == '"':
		end := start + 1
		for end < len(s) && s[end] != '"' {
			if s[end] == '\\' {
				end++
			}
			end++
		}
		if end >= len(s) {
			return &SyntaxError{Pos: start, Msg: "unterminated string"}
		}
		str, err := strconv.Unquote(s[start : end+1])
		if err != nil {
			return &SyntaxError{Pos: start, Msg: "bad string literal " + s[start:end+1]}
		}
		p.pos = end + 1
		p.tok = token{kind: tString, pos: start, text: str}
	default:
		two := ""
		if start+1 < len(s) {
			two = s[start : start+2]
		}
		switch two {
		case "&&", "||", "==", "!=", "<=", ">=":
			p.pos += 2
			p.tok = token{kind: tPunct, pos: start, text: two}
			return nil
		}
		switch c {
		case '(', ')', ',', '!', '<', '>':
			p.pos++
			p.tok = token{kind: tPunct, pos: start, text: s[start:p.pos]}
			return nil
		}
		return &SyntaxError{Pos: start, Msg: fmt.Sprintf("unexpected character %q", c)}
	}
	return nil
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }

// isWordPunct: the bytes other than letters, digits and _ that a word (a
// bare tag) may hold after its first byte.
func isWordPunct(c byte) bool { return c == '-' || c == '.' || c == ':' || c == '/' }

func (p *parser) is(text string) bool {
	return (p.tok.kind == tPunct || p.tok.kind == tIdent) && p.tok.text == text
}

func (p *parser) expect(text string) error {
	if !p.is(text) {
		return p.errf("expected %q, found %s", text, p.tok.describe())
	}
	return p.next()
}

func (p *parser) parseOr() (node, error) {
	l, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.is("||") {
		if err := p.next(); err != nil {
			return nil, err
		}
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		l = &binNode{or: true, l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseAnd() (node, error) {
	l, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	for p.is("&&") {
		if err := p.next(); err != nil {
			return nil, err
		}
		r, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		l = &binNode{l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseUnary() (node, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > MaxDepth {
		return nil, p.errf("expression nested deeper than %d", MaxDepth)
	}
	if p.is("!") {
		if err := p.next(); err != nil {
			return nil, err
		}
		x, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		return &notNode{x: x}, nil
	}
	return p.parsePrimary()
}

func (p *parser) parsePrimary() (node, error) {
	t := p.tok
	if p.is("(") {
		if err := p.next(); err != nil {
			return nil, err
		}
		x, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		if err := p.expect(")"); err != nil {
			return nil, err
		}
		return &parenNode{x: x}, nil
	}
	if t.kind != tIdent {
		return nil, p.errf("expected a field, true, false or (, found %s", t.describe())
	}
	switch t.text {
	case "true", "false":
		return constNode(t.text == "true"), p.next()
	case "has_attribute":
		return hasAttrNode{}, p.next()
	case "has_key":
		return hasKeyNode{}, p.next()
	case "has_tag", "has_header":
		if err := p.next(); err != nil {
			return nil, err
		}
		arg, err := p.parseArg(t.text)
		if err != nil {
			return nil, err
		}
		if t.text == "has_tag" {
			return &hasTagNode{v: strValue(arg)}, nil
		}
		return &hasHeaderNode{name: arg}, nil
	}
	f, ok := fieldByName[t.text]
	if err := p.next(); err != nil {
		return nil, err
	}
	if !ok {
		if p.tok.kind == tEOF || p.is("||") || p.is("&&") || p.is(")") {
			return &hasTagNode{v: strValue(t.text)}, nil // a bare tag
		}
		return nil, &SyntaxError{Pos: t.pos, Msg: fmt.Sprintf("unknown field %q (want attribute, size, msgid, offset, flag, key, tag or header(\"name\"); "+
			"a bare word is a tag only before ||, && or ))", t.text)}
	}
	x := ref{f: f}
	if f == fHeader {
		var err error
		if x.name, err = p.parseArg("header"); err != nil {
			return nil, err
		}
	}
	neg := false
	if p.is("not") {
		neg = true
		if err := p.next(); err != nil {
			return nil, err
		}
		if !p.is("in") {
			return nil, p.errf("expected \"in\" after \"not\", found %s", p.tok.describe())
		}
	}
	if p.is("in") {
		return p.parseIn(x, neg)
	}
	if p.tok.kind != tPunct {
		return nil, p.errf("expected a comparison after %s, found %s", f, p.tok.describe())
	}
	o, ok := opByText[p.tok.text]
	if !ok {
		return nil, p.errf("expected a comparison after %s, found %s", f, p.tok.describe())
	}
	if f == fTag && o != opEq && o != opNe {
		return nil, p.errf("tag compares with ==, !=, in or not in, found %s", p.tok.describe())
	}
	if err := p.next(); err != nil {
		return nil, err
	}
	v, err := p.parseLiteral(f, nil)
	if err != nil {
		return nil, err
	}
	return &cmpNode{x: x, op: o, v: v}, nil
}

// parseArg parses `"(" string ")"` after has_tag, has_header or header.
func (p *parser) parseArg(what string) (string, error) {
	if err := p.expect("("); err != nil {
		return "", err
	}
	if p.tok.kind != tString {
		return "", p.errf("%s takes a string literal, found %s", what, p.tok.describe())
	}
	s := p.tok.text
	if err := p.next(); err != nil {
		return "", err
	}
	return s, p.expect(")")
}

func (p *parser) parseIn(x ref, neg bool) (node, error) {
	if err := p.next(); err != nil { // "in"
		return nil, err
	}
	if err := p.expect("("); err != nil {
		return nil, err
	}
	n := &inNode{x: x, neg: neg}
	for {
		var first *value
		if len(n.vs) > 0 {
			first = &n.vs[0]
		}
		v, err := p.parseLiteral(x.f, first)
		if err != nil {
			return nil, err
		}
		n.vs = append(n.vs, v)
		if p.is(")") {
			return n, p.next()
		}
		if err := p.expect(","); err != nil {
			return nil, err
		}
	}
}

// parseLiteral parses f's literal; in an in list, first is the list's
// first literal, whose kind a header's others must have.
func (p *parser) parseLiteral(f field, first *value) (value, error) {
	t := p.tok
	switch {
	case f == fHeader && first != nil && first.isStr != (t.kind == tString):
		what := "an integer"
		if first.isStr {
			what = "a string literal"
		}
		return value{}, p.errf("header in list mixes kinds: want %s, found %s", what, t.describe())
	case (f.str() || f == fHeader) && t.kind == tString:
		return strValue(t.text), p.next()
	case !f.str() && t.kind == tInt:
		return value{n: t.n}, p.next()
	case f == fHeader:
		return value{}, p.errf("header compares with a string literal or an integer, found %s", t.describe())
	case f.str():
		return value{}, p.errf("%s compares with a string literal, found %s", f, t.describe())
	}
	return value{}, p.errf("%s compares with an integer, found %s", f, t.describe())
}

// String returns the expression in canonical form; parsing it again gives
// the same expression.
func (e *Expr) String() string {
	var sb strings.Builder
	e.root.format(&sb)
	return sb.String()
}
