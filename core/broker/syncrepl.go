package broker

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/store"
)

// Sync replication, the master side (MetaQ's samsa, reference §9), with
// replication = "sync".
//
// The master finds its slave in ZooKeeper (the lowest slave<N> under
// ids/<id>) and keeps one connection to it, the link. A partition is in
// sync once the slave has caught up with it: the joiner holds the
// partition's puts back, waits for the puts in flight, and waits until the
// slave's end (an `offset ... MaxInt64` to the slave) equals the master's;
// the slave gets there by pulling, as an async slave does. From then on
// every put and mput to the partition takes its msgIds here and, under the
// partition's lock (so the slave sees the partition's puts in the master's
// append order), is appended locally and shipped to the slave as one
// `sync` per message on the link. The put is answered once both are done:
// 200 with the master's offset if both succeeded, 500 naming the side that
// failed otherwise. In group-commit mode both sides answer after their
// fsync, so an acknowledged message is durable on both copies.
//
// A lost link (an error, or a sync unanswered within sync_timeout) takes
// every partition out of sync. A put to a partition that is not in sync
// gets MetaQ's `500 Slave is disconnected`, or with sync_degrade = true is
// stored on the master alone (async), with a log line when that starts and
// the sync_degraded_puts counter. The manager reconnects and joins the
// partitions again as soon as a slave is registered.
//
// Transactions (MetaQ's samsa had none) are shipped as txsync frames on
// the same link: core/tx/repl.go.

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
	if !ok {
		if !sm.Degrade() || !sm.DegradeOK(func() string {
			return fmt.Sprintf("sync: %s-%d: the slave is not in sync; storing puts on the master alone (sync_degrade = true) until it is", t.name, p)
		}) {
			sp.Unlock()
			c.b.stats.putFailed.Add(1)
			c.replyErr(sm.Refuse("puts"), opaque)
			return
		}
		sm.CountDegraded(len(c.entries))
		w := sp.Track(c)
		c.addPending(1)
		err := l.Append(c.entries, w, token)
		if err == nil {
			sp.Advance(entriesSize(c.entries))
		}
		sp.Unlock()
		if err != nil {
			sp.Release()
			c.addPending(-1)
			c.b.disks.wakeOn(err)
			c.putFail(opaque, "append failed: "+err.Error())
			return
		}
		c.realtimePut(t, size)
		return
	}
	n := len(c.entries)
	first := c.b.ids.Next(n)
	for i := range c.entries {
		c.entries[i].ID = first + int64(i)
	}
	w := &syncWait{c: c, sp: sp, token: token}
	w.left.Store(int32(n + 1))
	sp.Hold()
	c.addPending(1)
	if err := l.Append(c.entries, w, token); err != nil {
		sp.Unlock()
		sp.Release()
		c.addPending(-1)
		c.b.disks.wakeOn(err)
		c.putFail(opaque, "append failed: "+err.Error())
		return
	}
	sp.Advance(entriesSize(c.entries))
	lk.Ship(t.name, p, c.entries, w)
	sp.Unlock()
	c.realtimePut(t, size)
}

// realtimePut counts a put in the topic's realtime stats.
func (c *conn) realtimePut(t *topic, size int64) {
	if t.conf().Stat {
		t.rt.put.add(int64(len(c.entries)))
		t.rt.size.add(size)
	}
}

// syncWait completes a replicated put once its local append and each of
// its syncs are done.
type syncWait struct {
	c     *conn
	sp    *repl.Part
	token uint64
	left  atomic.Int32

	mu       sync.Mutex
	firstID  int64
	offset   int64
	err      error // local
	slaveErr error
}

func (w *syncWait) AppendDone(_ uint64, firstID, firstOffset int64, err error) {
	w.mu.Lock()
	w.firstID, w.offset, w.err = firstID, firstOffset, err
	w.mu.Unlock()
	w.done()
}

// SlaveDone is one sync's outcome.
func (w *syncWait) SlaveDone(err error) {
	if err != nil {
		w.mu.Lock()
		if w.slaveErr == nil {
			w.slaveErr = err
		}
		w.mu.Unlock()
	}
	w.done()
}

func (w *syncWait) done() {
	if w.left.Add(-1) != 0 {
		return
	}
	w.sp.Release()
	w.mu.Lock()
	firstID, off, err, serr := w.firstID, w.offset, w.err, w.slaveErr
	w.mu.Unlock()
	c := w.c
	switch {
	case err != nil:
		c.AppendDone(w.token, 0, 0, err)
	case serr != nil:
		c.addPending(-1)
		c.b.sync.CountFailed()
		c.b.stats.putFailed.Add(1)
		c.replyErr(serr, int32(uint32(w.token)))
	default:
		c.AppendDone(w.token, firstID, off, nil)
	}
}
