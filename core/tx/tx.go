package tx

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Transactions (reference §10, docs/protocol.md).
//
// A local transaction (key TX:<session>:<n>) lives in its connection (its
// Session): it is begun, filled and committed or rolled back there, and
// rolled back when the connection closes. Its messages are buffered in
// memory, bounded by tx_max_bytes per transaction and
// tx_max_buffered_bytes in all, invisible and taking no partition space
// until the commit appends each partition's messages as one batch, in put
// order, with the ids their puts were answered with. A transaction not
// committed within its timeout (the BEGIN's, capped at 60 s, or
// tx_default_timeout) is rolled back.
//
// XA transactions (XID keys, xa.go) are the broker's: any connection of
// the same user (or an admin) may prepare, commit, roll back or recover
// them, and a connection closing does not end them.

// txState is where a transaction is in its life.
type txState uint8

const (
	txActive     txState = iota // begun; puts accepted
	txPrepared                  // XA: prepared, waiting for the decision
	txCommitting                // commit under way: its batches are being appended
	txDone                      // committed or rolled back: no longer registered
)

func (s txState) String() string {
	switch s {
	case txActive:
		return "active"
	case txPrepared:
		return "prepared"
	case txCommitting:
		return "committing"
	}
	return "done"
}

// tx is one open transaction. Its fields after the first block are under
// Manager.mu.
type tx struct {
	key     string // canonical key
	session string
	xa      bool
	// user is the authenticated user who began it ("" with auth off):
	// only they or an admin may use an XA transaction from another
	// connection.
	user    string
	owner   *Session // a local transaction's connection; nil for XA
	began   time.Time
	timeout time.Duration
	timer   *time.Timer

	state txState
	msgs  []txMsg
	bytes int64
	// files are the journal files holding its records (under txLog.mu).
	files map[int64]bool
}

// txMsg is one buffered transactional message.
type txMsg struct {
	t Topic
	l *store.Log
	p int32
	e store.Entry // Data is the transaction's own copy; ID is the put's
}

// Session is one connection's transactions: its local ones by canonical
// key (under Manager.mu) and, on a slave, the put records a sync master
// shipped ahead of the txsync frame that uses them (the connection's
// goroutine only).
type Session struct {
	peer    Peer
	txs     map[string]*tx
	closing bool // its local transactions were rolled back on close
	stage   txStageSet
}

// NewSession is a new connection's transactions.
func (m *Manager) NewSession(p Peer) *Session { return &Session{peer: p} }

// timeoutOf is the timeout of a transaction whose BEGIN asked for sec
// seconds (0 or less: none).
func (m *Manager) timeoutOf(sec int64) time.Duration {
	if sec <= 0 {
		return m.config().DefaultTimeout
	}
	return time.Duration(min(sec, conf.MaxTxTimeout)) * time.Second
}

// BeginLocal begins local transaction key on s (session is the client's
// token, timeoutSec the BEGIN's timeout). A closing connection begins
// nothing, and nil is returned with no reply due: closed reports that.
func (m *Manager) BeginLocal(s *Session, key, session string, timeoutSec int64) (closed bool, err error) {
	m.mu.Lock()
	if s.closing {
		m.mu.Unlock()
		return true, nil
	}
	if _, ok := s.txs[key]; ok {
		m.mu.Unlock()
		return false, plainErr("transaction " + key + " is already begun on this connection")
	}
	t := &tx{key: key, session: showToken(session), owner: s, began: time.Now(), timeout: m.timeoutOf(timeoutSec)}
	if s.txs == nil {
		s.txs = make(map[string]*tx)
	}
	s.txs[key] = t
	m.open[t] = struct{}{}
	t.timer = time.AfterFunc(t.timeout, func() { m.expire(t) })
	m.mu.Unlock()
	m.begins.Add(1)
	return false, nil
}

// unregisterLocked removes t from the manager and its connection and frees
// its buffered bytes; the caller holds mu and sets t's new state.
func (m *Manager) unregisterLocked(t *tx) {
	if t.timer != nil {
		t.timer.Stop()
	}
	delete(m.open, t)
	if t.xa && m.xa[t.key] == t {
		delete(m.xa, t.key)
	}
	if t.owner != nil && t.owner.txs[t.key] == t {
		delete(t.owner.txs, t.key)
	}
	m.buffered -= t.bytes
}

