// Package expr is the builtin "expr" filter: it keeps the messages for
// which a small boolean expression over their metadata holds, for example
//
//	attribute == "red" && size < 1024
//	attribute in ("a", "b") || !has_attribute
//
// Config: expr = "<expression>" (required). Fields: attribute (string; the
// empty string when the message has none), has_attribute (boolean), size
// (data length in bytes), msgid, offset and flag (integers). Operators:
// == != < <= > >=, in (...), not in (...), !, && and || (&& binds tighter),
// and parentheses. See Parse for the grammar. The filter reads metadata
// only (it never asks for bodies).
package expr

import (
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

// Match reports whether r satisfies the expression.
func (e *Expr) Match(r *filters.Record) bool { return e.root.eval(r) }

type field int

const (
	fAttribute field = iota
	fSize
	fMsgID
	fOffset
	fFlag
)

var fieldNames = [...]string{"attribute", "size", "msgid", "offset", "flag"}

var fieldByName = map[string]field{"attribute": fAttribute, "size": fSize, "msgid": fMsgID, "offset": fOffset, "flag": fFlag}

func (f field) String() string { return fieldNames[f] }

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

// value is a literal: s for attribute, n for the integer fields.
type value struct {
	s string
	n int64
}

func (v value) format(f field, sb *strings.Builder) {
	if f == fAttribute {
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

type cmpNode struct {
	f  field
	op op
	v  value
}

func (n *cmpNode) eval(r *filters.Record) bool {
	var c int
	if n.f == fAttribute {
		c = strings.Compare(r.Attribute, n.v.s)
	} else {
		x := n.f.int(r)
		switch {
		case x < n.v.n:
			c = -1
		case x > n.v.n:
			c = 1
		}
	}
	switch n.op {
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

func (n *cmpNode) format(sb *strings.Builder) {
	sb.WriteString(n.f.String())
	sb.WriteByte(' ')
	sb.WriteString(opTexts[n.op])
	sb.WriteByte(' ')
	n.v.format(n.f, sb)
}

type inNode struct {
	f   field
	neg bool
	vs  []value
}

func (n *inNode) eval(r *filters.Record) bool {
	found := false
	if n.f == fAttribute {
		for _, v := range n.vs {
			if r.Attribute == v.s {
				found = true
				break
			}
		}
	} else {
		x := n.f.int(r)
		for _, v := range n.vs {
			if x == v.n {
				found = true
				break
			}
		}
	}
	return found != n.neg
}

func (n *inNode) format(sb *strings.Builder) {
	sb.WriteString(n.f.String())
	if n.neg {
		sb.WriteString(" not")
	}
	sb.WriteString(" in (")
	for i, v := range n.vs {
		if i > 0 {
			sb.WriteString(", ")
		}
		v.format(n.f, sb)
	}
	sb.WriteByte(')')
}
