package tx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Transactions under sync replication (docs/replication.md, "Transactions
// under sync replication").
//
// The master ships transaction journal records to its slave on the sync
// link, as `txsync <kind> <len> <opaque>` frames whose body is records in
// the journal's own format (log.go), in link order with the puts' syncs:
//
//   - a commit: the transaction's put records, then its commit record whose
//     "not before" offsets are the exact offsets of its batches on the
//     master. The master appends the batches, under the partitions' sync
//     locks, at the offsets it names, and answers the commit once its own
//     batches are stored and the slave has answered (the slave stores the
//     batches at the same offsets, durable by its flush rule, and a branch
//     it held prepared is ended through its own journal);
//   - a prepare: the branch's put records and its prepare record. The
//     slave writes them to its own journal, fsyncs, and holds the branch
//     prepared (a promoted slave's RECOVER lists it). PREPARE is answered
//     XA_OK once both copies have it durably;
//   - a rollback of a prepared branch: its rollback record;
//   - state: when a link starts, the prepare records of every branch the
//     master holds prepared (their put records before them): the slave adds
//     those it lacks and drops the others. Until that is answered no
//     prepare is shipped and failover names no slave in sync.
//
// Put records may go ahead in `puts` frames (the slave's connection holds
// them for the frame that uses them), so that no frame exceeds the link's
// body limit.
//
// The link itself is the replication's (core/repl): the Manager is the
// repl.Extension the broker registers on the sync master, and reaches the
// link and the partitions' sync state through *repl.SyncMaster
// (Host.Master).

var _ repl.Extension = (*Manager)(nil)

// InSync implements repl.Extension: whether the slave of link id holds
// the master's prepared branches.
func (m *Manager) InSync(link int64) bool { return m.gen.Load() == link }

// storedAloneLocked notes, under rmu, an XA prepare or commit stored on
// the master without the slave.
func (m *Manager) storedAloneLocked() {
	m.alone.Add(1)
	m.gen.Store(0)
}

// txShip collects the outcomes of a shipment's frames and calls done
// once with the first error.
type txShip struct {
	left atomic.Int32
	mu   sync.Mutex
	err  error
	done func(error)
}

func newTxShip(frames int, done func(error)) *txShip {
	s := &txShip{done: done}
	s.left.Store(int32(frames))
	return s
}

// SlaveDone implements repl.Waiter.
func (s *txShip) SlaveDone(err error) {
	s.mu.Lock()
	if err != nil && s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	if s.left.Add(-1) == 0 {
		s.mu.Lock()
		err := s.err
		s.mu.Unlock()
		s.done(err)
	}
}

// appendTxRecord appends one journal record in the journal's format.
func appendTxRecord(dst []byte, typ byte, head, tail []byte) []byte {
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(head)+len(tail)))
	dst = append(dst, typ)
	dst = append(dst, head...)
	dst = append(dst, tail...)
	binary.BigEndian.PutUint32(dst[at:], crc32.Checksum(dst[at+4:], txCastagnoli))
	return dst
}

// txFrames packs put records into `puts` frames of at most limit bytes
// (a single record may be larger) and ends with a kind frame holding the
// rest and final.
func txFrames(kind string, msgs []txMsg, key string, final []byte, limit int) []repl.Frame {
	var frames []repl.Frame
	var body []byte
	var head [128]byte
	for i := range msgs {
		m := &msgs[i]
		n := txHeaderSize + len(appendTxAppendHead(head[:0], key, m)) + len(m.e.Data)
		if len(body) > 0 && len(body)+n > limit {
			frames = append(frames, repl.Frame{Kind: protocol.TxSyncPuts, Body: body})
			body = nil
		}
		body = appendTxRecord(body, txRecAppend, appendTxAppendHead(head[:0], key, m), m.e.Data)
	}
	if len(body) > 0 && len(body)+len(final) > limit {
		frames = append(frames, repl.Frame{Kind: protocol.TxSyncPuts, Body: body})
		body = nil
	}
	return append(frames, repl.Frame{Kind: kind, Body: append(body, final...)})
}