// expire rolls back t if it is still active when its timeout passes.
func (m *Manager) expire(t *tx) {
	m.mu.Lock()
	if t.state != txActive {
		m.mu.Unlock()
		return
	}
	t.state = txDone
	m.unregisterLocked(t)
	n := len(t.msgs)
	t.msgs = nil
	m.journalEnd(t, txRecRollback)
	m.mu.Unlock()
	m.j.release(t)
	m.rollbacks.Add(1)
	m.logf("transaction %s: not committed within %v, rolled back (%d messages dropped)", t.key, t.timeout, n)
}

// CloseSession rolls back the local transactions of a closing connection.
func (m *Manager) CloseSession(s *Session) {
	m.mu.Lock()
	s.closing = true
	var rolled []*tx
	for _, t := range s.txs {
		if t.state != txActive {
			continue
		}
		t.state = txDone
		m.unregisterLocked(t)
		t.msgs = nil
		m.journalEnd(t, txRecRollback)
		rolled = append(rolled, t)
	}
	m.mu.Unlock()
	for _, t := range rolled {
		m.j.release(t)
		m.rollbacks.Add(1)
		m.logf("transaction %s: connection closed, rolled back", t.key)
	}
}

// lookupLocalLocked returns the connection's active local transaction key,
// or the error why there is none. The caller holds mu.
func (s *Session) lookupLocalLocked(key string) (*tx, error) {
	t := s.txs[key]
	if t == nil {
		return nil, plainErr("transaction " + key + " is not begun on this connection (or was rolled back: timed out)")
	}
	if t.state != txActive {
		return nil, plainErr("transaction " + key + " is " + t.state.String())
	}
	return t, nil
}

// RollbackLocal rolls back local transaction key of s.
func (m *Manager) RollbackLocal(s *Session, key string) error {
	m.mu.Lock()
	t, lerr := s.lookupLocalLocked(key)
	var pos int64
	if t != nil {
		t.state = txDone
		m.unregisterLocked(t)
		t.msgs = nil
		pos = m.journalEnd(t, txRecRollback)
	}
	m.mu.Unlock()
	if t == nil {
		return lerr
	}
	err := m.j.force(pos)
	m.j.release(t)
	m.rollbacks.Add(1)
	if err != nil {
		// The rollback stands (nothing was appended); only its record may
		// be lost, and a replay rolls the transaction back anyway.
		m.errorf("transaction %s: rollback record: %v", key, err)
	}
	return nil
}

// Put is a transactional put: a message for partition p (log l) of topic
// tp buffered in transaction key (xa: an XA one) of s. It returns the id
// the message is stored with when the transaction commits.
func (m *Manager) Put(s *Session, key string, xa bool, tp Topic, l *store.Log, p int32, e store.Entry) (int64, error) {
	n := int64(len(e.Data))
	cfg := m.config()
	m.mu.Lock()
	var tr *tx
	var err error
	if xa {
		tr, err = m.lookupXAPutLocked(s, key)
	} else {
		tr, err = s.lookupLocalLocked(key)
	}
	switch {
	case tr == nil:
	case tr.bytes+n > cfg.MaxBytes:
		err = plainErr("transaction " + key + " would hold " + strconv.FormatInt(tr.bytes+n, 10) +
			" message bytes, over tx_max_bytes " + strconv.FormatInt(cfg.MaxBytes, 10) + "; the put is refused")
		tr = nil
	case m.buffered+n > cfg.MaxBufferedBytes:
		err = plainErr("open transactions hold " + strconv.FormatInt(m.buffered, 10) +
			" message bytes, tx_max_buffered_bytes is " + strconv.FormatInt(cfg.MaxBufferedBytes, 10) + "; the put is refused")
		tr = nil
	}
	if tr == nil {
		m.mu.Unlock()
		return 0, err
	}
	e.ID = m.host.NextID()
	e.Data = append([]byte(nil), e.Data...)
	tm := txMsg{t: tp, l: l, p: p, e: e}
	var head [128]byte
	if _, err := m.j.write2(tr, txRecAppend, appendTxAppendHead(head[:0], key, &tm), tm.e.Data); err != nil {
		m.mu.Unlock()
		return 0, plainErr("transaction " + key + ": " + err.Error())
	}
	tr.msgs = append(tr.msgs, tm)
	tr.bytes += n
	m.buffered += n
	m.mu.Unlock()
	return e.ID, nil
}

