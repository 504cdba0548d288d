package repl

import (
	"fmt"
	"sync"
	"sync/atomic"

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
// `sync` per message on the link (Part.AppendShip). The put is answered
// once both are done (PutWait): 200 with the master's offset if both
// succeeded, 500 naming the side that failed otherwise. In group-commit
// mode both sides answer after their fsync, so an acknowledged message is
// durable on both copies.
//
// A lost link (an error, or a sync unanswered within sync_timeout) takes
// every partition out of sync. A put to a partition that is not in sync
// gets MetaQ's `500 Slave is disconnected`, or with sync_degrade = true is
// stored on the master alone (async, Part.AppendAlone), with a log line
// when that starts and the sync_degraded_puts counter. The manager
// reconnects and joins the partitions again as soon as a slave is
// registered.
//
// Transactions (MetaQ's samsa had none) are shipped as txsync frames on
// the same link: core/tx/repl.go.

// Put is the put path of a sync master, whichever protocol took the put
// (docs/architecture.md, "A sync-replicated put"): entries, a put's or an
// mput's, go to partition p of topic (log l) under the partition's lock.
// With failover, a member that may not take puts now refuses
// (LateRefusal); a partition not in sync refuses unless puts may be stored
// on the master alone (DegradePuts). Otherwise the entries take their ids
// from ids and are appended and shipped to the slave (AppendShip, done
// told through a PutWait; a nil ids keeps the ids the entries carry, as a
// delayed message's delivery does), or stored alone (AppendAlone, done told the
// append's outcome). pending(1) is called before the append, pending(-1)
// if it fails. Put returns the refusal (nothing appended), or the
// append's error.
func (sm *SyncMaster) Put(topic string, p int32, l *store.Log, entries []store.Entry, ids store.IDSource, done PutDone, token uint64, pending func(int)) (refused, err error) {
	sp := sm.Part(topic, p, l)
	sp.Lock()
	if sm.fo != nil {
		if err := sm.fo.LateRefusal(); err != nil {
			sp.Unlock()
			return err, nil
		}
	}
	lk, ok := sm.InSync(sp)
	if !ok && !sm.DegradePuts(sp) {
		sp.Unlock()
		return sm.Refuse("puts"), nil
	}
	pending(1)
	if ok {
		if ids != nil {
			first := ids.Next(len(entries))
			for i := range entries {
				entries[i].ID = first + int64(i)
			}
		}
		err = sp.AppendShip(lk, entries, sm.NewPutWait(done, sp, token, len(entries)), token)
	} else {
		err = sm.AppendAlone(sp, entries, done, token)
	}
	if err != nil {
		pending(-1)
	}
	return nil, err
}

// DegradePuts reports whether puts to sp, which is not in sync, are stored
// on the master alone now (sync_degrade; DegradeOK).
func (sm *SyncMaster) DegradePuts(sp *Part) bool {
	return sm.Degrade() && sm.DegradeOK(func() string {
		return fmt.Sprintf("sync: %s-%d: the slave is not in sync; storing puts on the master alone (sync_degrade = true) until it is", sp.topic, sp.p)
	})
}

// AppendAlone appends entries, a put sp stores on the master alone
// (DegradePuts), to its log under sp's lock, which it releases; w is told
// the append's outcome unless it returns an error.
func (sm *SyncMaster) AppendAlone(sp *Part, entries []store.Entry, w store.Waiter, token uint64) error {
	sm.CountDegraded(len(entries))
	err := sp.l.Append(entries, sp.Track(w), token)
	if err == nil {
		sp.Advance(entriesSize(entries))
	}
	sp.Unlock()
	if err != nil {
		sp.Release()
	}
	return err
}

// AppendShip appends entries, a put to sp in sync under lk, to its log
// and ships them to the slave, under sp's lock, which it releases. w
// (NewPutWait) completes the put unless it returns an error.
func (sp *Part) AppendShip(lk *Link, entries []store.Entry, w *PutWait, token uint64) error {
	if err := sp.l.Append(entries, w, token); err != nil {
		sp.Unlock()
		sp.Release()
		return err
	}
	first := sp.End()
	sp.Advance(entriesSize(entries))
	lk.Ship(sp.topic, sp.p, first, entries, w)
	sp.Unlock()
	return nil
}

// PutDone is told a sync-replicated put's outcome (the connection that
// answers it).
type PutDone interface {
	// AppendDone is the local append's outcome (as store.Waiter) when it
	// failed or when both sides succeeded.
	AppendDone(token uint64, firstID, firstOffset int64, err error)
	// SyncFailed: the local append succeeded, the slave's side failed.
	SyncFailed(token uint64, err error)
}

// PutWait completes a sync-replicated put of n messages once its local
// append and each of its syncs are done: a store.Waiter and a Waiter.
type PutWait struct {
	to    PutDone
	sm    *SyncMaster
	sp    *Part
	token uint64
	left  atomic.Int32

	mu       sync.Mutex
	firstID  int64
	offset   int64
	err      error // local
	slaveErr error
}

// NewPutWait returns the completion of a put of n messages to sp, holding
// sp until it completes.
func (sm *SyncMaster) NewPutWait(to PutDone, sp *Part, token uint64, n int) *PutWait {
	w := &PutWait{to: to, sm: sm, sp: sp, token: token}
	w.left.Store(int32(n + 1))
	sp.Hold()
	return w
}

// AppendDone is the local append's outcome.
func (w *PutWait) AppendDone(_ uint64, firstID, firstOffset int64, err error) {
	w.mu.Lock()
	w.firstID, w.offset, w.err = firstID, firstOffset, err
	w.mu.Unlock()
	w.done()
}

// SlaveDone is one sync's outcome.
func (w *PutWait) SlaveDone(err error) {
	if err != nil {
		w.mu.Lock()
		if w.slaveErr == nil {
			w.slaveErr = err
		}
		w.mu.Unlock()
	}
	w.done()
}

func (w *PutWait) done() {
	if w.left.Add(-1) != 0 {
		return
	}
	w.sp.Release()
	w.mu.Lock()
	firstID, off, err, serr := w.firstID, w.offset, w.err, w.slaveErr
	w.mu.Unlock()
	switch {
	case err != nil:
		w.to.AppendDone(w.token, 0, 0, err)
	case serr != nil:
		w.sm.CountFailed()
		w.to.SyncFailed(w.token, serr)
	default:
		w.to.AppendDone(w.token, firstID, off, nil)
	}
}
