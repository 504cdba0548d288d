package broker

import (
	"github.com/metaq-go/metaq/core/httpapi"
	"strconv"
	"strings"
)

// The audit log (docs/security.md): every change an admin makes — topics
// created, deleted or given partitions (JSON API and dashboard), group
// offsets reset or skipped, a failover switchover, an XA transaction
// completed heuristically (wire protocol) — is one line at info with
// component=audit, the user ("-" with [auth] off), the remote address,
// the action and what changed. Operators grep component=audit (or read
// the "component" attribute of the JSON log format). Names a client
// chose pass through shownName (odd ones quoted and cut); the log handler
// escapes what is left.

// Audit actions.
const (
	auditTopicCreate = "topic.create"
	auditTopicDelete = "topic.delete"
	auditTopicAlter  = "topic.partitions"
	auditOffsetReset = "group.reset"
	auditOffsetSkip  = "group.skip"
	auditSwitchover  = "failover.switchover"
	auditHeuristic   = "tx.heuristic"
)

// auditMaxChanges bounds the partitions an offset change lists.
const auditMaxChanges = 32

// audit logs one admin change: who (a user name, "-" without auth),
// from (the remote address), via (the door: "api", "dashboard",
// "protocol"), action and details as slog key/value pairs.
func (b *Broker) audit(who, from, via, action string, details ...any) {
	for i := 1; i < len(details); i += 2 {
		switch details[i-1] {
		case "topic", "group", "xid": // a client's names
			if s, ok := details[i].(string); ok {
				details[i] = shownName(s)
			}
		}
	}
	args := append([]any{"component", "audit", "user", who, "remote", from, "via", via, "action", action}, details...)
	b.log.Info("audit: "+action, args...)
}

// auditAs is audit for a change made over HTTP (httpapi.Actor: its
// user, remote address and door).
func (b *Broker) auditAs(a httpapi.Actor, action string, details ...any) {
	who := "-"
	if a.User != "" {
		who = shownName(a.User)
	}
	b.audit(who, a.Remote, a.Via, action, details...)
}

// connAudit is audit for a wire-protocol connection.
func (c *conn) connAudit(action string, details ...any) {
	who := "-"
	if n := c.userName(); n != "" {
		who = shownName(n)
	}
	c.b.audit(who, c.nc.RemoteAddr().String(), "protocol", action, details...)
}

// auditChanges renders an offset plan's changes: "p0:100->200 p1:-1->0"
// (-1: nothing was committed), at most auditMaxChanges of them.
func auditChanges(cs []httpapi.ResetChange) string {
	var sb strings.Builder
	for i, c := range cs {
		if i == auditMaxChanges {
			sb.WriteString(" ... (" + strconv.Itoa(len(cs)-i) + " more)")
			break
		}
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString("p" + strconv.Itoa(c.Partition) + ":" + strconv.FormatInt(c.From, 10) + "->" + strconv.FormatInt(c.To, 10))
	}
	return sb.String()
}
