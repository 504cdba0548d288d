package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Transactions under sync replication, the slave side (txrepl.go has the
// master's and the frames): txsync frames applied in link order, prepared
// branches held in this broker's own journal, commits stored at the
// master's offsets.
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

// handleTxSync applies a txsync from the sync master (see the top of
// txrepl.go). Frames of a connection are applied in the order they arrive, with
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
	countdown
}

func (sc *slaveCommit) AppendDone(_ uint64, _, _ int64, err error) {
	if sc.done(err) {
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
	sc := &slaveCommit{c: c, t: t, opaque: opaque, countdown: countdown{left: 1}}
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
