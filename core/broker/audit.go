package broker

import (
	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/core/security"
)

// The audit log is security.Audit (docs/security.md, its actions
// security.Audit*); this is its doors' glue.

// AuditDLQReplay audits a replay of group's dead letters (core/httpapi
// dlq.go).
func (h httpBackend) AuditDLQReplay(a httpapi.Actor, group, to string, count int) {
	h.b.auditAs(a, security.AuditDLQReplay, "group", group, "to", to, "messages", count)
}

// auditAs audits a change made over HTTP (httpapi.Actor: its user, remote
// address and door).
func (b *Broker) auditAs(a httpapi.Actor, action string, details ...any) {
	b.audit.Log(a.User, a.Remote, a.Via, action, details...)
}

// connAudit audits a change made over a wire-protocol connection.
func (c *conn) connAudit(action string, details ...any) {
	c.b.audit.Log(c.userName(), c.nc.RemoteAddr().String(), "protocol", action, details...)
}

// auditChanges renders an offset plan's changes (security.AuditChanges).
func auditChanges(cs []httpapi.ResetChange) string {
	return security.AuditChanges(len(cs), func(i int) (int, int64, int64) { return cs[i].Partition, cs[i].From, cs[i].To })
}
