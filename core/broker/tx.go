package broker

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Transactions (reference §10, docs/protocol.md).
//
// A local transaction (key TX:<session>:<n>) lives in its connection: it
// is begun, filled and committed or rolled back there, and rolled back when
// the connection closes. Its messages are buffered in memory, bounded by
// tx_max_bytes per transaction and tx_max_buffered_bytes in all, invisible
// and taking no partition space until the commit appends each partition's
// messages as one batch, in put order, with the ids their puts were
// answered with. A transaction not committed within its timeout (the
// BEGIN's, capped at 60 s, or tx_default_timeout) is rolled back.
//
// XA transactions (XID keys, txxa.go) are the broker's: any connection
// of the same user (or an admin) may prepare, commit, roll back or
// recover them, and a connection closing does not end them.

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
// txSet.mu.
type tx struct {
	key     string // canonical key
	session string
	xa      bool
	// user is the authenticated user who began it ("" with auth off):
	// only they or an admin may use an XA transaction from another
	// connection.
	user    string
	owner   *conn // a local transaction's connection; nil for XA
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
	t *topic
	l *store.Log
	p int32
	e store.Entry // Data is the transaction's own copy; ID is the put's
}

// txSet is the broker's transactions: every open one, for stats, limits
// and timeouts; local ones are also in their connection's map.
type txSet struct {
	mu       sync.Mutex
	open     map[*tx]struct{}
	xa       map[string]*tx        // XA transactions by canonical key
	heur     map[string]*heurEntry // heuristically completed XA transactions (txxa.go)
	buffered int64                 // message bytes held by open transactions
	// held is, on a slave, the prepared branches it holds by the id of
	// each batch's first message (txreplslave.go): a batch the puller copies
	// ends its branch here.
	held  map[int64]*tx
	nheld atomic.Int64

	begins, xaBegins, commits, rollbacks atomic.Int64
}

// connTxs is a connection's local transactions by canonical key (under
// txSet.mu).
type connTxs map[string]*tx

// localErr replies a local transaction's error: a plain message.
func (c *conn) localErr(opaque int32, msg string) {
	c.reply(protocol.StatusInternalError, msg, opaque)
}

// xaErr replies an XA error: `XAException:code=<n>,msg=<m>`.
func (c *conn) xaErr(opaque int32, code int, msg string) {
	c.reply(protocol.StatusInternalError, protocol.XAErrorBody(code, msg), opaque)
}

func (c *conn) handleTransaction(r *protocol.Request) {
	if r.TxType == protocol.TxRecover {
		c.recoverXA(r) // txxa.go
		return
	}
	id, err := protocol.ParseTxKey(r.TxKey)
	if err != nil { // the decoder checked it; kept for safety
		c.reply(protocol.StatusBadRequest, err.Error(), r.Opaque)
		return
	}
	key := id.String()
	if id.XA {
		c.handleXA(r, key) // txxa.go
		return
	}
	switch r.TxType {
	case protocol.TxBegin:
		c.beginLocal(key, string(r.TxSession), r.TxTimeout, r.Opaque)
	case protocol.TxEnd:
		// MetaQ ignores END and sends no reply.
	case protocol.TxPrepare:
		c.xaErr(r.Opaque, protocol.XAErRMErr, "transaction "+key+" is local: it cannot be prepared")
	case protocol.TxCommitOnePhase, protocol.TxCommitTwoPhase:
		// As in MetaQ, a local transaction commits in one phase whichever
		// type the client sends.
		c.commitLocal(key, r.Opaque)
	case protocol.TxRollback:
		c.rollbackLocal(key, r.Opaque)
	case protocol.TxForget, protocol.TxHeuristicCommit, protocol.TxHeuristicRollback:
		c.localErr(r.Opaque, "transaction "+key+" is local: "+r.TxType.String()+" applies to XA transactions")
	default:
		c.reply(protocol.StatusBadRequest, "unexpected transaction type "+r.TxType.String(), r.Opaque)
	}
}

// txTimeout is the timeout of a transaction whose BEGIN asked for sec
// seconds (0 or less: none).
func (b *Broker) txTimeout(sec int64) time.Duration {
	if sec <= 0 {
		return time.Duration(b.config().TxDefaultTimeout) * time.Second
	}
	return time.Duration(min(sec, conf.MaxTxTimeout)) * time.Second
}

