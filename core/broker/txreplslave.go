package broker

import (
	"strconv"

	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/tx"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Transactions under sync replication, the slave's link side
// (core/tx/replslave.go applies the frames): txsync frames are taken only
// on a connection bound to the current epoch, and a replicated commit's
// batches are stored under the puller's lock of their partitions.

var _ tx.SlaveLogs = (*repl.Slave)(nil)

// syncRefusal is why this broker takes no sync or txsync on c now (""
// when it does): it is not a failover slave any more, or c is not bound
// to the current epoch.
func (c *conn) syncRefusal() string {
	f := c.b.fo
	if f == nil {
		return ""
	}
	if !f.isSlave() {
		return "sync refused: this broker holds epoch " + strconv.FormatInt(f.epoch.Load(), 10) + " now (failover); it takes no sync"
	}
	if e := c.syncEpoch.Load(); e == 0 || e < f.known.Load() {
		return "sync refused: the connection is bound to epoch " + strconv.FormatInt(e, 10) +
			", the current epoch is " + strconv.FormatInt(f.known.Load(), 10) + " (failover: bind it first with stats " + syncEpochItem + "<epoch>)"
	}
	return ""
}

// handleTxSync applies a txsync from the sync master (core/tx/repl.go).
// Frames of a connection are applied in the order they arrive, with its
// syncs.
func (c *conn) handleTxSync(r *protocol.Request) {
	if msg := c.syncRefusal(); msg != "" {
		c.reply(protocol.StatusInternalError, msg, r.Opaque)
		return
	}
	c.b.txm.ApplySync(c.txs, string(r.Item), r.Body, r.Opaque)
}
