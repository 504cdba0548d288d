package broker

import (
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/store"
)

// Sync replication, the master side, lives in core/repl (put.go: the
// put path; syncloop.go: the manager); this is the broker's side of it.

// syncMaster is a sync master's replication state (core/repl) and the
// broker's side of it: the manager that links to the slave and joins the
// partitions.
type syncMaster struct {
	*repl.SyncMaster
	b *Broker
}

func newSyncMaster(b *Broker) *syncMaster {
	return &syncMaster{SyncMaster: repl.NewSyncMaster(repl.FromConf(b.config()), replHost{partSource{b}}, b.log), b: b}
}

// master is the sync master, nil when there is none (sm nil).
func (sm *syncMaster) master() *repl.SyncMaster {
	if sm == nil {
		return nil
	}
	return sm.SyncMaster
}

// run runs the manager (core/repl/syncloop.go); the caller did b.wg.Add(1).
func (sm *syncMaster) run() {
	defer sm.b.wg.Done()
	sm.Run()
}

// appendReplicated is appendEntries on a sync master
// (repl.SyncMaster.Put): a refusal is answered with its status line, a
// failed append as a put's.
func (c *conn) appendReplicated(t *partition.Topic, l *store.Log, p int32, opaque int32, mput bool, size int64, w repl.PutDone) {
	token := uint64(uint32(opaque)) | uint64(uint16(p))<<32
	if mput {
		token |= uint64(len(c.entries)) << 48
	}
	refused, err := c.b.sync.Put(t.Name(), p, l, c.entries, c.b.ids, w, token, c.addPending)
	if iw, ok := w.(putFailer); ok && (refused != nil || err != nil) {
		iw.Failed()
	}
	switch {
	case refused != nil:
		c.b.stats.putFailed.Add(1)
		c.replyErr(refused, opaque)
		return
	case err != nil:
		c.b.disks.WakeOn(err)
		c.putFail(opaque, "append failed: "+err.Error())
		return
	}
	if t.Conf().Stat {
		t.RT.Put.Add(int64(len(c.entries)))
		t.RT.Size.Add(size)
	}
}

// SyncFailed answers a sync-replicated put stored here that the slave
// failed (repl.PutDone).
func (c *conn) SyncFailed(token uint64, err error) {
	c.addPending(-1)
	c.b.stats.putFailed.Add(1)
	c.replyErr(err, int32(uint32(token)))
}
