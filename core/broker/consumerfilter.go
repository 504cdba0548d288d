package broker

import (
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Filters chosen by the consumer (docs/filters.md, docs/protocol.md
// "filter"): a connection keeps them in its filterset.ConnFilters
// (core/filterset consumer.go), and its gets of the topic as the group
// take the server-side filter path (filter.go).

// handleFilter answers a filter request: 200 once the expression is
// registered (or cleared), 400 with the parse error or over
// filterset.MaxConnFilters.
func (c *conn) handleFilter(r *protocol.Request) {
	if err := message.ValidateGroup(string(r.Group)); err != nil {
		c.reply(protocol.StatusBadRequest, "filter: group "+protocol.Printable(r.Group)+": "+err.Error(), r.Opaque)
		return
	}
	t, err := c.b.lookup(r.Topic, false)
	if err != nil {
		c.reply(protocol.StatusInternalError, "unknown topic "+showTopic(r.Topic), r.Opaque)
		return
	}
	if !t.Conf().AcceptSubscribe {
		c.reply(protocol.StatusForbidden, "topic "+t.Name()+" does not accept gets (accept_subscribe = false)", r.Opaque)
		return
	}
	if err := c.subs.Set(t.Name(), string(r.Group), r.Body); err != nil {
		c.reply(protocol.StatusBadRequest, err.Error(), r.Opaque)
		return
	}
	c.reply(protocol.StatusOK, "", r.Opaque)
}