func (c *conn) beginLocal(key, session string, timeoutSec int64, opaque int32) {
	b := c.b
	s := &b.txs
	s.mu.Lock()
	if c.closing {
		s.mu.Unlock()
		return
	}
	if _, ok := c.txs[key]; ok {
		s.mu.Unlock()
		c.localErr(opaque, "transaction "+key+" is already begun on this connection")
		return
	}
	t := &tx{key: key, session: showToken(session), owner: c, began: time.Now(), timeout: b.txTimeout(timeoutSec)}
	if c.txs == nil {
		c.txs = make(connTxs)
	}
	if s.open == nil {
		s.open = make(map[*tx]struct{})
	}
	c.txs[key] = t
	s.open[t] = struct{}{}
	t.timer = time.AfterFunc(t.timeout, func() { b.expireTx(t) })
	s.mu.Unlock()
	s.begins.Add(1)
	c.reply(protocol.StatusOK, "", opaque)
}

// unregisterLocked removes t from the broker and its connection and frees
// its buffered bytes; the caller holds txSet.mu and sets t's new state.
func (s *txSet) unregisterLocked(t *tx) {
	if t.timer != nil {
		t.timer.Stop()
	}
	delete(s.open, t)
	if t.xa && s.xa[t.key] == t {
		delete(s.xa, t.key)
	}
	if t.owner != nil && t.owner.txs[t.key] == t {
		delete(t.owner.txs, t.key)
	}
	s.buffered -= t.bytes
}

// stopTimers stops every open transaction's timeout, for Close: what is
// open stays in the journal (local and unprepared XA ones are rolled back
// by the next start, prepared ones rebuilt).
func (s *txSet) stopTimers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t := range s.open {
		if t.timer != nil {
			t.timer.Stop()
		}
	}
}

// expireTx rolls back t if it is still active when its timeout passes.
func (b *Broker) expireTx(t *tx) {
	s := &b.txs
	s.mu.Lock()
	if t.state != txActive {
		s.mu.Unlock()
		return
	}
	t.state = txDone
	s.unregisterLocked(t)
	n := len(t.msgs)
	t.msgs = nil
	b.journalEnd(t, txRecRollback)
	s.mu.Unlock()
	b.txlog.release(t)
	s.rollbacks.Add(1)
	b.logf("transaction %s: not committed within %v, rolled back (%d messages dropped)", t.key, t.timeout, n)
}

// rollbackConnTxs rolls back the local transactions of a closing
// connection.
func (c *conn) rollbackConnTxs() {
	s := &c.b.txs
	s.mu.Lock()
	c.closing = true
	var rolled []*tx
	for _, t := range c.txs {
		if t.state != txActive {
			continue
		}
		t.state = txDone
		s.unregisterLocked(t)
		t.msgs = nil
		c.b.journalEnd(t, txRecRollback)
		rolled = append(rolled, t)
	}
	s.mu.Unlock()
	for _, t := range rolled {
		c.b.txlog.release(t)
		s.rollbacks.Add(1)
		c.b.logf("transaction %s: connection closed, rolled back", t.key)
	}
}

// lookupLocalLocked returns the connection's active local transaction key, or
// replies why there is none. The caller holds txSet.mu.
func (c *conn) lookupLocalLocked(key string) (*tx, string) {
	t := c.txs[key]
	if t == nil {
		return nil, "transaction " + key + " is not begun on this connection (or was rolled back: timed out)"
	}
	if t.state != txActive {
		return nil, "transaction " + key + " is " + t.state.String()
	}
	return t, ""
}

func (c *conn) rollbackLocal(key string, opaque int32) {
	s := &c.b.txs
	s.mu.Lock()
	t, msg := c.lookupLocalLocked(key)
	var pos int64
	if t != nil {
		t.state = txDone
		s.unregisterLocked(t)
		t.msgs = nil
		pos = c.b.journalEnd(t, txRecRollback)
	}
	s.mu.Unlock()
	if t == nil {
		c.localErr(opaque, msg)
		return
	}
	err := c.b.txlog.force(pos)
	c.b.txlog.release(t)
	s.rollbacks.Add(1)
	if err != nil {
		// The rollback stands (nothing was appended); only its record may
		// be lost, and a replay rolls the transaction back anyway.
		c.b.errorf("transaction %s: rollback record: %v", key, err)
	}
	c.reply(protocol.StatusOK, "", opaque)
}