// countdown counts the appends of a commit still to complete, with their
// errors (mu also guards what its owner adds).
type countdown struct {
	mu   sync.Mutex
	left int
	errs []string
}

// done notes one completed append and reports whether it was the last.
func (d *countdown) done(err error) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.errs = append(d.errs, err.Error())
	}
	d.left--
	return d.left == 0
}

// txCommit is one commit whose batches are being appended: it answers
// when the last one is done.
type txCommit struct {
	m      *Manager
	s      *Session
	t      *tx
	opaque int32
	heur   bool // an admin's heuristic commit: recorded as such
	logs   []*store.Log
	// batches are counted in the topics' in-counters once stored.
	batches []*txBatch
	flush   bool // a batch went to a threshold-mode partition: finish flushes it
	countdown
	// slaveErr: a sync master's slave failed the shipped commit
	// (repl.go).
	slaveErr error
}

// AppendDone implements store.Waiter for one partition's batch.
func (tc *txCommit) AppendDone(token uint64, _, _ int64, err error) {
	if tc.done(err) {
		if tc.heur || tc.flush || tc.m.j.releaseSyncs(tc.t) {
			// Not on the caller's goroutine, the store's completer:
			// finishing fsyncs (a threshold-mode partition, the
			// heuristic record, or the journal before old files go).
			go tc.finish()
			return
		}
		tc.finish()
	}
}

func (tc *txCommit) finish() {
	m := tc.m
	if len(tc.errs) == 0 {
		// Threshold-mode partitions: the batches must be durable before
		// the journal may forget the transaction.
		for _, l := range tc.logs {
			if err := l.Flush(); err != nil {
				tc.errs = append(tc.errs, err.Error())
			}
		}
	}
	m.mu.Lock()
	tc.t.state = txDone
	m.unregisterLocked(tc.t)
	tc.t.msgs = nil
	if len(tc.errs) == 0 {
		m.journalEnd(tc.t, txRecDone)
	}
	var heurPos int64
	if tc.heur {
		out := heurCommitted
		if len(tc.errs) > 0 {
			out = heurHazard
		}
		heurPos = m.recordHeuristicLocked(tc.t.key, out)
	}
	m.mu.Unlock()
	tc.s.peer.TxPending(-1)
	if tc.heur {
		if err := m.j.force(heurPos); err != nil {
			tc.errs = append(tc.errs, err.Error())
		}
	}
	if len(tc.errs) > 0 {
		// The commit record stays in the journal (the transaction keeps
		// its files): the next start completes the commit.
		msg := "commit of " + tc.t.key + " failed: " + strings.Join(tc.errs, "; ") + " (it is completed when the broker restarts)"
		m.logf("transaction %s", msg)
		tc.s.peer.TxDone(tc.opaque, "", tc.t.fail(protocol.XAErRMFail, oneLine(msg)))
		return
	}
	m.j.release(tc.t)
	m.commits.Add(1)
	m.countIn(tc.batches)
	if err := tc.replFailure(); err != nil { // repl.go
		m.logf("transaction %s", err.Error())
		tc.s.peer.TxDone(tc.opaque, "", tc.t.fail(protocol.XAErRMFail, oneLine(err.Error())))
		return
	}
	tc.s.peer.TxDone(tc.opaque, "", nil)
}

// txBatch is one partition's messages of a commit.
type txBatch struct {
	t       Topic
	l       *store.Log
	p       int32
	entries []store.Entry
}

// countIn adds a committed transaction's stored batches to their
// partitions' counters (metaq_topic_messages_in_total and
// bytes_in_total, the dashboard's rates), as a put's are counted when it
// is accepted.
func (m *Manager) countIn(batches []*txBatch) {
	for _, bt := range batches {
		var size int64
		for i := range bt.entries {
			size += int64(len(bt.entries[i].Data))
		}
		bt.t.CountIn(bt.p, len(bt.entries), size)
	}
}

// txBatches groups msgs by partition, in the order the partitions were
// first put to, each in put order.
func txBatches(msgs []txMsg) []*txBatch {
	var batches []*txBatch
	idx := map[*store.Log]*txBatch{}
	for i := range msgs {
		m := &msgs[i]
		bt := idx[m.l]
		if bt == nil {
			bt = &txBatch{t: m.t, l: m.l, p: m.p}
			idx[m.l] = bt
			batches = append(batches, bt)
		}
		bt.entries = append(bt.entries, m.e)
	}
	return batches
}

