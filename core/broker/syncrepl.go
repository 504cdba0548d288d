package broker

import (
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

// run runs the manager (core/repl/syncloop.go); the caller did b.wg.Add(1).
func (sm *syncMaster) run() {
	defer sm.b.wg.Done()
	sm.Run()
}

// appendReplicated is appendEntries on a sync master.
func (c *conn) appendReplicated(t *topic, l *store.Log, p int32, opaque int32, mput bool, size int64) {
	sm := c.b.sync
	token := uint64(uint32(opaque)) | uint64(uint16(p))<<32
	if mput {
		token |= uint64(len(c.entries)) << 48
	}
	sp := sm.Part(t.name, p, l)
	sp.Lock()
	if f := c.b.fo; f != nil {
		if err := f.LateRefusal(); err != nil { // core/repl
			sp.Unlock()
			c.b.stats.putFailed.Add(1)
			c.replyErr(err, opaque)
			return
		}
	}
	lk, ok := sm.InSync(sp)
	if !ok && !sm.DegradePuts(sp) {
		sp.Unlock()
		c.b.stats.putFailed.Add(1)
		c.replyErr(sm.Refuse("puts"), opaque)
		return
	}
	c.addPending(1)
	var err error
	if ok {
		first := c.b.ids.Next(len(c.entries))
		for i := range c.entries {
			c.entries[i].ID = first + int64(i)
		}
		err = sp.AppendShip(lk, c.entries, sm.NewPutWait(c, sp, token, len(c.entries)), token)
	} else {
		err = sm.AppendAlone(sp, c.entries, c, token)
	}
	if err != nil {
		c.addPending(-1)
		c.b.disks.WakeOn(err)
		c.putFail(opaque, "append failed: "+err.Error())
		return
	}
	if t.conf().Stat {
		t.rt.Put.Add(int64(len(c.entries)))
		t.rt.Size.Add(size)
	}
}

// SyncFailed answers a sync-replicated put stored here that the slave
// failed (repl.PutDone).
func (c *conn) SyncFailed(token uint64, err error) {
	c.addPending(-1)
	c.b.stats.putFailed.Add(1)
	c.replyErr(err, int32(uint32(token)))
}
