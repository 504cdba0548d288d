// Package expr is the builtin "expr" filter: it keeps the messages for
// which a small boolean expression over their metadata holds, for example
//
//	attribute == "red" && size < 1024
//	attribute in ("a", "b") || !has_attribute
//	tag == "TagA" && header("region") == "eu"
//	TagA || TagB
//
// Config: expr = "<expression>" (required). The same expressions are what
// a consumer names when it subscribes (docs/filters.md, "Filters chosen by
// the consumer"). Fields: attribute (string; the empty string when the
// message has none), has_attribute (boolean), size (data length in bytes),
// msgid, offset and flag (integers), and from the message's properties
// block (sdk/message): key (string; "" without one), has_key, tag (tests
// against each of the message's tags), has_tag("t"), header("name") (the
// last header of that name: a string, or compared with an integer its
// decimal value) and has_header("name"). A bare word (TagA), or `*` as the
// whole expression, is RocketMQ's tag form: has_tag("TagA"), true.
// Operators: == != < <= > >=, in (...), not in (...), !, && and || (&&
// binds tighter), and parentheses. See Parse for the grammar. The filter
// reads metadata only (it never asks for bodies).
package expr

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/metaq-go/metaq/filters"
)

// Name is the builtin's name in server.toml.
const Name = "expr"

// New returns an expression filter with no instances.
func New() filters.Filter { return filters.NewRecordFilter(Compile) }

// Compile builds one instance's predicate from its config.
func Compile(req *filters.InitRequest) (func(*filters.Record) bool, bool, error) {
	src, ok := req.Config["expr"]
	for k := range req.Config {
		if k != "expr" {
			return nil, false, fmt.Errorf("%w: expr: unknown key %q (want expr)", filters.ErrBadConfig, k)
		}
	}
	if !ok {
		return nil, false, fmt.Errorf("%w: expr: config needs expr", filters.ErrBadConfig)
	}
	e, err := Parse(src)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", filters.ErrBadConfig, err)
	}
	return e.Match, false, nil
}

// Expr is a parsed expression. It is immutable and safe for concurrent use.
type Expr struct{ root node }

// Match reports whether r satisfies the expression. A properties block
// that does not decode (the broker checks it on put, so only a damaged
// one) reads as none: no key, tags or headers. Match never panics.
func (e *Expr) Match(r *filters.Record) bool { return e.root.eval(r) }

type field int

const (
	fAttribute field = iota
	fSize
	fMsgID
	fOffset
	fFlag
	fKey
	fTag
	fHeader
)

var fieldNames = [...]string{"attribute", "size", "msgid", "offset", "flag", "key", "tag", "header"}

var fieldByName = map[string]field{"attribute": fAttribute, "size": fSize, "msgid": fMsgID, "offset": fOffset, "flag": fFlag,
	"key": fKey, "tag": fTag, "header": fHeader}

func (f field) String() string { return fieldNames[f] }

// str reports whether f compares with string literals (header takes either).
func (f field) str() bool { return f == fAttribute || f == fKey || f == fTag }

func (f field) int(r *filters.Record) int64 {
	switch f {
	case fSize:
		return int64(r.Size)
	case fMsgID:
		return r.MsgID
	case fOffset:
		return r.Offset
	}
	return int64(r.Flag)
}

// ref is what a comparison reads: a field and, for header, its name.
type ref struct {
	f    field
	name string
}

func (x ref) format(sb *strings.Builder) {
	sb.WriteString(x.f.String())
	if x.f == fHeader {
		sb.WriteByte('(')
		sb.WriteString(strconv.Quote(x.name))
		sb.WriteByte(')')
	}
}

// value reads a string-valued ref of r; ok is false for a header r lacks.
func (x ref) value(r *filters.Record) (v []byte, ok bool) {
	switch x.f {
	case fAttribute:
		return unsafeBytes(r.Attribute), true
	case fKey:
		k, _ := propKey(r.Properties)
		return k, true
	}
	return propHeader(r.Properties, x.name)
}

type op int

const (
	opEq op = iota
	opNe
	opLt
	opLe
	opGt
	opGe
)

var opTexts = [...]string{"==", "!=", "<", "<=", ">", ">="}

var opByText = map[string]op{"==": opEq, "!=": opNe, "<": opLt, "<=": opLe, ">": opGt, ">=": opGe}

func (o op) holds(c int) bool {
	switch o {
	case opEq:
		return c == 0
	case opNe:
		return c != 0
	case opLt:
		return c < 0
	case opLe:
		return c <= 0
	case opGt:
		return c > 0
	}
	return c >= 0
}

// value is a literal: a string (s, and b its bytes) or an integer (n).
type value struct {
	isStr bool
	s     string
	b     []byte
	n     int64
}

func strValue(s string) value { return value{isStr: true, s: s, b: []byte(s)} }

func (v value) format(sb *strings.Builder) {
	if v.isStr {
		sb.WriteString(strconv.Quote(v.s))
	} else {
		sb.WriteString(strconv.FormatInt(v.n, 10))
	}
}

type node interface {
	eval(r *filters.Record) bool
	format(sb *strings.Builder)
}

