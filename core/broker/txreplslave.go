package broker

import (
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/tx"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Transactions under sync replication, the slave's link side
// (core/tx/replslave.go applies the frames): txsync frames are taken only
// on a connection bound to the current epoch, and a replicated commit's
// batches are stored under the puller's lock of their partitions.

var _ tx.SlaveLogs = (*repl.Slave)(nil)

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
