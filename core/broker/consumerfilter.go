package broker

import (
	"strconv"
	"strings"

	"github.com/metaq-go/metaq/filters/expr"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Filters chosen by the consumer (docs/filters.md, docs/protocol.md
// "filter"). A `filter <topic> <group> <len> <opaque>` request compiles its
// body with filters/expr once and keeps it on the connection for (topic,
// group); that connection's later gets of the topic as the group return
// only the records it matches, through the server-side filter path
// (filter.go): with a [[topic.filter]] for the group too, a record must
// pass both. An empty body clears it. The filters die with the connection;
// the SDK registers them again on every new one.

// maxConnFilters is how many consumer filters one connection may hold
// (the default max_memberships_per_connection, for the same reason: a
// connection serves a handful of subscriptions).
const maxConnFilters = 64

// maxFilterErrorLen bounds the parse error quoted in a 400 reply.
const maxFilterErrorLen = 256

// handleFilter answers a filter request: 200 once the expression is
// registered (or cleared), 400 with the parse error. White space around
// the expression is ignored: the column counts from its first other byte.
func (c *conn) handleFilter(r *protocol.Request) {
	b := c.b
	if err := message.ValidateGroup(string(r.Group)); err != nil {
		c.reply(protocol.StatusBadRequest, "filter: group "+protocol.Printable(r.Group)+": "+err.Error(), r.Opaque)
		return
	}
	t, err := b.lookup(r.Topic, false)
	if err != nil {
		c.reply(protocol.StatusInternalError, "unknown topic "+showTopic(r.Topic), r.Opaque)
		return
	}
	if !t.conf().AcceptSubscribe {
		c.reply(protocol.StatusForbidden, "topic "+t.name+" does not accept gets (accept_subscribe = false)", r.Opaque)
		return
	}
	src := strings.Trim(string(r.Body), " \t\r\n")
	groups := c.subs[t.name]
	_, had := groups[string(r.Group)]
	if src == "" {
		if had {
			delete(groups, string(r.Group))
			c.nsubs--
		}
		c.reply(protocol.StatusOK, "", r.Opaque)
		return
	}
	if !had && c.nsubs >= maxConnFilters {
		c.reply(protocol.StatusBadRequest, "filter: this connection holds "+strconv.Itoa(maxConnFilters)+
			" filters, the limit; clear one (an empty filter) first", r.Opaque)
		return
	}
	e, err := expr.Parse(src)
	if err != nil {
		msg := err.Error()
		if len(msg) > maxFilterErrorLen {
			msg = msg[:maxFilterErrorLen] + "..."
		}
		c.reply(protocol.StatusBadRequest, "filter: "+msg, r.Opaque)
		return
	}
	if groups == nil {
		if c.subs == nil {
			c.subs = make(map[string]map[string]*expr.Expr)
		}
		groups = make(map[string]*expr.Expr)
		c.subs[t.name] = groups
	}
	if !had {
		c.nsubs++
	}
	groups[string(r.Group)] = e
	c.reply(protocol.StatusOK, "", r.Opaque)
}

// consumerFilter returns the filter this connection registered for a
// topic and group, or nil (read loop only; no allocation).
func (c *conn) consumerFilter(topic string, group []byte) *expr.Expr {
	if c.nsubs == 0 {
		return nil
	}
	return c.subs[topic][string(group)]
}
