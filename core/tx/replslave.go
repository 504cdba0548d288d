package tx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Transactions under sync replication, the slave side (repl.go has the
// master's and the frames): txsync frames applied in link order, prepared
// branches held in this broker's own journal, commits stored at the
// master's offsets.

// SlaveLogs is the slave side of replication as the transactions use it:
// the partitions the puller copies into.
type SlaveLogs interface {
	// AppendAt appends entries, a batch the master stored at offset off
	// of l, after those of them l has already (the puller may have
	// copied them), under the puller's lock of l. It reports whether it
	// appended anything: then w.AppendDone(token, ...) is called once.
	AppendAt(l *store.Log, off int64, entries []store.Entry, w store.Waiter, token uint64) (bool, error)
}

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

// ApplySync applies a txsync frame from the sync master (see the top of
// repl.go) on s, the link's connection, which applies its frames in the
// order they arrive, with its syncs. The answer to opaque comes through
// s's Peer.
func (m *Manager) ApplySync(s *Session, kind string, body []byte, opaque int32) {
	cfg := m.config()
	done := func(err error) { s.peer.TxDone(opaque, "", err) }
	if kind == protocol.TxSyncCommit {
		done = func(err error) { s.commitFailed(opaque, err) }
	}
	sm, err := decodeTxSync(kind, body, cfg.MaxMessageSize)
	if err != nil {
		done(malformed("txsync " + kind + ": " + err.Error()))
		return
	}
	for _, p := range sm.puts {
		if !s.stage.add(p.key, p.m, cfg.MaxBufferedBytes) {
			done(plainErr("txsync: the put records held on this connection would exceed tx_max_buffered_bytes; " + p.key + "'s are dropped"))
			return
		}
		m.host.ObserveID(p.m.e.ID)
	}
	switch kind {
	case protocol.TxSyncPuts:
		s.peer.TxDone(opaque, "", nil)
	case protocol.TxSyncPrepare, protocol.TxSyncState:
		m.applyPrepares(s, sm.prepares, kind == protocol.TxSyncState, opaque)
	case protocol.TxSyncRollback:
		m.applyRollback(s, sm.rollback, opaque)
	case protocol.TxSyncCommit:
		m.applyCommit(s, sm.commit, opaque)
	}
}

// applyPrepares holds the branches prepared (their records written to
// this broker's journal and made durable by its flush_tx_log_at_commit,
// fsynced with the default 1, before the answer); with state, the
// prepared branches not listed are dropped.
func (m *Manager) applyPrepares(s *Session, prepares []txSyncPrepare, state bool, opaque int32) {
	var pos int64
	var dropped []*tx
	listed := map[string]bool{}
	m.mu.Lock()
	for _, p := range prepares {
		listed[p.key] = true
		st := s.stage.take(p.key)
		if t := m.xa[p.key]; t != nil && t.state == txPrepared {
			continue // held already
		}
		if st == nil || len(st.msgs) == 0 {
			m.mu.Unlock()
			s.peer.TxDone(opaque, "", malformed("txsync: prepare of "+p.key+" without its put records"))
			return
		}
		at, err := m.holdPreparedLocked(&replayedTx{key: p.key, user: p.user, msgs: st.msgs}, "(replicated)")
		if err != nil {
			m.mu.Unlock()
			s.peer.TxDone(opaque, "", plainErr("txsync: prepare of "+p.key+": "+err.Error()))
			return
		}
		pos = max(pos, at)
	}
	if state {
		for key, t := range m.xa {
			if t.state != txPrepared || listed[key] {
				continue
			}
			// The master holds it no more: it was committed (its
			// batches come by pulling) or rolled back.
			t.state = txDone
			m.unholdLocked(t)
			m.unregisterLocked(t)
			t.msgs = nil
			pos = max(pos, m.journalEnd(t, txRecRollback))
			dropped = append(dropped, t)
		}
		s.stage.reset()
	}
	m.mu.Unlock()
	for _, t := range dropped {
		m.j.release(t)
		m.logf("sync: transaction %s: no longer prepared on the master; dropped here", t.key)
	}
	m.forceThenDone(s, pos, opaque)
}

// forceThenDone answers once the journal is durable up to pos, off the
// connection's goroutine (the frames after it go on meanwhile).
func (m *Manager) forceThenDone(s *Session, pos int64, opaque int32) {
	if pos == 0 {
		s.peer.TxDone(opaque, "", nil)
		return
	}
	s.peer.TxPending(1)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		err := m.j.force(pos)
		s.peer.TxPending(-1)
		if err != nil {
			s.peer.TxDone(opaque, "", plainErr("txsync: transaction journal: "+err.Error()))
			return
		}
		s.peer.TxDone(opaque, "", nil)
	}()
}