// handleTxPut buffers a transactional put in its transaction.
func (c *conn) handleTxPut(r *protocol.Request) {
	b := c.b
	id, err := protocol.ParseTxKey(r.TxKey)
	if err != nil {
		c.putFail(r.Opaque, err.Error())
		return
	}
	if r.Partition < 0 {
		c.putFail(r.Opaque, "a transactional put must name its partition (got "+strconv.Itoa(int(r.Partition))+")")
		return
	}
	t, l, p, crc, ok := c.checkPut(r)
	if !ok {
		return
	}
	key := id.String()
	n := int64(len(r.Body))
	s := &b.txs
	s.mu.Lock()
	var tr *tx
	var msg string
	if id.XA {
		tr, msg = c.lookupXAPutLocked(key)
	} else {
		tr, msg = c.lookupLocalLocked(key)
	}
	switch {
	case tr == nil:
	case tr.bytes+n > b.config().TxMaxBytes:
		msg = "transaction " + key + " would hold " + strconv.FormatInt(tr.bytes+n, 10) +
			" message bytes, over tx_max_bytes " + strconv.FormatInt(b.config().TxMaxBytes, 10) + "; the put is refused"
		tr = nil
	case s.buffered+n > b.config().TxMaxBufferedBytes:
		msg = "open transactions hold " + strconv.FormatInt(s.buffered, 10) +
			" message bytes, tx_max_buffered_bytes is " + strconv.FormatInt(b.config().TxMaxBufferedBytes, 10) + "; the put is refused"
		tr = nil
	}
	if tr == nil {
		s.mu.Unlock()
		c.putFail(r.Opaque, msg)
		return
	}
	msgID := b.ids.Next(1)
	m := txMsg{t: t, l: l, p: p, e: store.Entry{ID: msgID, Flag: r.Flag, CRC: crc, Data: append([]byte(nil), r.Body...)}}
	var head [128]byte
	if _, err := b.txlog.write2(tr, txRecAppend, appendTxAppendHead(head[:0], key, &m), m.e.Data); err != nil {
		s.mu.Unlock()
		c.putFail(r.Opaque, "transaction "+key+": "+err.Error())
		return
	}
	tr.msgs = append(tr.msgs, m)
	tr.bytes += n
	s.buffered += n
	s.mu.Unlock()
	if t.conf().Stat {
		t.rt.put.add(1)
		t.rt.size.add(n)
	}
	var body [64]byte
	c.replyBytes(protocol.StatusOK, protocol.AppendPutResultBody(body[:0], msgID, p, -1), r.Opaque)
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

// txCommit is one commit whose batches are being appended: it replies when
// the last one is done.
type txCommit struct {
	c      *conn
	t      *tx
	opaque int32
	heur   bool // an admin's heuristic commit: recorded as such
	logs   []*store.Log
	// batches are counted in the topics' in-counters once stored.
	batches []*txBatch
	flush   bool // a batch went to a threshold-mode partition: finish flushes it
	countdown
	// slaveErr: a sync master's slave failed the shipped commit
	// (txrepl.go).
	slaveErr error
}

// AppendDone implements store.Waiter for one partition's batch.
func (tc *txCommit) AppendDone(token uint64, _, _ int64, err error) {
	if tc.done(err) {
		if tc.heur || tc.flush || tc.c.b.txlog.releaseSyncs(tc.t) {
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
	c := tc.c
	b := c.b
	s := &b.txs
	if len(tc.errs) == 0 {
		// Threshold-mode partitions: the batches must be durable before
		// the journal may forget the transaction.
		for _, l := range tc.logs {
			if err := l.Flush(); err != nil {
				tc.errs = append(tc.errs, err.Error())
			}
		}
	}
	s.mu.Lock()
	tc.t.state = txDone
	s.unregisterLocked(tc.t)
	tc.t.msgs = nil
	if len(tc.errs) == 0 {
		b.journalEnd(tc.t, txRecDone)
	}
	var heurPos int64
	if tc.heur {
		out := heurCommitted
		if len(tc.errs) > 0 {
			out = heurHazard
		}
		heurPos = b.recordHeuristicLocked(tc.t.key, out)
	}
	s.mu.Unlock()
	c.addPending(-1)
	if tc.heur {
		if err := b.txlog.force(heurPos); err != nil {
			tc.errs = append(tc.errs, err.Error())
		}
	}
	if len(tc.errs) > 0 {
		// The commit record stays in the journal (the transaction keeps
		// its files): the next start completes the commit.
		msg := "commit of " + tc.t.key + " failed: " + strings.Join(tc.errs, "; ") + " (it is completed when the broker restarts)"
		b.logf("transaction %s", msg)
		c.txFail(tc.t, tc.opaque, protocol.XAErRMFail, oneLine(msg))
		return
	}
	b.txlog.release(tc.t)
	s.commits.Add(1)
	countTxIn(tc.batches)
	if msg := tc.replFailure(); msg != "" { // txrepl.go
		b.logf("transaction %s", msg)
		c.txFail(tc.t, tc.opaque, protocol.XAErRMFail, oneLine(msg))
		return
	}
	c.reply(protocol.StatusOK, "", tc.opaque)
}

// txBatch is one partition's messages of a commit.
type txBatch struct {
	t       *topic
	l       *store.Log
	p       int32
	entries []store.Entry
}

// countTxIn adds a committed transaction's stored batches to their
// partitions' in-counters (metaq_topic_messages_in_total and
// bytes_in_total, the dashboard's rates), as a put's are counted when it
// is accepted.
func countTxIn(batches []*txBatch) {
	for _, bt := range batches {
		var size int64
		for i := range bt.entries {
			size += int64(len(bt.entries[i].Data))
		}
		if int(bt.p) < len(bt.t.pc) {
			pc := &bt.t.pc[bt.p]
			pc.msgsIn.Add(int64(len(bt.entries)))
			pc.bytesIn.Add(size)
		}
		if bt.t.conf().Stat {
			bt.t.rt.put.add(int64(len(bt.entries)))
			bt.t.rt.size.add(size)
		}
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

func (c *conn) commitLocal(key string, opaque int32) {
	s := &c.b.txs
	s.mu.Lock()
	t, msg := c.lookupLocalLocked(key)
	if t == nil {
		s.mu.Unlock()
		c.localErr(opaque, msg)
		return
	}
	c.startCommitLocked(t, opaque, false)
}

// txFail replies a transaction's failure in its kind's form: an XA error
// (code) or a plain message.
func (c *conn) txFail(t *tx, opaque int32, code int, msg string) {
	if t.xa {
		c.xaErr(opaque, code, msg)
	} else {
		c.localErr(opaque, msg)
	}
}

// startCommitLocked records t's commit, makes it durable and appends its
// batches; the reply comes when they are stored. The caller holds txSet.mu
// and has checked that t may commit; it is unlocked on return.
func (c *conn) startCommitLocked(t *tx, opaque int32, heur bool) {
	b := c.b
	s := &b.txs
	key := t.key
	batches := txBatches(t.msgs)
	if msg := c.txCommitRefusal(t, batches); msg != "" { // txrepl.go
		s.mu.Unlock()
		c.txFail(t, opaque, protocol.XAErRMFail, msg)
		return
	}
	// One journal round, no commit record (txatomic.go); not on a sync
	// master, whose commits ship their batches (appendCommitReplicated).
	if j := atomicJournal(t, batches, heur); j != nil && b.syncActive() == nil {
		t.state = txCommitting
		if t.timer != nil {
			t.timer.Stop()
		}
		s.mu.Unlock()
		c.addPending(1)
		c.appendCommitAtomic(j, t, batches, opaque)
		return
	}
	locs := make([]txBatchLoc, len(batches))
	for i, bt := range batches {
		locs[i] = txBatchLoc{topic: bt.t.name, partition: bt.p, notBefore: bt.l.MaxOffset(),
			firstID: bt.entries[0].ID, n: len(bt.entries), crc: batchCRC(bt.entries)}
	}
	pos, err := b.txlog.write(t, txRecCommit, encodeTxCommit(key, locs))
	if err != nil {
		s.mu.Unlock()
		c.txFail(t, opaque, protocol.XAErRMFail, "commit of "+key+" refused: "+err.Error())
		return
	}
	t.state = txCommitting
	if t.timer != nil {
		t.timer.Stop()
	}
	s.mu.Unlock()
	c.addPending(1)
	if b.txlog.mode == txFlushCommit {
		// The fsync is not waited for on the connection's goroutine: the
		// connection's next requests (other transactions' commits among
		// them) go on meanwhile, and commits that wait together share one
		// fsync (txLog.syncTo).
		b.wg.Add(1) // from the connection's goroutine, itself counted: Close waits for it
		go func() {
			defer b.wg.Done()
			c.forceAndAppend(t, pos, batches, opaque, heur)
		}()
		return
	}
	c.forceAndAppend(t, pos, batches, opaque, heur)
}

// forceAndAppend makes t's commit record durable (as flush_tx_log_at_commit
// says), then appends its batches.
func (c *conn) forceAndAppend(t *tx, pos int64, batches []*txBatch, opaque int32, heur bool) {
	if err := c.b.txlog.force(pos); err != nil {
		// Not known to be durable: do not append (a replay may or may
		// not see the commit; if it does, it appends the batches).
		tc := &txCommit{c: c, t: t, opaque: opaque, heur: heur, countdown: countdown{left: 1}}
		tc.AppendDone(0, 0, 0, err)
		return
	}
	c.appendCommit(t, batches, opaque, heur)
}

// appendCommit appends a committed transaction's batches, one per
// partition, and replies when all are done.
func (c *conn) appendCommit(t *tx, batches []*txBatch, opaque int32, heur bool) {
	if sm := c.b.syncActive(); sm != nil {
		c.appendCommitReplicated(sm, t, batches, opaque, heur) // txrepl.go
		return
	}
	tc := &txCommit{c: c, t: t, opaque: opaque, heur: heur, countdown: countdown{left: len(batches) + 1}, batches: batches}
	for _, bt := range batches {
		tc.logs = append(tc.logs, bt.l)
		if bt.t.conf().UnflushThreshold > 0 {
			tc.flush = true
		}
	}
	for i, bt := range batches {
		if err := bt.l.Append(bt.entries, tc, uint64(i)); err != nil {
			c.b.disks.wakeOn(err)
			tc.AppendDone(uint64(i), 0, 0, fmt.Errorf("append to %s: %w", bt.l.Dir(), err))
		}
	}
	tc.AppendDone(0, 0, 0, nil) // the extra count: no reply before every Append was made
}

// journalEnd writes t's final record (rollback or done) and returns its
// journal position; the caller holds txSet.mu. A failure is logged: the
// journal then refuses every later transaction, and a replay of what it
// holds gives the same outcome (an unfinished local transaction is
// rolled back; a commit record without its done is completed).
func (b *Broker) journalEnd(t *tx, typ byte) int64 {
	if len(t.files) == 0 {
		return 0 // nothing of it is in the journal
	}
	pos, err := b.txlog.write(t, typ, appendStr(nil, t.key))
	if err != nil {
		b.errorf("transaction %s: %v", t.key, err)
	}
	return pos
}

// writeTxStats answers `stats transactions`: one line per open transaction,
// oldest first.
func (b *Broker) writeTxStats(sb *strings.Builder) {
	type line struct {
		began time.Time
		text  string
	}
	var lines []line
	now := time.Now()
	s := &b.txs
	s.mu.Lock()
	for t := range s.open {
		kind := "local"
		if t.xa {
			kind = "xa"
		}
		lines = append(lines, line{t.began, fmt.Sprintf("%s type %s state %s session %s messages %d bytes %d age_ms %d timeout_s %d\r\n",
			t.key, kind, t.state, t.session, len(t.msgs), t.bytes, now.Sub(t.began).Milliseconds(), int64(t.timeout/time.Second))})
	}
	buffered := s.buffered
	var heur []string
	for key, e := range s.heur {
		heur = append(heur, key+" type xa state heuristic_"+e.out.short()+"\r\n")
	}
	s.mu.Unlock()
	sort.Slice(lines, func(i, j int) bool { return lines[i].began.Before(lines[j].began) })
	sort.Strings(heur)
	sb.WriteString("STATS\r\n")
	fmt.Fprintf(sb, "open %d buffered_bytes %d\r\n", len(lines), buffered)
	for _, l := range lines {
		sb.WriteString(l.text)
	}
	fmt.Fprintf(sb, "heuristic %d\r\n", len(heur))
	for _, l := range heur {
		sb.WriteString(l)
	}
	sb.WriteString("END\r\n")
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
