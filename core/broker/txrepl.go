package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/metaq-go/metaq/core/repl"
	"hash/crc32"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Transactions under sync replication (docs/replication.md, "Transactions
// under sync replication").
//
// The master ships transaction journal records to its slave on the sync
// link, as `txsync <kind> <len> <opaque>` frames whose body is records in
// the journal's own format (txlog.go), in link order with the puts' syncs:
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
// Put records may go ahead in `puts` frames (the connection holds them for
// the frame that uses them), so that no frame exceeds the link's body
// limit.

// txReplState is the transaction side of sync replication: the
// repl.Extension the broker registers on the sync master (b.txr). It
// tells the joiner whether the slave holds the prepared branches, and
// ships them.
type txReplState struct {
	b *Broker
	// mu orders the prepares, rollbacks, commits and state of the link:
	// a branch's records are shipped in the order of its operations. It
	// is taken after the partitions' locks.
	mu sync.Mutex
	// gen is the link whose slave has the master's prepared branches (0:
	// none). It is set, under mu, only if no branch was prepared, and no
	// XA commit stored, on the master alone (alone) while the state was
	// shipped; such a one clears it, so that the state is shipped again
	// before failover may name the slave in sync.
	gen   atomic.Int64
	alone atomic.Int64
}

var _ repl.Extension = (*txReplState)(nil)

// InSync reports whether the slave of link id holds the prepared
// branches.
func (r *txReplState) InSync(link int64) bool { return r.gen.Load() == link }

// storedAloneLocked notes, under mu, an XA prepare or commit stored on
// the master without the slave.
func (r *txReplState) storedAloneLocked() {
	r.alone.Add(1)
	r.gen.Store(0)
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

// frameLimit is the most body bytes a txsync frame carries (a single
// record may exceed it; a slave's decoder allows for that).
func (b *Broker) frameLimit() int {
	return max(b.config().MaxMessageSize, b.config().MaxTransferSize)
}

// syncActive is the sync master state when this broker takes puts as a
// sync master (not as a failover slave), else nil.
func (b *Broker) syncActive() *syncMaster {
	if b.sync == nil || (b.fo != nil && b.fo.isSlave()) {
		return nil
	}
	return b.sync
}

// degradeTxOK is SyncMaster.DegradeOK for transactions.
func degradeTxOK(sm *syncMaster) bool {
	return sm.DegradeOK(func() string {
		return "sync: the slave is not in sync; storing transactions on the master alone (sync_degrade = true) until it is"
	})
}

// txRefusal says why a transaction's commit (batches to the partitions of
// logs), prepare or rollback cannot be replicated now and may not go on the
// master alone; nil if it may go on.
func (b *Broker) txRefusal(sm *syncMaster, logs []*store.Log, prepared bool) *repl.Error {
	lk := sm.Link()
	ok := lk != nil
	if ok && prepared {
		ok = b.txr.InSync(lk.ID())
	}
	for _, l := range logs {
		if !ok {
			break
		}
		sp := sm.Lookup(l)
		ok = sp != nil && sp.InSyncUnder(lk)
	}
	if ok || degradeTxOK(sm) {
		return nil
	}
	return sm.Refuse("transactions")
}

// txCommitRefusal is startCommitLocked's check on a sync master: a commit
// whose batches cannot be replicated is refused before anything is
// recorded, and the transaction stays as it was.
func (c *conn) txCommitRefusal(t *tx, batches []*txBatch) string {
	sm := c.b.syncActive()
	if sm == nil {
		return ""
	}
	logs := make([]*store.Log, len(batches))
	for i, bt := range batches {
		logs[i] = bt.l
	}
	rerr := c.b.txRefusal(sm, logs, false)
	if rerr == nil {
		return ""
	}
	msg := rerr.Error()
	state := "still open"
	if t.state == txPrepared {
		state = "still prepared"
	}
	return "commit of " + t.key + " refused: " + msg + " (the transaction is " + state + "; commit it again once the slave is back in sync)"
}

// txRollbackRefusal is the check before a prepared branch is rolled back
// on a sync master.
func (c *conn) txRollbackRefusal(t *tx) string {
	sm := c.b.syncActive()
	if sm == nil || t.state != txPrepared {
		return ""
	}
	if rerr := c.b.txRefusal(sm, nil, true); rerr != nil {
		msg := rerr.Error()
		return "rollback of " + t.key + " refused: " + msg + " (the branch is still prepared)"
	}
	return ""
}

// txSyncPart is one batch's partition on a sync master.
type txSyncPart struct {
	sp *repl.Part
	i  int // batch index
}

// SlaveDone is the slave's answer to a shipped commit.
func (tc *txCommit) SlaveDone(err error) {
	if err != nil {
		tc.mu.Lock()
		tc.slaveErr = err
		tc.mu.Unlock()
	}
	tc.AppendDone(0, 0, 0, nil)
}

// replFailure is what a commit whose batches are stored on the master is
// answered instead of 200: the slave's failure, or the failover fence.
func (tc *txCommit) replFailure() string {
	b := tc.c.b
	tc.mu.Lock()
	serr := tc.slaveErr
	tc.mu.Unlock()
	if serr != nil {
		b.sync.CountFailed()
		return "commit of " + tc.t.key + " is stored on the master but the slave did not confirm it: " + serr.Error() +
			" (the commit stands; the slave copies the batches by pulling when it is back)"
	}
	if f := b.fo; f != nil && !f.mayAck() {
		return f.refusal()
	}
	return ""
}

// appendCommitReplicated is appendCommit on a sync master: each batch is
// appended under its partition's sync lock at the offset the slave is
// told, and the commit is shipped; the reply waits for both.
func (c *conn) appendCommitReplicated(sm *syncMaster, t *tx, batches []*txBatch, opaque int32, heur bool) {
	tc := &txCommit{c: c, t: t, opaque: opaque, heur: heur, countdown: countdown{left: len(batches) + 1}, batches: batches}
	parts := make([]txSyncPart, len(batches))
	for i, bt := range batches {
		tc.logs = append(tc.logs, bt.l)
		if bt.t.conf().UnflushThreshold > 0 {
			tc.flush = true
		}
		parts[i] = txSyncPart{sp: sm.Part(bt.t.name, bt.p, bt.l), i: i}
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
		if !degradeTxOK(sm) {
			tc.slaveErr = &repl.Error{Kind: repl.Disconnected, Msg: "Slave is disconnected"}
		} else {
			for _, bt := range batches {
				sm.CountDegraded(len(bt.entries))
			}
		}
		if t.xa {
			// The slave may hold the branch prepared: it must get the
			// state again before it is named in sync.
			c.b.txr.mu.Lock()
			c.b.txr.storedAloneLocked()
			c.b.txr.mu.Unlock()
		}
	} else {
		tc.left++
	}
	locs := make([]txBatchLoc, len(batches))
	var failed bool
	for _, sp := range parts {
		bt := batches[sp.i]
		locs[sp.i] = txBatchLoc{topic: bt.t.name, partition: bt.p, notBefore: sp.sp.End(),
			firstID: bt.entries[0].ID, n: len(bt.entries), crc: batchCRC(bt.entries)}
		if err := bt.l.Append(bt.entries, sp.sp.Track(tc), uint64(sp.i)); err != nil {
			sp.sp.Release()
			c.b.disks.wakeOn(err)
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
				appendTxRecord(nil, txRecCommit, encodeTxCommit(t.key, locs), nil), c.b.frameLimit())
			c.b.txr.mu.Lock()
			lk.ShipFrames(frames, newTxShip(len(frames), tc.SlaveDone))
			c.b.txr.mu.Unlock()
		}
	}
	for _, sp := range parts {
		sp.sp.Unlock()
	}
	tc.AppendDone(0, 0, 0, nil) // the extra count: no reply before every Append was made
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
func (c *conn) finishPrepare(t *tx, pos int64, op int32) {
	b := c.b
	sm := b.syncActive()
	var wait chan error
	var refused string
	if sm != nil {
		b.txr.mu.Lock()
		lk := sm.Link()
		if lk != nil && b.txr.InSync(lk.ID()) {
			wait = make(chan error, 1)
			frames := txFrames(protocol.TxSyncPrepare, t.msgs, t.key,
				appendTxRecord(nil, txRecPrepare, encodeTxPrepare(t.key, t.user), nil), b.frameLimit())
			lk.ShipFrames(frames, newTxShip(len(frames), func(err error) { wait <- err }))
		} else if rerr := b.txRefusal(sm, nil, true); rerr != nil {
			refused = rerr.Error()
		} else {
			b.txr.storedAloneLocked() // degraded: acknowledged on the master alone
		}
		b.txr.mu.Unlock()
	}
	err := b.txlog.force(pos)
	if err != nil {
		c.xaErr(op, protocol.XAErRMFail, "prepare of "+t.key+": "+err.Error())
		return
	}
	if sm != nil {
		msg := refused
		if wait != nil {
			if err := <-wait; err != nil {
				sm.CountFailed()
				msg = err.Error()
			}
		}
		if msg != "" {
			// The branch stays prepared here (a coordinator rolls back a
			// branch whose prepare failed; RECOVER lists it meanwhile).
			c.xaErr(op, protocol.XAErRMFail, "prepare of "+t.key+": "+msg+
				" (the branch is prepared on the master alone; roll it back, or commit it once the slave is back in sync)")
			return
		}
	}
	if f := b.fo; f != nil && !f.mayAck() {
		c.xaErr(op, protocol.XAErRMFail, f.refusal())
		return
	}
	c.reply(protocol.StatusOK, "0", op)
}

// shipRollback ships the rollback of a prepared branch and waits for the
// slave. The rollback stands on the master whatever the slave says; a
// slave that missed it drops the branch at its next state.
func (c *conn) shipRollback(key string) {
	sm := c.b.syncActive()
	if sm == nil {
		return
	}
	txr := c.b.txr
	txr.mu.Lock()
	lk := sm.Link()
	if lk == nil {
		txr.mu.Unlock()
		return
	}
	wait := make(chan error, 1)
	lk.ShipFrames([]repl.Frame{{Kind: protocol.TxSyncRollback, Body: appendTxRecord(nil, txRecRollback, appendStr(nil, key), nil)}},
		newTxShip(1, func(err error) { wait <- err }))
	txr.mu.Unlock()
	if err := <-wait; err != nil {
		c.b.logf("sync: transaction %s: rolled back here; the slave did not confirm it (%v): it drops the branch when it is in sync again", key, err)
	}
}

// SyncState ships the master's prepared branches to the slave of lk,
// once per link, before failover may name it in sync (repl.Extension).
func (r *txReplState) SyncState(lk *repl.Link) error {
	b := r.b
	s := &b.txs
	r.mu.Lock()
	alone := r.alone.Load()
	var frames []repl.Frame
	var state []byte
	s.mu.Lock()
	keys := make([]string, 0, len(s.xa))
	for key, t := range s.xa {
		if t.state == txPrepared {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		t := s.xa[key]
		fs := txFrames(protocol.TxSyncPuts, t.msgs, key, nil, b.frameLimit())
		for _, f := range fs {
			if len(f.Body) > 0 {
				frames = append(frames, repl.Frame{Kind: protocol.TxSyncPuts, Body: f.Body})
			}
		}
		state = appendTxRecord(state, txRecPrepare, encodeTxPrepare(key, t.user), nil)
	}
	s.mu.Unlock()
	frames = append(frames, repl.Frame{Kind: protocol.TxSyncState, Body: state})
	wait := make(chan error, 1)
	lk.ShipFrames(frames, newTxShip(len(frames), func(err error) { wait <- err }))
	r.mu.Unlock()
	if err := <-wait; err != nil {
		return err
	}
	r.mu.Lock()
	again := r.alone.Load() != alone
	if !again {
		r.gen.Store(lk.ID())
	}
	r.mu.Unlock()
	if again {
		return errors.New("a transaction was stored on the master alone meanwhile; shipping the state again")
	}
	if len(keys) > 0 {
		b.logf("sync: the slave holds the %d prepared XA branches", len(keys))
	}
	return nil
}
