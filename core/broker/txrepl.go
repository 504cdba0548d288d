package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

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

// txReplState is a sync master's transaction replication state.
type txReplState struct {
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
	// shipped counts the txsync frames the slave answered 200.
	shipped atomic.Int64
}

// storedAlone notes, under mu, an XA prepare or commit stored on the
// master without the slave.
func (sm *syncMaster) storedAloneLocked() {
	sm.tx.alone.Add(1)
	sm.tx.gen.Store(0)
}

// slaveWaiter gets one shipped frame's outcome.
type slaveWaiter interface{ slaveDone(err error) }

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

func (s *txShip) slaveDone(err error) {
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

// shipFrames writes whole frames (each with a placeholder opaque written
// by frame) and registers w once per frame.
func (lk *syncLink) shipFrames(frames []txFrame, w slaveWaiter) {
	lk.wmu.Lock()
	defer lk.wmu.Unlock()
	now := time.Now()
	for _, f := range frames {
		lk.pmu.Lock()
		if lk.dead {
			err := lk.deadErr
			lk.pmu.Unlock()
			w.slaveDone(err)
			continue
		}
		lk.op++
		if lk.op <= 0 {
			lk.op = 1
		}
		op := lk.op
		lk.pending[op] = pendingSync{w: w, at: now}
		lk.pmu.Unlock()
		lk.buf = protocol.AppendTxSyncHeader(lk.buf[:0], f.kind, len(f.body), op)
		lk.buf = append(lk.buf, f.body...)
		if _, err := lk.w.Write(lk.buf); err != nil {
			lk.fail(fmt.Errorf("Slave is disconnected (write: %v)", err))
		}
	}
	if cap(lk.buf) > maxRetainedSyncBuf {
		lk.buf = nil
	}
	select {
	case lk.kick <- struct{}{}:
	default:
	}
}

// txFrame is one txsync frame to ship.
type txFrame struct {
	kind string
	body []byte
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
func txFrames(kind string, msgs []txMsg, key string, final []byte, limit int) []txFrame {
	var frames []txFrame
	var body []byte
	var head [128]byte
	for i := range msgs {
		m := &msgs[i]
		n := txHeaderSize + len(appendTxAppendHead(head[:0], key, m)) + len(m.e.Data)
		if len(body) > 0 && len(body)+n > limit {
			frames = append(frames, txFrame{kind: protocol.TxSyncPuts, body: body})
			body = nil
		}
		body = appendTxRecord(body, txRecAppend, appendTxAppendHead(head[:0], key, m), m.e.Data)
	}
	if len(body) > 0 && len(body)+len(final) > limit {
		frames = append(frames, txFrame{kind: protocol.TxSyncPuts, body: body})
		body = nil
	}
	return append(frames, txFrame{kind: kind, body: append(body, final...)})
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

// degradeOK reports whether what a sync master stores alone may be
// acknowledged now (sync_degrade, and with failover no slave named in
// sync; if one is, it is unnamed soon and the caller refuses).
func (sm *syncMaster) degradeOK() bool {
	if !sm.degrade {
		return false
	}
	if f := sm.b.fo; f != nil {
		if f.insync.Load() >= 0 {
			f.clearInSyncSoon()
			return false
		}
		sm.degradeSeq.Add(1)
	}
	if !sm.degraded.Swap(true) {
		sm.b.logf("sync: the slave is not in sync; storing transactions on the master alone (sync_degrade = true) until it is")
	}
	return true
}

// txRefusal says why a transaction's commit (batches to the partitions of
// logs), prepare or rollback cannot be replicated now and may not go on the
// master alone; "" if it may go on.
func (sm *syncMaster) txRefusal(logs []*store.Log, prepared bool) string {
	lk := sm.link.Load()
	ok := lk != nil && !lk.isDead()
	if ok && prepared {
		ok = sm.tx.gen.Load() == lk.id
	}
	for _, l := range logs {
		if !ok {
			break
		}
		sm.mu.Lock()
		sp := sm.parts[l]
		sm.mu.Unlock()
		ok = sp != nil && sp.gen.Load() == lk.id
	}
	if ok || sm.degradeOK() {
		return ""
	}
	sm.refused.Add(1)
	if sm.degrade {
		return "Slave is disconnected (unnaming the in-sync slave in ZooKeeper before storing transactions on the master alone)"
	}
	return "Slave is disconnected"
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
	msg := sm.txRefusal(logs, false)
	if msg == "" {
		return ""
	}
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
	if msg := sm.txRefusal(nil, true); msg != "" {
		return "rollback of " + t.key + " refused: " + msg + " (the branch is still prepared)"
	}
	return ""
}

// txSyncPart is one batch's partition on a sync master.
type txSyncPart struct {
	sp *syncPart
	i  int // batch index
}

// txBatchWait completes one replicated batch's local append.
type txBatchWait struct {
	tc *txCommit
	sp *syncPart
}

func (w *txBatchWait) AppendDone(token uint64, firstID, firstOffset int64, err error) {
	w.sp.inflight.Add(-1)
	w.tc.AppendDone(token, firstID, firstOffset, err)
}

// slaveDone is the slave's answer to a shipped commit.
func (tc *txCommit) slaveDone(err error) {
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
		b.sync.failed.Add(1)
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
	tc := &txCommit{c: c, t: t, opaque: opaque, heur: heur, left: len(batches) + 1}
	parts := make([]txSyncPart, len(batches))
	for i, bt := range batches {
		tc.logs = append(tc.logs, bt.l)
		if bt.t.conf().UnflushThreshold > 0 {
			tc.flush = true
		}
		parts[i] = txSyncPart{sp: sm.part(bt.t.name, bt.p, bt.l), i: i}
	}
	// One lock order for every commit: no two wait on each other.
	sort.Slice(parts, func(i, j int) bool {
		a, b := parts[i].sp, parts[j].sp
		return a.topic < b.topic || a.topic == b.topic && a.p < b.p
	})
	for _, sp := range parts {
		sp.sp.mu.Lock()
	}
	lk := sm.link.Load()
	inSync := lk != nil && !lk.isDead()
	for _, sp := range parts {
		inSync = inSync && sp.sp.gen.Load() == lk.id
	}
	if !inSync {
		// The check before the commit record passed, the link was lost
		// since: the commit is decided, so it is stored here, and the
		// answer says whether that may be acknowledged.
		if !sm.degradeOK() {
			tc.slaveErr = errors.New("Slave is disconnected")
		} else {
			for _, bt := range batches {
				sm.degradedPuts.Add(int64(len(bt.entries)))
			}
		}
		if t.xa {
			// The slave may hold the branch prepared: it must get the
			// state again before it is named in sync.
			sm.tx.mu.Lock()
			sm.storedAloneLocked()
			sm.tx.mu.Unlock()
		}
	} else {
		tc.left++
	}
	locs := make([]txBatchLoc, len(batches))
	var failed bool
	for _, sp := range parts {
		bt := batches[sp.i]
		locs[sp.i] = txBatchLoc{topic: bt.t.name, partition: bt.p, notBefore: sp.sp.end,
			firstID: bt.entries[0].ID, n: len(bt.entries), crc: batchCRC(bt.entries)}
		sp.sp.inflight.Add(1)
		if err := bt.l.Append(bt.entries, &txBatchWait{tc: tc, sp: sp.sp}, uint64(sp.i)); err != nil {
			sp.sp.inflight.Add(-1)
			c.b.disks.wakeOn(err)
			tc.AppendDone(uint64(sp.i), 0, 0, fmt.Errorf("append to %s: %w", bt.l.Dir(), err))
			failed = true
			continue
		}
		sp.sp.end += entriesSize(bt.entries)
	}
	if inSync {
		if failed {
			// The other batches are stored here and not on the slave:
			// the partitions join again (the slave pulls them first).
			for _, sp := range parts {
				sp.sp.gen.Store(0)
			}
			tc.slaveDone(errors.New("not shipped: the master's own append failed"))
		} else {
			var msgs []txMsg
			for _, bt := range batches {
				for _, e := range bt.entries {
					msgs = append(msgs, txMsg{t: bt.t, l: bt.l, p: bt.p, e: e})
				}
			}
			frames := txFrames(protocol.TxSyncCommit, msgs, t.key,
				appendTxRecord(nil, txRecCommit, encodeTxCommit(t.key, locs), nil), c.b.frameLimit())
			sm.tx.mu.Lock()
			lk.shipFrames(frames, newTxShip(len(frames), tc.slaveDone))
			sm.tx.mu.Unlock()
		}
	}
	for _, sp := range parts {
		sp.sp.mu.Unlock()
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
		sm.tx.mu.Lock()
		lk := sm.link.Load()
		if lk != nil && !lk.isDead() && sm.tx.gen.Load() == lk.id {
			wait = make(chan error, 1)
			frames := txFrames(protocol.TxSyncPrepare, t.msgs, t.key,
				appendTxRecord(nil, txRecPrepare, encodeTxPrepare(t.key, t.user), nil), b.frameLimit())
			lk.shipFrames(frames, newTxShip(len(frames), func(err error) { wait <- err }))
		} else if refused = sm.txRefusal(nil, true); refused == "" {
			sm.storedAloneLocked() // degraded: acknowledged on the master alone
		}
		sm.tx.mu.Unlock()
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
				sm.failed.Add(1)
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
	sm.tx.mu.Lock()
	lk := sm.link.Load()
	if lk == nil || lk.isDead() {
		sm.tx.mu.Unlock()
		return
	}
	wait := make(chan error, 1)
	lk.shipFrames([]txFrame{{kind: protocol.TxSyncRollback, body: appendTxRecord(nil, txRecRollback, appendStr(nil, key), nil)}},
		newTxShip(1, func(err error) { wait <- err }))
	sm.tx.mu.Unlock()
	if err := <-wait; err != nil {
		c.b.logf("sync: transaction %s: rolled back here; the slave did not confirm it (%v): it drops the branch when it is in sync again", key, err)
	}
}

// syncTxState ships the master's prepared branches to the slave of lk,
// once per link, before failover may name it in sync.
func (sm *syncMaster) syncTxState(lk *syncLink) error {
	b := sm.b
	s := &b.txs
	sm.tx.mu.Lock()
	alone := sm.tx.alone.Load()
	var frames []txFrame
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
			if len(f.body) > 0 {
				frames = append(frames, txFrame{kind: protocol.TxSyncPuts, body: f.body})
			}
		}
		state = appendTxRecord(state, txRecPrepare, encodeTxPrepare(key, t.user), nil)
	}
	s.mu.Unlock()
	frames = append(frames, txFrame{kind: protocol.TxSyncState, body: state})
	wait := make(chan error, 1)
	lk.shipFrames(frames, newTxShip(len(frames), func(err error) { wait <- err }))
	sm.tx.mu.Unlock()
	if err := <-wait; err != nil {
		return err
	}
	sm.tx.mu.Lock()
	again := sm.tx.alone.Load() != alone
	if !again {
		sm.tx.gen.Store(lk.id)
	}
	sm.tx.mu.Unlock()
	if again {
		return errors.New("a transaction was stored on the master alone meanwhile; shipping the state again")
	}
	if len(keys) > 0 {
		b.logf("sync: the slave holds the %d prepared XA branches", len(keys))
	}
	return nil
}

// The slave side.

// txStaged is a transaction's put records a slave connection holds for
// the frame that uses them.
type txStaged struct {
	msgs  []replayedMsg
	bytes int64
}

// txStageSet is a connection's staged put records, at most
// tx_max_buffered_bytes of message data in all.
type txStageSet struct {
	m     map[string]*txStaged
	bytes int64
}

// add stages m for key; false if that would pass limit bytes (nothing is
// staged then, and key's staged records are dropped).
func (ss *txStageSet) add(key string, m replayedMsg, limit int64) bool {
	n := int64(len(m.e.Data))
	if ss.bytes+n > limit {
		ss.take(key)
		return false
	}
	if ss.m == nil {
		ss.m = map[string]*txStaged{}
	}
	st := ss.m[key]
	if st == nil {
		st = &txStaged{}
		ss.m[key] = st
	}
	m.e.Data = append([]byte(nil), m.e.Data...) // the decoder's buffer is reused
	st.msgs = append(st.msgs, m)
	st.bytes += n
	ss.bytes += n
	return true
}

// take removes and returns key's staged records (nil: none).
func (ss *txStageSet) take(key string) *txStaged {
	st := ss.m[key]
	if st != nil {
		delete(ss.m, key)
		ss.bytes -= st.bytes
	}
	return st
}

func (ss *txStageSet) reset() {
	clear(ss.m)
	ss.bytes = 0
}

// txSyncMsg is a decoded txsync body.
type txSyncMsg struct {
	puts     []txSyncPut
	prepares []txSyncPrepare
	commit   *txSyncCommit
	rollback string
}

type txSyncPut struct {
	key string
	m   replayedMsg
}

type txSyncPrepare struct{ key, user string }

type txSyncCommit struct {
	key  string
	locs []txBatchLoc
}

// decodeTxSync parses a txsync body of the given kind: journal records,
// each verified by its crc, of the types the kind allows, in order (puts
// first).
func decodeTxSync(kind string, body []byte, maxMsg int) (*txSyncMsg, error) {
	m := &txSyncMsg{}
	for len(body) > 0 {
		if len(body) < txHeaderSize {
			return nil, errors.New("a short record header")
		}
		n := binary.BigEndian.Uint32(body[4:])
		if uint64(n) > uint64(len(body)-txHeaderSize) {
			return nil, fmt.Errorf("a record of %d bytes, %d left", n, len(body)-txHeaderSize)
		}
		rec := body[:txHeaderSize+int(n)]
		body = body[len(rec):]
		if crc32.Checksum(rec[4:], txCastagnoli) != binary.BigEndian.Uint32(rec) {
			return nil, errors.New("a record's crc does not match")
		}
		typ, p := rec[8], rec[txHeaderSize:]
		last := m.commit != nil || m.rollback != "" || len(m.prepares) > 0
		switch {
		case typ == txRecAppend && !last:
			key, rm, ok := decodeTxAppend(p)
			if !ok {
				return nil, errors.New("a malformed put record")
			}
			if len(rm.e.Data) > maxMsg {
				return nil, fmt.Errorf("a message of %d bytes exceeds max_message_size %d", len(rm.e.Data), maxMsg)
			}
			if _, _, _, err := message.SplitData(rm.e.Flag, rm.e.Data); err != nil || rm.e.ID <= 0 || rm.partition < 0 {
				return nil, fmt.Errorf("a bad put record for %s", key)
			}
			m.puts = append(m.puts, txSyncPut{key: key, m: rm})
		case typ == txRecPrepare && (kind == protocol.TxSyncPrepare || kind == protocol.TxSyncState):
			r := &txReader{p: p}
			key, user := r.str(), r.str()
			if r.bad || len(r.p) != 0 || key == "" {
				return nil, errors.New("a malformed prepare record")
			}
			m.prepares = append(m.prepares, txSyncPrepare{key: key, user: user})
		case typ == txRecCommit && kind == protocol.TxSyncCommit && !last:
			key, locs, ok := decodeTxCommit(p)
			if !ok || key == "" || len(locs) == 0 {
				return nil, errors.New("a malformed commit record")
			}
			for _, l := range locs {
				if l.n <= 0 || l.partition < 0 || l.notBefore < 0 {
					return nil, errors.New("a malformed commit record")
				}
			}
			m.commit = &txSyncCommit{key: key, locs: locs}
		case typ == txRecRollback && kind == protocol.TxSyncRollback && !last:
			r := &txReader{p: p}
			key := r.str()
			if r.bad || len(r.p) != 0 || key == "" {
				return nil, errors.New("a malformed rollback record")
			}
			m.rollback = key
		default:
			return nil, fmt.Errorf("a record of type %d where %s takes none", typ, kind)
		}
	}
	switch {
	case kind == protocol.TxSyncPuts && len(m.puts) == 0,
		kind == protocol.TxSyncPrepare && len(m.prepares) == 0,
		kind == protocol.TxSyncCommit && m.commit == nil,
		kind == protocol.TxSyncRollback && m.rollback == "":
		return nil, errors.New("no record for " + kind)
	}
	return m, nil
}

// decodeTxAppend parses a put record's payload.
func decodeTxAppend(p []byte) (string, replayedMsg, bool) {
	r := &txReader{p: p}
	key := r.str()
	id := r.u64()
	topic := r.str()
	part := int32(r.u32())
	flag := int32(r.u32())
	data := r.take(int(r.u32()))
	if r.bad || len(r.p) != 0 {
		return "", replayedMsg{}, false
	}
	return key, replayedMsg{topic: topic, partition: part,
		e: store.Entry{ID: id, Flag: flag, CRC: message.Checksum(data), Data: data}}, true
}

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

// handleTxSync applies a txsync from the sync master (see the top of this
// file). Frames of a connection are applied in the order they arrive, with
// its syncs.
func (c *conn) handleTxSync(r *protocol.Request) {
	b := c.b
	if msg := c.syncRefusal(); msg != "" {
		c.reply(protocol.StatusInternalError, msg, r.Opaque)
		return
	}
	kind := string(r.Item)
	m, err := decodeTxSync(kind, r.Body, b.config().MaxMessageSize)
	if err != nil {
		c.reply(protocol.StatusBadRequest, "txsync "+kind+": "+err.Error(), r.Opaque)
		return
	}
	for _, p := range m.puts {
		if !c.txStage.add(p.key, p.m, b.config().TxMaxBufferedBytes) {
			c.reply(protocol.StatusInternalError, "txsync: the put records held on this connection would exceed tx_max_buffered_bytes; "+p.key+"'s are dropped", r.Opaque)
			return
		}
		b.ids.observe(p.m.e.ID)
	}
	switch kind {
	case protocol.TxSyncPuts:
		c.reply(protocol.StatusOK, "", r.Opaque)
	case protocol.TxSyncPrepare, protocol.TxSyncState:
		c.applyPrepares(m.prepares, kind == protocol.TxSyncState, r.Opaque)
	case protocol.TxSyncRollback:
		c.applyRollback(m.rollback, r.Opaque)
	case protocol.TxSyncCommit:
		c.applyCommit(m.commit, r.Opaque)
	}
}

// applyPrepares holds the branches prepared (their records written to
// this broker's journal and made durable by its flush_tx_log_at_commit,
// fsynced with the default 1, before the answer); with state, the
// prepared branches not listed are dropped.
func (c *conn) applyPrepares(prepares []txSyncPrepare, state bool, opaque int32) {
	b := c.b
	s := &b.txs
	var pos int64
	var dropped []*tx
	listed := map[string]bool{}
	s.mu.Lock()
	for _, p := range prepares {
		listed[p.key] = true
		st := c.txStage.take(p.key)
		if t := s.xa[p.key]; t != nil && t.state == txPrepared {
			continue // held already
		}
		if st == nil || len(st.msgs) == 0 {
			s.mu.Unlock()
			c.reply(protocol.StatusBadRequest, "txsync: prepare of "+p.key+" without its put records", opaque)
			return
		}
		at, err := b.holdPreparedLocked(&replayedTx{key: p.key, user: p.user, msgs: st.msgs}, "(replicated)")
		if err != nil {
			s.mu.Unlock()
			c.reply(protocol.StatusInternalError, "txsync: prepare of "+p.key+": "+err.Error(), opaque)
			return
		}
		pos = max(pos, at)
	}
	if state {
		for key, t := range s.xa {
			if t.state != txPrepared || listed[key] {
				continue
			}
			// The master holds it no more: it was committed (its
			// batches come by pulling) or rolled back.
			t.state = txDone
			s.unholdLocked(t)
			s.unregisterLocked(t)
			t.msgs = nil
			pos = max(pos, b.journalEnd(t, txRecRollback))
			dropped = append(dropped, t)
		}
		c.txStage.reset()
	}
	s.mu.Unlock()
	for _, t := range dropped {
		b.txlog.release(t)
		b.logf("sync: transaction %s: no longer prepared on the master; dropped here", t.key)
	}
	c.forceThenReply(pos, opaque)
}

// forceThenReply answers once the journal is durable up to pos, off the
// connection's goroutine (the frames after it go on meanwhile).
func (c *conn) forceThenReply(pos int64, opaque int32) {
	if pos == 0 {
		c.reply(protocol.StatusOK, "", opaque)
		return
	}
	b := c.b
	c.addPending(1)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		err := b.txlog.force(pos)
		c.addPending(-1)
		if err != nil {
			c.reply(protocol.StatusInternalError, "txsync: transaction journal: "+err.Error(), opaque)
			return
		}
		c.reply(protocol.StatusOK, "", opaque)
	}()
}

// applyRollback ends a branch held prepared.
func (c *conn) applyRollback(key string, opaque int32) {
	b := c.b
	s := &b.txs
	s.mu.Lock()
	c.txStage.take(key)
	t := s.xa[key]
	var pos int64
	if t != nil && t.state == txPrepared {
		t.state = txDone
		s.unholdLocked(t)
		s.unregisterLocked(t)
		t.msgs = nil
		pos = b.journalEnd(t, txRecRollback)
	} else {
		t = nil
	}
	s.mu.Unlock()
	if t != nil {
		b.txlog.release(t)
	}
	c.forceThenReply(pos, opaque)
}

// slaveCommit completes a replicated commit on the slave.
type slaveCommit struct {
	c      *conn
	t      *tx // the branch held prepared, or nil
	opaque int32
	logs   []*store.Log
	mu     sync.Mutex
	left   int
	errs   []string
}

func (sc *slaveCommit) AppendDone(_ uint64, _, _ int64, err error) {
	sc.mu.Lock()
	if err != nil {
		sc.errs = append(sc.errs, err.Error())
	}
	sc.left--
	last := sc.left == 0
	sc.mu.Unlock()
	if last {
		go sc.finish() // it may flush and write the journal
	}
}

func (sc *slaveCommit) finish() {
	c := sc.c
	b := c.b
	defer c.addPending(-1)
	if len(sc.errs) > 0 {
		c.reply(protocol.StatusInternalError, "txsync: commit: "+oneLine(fmt.Sprint(sc.errs)), sc.opaque)
		return
	}
	if t := sc.t; t != nil {
		// The batches must be durable before the journal forgets the
		// branch (threshold-mode partitions are flushed).
		for _, l := range sc.logs {
			if err := l.Flush(); err != nil {
				c.reply(protocol.StatusInternalError, "txsync: commit: "+err.Error(), sc.opaque)
				return
			}
		}
		s := &b.txs
		s.mu.Lock()
		t.state = txDone
		s.unregisterLocked(t)
		t.msgs = nil
		b.journalEnd(t, txRecDone)
		s.mu.Unlock()
		b.txlog.release(t)
	}
	c.reply(protocol.StatusOK, "", sc.opaque)
}

// applyCommit stores a commit's batches at the master's offsets. A branch
// held prepared here is ended through the journal as the master's commit
// is: commit record (fsynced, on this goroutine, so that the batches keep
// their place among the syncs), batches, done record.
func (c *conn) applyCommit(cm *txSyncCommit, opaque int32) {
	b := c.b
	s := &b.txs
	st := c.txStage.take(cm.key)
	var msgs []replayedMsg
	if st != nil {
		msgs = st.msgs
	}
	s.mu.Lock()
	t := s.xa[cm.key]
	if t == nil || t.state != txPrepared {
		t = nil
	} else if msgs == nil {
		for _, m := range t.msgs {
			msgs = append(msgs, replayedMsg{topic: m.t.name, partition: m.p, e: m.e})
		}
	}
	type batch struct {
		l       *store.Log
		entries []store.Entry
	}
	batches := make([]batch, len(cm.locs))
	for i, loc := range cm.locs {
		tp, err := b.lookup([]byte(loc.topic), true)
		var l *store.Log
		if err == nil {
			l = tp.partition(loc.partition)
		}
		if l == nil || loc.partition < 0 {
			s.mu.Unlock()
			c.reply(protocol.StatusInternalError, "txsync: commit of "+cm.key+": no partition "+loc.topic+"-"+strconv.Itoa(int(loc.partition)), opaque)
			return
		}
		var entries []store.Entry
		for _, m := range msgs {
			if m.topic == loc.topic && m.partition == loc.partition {
				entries = append(entries, m.e)
			}
		}
		if len(entries) != loc.n || entries[0].ID != loc.firstID || batchCRC(entries) != loc.crc {
			s.mu.Unlock()
			c.reply(protocol.StatusBadRequest, "txsync: commit of "+cm.key+": its put records do not match its batch for "+loc.topic+"-"+strconv.Itoa(int(loc.partition)), opaque)
			return
		}
		batches[i] = batch{l: l, entries: entries}
	}
	var pos int64
	if t != nil {
		var err error
		if pos, err = b.txlog.write(t, txRecCommit, encodeTxCommit(cm.key, cm.locs)); err != nil {
			s.mu.Unlock()
			c.reply(protocol.StatusInternalError, "txsync: commit of "+cm.key+": "+err.Error(), opaque)
			return
		}
		t.state = txCommitting
		s.unholdLocked(t) // its batches come now: the puller must not end it
	}
	s.mu.Unlock()
	if t != nil {
		if err := b.txlog.force(pos); err != nil {
			c.reply(protocol.StatusInternalError, "txsync: commit of "+cm.key+": "+err.Error(), opaque)
			return
		}
	}
	sc := &slaveCommit{c: c, t: t, opaque: opaque, left: 1}
	c.addPending(1)
	for i, bt := range batches {
		loc := cm.locs[i]
		sc.logs = append(sc.logs, bt.l)
		sl := b.slave.logState(bt.l)
		sl.mu.Lock()
		skip, err := sl.present(loc.notBefore, bt.entries)
		if err == nil && skip < len(bt.entries) {
			rest := bt.entries[skip:]
			sc.mu.Lock()
			sc.left++
			sc.mu.Unlock()
			if err = bt.l.Append(rest, sc, uint64(i)); err != nil {
				sc.mu.Lock()
				sc.left--
				sc.mu.Unlock()
			} else {
				sl.end += entriesSize(rest)
				for _, e := range rest {
					sl.lastID = max(sl.lastID, e.ID)
				}
				b.slave.syncs.Add(int64(len(rest)))
			}
		}
		sl.mu.Unlock()
		if err != nil {
			sc.mu.Lock()
			sc.errs = append(sc.errs, fmt.Sprintf("%s-%d: %v", loc.topic, loc.partition, err))
			sc.mu.Unlock()
		}
	}
	sc.AppendDone(0, 0, 0, nil)
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

// holdLocked indexes a prepared branch a slave holds by the first id of
// each of its batches. The caller holds txSet.mu.
func (s *txSet) holdLocked(t *tx) {
	if s.held == nil {
		s.held = map[int64]*tx{}
	}
	seen := map[*store.Log]bool{}
	for _, m := range t.msgs {
		if !seen[m.l] {
			seen[m.l] = true
			s.held[m.e.ID] = t
			s.nheld.Add(1)
		}
	}
}

// unholdLocked removes t from the index. The caller holds txSet.mu.
func (s *txSet) unholdLocked(t *tx) {
	for id, h := range s.held {
		if h == t {
			delete(s.held, id)
			s.nheld.Add(-1)
		}
	}
}

// endPulledBranches is the slave's puller about to append entries: a
// branch held prepared whose batch is among them was committed on the
// master (whose commit did not reach this slave as a txsync), so it is
// ended here, durably, before its batch is stored: a promoted slave must
// not list it in RECOVER, where committing it again would store the batch
// twice. The caller holds the partition's slaveLog lock.
func (b *Broker) endPulledBranches(entries []store.Entry) {
	s := &b.txs
	if s.nheld.Load() == 0 {
		return
	}
	var ended []*tx
	var pos int64
	s.mu.Lock()
	for i := range entries {
		t := s.held[entries[i].ID]
		if t == nil {
			continue
		}
		s.unholdLocked(t)
		if t.state != txPrepared {
			continue
		}
		t.state = txDone
		s.unregisterLocked(t)
		t.msgs = nil
		pos = max(pos, b.journalEnd(t, txRecRollback))
		ended = append(ended, t)
	}
	s.mu.Unlock()
	if err := b.txlog.force(pos); err != nil {
		b.errorf("slave: transaction journal: %v", err)
	}
	for _, t := range ended {
		b.txlog.release(t)
		b.logf("slave: transaction %s: its batch was copied from the master (committed there); no longer held prepared", t.key)
	}
}