// applyRollback ends a branch held prepared.
func (m *Manager) applyRollback(s *Session, key string, opaque int32) {
	m.mu.Lock()
	s.stage.take(key)
	t := m.xa[key]
	var pos int64
	if t != nil && t.state == txPrepared {
		t.state = txDone
		m.unholdLocked(t)
		m.unregisterLocked(t)
		t.msgs = nil
		pos = m.journalEnd(t, txRecRollback)
	} else {
		t = nil
	}
	m.mu.Unlock()
	if t != nil {
		m.j.release(t)
	}
	m.forceThenDone(s, pos, opaque)
}

// commitFailed answers opaque, a commit (or a frame of one) this slave
// did not store, with err, after refusing the later syncs on s's
// connection (its Peer's FailSyncs, repl.SyncGate): the master stored the
// commit's batches, and a sync after it, which carries no offset, would
// land here at a lower offset than there.
func (s *Session) commitFailed(opaque int32, err error) {
	s.peer.FailSyncs()
	s.peer.TxDone(opaque, "", err)
}

// slaveCommit completes a replicated commit on the slave.
type slaveCommit struct {
	m      *Manager
	s      *Session
	t      *tx // the branch held prepared, or nil
	opaque int32
	logs   []*store.Log
	countdown
}

func (sc *slaveCommit) AppendDone(_ uint64, _, _ int64, err error) {
	if sc.done(err) {
		go sc.finish() // it may flush and write the journal
	}
}

func (sc *slaveCommit) finish() {
	m := sc.m
	defer sc.s.peer.TxPending(-1)
	if len(sc.errs) > 0 {
		sc.s.commitFailed(sc.opaque, plainErr("txsync: commit: "+oneLine(fmt.Sprint(sc.errs))))
		return
	}
	if t := sc.t; t != nil {
		// The batches must be durable before the journal forgets the
		// branch (threshold-mode partitions are flushed).
		for _, l := range sc.logs {
			if err := l.Flush(); err != nil {
				sc.s.commitFailed(sc.opaque, plainErr("txsync: commit: "+err.Error()))
				return
			}
		}
		m.mu.Lock()
		t.state = txDone
		m.unregisterLocked(t)
		t.msgs = nil
		m.journalEnd(t, txRecDone)
		m.mu.Unlock()
		m.j.release(t)
	}
	sc.s.peer.TxDone(sc.opaque, "", nil)
}