// degradeOK is SyncMaster.DegradeOK for transactions.
func degradeOK(sm *repl.SyncMaster) bool {
	return sm.DegradeOK(func() string {
		return "sync: the slave is not in sync; storing transactions on the master alone (sync_degrade = true) until it is"
	})
}

// refusal says why a transaction's commit (batches to the partitions of
// logs), prepare or rollback cannot be replicated now and may not go on
// the master alone; nil if it may go on.
func (m *Manager) refusal(sm *repl.SyncMaster, logs []*store.Log, prepared bool) error {
	lk := sm.Link()
	ok := lk != nil
	if ok && prepared {
		ok = m.InSync(lk.ID())
	}
	for _, l := range logs {
		if !ok {
			break
		}
		sp := sm.Lookup(l)
		ok = sp != nil && sp.InSyncUnder(lk)
	}
	if ok || degradeOK(sm) {
		return nil
	}
	return sm.Refuse("transactions")
}

// commitRefusal is startCommitLocked's check on a sync master (sm): a
// commit whose batches cannot be replicated is refused before anything is
// recorded, and the transaction stays as it was.
func (m *Manager) commitRefusal(sm *repl.SyncMaster, t *tx, batches []*txBatch) error {
	if sm == nil {
		return nil
	}
	logs := make([]*store.Log, len(batches))
	for i, bt := range batches {
		logs[i] = bt.l
	}
	err := m.refusal(sm, logs, false)
	if err == nil {
		return nil
	}
	state := "still open"
	if t.state == txPrepared {
		state = "still prepared"
	}
	return errors.New("commit of " + t.key + " refused: " + err.Error() + " (the transaction is " + state + "; commit it again once the slave is back in sync)")
}

// rollbackRefusal is the check before a prepared branch is rolled back
// on a sync master.
func (m *Manager) rollbackRefusal(sm *repl.SyncMaster, t *tx) error {
	if sm == nil || t.state != txPrepared {
		return nil
	}
	if err := m.refusal(sm, nil, true); err != nil {
		return errors.New("rollback of " + t.key + " refused: " + err.Error() + " (the branch is still prepared)")
	}
	return nil
}

// txSyncPart is one batch's partition on a sync master.
type txSyncPart struct {
	sp *repl.Part
	i  int // batch index
}

// SlaveDone implements repl.Waiter: the slave's answer to a shipped
// commit.
func (tc *txCommit) SlaveDone(err error) {
	if err != nil {
		tc.mu.Lock()
		tc.slaveErr = err
		tc.mu.Unlock()
	}
	tc.AppendDone(0, 0, 0, nil)
}

// replFailure is why a commit whose batches are stored on the master is
// not answered OK: the slave's failure, or the failover fence.
func (tc *txCommit) replFailure() error {
	m := tc.m
	tc.mu.Lock()
	serr := tc.slaveErr
	tc.mu.Unlock()
	if serr != nil {
		if sm := m.host.Master(); sm != nil {
			sm.CountFailed()
		}
		return errors.New("commit of " + tc.t.key + " is stored on the master but the slave did not confirm it: " + serr.Error() +
			" (the commit stands; the slave copies the batches by pulling when it is back)")
	}
	return m.host.Fence()
}

