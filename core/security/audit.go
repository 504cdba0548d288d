package security

import (
	"log/slog"
	"strconv"
	"strings"
)

// Audit is the audit log (docs/security.md): every change an admin makes
// — topics created, deleted or given partitions (JSON API and dashboard),
// group offsets reset or skipped, a failover switchover, an XA
// transaction completed heuristically (wire protocol) — is one line at
// info with component=audit, the user ("-" with [auth] off), the remote
// address, the action and what changed. Operators grep component=audit
// (or read the "component" attribute of the JSON log format). Names a
// client chose pass through Shown (odd ones quoted and cut); the log
// handler escapes what is left.
type Audit struct {
	log   *slog.Logger
	shown func(string) string
}

// NewAudit returns the audit log writing to log, showing a client's names
// with shown.
func NewAudit(log *slog.Logger, shown func(string) string) *Audit {
	return &Audit{log: log, shown: shown}
}

// The audit log's actions.
const (
	AuditTopicCreate = "topic.create"
	AuditTopicDelete = "topic.delete"
	AuditTopicAlter  = "topic.partitions"
	AuditOffsetReset = "group.reset"
	AuditOffsetSkip  = "group.skip"
	AuditSwitchover  = "failover.switchover"
	AuditHeuristic   = "tx.heuristic"
	AuditDLQReplay   = "group.dlq_replay"
)

// AuditMaxChanges bounds the partitions an offset change lists.
const AuditMaxChanges = 32

// Log logs one admin change: by user ("" without auth), from (the remote
// address), via (the door: "api", "dashboard", "protocol"), action and
// details as slog key/value pairs.
func (a *Audit) Log(user, from, via, action string, details ...any) {
	who := "-"
	if user != "" {
		who = a.shown(user)
	}
	for i := 1; i < len(details); i += 2 {
		switch details[i-1] {
		case "topic", "group", "xid": // a client's names
			if s, ok := details[i].(string); ok {
				details[i] = a.shown(s)
			}
		}
	}
	args := append([]any{"component", "audit", "user", who, "remote", from, "via", via, "action", action}, details...)
	a.log.Info("audit: "+action, args...)
}

// AuditChanges renders n offset changes (change(i): partition, from, to):
// "p0:100->200 p1:-1->0" (-1: nothing was committed), at most
// AuditMaxChanges of them.
func AuditChanges(n int, change func(i int) (p int, from, to int64)) string {
	var sb strings.Builder
	for i := range n {
		if i == AuditMaxChanges {
			sb.WriteString(" ... (" + strconv.Itoa(n-i) + " more)")
			break
		}
		if i > 0 {
			sb.WriteByte(' ')
		}
		p, from, to := change(i)
		sb.WriteString("p" + strconv.Itoa(p) + ":" + strconv.FormatInt(from, 10) + "->" + strconv.FormatInt(to, 10))
	}
	return sb.String()
}