// CommitLocal commits local transaction key of s; the answer to opaque
// comes through s's Peer, once the batches are stored.
func (m *Manager) CommitLocal(s *Session, key string, opaque int32) {
	m.mu.Lock()
	t, err := s.lookupLocalLocked(key)
	if t == nil {
		m.mu.Unlock()
		s.peer.TxDone(opaque, "", err)
		return
	}
	m.startCommitLocked(s, t, opaque, false)
}

// fail is t's failure in its kind's form: an XA error (code) or a plain
// message.
func (t *tx) fail(code int, msg string) error {
	if t.xa {
		return xaErr(code, msg)
	}
	return plainErr(msg)
}

// startCommitLocked records t's commit, makes it durable and appends its
// batches; the answer comes when they are stored. The caller holds mu and
// has checked that t may commit; it is unlocked on return.
func (m *Manager) startCommitLocked(s *Session, t *tx, opaque int32, heur bool) {
	key := t.key
	msgs, timers, err := m.commitTimerMsgs(t.msgs, time.Now().UnixMilli()) // delayed.go
	if err != nil {
		m.mu.Unlock()
		s.peer.TxDone(opaque, "", t.fail(protocol.XAErRMFail, "commit of "+key+" refused: "+oneLine(err.Error())))
		return
	}
	batches := txBatches(msgs)
	sm := m.host.Master()
	if err := m.commitRefusal(sm, t, batches); err != nil { // repl.go
		m.mu.Unlock()
		s.peer.TxDone(opaque, "", t.fail(protocol.XAErRMFail, err.Error()))
		return
	}
	// One journal round, no commit record (atomic.go); not on a sync
	// master, whose commits ship their batches (appendCommitReplicated).
	if j := atomicJournal(t, batches, heur); j != nil && sm == nil {
		t.state = txCommitting
		if t.timer != nil {
			t.timer.Stop()
		}
		m.mu.Unlock()
		s.peer.TxPending(1)
		m.appendCommitAtomic(s, j, t, batches, opaque)
		return
	}
	locs := make([]txBatchLoc, len(batches))
	for i, bt := range batches {
		locs[i] = txBatchLoc{topic: bt.t.Name(), partition: bt.p, notBefore: bt.l.MaxOffset(),
			firstID: bt.entries[0].ID, n: len(bt.entries), crc: batchCRC(bt.entries)}
	}
	// The delayed messages' timer records go before the commit record, so
	// that a replay can complete their batches (delayed.go).
	var head [128]byte
	for i := range timers {
		tm := &timers[i]
		if _, err = m.j.write2(t, txRecAppend, appendTxAppendHead(head[:0], key, tm), tm.e.Data); err != nil {
			break
		}
	}
	var pos int64
	if err == nil {
		pos, err = m.j.write(t, txRecCommit, encodeTxCommit(key, locs))
	}
	if err != nil {
		m.mu.Unlock()
		s.peer.TxDone(opaque, "", t.fail(protocol.XAErRMFail, "commit of "+key+" refused: "+err.Error()))
		return
	}
	t.state = txCommitting
	if t.timer != nil {
		t.timer.Stop()
	}
	m.mu.Unlock()
	s.peer.TxPending(1)
	if m.j.mode == txFlushCommit {
		// The fsync is not waited for on the connection's goroutine: the
		// connection's next requests (other transactions' commits among
		// them) go on meanwhile, and commits that wait together share one
		// fsync (txLog.syncTo).
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.forceAndAppend(s, t, pos, batches, opaque, heur)
		}()
		return
	}
	m.forceAndAppend(s, t, pos, batches, opaque, heur)
}

// forceAndAppend makes t's commit record durable (as flush_tx_log_at_commit
// says), then appends its batches.
func (m *Manager) forceAndAppend(s *Session, t *tx, pos int64, batches []*txBatch, opaque int32, heur bool) {
	if err := m.j.force(pos); err != nil {
		// Not known to be durable: do not append (a replay may or may
		// not see the commit; if it does, it appends the batches).
		tc := &txCommit{m: m, s: s, t: t, opaque: opaque, heur: heur, countdown: countdown{left: 1}}
		tc.AppendDone(0, 0, 0, err)
		return
	}
	m.appendCommit(s, t, batches, opaque, heur)
}