// appendCommitReplicated is appendCommit on a sync master: each batch is
// appended under its partition's sync lock at the offset the slave is
// told, and the commit is shipped; the answer waits for both.
func (m *Manager) appendCommitReplicated(sm *repl.SyncMaster, s *Session, t *tx, batches []*txBatch, opaque int32, heur bool) {
	tc := &txCommit{m: m, s: s, t: t, opaque: opaque, heur: heur, countdown: countdown{left: len(batches) + 1}, batches: batches}
	parts := make([]txSyncPart, len(batches))
	for i, bt := range batches {
		tc.logs = append(tc.logs, bt.l)
		if bt.t.ThresholdFlush() {
			tc.flush = true
		}
		parts[i] = txSyncPart{sp: sm.Part(bt.t.Name(), bt.p, bt.l), i: i}
	}
	// One lock order for every commit: no two wait on each other.
	sort.Slice(parts, func(i, j int) bool {
		a, b := parts[i].sp, parts[j].sp
		return a.Topic() < b.Topic() || a.Topic() == b.Topic() && a.P() < b.P()
	})
	for _, sp := range parts {
		sp.sp.Lock()
	}
	lk := sm.Link()
	inSync := lk != nil
	for _, sp := range parts {
		inSync = inSync && sp.sp.InSyncUnder(lk)
	}
	if !inSync {
		// The check before the commit record passed, the link was lost
		// since: the commit is decided, so it is stored here, and the
		// answer says whether that may be acknowledged.
		if !degradeOK(sm) {
			tc.slaveErr = &repl.Error{Kind: repl.Disconnected, Msg: "Slave is disconnected"}
		} else {
			for _, bt := range batches {
				sm.CountDegraded(len(bt.entries))
			}
		}
		if t.xa {
			// The slave may hold the branch prepared: it must get the
			// state again before it is named in sync.
			m.rmu.Lock()
			m.storedAloneLocked()
			m.rmu.Unlock()
		}
	} else {
		tc.left++
	}
	locs := make([]txBatchLoc, len(batches))
	var failed bool
	for _, sp := range parts {
		bt := batches[sp.i]
		locs[sp.i] = txBatchLoc{topic: bt.t.Name(), partition: bt.p, notBefore: sp.sp.End(),
			firstID: bt.entries[0].ID, n: len(bt.entries), crc: batchCRC(bt.entries)}
		if err := bt.l.Append(bt.entries, sp.sp.Track(tc), uint64(sp.i)); err != nil {
			sp.sp.Release()
			m.host.AppendFailed(err)
			tc.AppendDone(uint64(sp.i), 0, 0, fmt.Errorf("append to %s: %w", bt.l.Dir(), err))
			failed = true
			continue
		}
		sp.sp.Advance(entriesSize(bt.entries))
	}
	if inSync {
		if failed {
			// The other batches are stored here and not on the slave:
			// the partitions join again (the slave pulls them first).
			for _, sp := range parts {
				sp.sp.Unsync()
			}
			tc.SlaveDone(errors.New("not shipped: the master's own append failed"))
		} else {
			var msgs []txMsg
			for _, bt := range batches {
				for _, e := range bt.entries {
					msgs = append(msgs, txMsg{t: bt.t, l: bt.l, p: bt.p, e: e})
				}
			}
			frames := txFrames(protocol.TxSyncCommit, msgs, t.key,
				appendTxRecord(nil, txRecCommit, encodeTxCommit(t.key, locs), nil), m.config().FrameLimit)
			m.rmu.Lock()
			lk.ShipFrames(frames, newTxShip(len(frames), tc.SlaveDone))
			m.rmu.Unlock()
		}
	}
	for _, sp := range parts {
		sp.sp.Unlock()
	}
	tc.AppendDone(0, 0, 0, nil) // the extra count: no answer before every Append was made
}

// entriesSize is the bytes entries take in a partition.
func entriesSize(entries []store.Entry) int64 {
	var n int64
	for i := range entries {
		n += int64(message.HeaderSize + len(entries[i].Data))
	}
	return n
}