// applyCommit stores a commit's batches at the master's offsets. A branch
// held prepared here is ended through the journal as the master's commit
// is: commit record (fsynced, on this goroutine, so that the batches keep
// their place among the syncs), batches, done record.
func (m *Manager) applyCommit(s *Session, cm *txSyncCommit, opaque int32) {
	sl := m.host.Slave()
	st := s.stage.take(cm.key)
	var msgs []replayedMsg
	if st != nil {
		msgs = st.msgs
	}
	m.mu.Lock()
	t := m.xa[cm.key]
	if t == nil || t.state != txPrepared {
		t = nil
	} else if msgs == nil {
		for _, tm := range t.msgs {
			msgs = append(msgs, replayedMsg{topic: tm.t.Name(), partition: tm.p, e: tm.e})
		}
	}
	type batch struct {
		l       *store.Log
		entries []store.Entry
	}
	batches := make([]batch, len(cm.locs))
	for i, loc := range cm.locs {
		if sl == nil {
			m.mu.Unlock()
			s.commitFailed(opaque, plainErr("txsync: commit of "+cm.key+": this broker is not a slave"))
			return
		}
		_, l, err := m.openLog(loc.topic, loc.partition)
		if err != nil {
			m.mu.Unlock()
			s.commitFailed(opaque, plainErr("txsync: commit of "+cm.key+": no partition "+loc.topic+"-"+strconv.Itoa(int(loc.partition))))
			return
		}
		var entries []store.Entry
		for _, rm := range msgs {
			if rm.topic == loc.topic && rm.partition == loc.partition {
				entries = append(entries, rm.e)
			}
		}
		if len(entries) != loc.n || entries[0].ID != loc.firstID || batchCRC(entries) != loc.crc {
			m.mu.Unlock()
			s.commitFailed(opaque, malformed("txsync: commit of "+cm.key+": its put records do not match its batch for "+loc.topic+"-"+strconv.Itoa(int(loc.partition))))
			return
		}
		batches[i] = batch{l: l, entries: entries}
	}
	var pos int64
	if t != nil {
		// The master's commit turned its delayed messages into timer log
		// records: they go before the commit record here too, so that a
		// replay can complete their batches (delayed.go).
		var err error
		var head [128]byte
		for i := range msgs {
			rm := &msgs[i]
			if rm.topic != conf.TimerTopic {
				continue
			}
			if _, err = m.j.write2(t, txRecAppend, appendPutHead(head[:0], cm.key, rm.topic, rm.partition, &rm.e), rm.e.Data); err != nil {
				break
			}
		}
		if err == nil {
			pos, err = m.j.write(t, txRecCommit, encodeTxCommit(cm.key, cm.locs))
		}
		if err != nil {
			m.mu.Unlock()
			s.commitFailed(opaque, plainErr("txsync: commit of "+cm.key+": "+err.Error()))
			return
		}
		t.state = txCommitting
		m.unholdLocked(t) // its batches come now: the puller must not end it
	}
	m.mu.Unlock()
	if t != nil {
		if err := m.j.force(pos); err != nil {
			s.commitFailed(opaque, plainErr("txsync: commit of "+cm.key+": "+err.Error()))
			return
		}
	}
	sc := &slaveCommit{m: m, s: s, t: t, opaque: opaque, countdown: countdown{left: 1}}
	s.peer.TxPending(1)
	for i, bt := range batches {
		loc := cm.locs[i]
		sc.logs = append(sc.logs, bt.l)
		sc.mu.Lock()
		sc.left++
		sc.mu.Unlock()
		appended, err := sl.AppendAt(bt.l, loc.notBefore, bt.entries, sc, uint64(i))
		if !appended {
			sc.mu.Lock()
			sc.left--
			if err != nil {
				sc.errs = append(sc.errs, fmt.Sprintf("%s-%d: %v", loc.topic, loc.partition, err))
			}
			sc.mu.Unlock()
		}
	}
	sc.AppendDone(0, 0, 0, nil)
}

// holdLocked indexes a prepared branch a slave holds by the first id of
// each of its batches. The caller holds mu.
func (m *Manager) holdLocked(t *tx) {
	if m.held == nil {
		m.held = map[int64]*tx{}
	}
	seen := map[*store.Log]bool{}
	for _, tm := range t.msgs {
		if !seen[tm.l] {
			seen[tm.l] = true
			m.held[tm.e.ID] = t
			m.nheld.Add(1)
		}
	}
}

// unholdLocked removes t from the index. The caller holds mu.
func (m *Manager) unholdLocked(t *tx) {
	for id, h := range m.held {
		if h == t {
			delete(m.held, id)
			m.nheld.Add(-1)
		}
	}
}

var _ repl.SlaveExtension = (*Manager)(nil)

// Pulled implements repl.SlaveExtension: a slave's puller is about to
// append entries. A branch held prepared whose batch is among them was
// committed on the master (whose commit did not reach this slave as a
// txsync), so it is ended here, durably, before its batch is stored: a
// promoted slave must not list it in RECOVER, where committing it again
// would store the batch twice. The caller holds the partition's SlaveLog
// lock.
func (m *Manager) Pulled(entries []store.Entry) {
	if m.nheld.Load() == 0 {
		return
	}
	var ended []*tx
	var pos int64
	m.mu.Lock()
	for i := range entries {
		t := m.held[entries[i].ID]
		if t == nil {
			continue
		}
		m.unholdLocked(t)
		if t.state != txPrepared {
			continue
		}
		t.state = txDone
		m.unregisterLocked(t)
		t.msgs = nil
		pos = max(pos, m.journalEnd(t, txRecRollback))
		ended = append(ended, t)
	}
	m.mu.Unlock()
	if err := m.j.force(pos); err != nil {
		m.errorf("slave: transaction journal: %v", err)
	}
	for _, t := range ended {
		m.j.release(t)
		m.logf("slave: transaction %s: its batch was copied from the master (committed there); no longer held prepared", t.key)
	}
}
