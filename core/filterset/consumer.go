package filterset

import (
	"strconv"
	"strings"

	"github.com/metaq-go/metaq/filters/expr"
)

// Filters chosen by the consumer (docs/filters.md, docs/protocol.md
// "filter"). A `filter <topic> <group> <len> <opaque>` request compiles its
// body with filters/expr once and keeps it on the connection for (topic,
// group); that connection's later gets of the topic as the group return
// only the records it matches, through the server-side filter path
// (judge.go): with a [[topic.filter]] for the group too, a record must
// pass both. An empty body clears it. The filters die with the connection;
// the SDK registers them again on every new one.

// MaxConnFilters is how many consumer filters one connection may hold
// (the default max_memberships_per_connection, for the same reason: a
// connection serves a handful of subscriptions).
const MaxConnFilters = 64

// maxFilterErrorLen bounds the parse error quoted in a refusal.
const maxFilterErrorLen = 256

// ConnFilters are the filters a connection's consumers chose: topic ->
// group -> expression. The zero value holds none; used by the
// connection's read loop only.
type ConnFilters struct {
	subs map[string]map[string]*expr.Expr
	n    int
}

// FilterError is a refused filter request (a 400): the connection holds
// MaxConnFilters already, or the expression does not parse.
type FilterError struct{ Msg string }

func (e *FilterError) Error() string { return e.Msg }

// Set registers body, an expression, for topic and group, replacing the
// one they had; an empty body (white space aside) clears it. White space
// around the expression is ignored: a parse error's column counts from its
// first other byte.
func (f *ConnFilters) Set(topic, group string, body []byte) error {
	src := strings.Trim(string(body), " \t\r\n")
	groups := f.subs[topic]
	_, had := groups[group]
	if src == "" {
		if had {
			delete(groups, group)
			f.n--
		}
		return nil
	}
	if !had && f.n >= MaxConnFilters {
		return &FilterError{"filter: this connection holds " + strconv.Itoa(MaxConnFilters) +
			" filters, the limit; clear one (an empty filter) first"}
	}
	e, err := expr.Parse(src)
	if err != nil {
		msg := err.Error()
		if len(msg) > maxFilterErrorLen {
			msg = msg[:maxFilterErrorLen] + "..."
		}
		return &FilterError{"filter: " + msg}
	}
	if groups == nil {
		if f.subs == nil {
			f.subs = make(map[string]map[string]*expr.Expr)
		}
		groups = make(map[string]*expr.Expr)
		f.subs[topic] = groups
	}
	if !had {
		f.n++
	}
	groups[group] = e
	return nil
}

// Lookup returns the filter registered for a topic and group, or nil (no
// allocation).
func (f *ConnFilters) Lookup(topic string, group []byte) *expr.Expr {
	if f.n == 0 {
		return nil
	}
	return f.subs[topic][string(group)]
}