// finishPrepare makes a prepare durable and, on a sync master, ships it;
// PREPARE is answered once both copies hold the branch.
func (m *Manager) finishPrepare(t *tx, pos int64) error {
	sm := m.host.Master()
	var wait chan error
	var refused error
	if sm != nil {
		m.rmu.Lock()
		lk := sm.Link()
		if lk != nil && m.InSync(lk.ID()) {
			wait = make(chan error, 1)
			frames := txFrames(protocol.TxSyncPrepare, t.msgs, t.key,
				appendTxRecord(nil, txRecPrepare, encodeTxPrepare(t.key, t.user), nil), m.config().FrameLimit)
			lk.ShipFrames(frames, newTxShip(len(frames), func(err error) { wait <- err }))
		} else if refused = m.refusal(sm, nil, true); refused == nil {
			m.storedAloneLocked() // degraded: acknowledged on the master alone
		}
		m.rmu.Unlock()
	}
	if err := m.j.force(pos); err != nil {
		return xaErr(protocol.XAErRMFail, "prepare of "+t.key+": "+err.Error())
	}
	if sm != nil {
		msg := ""
		if refused != nil {
			msg = refused.Error()
		}
		if wait != nil {
			if err := <-wait; err != nil {
				sm.CountFailed()
				msg = err.Error()
			}
		}
		if msg != "" {
			// The branch stays prepared here (a coordinator rolls back a
			// branch whose prepare failed; RECOVER lists it meanwhile).
			return xaErr(protocol.XAErRMFail, "prepare of "+t.key+": "+msg+
				" (the branch is prepared on the master alone; roll it back, or commit it once the slave is back in sync)")
		}
	}
	if err := m.host.Fence(); err != nil {
		return xaErr(protocol.XAErRMFail, err.Error())
	}
	return nil
}

// shipRollback ships the rollback of a prepared branch and waits for the
// slave. The rollback stands on the master whatever the slave says; a
// slave that missed it drops the branch at its next state.
func (m *Manager) shipRollback(sm *repl.SyncMaster, key string) {
	if sm == nil {
		return
	}
	m.rmu.Lock()
	lk := sm.Link()
	if lk == nil {
		m.rmu.Unlock()
		return
	}
	wait := make(chan error, 1)
	lk.ShipFrames([]repl.Frame{{Kind: protocol.TxSyncRollback, Body: appendTxRecord(nil, txRecRollback, appendStr(nil, key), nil)}},
		newTxShip(1, func(err error) { wait <- err }))
	m.rmu.Unlock()
	if err := <-wait; err != nil {
		m.logf("sync: transaction %s: rolled back here; the slave did not confirm it (%v): it drops the branch when it is in sync again", key, err)
	}
}

// SyncState implements repl.Extension: it ships the master's prepared
// branches to the slave of lk (their put records, then the state frame of
// their prepare records), once per link, before failover may name it in
// sync.
func (m *Manager) SyncState(lk *repl.Link) error {
	m.rmu.Lock()
	alone := m.alone.Load()
	var frames []repl.Frame
	var state []byte
	m.mu.Lock()
	keys := make([]string, 0, len(m.xa))
	for key, t := range m.xa {
		if t.state == txPrepared {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		t := m.xa[key]
		for _, f := range txFrames(protocol.TxSyncPuts, t.msgs, key, nil, m.config().FrameLimit) {
			if len(f.Body) > 0 {
				frames = append(frames, repl.Frame{Kind: protocol.TxSyncPuts, Body: f.Body})
			}
		}
		state = appendTxRecord(state, txRecPrepare, encodeTxPrepare(key, t.user), nil)
	}
	m.mu.Unlock()
	frames = append(frames, repl.Frame{Kind: protocol.TxSyncState, Body: state})
	wait := make(chan error, 1)
	lk.ShipFrames(frames, newTxShip(len(frames), func(err error) { wait <- err }))
	m.rmu.Unlock()
	if err := <-wait; err != nil {
		return err
	}
	m.rmu.Lock()
	again := m.alone.Load() != alone
	if !again {
		m.gen.Store(lk.ID())
	}
	m.rmu.Unlock()
	if again {
		return errors.New("a transaction was stored on the master alone meanwhile; shipping the state again")
	}
	if len(keys) > 0 {
		m.logf("sync: the slave holds the %d prepared XA branches", len(keys))
	}
	return nil
}