// appendCommit appends a committed transaction's batches, one per
// partition, and answers when all are done.
func (m *Manager) appendCommit(s *Session, t *tx, batches []*txBatch, opaque int32, heur bool) {
	if sm := m.host.Master(); sm != nil {
		m.appendCommitReplicated(sm, s, t, batches, opaque, heur) // repl.go
		return
	}
	tc := &txCommit{m: m, s: s, t: t, opaque: opaque, heur: heur, countdown: countdown{left: len(batches) + 1}, batches: batches}
	for _, bt := range batches {
		tc.logs = append(tc.logs, bt.l)
		if bt.t.ThresholdFlush() {
			tc.flush = true
		}
	}
	for i, bt := range batches {
		if err := bt.l.Append(bt.entries, tc, uint64(i)); err != nil {
			m.host.AppendFailed(err)
			tc.AppendDone(uint64(i), 0, 0, fmt.Errorf("append to %s: %w", bt.l.Dir(), err))
		}
	}
	tc.AppendDone(0, 0, 0, nil) // the extra count: no answer before every Append was made
}

// journalEnd writes t's final record (rollback or done) and returns its
// journal position; the caller holds mu. A failure is logged: the journal
// then refuses every later transaction, and a replay of what it holds
// gives the same outcome (an unfinished local transaction is rolled back;
// a commit record without its done is completed).
func (m *Manager) journalEnd(t *tx, typ byte) int64 {
	if len(t.files) == 0 {
		return 0 // nothing of it is in the journal
	}
	pos, err := m.j.write(t, typ, appendStr(nil, t.key))
	if err != nil {
		m.errorf("transaction %s: %v", t.key, err)
	}
	return pos
}

// OpenTx is an open transaction as `stats transactions` shows it.
type OpenTx struct {
	Key      string
	XA       bool
	State    string
	Session  string
	Messages int
	Bytes    int64
	Began    time.Time
	Timeout  time.Duration
}

// HeuristicTx is a heuristically completed XA transaction: Outcome is
// committed, rolled_back or hazard.
type HeuristicTx struct{ Key, Outcome string }

// Status is the transactions' state for `stats transactions`.
type Status struct {
	// Open are the open transactions, oldest first.
	Open          []OpenTx
	BufferedBytes int64
	// Heuristic are the heuristic outcomes, by key.
	Heuristic []HeuristicTx
	// JournalSynced is how many bytes of journal records, since start,
	// the journal's last fsync covered.
	JournalSynced int64
}

// Status returns the open transactions and the heuristic outcomes.
func (m *Manager) Status() Status {
	var st Status
	m.mu.Lock()
	for t := range m.open {
		st.Open = append(st.Open, OpenTx{Key: t.key, XA: t.xa, State: t.state.String(), Session: t.session,
			Messages: len(t.msgs), Bytes: t.bytes, Began: t.began, Timeout: t.timeout})
	}
	st.BufferedBytes = m.buffered
	for key, e := range m.heur {
		st.Heuristic = append(st.Heuristic, HeuristicTx{Key: key, Outcome: e.out.short()})
	}
	m.mu.Unlock()
	st.JournalSynced = m.j.synced.Load()
	sort.Slice(st.Open, func(i, j int) bool { return st.Open[i].Began.Before(st.Open[j].Began) })
	sort.Slice(st.Heuristic, func(i, j int) bool { return st.Heuristic[i].Key < st.Heuristic[j].Key })
	return st
}

// showToken renders a client's token for stats and logs: as is when it is
// printable ASCII, else quoted with escapes.
func showToken(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return protocol.Printable([]byte(s))
		}
	}
	return s
}

// oneLine makes s fit on one reply line.
func oneLine(s string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
}

// StatsLines are the lines of `stats transactions` (the broker frames
// them): the open transactions, oldest first, then the heuristic
// outcomes.
func (st Status) StatsLines(now time.Time, line func(string)) {
	line(fmt.Sprintf("open %d buffered_bytes %d", len(st.Open), st.BufferedBytes))
	for _, t := range st.Open {
		kind := "local"
		if t.XA {
			kind = "xa"
		}
		line(fmt.Sprintf("%s type %s state %s session %s messages %d bytes %d age_ms %d timeout_s %d",
			t.Key, kind, t.State, t.Session, t.Messages, t.Bytes, now.Sub(t.Began).Milliseconds(), int64(t.Timeout/time.Second)))
	}
	line(fmt.Sprintf("heuristic %d", len(st.Heuristic)))
	for _, h := range st.Heuristic {
		line(h.Key + " type xa state heuristic_" + h.Outcome)
	}
}
