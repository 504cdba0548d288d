package broker

import (
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/tx"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The slave's side of sync replication: syncs (core/repl/slavesync.go)
// and txsyncs (core/tx/replslave.go) are taken only on a connection bound
// to the current epoch.

var _ tx.SlaveLogs = (*repl.Slave)(nil)

// handleSync applies a sync from a sync master (core/repl/slavesync.go):
// the message is appended with the master's msgId and answered like a put
// once it is durable here, or, if the puller copied it already, by SyncDup.
// A sync refused here refuses the later ones on c (repl.SyncGate).
func (c *conn) handleSync(r *protocol.Request) {
	if err := c.syncGate.Check(); err != nil {
		c.replyErr(err, r.Opaque)
		return
	}
	if code, body, ok := c.applySync(r); !ok {
		c.syncGate.Fail()
		c.reply(code, body, r.Opaque)
	}
}

// applySync checks r, a sync, and applies it; ok false with the refusal's
// reply when it is not applied.
func (c *conn) applySync(r *protocol.Request) (code int, body string, ok bool) {
	b := c.b
	if err := repl.CheckSync(r.MsgID, len(r.Body), b.config().MaxMessageSize); err != nil {
		code, body = statusOf(err)
		return code, body, false
	}
	t, err := b.lookup(r.Topic, true)
	if err != nil {
		return protocol.StatusInternalError, "sync: The server do not accept topic " + showTopic(r.Topic), false
	}
	l := t.Partition(r.Partition)
	if l == nil || r.Partition < 0 {
		return protocol.StatusInternalError, outOfRange(t, r.Partition), false
	}
	e, err := repl.SyncEntry(r.MsgID, r.Flag, r.Body, r.HasChecksum(), r.Checksum)
	if err == nil {
		c.entries = append(c.entries[:0], e)
		err = b.slave.ApplySync(c, l, r.Partition, c.entries, r.Opaque, c.syncRefusal)
	}
	if err != nil {
		code, body = statusOf(err)
		return code, body, false
	}
	return 0, "", true
}

// SyncPending implements repl.SyncConn.
func (c *conn) SyncPending(n int) { c.addPending(n) }

// SyncDup answers a sync whose message the puller appended
// (repl.SyncConn): 200 with offset -1, or the puller's append failure.
func (c *conn) SyncDup(opaque int32, id int64, p int32, err error) {
	c.addPending(-1)
	if err != nil {
		c.syncGate.Fail()
		c.reply(protocol.StatusInternalError, "sync: append failed: "+err.Error(), opaque)
		return
	}
	var body [64]byte
	c.replyBytes(protocol.StatusOK, protocol.AppendPutResultBody(body[:0], id, p, -1), opaque)
}

// FailSyncs refuses the later syncs on c: one's append failed once
// queued (repl.SyncConn).
func (c *conn) FailSyncs() { c.syncGate.Fail() }

// syncRefusal is why this broker takes no sync or txsync on c now (nil
// when it does): with failover, it is not a slave any more, or c is not
// bound to the current epoch (repl.Failover.SyncRefusal).
func (c *conn) syncRefusal() error {
	if f := c.b.fo; f != nil {
		return f.SyncRefusal(c.syncEpoch.Load())
	}
	return nil
}

// handleTxSync applies a txsync from the sync master (core/tx/repl.go).
// Frames of a connection are applied in the order they arrive, with its
// syncs.
func (c *conn) handleTxSync(r *protocol.Request) {
	if err := c.syncRefusal(); err != nil {
		c.replyErr(err, r.Opaque)
		return
	}
	c.b.txm.ApplySync(c.txs, string(r.Item), r.Body, r.Opaque)
}
