package broker

import (
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Automatic failover with fencing (failover = true; docs/replication.md,
// Failover) lives in core/repl (repl.Failover: the epoch, the lease,
// elections, rejoin, switchover). This is the broker's side: the replies
// of its requests (`stats sync-epoch:`, `epoch-start:`, `switchover`) and
// the refusal of puts this member may not take.

// The stats items of failover (docs/protocol.md).
const (
	syncEpochItem  = repl.SyncEpochItem
	epochStartItem = repl.EpochStartItem
	switchoverItem = repl.SwitchoverItem
)

// failoverRefuses answers a put, mput or transaction that this member may
// not take (it does not hold the epoch, or is between roles) and reports
// whether it did.
func (c *conn) failoverRefuses(r *protocol.Request) bool {
	switch r.Op {
	case protocol.OpPut, protocol.OpMPut, protocol.OpTransaction:
	default:
		return false
	}
	err := c.b.fo.Refuses()
	if err == nil {
		return false
	}
	if r.Op != protocol.OpTransaction {
		c.b.stats.cmdPut.Add(1)
		c.b.stats.putFailed.Add(1)
	}
	c.replyErr(err, r.Opaque)
	return true
}

// bindSyncEpoch answers stats sync-epoch:<E> on a slave: the connection
// takes syncs of epoch E if E is the epoch ZooKeeper holds now.
func (c *conn) bindSyncEpoch(arg string, opaque int32) {
	e, err := c.b.fo.BindSyncEpoch(arg) // c.b.fo may be nil
	if err != nil {
		c.replyErr(err, opaque)
		return
	}
	c.syncEpoch.Store(e)
	c.reply(protocol.StatusOK, "sync-epoch "+arg, opaque)
}

// epochStart answers `stats epoch-start:<E>` on the holder: the start of
// the first epoch after E it knows, per partition.
func (c *conn) epochStart(arg string, opaque int32) {
	body, err := c.b.fo.EpochStart(arg) // c.b.fo may be nil
	if err != nil {
		c.replyErr(err, opaque)
		return
	}
	c.replyBytes(protocol.StatusOK, body, opaque)
}

// switchover answers `stats switchover` on the holder (metaq failover,
// repl.Failover.Switchover).
func (c *conn) switchover(opaque int32) {
	f := c.b.fo
	if f == nil {
		c.reply(protocol.StatusInternalError, "switchover: failover is off on this broker", opaque)
		return
	}
	go func() { // the handover takes up to seconds; the connection goes on
		code, msg := protocol.StatusOK, ""
		msg, err := f.Switchover()
		if err != nil {
			code, msg = statusOf(err)
		}
		c.connAudit(security.AuditSwitchover, "status", code, "result", msg) // audit.go
		c.reply(code, msg, opaque)
	}()
}

// replFailoverStatus maps failover's error kinds (the others are 500).
func replFailoverStatus(e *repl.Error) int {
	switch e.Kind {
	case repl.Busy:
		return protocol.StatusBusy
	case repl.Invalid:
		return protocol.StatusBadRequest
	}
	return protocol.StatusInternalError
}