type binNode struct {
	or   bool
	l, r node
}

func (n *binNode) eval(r *filters.Record) bool {
	if n.or {
		return n.l.eval(r) || n.r.eval(r)
	}
	return n.l.eval(r) && n.r.eval(r)
}

func (n *binNode) format(sb *strings.Builder) {
	n.l.format(sb)
	if n.or {
		sb.WriteString(" || ")
	} else {
		sb.WriteString(" && ")
	}
	n.r.format(sb)
}

type notNode struct{ x node }

func (n *notNode) eval(r *filters.Record) bool { return !n.x.eval(r) }
func (n *notNode) format(sb *strings.Builder) {
	sb.WriteByte('!')
	n.x.format(sb)
}

type parenNode struct{ x node }

func (n *parenNode) eval(r *filters.Record) bool { return n.x.eval(r) }
func (n *parenNode) format(sb *strings.Builder) {
	sb.WriteByte('(')
	n.x.format(sb)
	sb.WriteByte(')')
}

type constNode bool

func (n constNode) eval(*filters.Record) bool { return bool(n) }
func (n constNode) format(sb *strings.Builder) {
	sb.WriteString(strconv.FormatBool(bool(n)))
}

type hasAttrNode struct{}

func (hasAttrNode) eval(r *filters.Record) bool { return r.HasAttribute }
func (hasAttrNode) format(sb *strings.Builder)  { sb.WriteString("has_attribute") }

type hasKeyNode struct{}

func (hasKeyNode) eval(r *filters.Record) bool {
	_, ok := propKey(r.Properties)
	return ok
}
func (hasKeyNode) format(sb *strings.Builder) { sb.WriteString("has_key") }

// hasTagNode is has_tag("t"), and what a bare word compiles to.
type hasTagNode struct{ v value }

func (n *hasTagNode) eval(r *filters.Record) bool { return propHasTag(r.Properties, n.v.b) }
func (n *hasTagNode) format(sb *strings.Builder) {
	sb.WriteString("has_tag(")
	n.v.format(sb)
	sb.WriteByte(')')
}

type hasHeaderNode struct{ name string }

func (n *hasHeaderNode) eval(r *filters.Record) bool {
	_, ok := propHeader(r.Properties, n.name)
	return ok
}
func (n *hasHeaderNode) format(sb *strings.Builder) {
	sb.WriteString("has_header(")
	sb.WriteString(strconv.Quote(n.name))
	sb.WriteByte(')')
}

type cmpNode struct {
	x  ref
	op op
	v  value
}

func (n *cmpNode) eval(r *filters.Record) bool {
	switch {
	case n.x.f == fTag: // == and != only: some tag is, or no tag is, the literal
		return propHasTag(r.Properties, n.v.b) == (n.op == opEq)
	case n.x.f.str() || n.x.f == fHeader && n.v.isStr:
		s, _ := n.x.value(r) // an absent header compares as ""
		return n.op.holds(bytes.Compare(s, n.v.b))
	}
	var x int64
	if n.x.f == fHeader {
		var ok bool
		if x, ok = headerInt(r, n.x.name); !ok {
			return false // no such header, or not a decimal integer
		}
	} else {
		x = n.x.f.int(r)
	}
	c := 0
	switch {
	case x < n.v.n:
		c = -1
	case x > n.v.n:
		c = 1
	}
	return n.op.holds(c)
}

func (n *cmpNode) format(sb *strings.Builder) {
	n.x.format(sb)
	sb.WriteByte(' ')
	sb.WriteString(opTexts[n.op])
	sb.WriteByte(' ')
	n.v.format(sb)
}

type inNode struct {
	x   ref
	neg bool
	vs  []value
}

func (n *inNode) eval(r *filters.Record) bool {
	return n.found(r) != n.neg
}

func (n *inNode) found(r *filters.Record) bool {
	switch {
	case n.x.f == fTag:
		return propAnyTag(r.Properties, n.vs)
	case n.x.f.str() || n.x.f == fHeader && n.vs[0].isStr:
		s, _ := n.x.value(r)
		for _, v := range n.vs {
			if bytes.Equal(s, v.b) {
				return true
			}
		}
		return false
	}
	var x int64
	if n.x.f == fHeader {
		var ok bool
		if x, ok = headerInt(r, n.x.name); !ok {
			return n.neg // neither in nor not in holds
		}
	} else {
		x = n.x.f.int(r)
	}
	for _, v := range n.vs {
		if x == v.n {
			return true
		}
	}
	return false
}

func (n *inNode) format(sb *strings.Builder) {
	n.x.format(sb)
	if n.neg {
		sb.WriteString(" not")
	}
	sb.WriteString(" in (")
	for i, v := range n.vs {
		if i > 0 {
			sb.WriteString(", ")
		}
		v.format(sb)
	}
	sb.WriteByte(')')
}

// headerInt reads the last header named name as a decimal int64.
func headerInt(r *filters.Record, name string) (int64, bool) {
	v, ok := propHeader(r.Properties, name)
	if !ok || len(v) == 0 || len(v) > 20 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil
}
