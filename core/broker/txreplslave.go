package broker

import (
	"fmt"
	"strconv"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/core/tx"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Transactions under sync replication, the slave's link side
// (core/tx/replslave.go applies the frames): txsync frames are taken only
// on a connection bound to the current epoch, and a replicated commit's
// batches are stored under the puller's lock of their partitions.

var _ tx.SlaveLogs = (*slaveState)(nil)

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

// AppendAt implements tx.SlaveLogs: the entries of a replicated commit's
// batch that the puller has not copied yet are appended, at the master's
// offset off.
func (s *slaveState) AppendAt(l *store.Log, off int64, entries []store.Entry, w store.Waiter, token uint64) (bool, error) {
	sl := s.logState(l)
	sl.mu.Lock()
	defer sl.mu.Unlock()
	skip, err := sl.present(off, entries)
	if err != nil || skip == len(entries) {
		return false, err
	}
	rest := entries[skip:]
	if err := l.Append(rest, w, token); err != nil {
		return false, err
	}
	sl.end += entriesSize(rest)
	for _, e := range rest {
		sl.lastID = max(sl.lastID, e.ID)
	}
	s.syncs.Add(int64(len(rest)))
	return true, nil
}

// present reports how many of a batch's entries, starting at the master's
// offset off, this slave has already (the puller may have copied them);
// an error when its end is before off (a gap) or inside a record.
func (sl *slaveLog) present(off int64, entries []store.Entry) (int, error) {
	have := sl.end - off
	if have < 0 {
		return 0, fmt.Errorf("the slave's end %d is before the batch's offset %d (a gap)", sl.end, off)
	}
	k := 0
	for ; k < len(entries) && have > 0; k++ {
		have -= int64(message.HeaderSize + len(entries[k].Data))
	}
	if have < 0 {
		return 0, fmt.Errorf("the slave's end %d is inside the batch at %d (the copies diverged)", sl.end, off)
	}
	return k, nil
}

// endPulledBranches is the slave's puller about to append entries: a
// branch held prepared whose batch is among them is ended
// (tx.Manager.EndPulled). The caller holds the partition's slaveLog lock.
func (b *Broker) endPulledBranches(entries []store.Entry) { b.txm.EndPulled(entries) }
