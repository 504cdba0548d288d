package broker

import (
	"sort"
	"strings"
	"time"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// XA transactions (reference §10): broker-wide, keyed by their canonical
// XID key. BEGIN, puts and PREPARE usually come from one connection, but
// COMMIT_TWO_PHASE, ROLLBACK and RECOVER may come from any (a coordinator
// recovering after a crash). With auth on, only the user who began the
// transaction, or an admin, may touch it or see it in RECOVER.

// heurOut is the outcome of a heuristically completed XA transaction.
type heurOut uint8

const (
	heurCommitted heurOut = iota + 1
	heurRolledBack
	heurHazard
)

func (h heurOut) String() string {
	switch h {
	case heurCommitted:
		return "committed"
	case heurRolledBack:
		return "rolled back"
	}
	return "completed (outcome unknown)"
}

// short names the outcome in stats: committed, rolled_back, hazard.
func (h heurOut) short() string {
	switch h {
	case heurCommitted:
		return "committed"
	case heurRolledBack:
		return "rolled_back"
	}
	return "hazard"
}

// code is the XA error a later commit or rollback gets.
func (h heurOut) code() int {
	switch h {
	case heurCommitted:
		return protocol.XAHeurCom
	case heurRolledBack:
		return protocol.XAHeurRB
	}
	return protocol.XAHeurHaz
}

// heurEntry is a heuristic outcome; hold references the journal file of
// its record.
type heurEntry struct {
	out  heurOut
	hold *tx
}

// recordHeuristicLocked records key's heuristic outcome in the journal and
// in the heuristic list, and returns the record's position (0 if the
// journal failed, which is logged). The caller holds txSet.mu.
func (b *Broker) recordHeuristicLocked(key string, out heurOut) int64 {
	s := &b.txs
	if s.heur == nil {
		s.heur = make(map[string]*heurEntry)
	}
	e := &heurEntry{out: out, hold: &tx{key: key}}
	pos, err := b.txlog.write(e.hold, txRecHeuristic, encodeTxHeuristic(key, out))
	if err != nil {
		b.errorf("transaction %s: heuristic record: %v", key, err)
	}
	s.heur[key] = e
	b.logf("transaction %s: heuristically %s", key, out)
	return pos
}

// userName is the connection's authenticated user, "" with auth off.
func (c *conn) userName() string {
	if c.auth.user != nil {
		return c.auth.user.Name
	}
	return ""
}

// mayUse reports whether the connection's user may act on t.
func (c *conn) mayUse(t *tx) bool {
	if !c.b.config().Auth.Enabled {
		return true
	}
	u := c.auth.user
	return u != nil && (u.Admin || u.Name == t.user)
}

// lookupXALocked returns the XA transaction key, or the XA error code and
// message why it cannot be used (unknown, heuristically completed,
// another user's). The caller holds txSet.mu and checks the state.
func (c *conn) lookupXALocked(key string) (*tx, int, string) {
	s := &c.b.txs
	t := s.xa[key]
	if t == nil {
		if h, ok := s.heur[key]; ok {
			return nil, h.out.code(), "transaction " + key + " was heuristically " + h.out.String()
		}
		return nil, protocol.XAErNotA, "unknown XID " + key
	}
	if !c.mayUse(t) {
		return nil, protocol.XAErRMErr, "transaction " + key + " belongs to another user"
	}
	return t, 0, ""
}

// lookupXAPutLocked is lookupXALocked for a put: the transaction must be
// active. The message is the reply body.
func (c *conn) lookupXAPutLocked(key string) (*tx, string) {
	t, code, msg := c.lookupXALocked(key)
	if t != nil && t.state != txActive {
		t, code, msg = nil, protocol.XAErProto, "transaction "+key+" is "+t.state.String()+": it takes no more messages"
	}
	if t == nil {
		return nil, protocol.XAErrorBody(code, msg)
	}
	return t, ""
}

func (c *conn) handleXA(r *protocol.Request, key string) {
	b := c.b
	s := &b.txs
	op := r.Opaque
	if r.TxType == protocol.TxEnd {
		return // MetaQ ignores END and sends no reply
	}
	s.mu.Lock()
	if r.TxType == protocol.TxBegin {
		if _, ok := s.xa[key]; ok {
			s.mu.Unlock()
			c.xaErr(op, protocol.XAErDupID, "transaction "+key+" already exists")
			return
		}
		if _, ok := s.heur[key]; ok {
			s.mu.Unlock()
			c.xaErr(op, protocol.XAErDupID, "transaction "+key+" was heuristically completed and not forgotten")
			return
		}
		t := &tx{key: key, xa: true, user: c.userName(), session: showToken(string(r.TxSession)),
			began: time.Now(), timeout: b.txTimeout(r.TxTimeout)}
		if s.xa == nil {
			s.xa = make(map[string]*tx)
		}
		if s.open == nil {
			s.open = make(map[*tx]struct{})
		}
		s.xa[key] = t
		s.open[t] = struct{}{}
		t.timer = time.AfterFunc(t.timeout, func() { b.expireTx(t) })
		s.mu.Unlock()
		s.xaBegins.Add(1)
		c.reply(protocol.StatusOK, "", op)
		return
	}
	if r.TxType == protocol.TxForget {
		c.forgetLocked(key, op) // unlocks
		return
	}
	t, code, msg := c.lookupXALocked(key)
	if t == nil {
		s.mu.Unlock()
		c.xaErr(op, code, msg)
		return
	}
	switch r.TxType {
	case protocol.TxPrepare:
		if t.state != txActive {
			s.mu.Unlock()
			c.xaErr(op, protocol.XAErProto, "transaction "+key+" is "+t.state.String()+": it cannot be prepared")
			return
		}
		if len(t.msgs) == 0 {
			// Read-only: nothing to commit, the branch is over.
			t.state = txDone
			s.unregisterLocked(t)
			s.mu.Unlock()
			c.reply(protocol.StatusOK, "3", op)
			return
		}
		pos, err := b.txlog.write(t, txRecPrepare, encodeTxPrepare(key, t.user))
		if err != nil {
			s.mu.Unlock()
			c.xaErr(op, protocol.XAErRMFail, "prepare of "+key+": "+err.Error())
			return
		}
		t.state = txPrepared
		t.timer.Stop()
		s.mu.Unlock()
		c.finishPrepare(t, pos, op) // txrepl.go: durable here (and on a sync master's slave)
	case protocol.TxCommitOnePhase:
		if t.state != txActive {
			s.mu.Unlock()
			c.xaErr(op, protocol.XAErProto, "transaction "+key+" is "+t.state.String()+": it cannot be committed in one phase")
			return
		}
		c.startCommitLocked(t, op, false)
	case protocol.TxCommitTwoPhase:
		if t.state != txPrepared {
			s.mu.Unlock()
			c.xaErr(op, protocol.XAErProto, "transaction "+key+" is "+t.state.String()+", not prepared: it cannot be committed in two phases")
			return
		}
		c.startCommitLocked(t, op, false)
	case protocol.TxHeuristicCommit:
		if t.state != txActive && t.state != txPrepared {
			s.mu.Unlock()
			c.xaErr(op, protocol.XAErProto, "transaction "+key+" is "+t.state.String()+": it cannot be committed heuristically")
			return
		}
		c.connAudit(auditHeuristic, "xid", key, "outcome", "commit", "state", t.state.String()) // audit.go
		c.startCommitLocked(t, op, true)
	case protocol.TxRollback, protocol.TxHeuristicRollback:
		if t.state != txActive && t.state != txPrepared {
			s.mu.Unlock()
			c.xaErr(op, protocol.XAErProto, "transaction "+key+" is "+t.state.String()+": it cannot be rolled back")
			return
		}
		if msg := c.txRollbackRefusal(t); msg != "" { // txrepl.go
			s.mu.Unlock()
			c.xaErr(op, protocol.XAErRMFail, msg)
			return
		}
		wasPrepared := t.state == txPrepared
		t.state = txDone
		s.unregisterLocked(t)
		t.msgs = nil
		pos := b.journalEnd(t, txRecRollback)
		if r.TxType == protocol.TxHeuristicRollback {
			pos = max(pos, b.recordHeuristicLocked(key, heurRolledBack))
			c.connAudit(auditHeuristic, "xid", key, "outcome", "rollback", "prepared", wasPrepared) // audit.go
		}
		s.mu.Unlock()
		err := b.txlog.force(pos)
		b.txlog.release(t)
		s.rollbacks.Add(1)
		if err != nil {
			b.errorf("transaction %s: rollback record: %v", key, err)
		}
		if wasPrepared {
			c.shipRollback(key) // txrepl.go
		}
		c.reply(protocol.StatusOK, "", op)
	default:
		s.mu.Unlock()
		c.reply(protocol.StatusBadRequest, "unexpected transaction type "+r.TxType.String(), op)
	}
}

// forgetLocked answers FORGET: a heuristically completed transaction is
// removed from the heuristic list. The caller holds txSet.mu; it is
// unlocked on return.
func (c *conn) forgetLocked(key string, op int32) {
	b := c.b
	s := &b.txs
	if _, ok := s.heur[key]; !ok {
		s.mu.Unlock()
		c.xaErr(op, protocol.XAErNotA, "transaction "+key+" was not heuristically completed")
		return
	}
	e := s.heur[key]
	pos, err := b.txlog.write(nil, txRecForget, appendStr(nil, key))
	if err == nil {
		delete(s.heur, key)
	}
	s.mu.Unlock()
	if err == nil {
		err = b.txlog.force(pos)
		b.txlog.release(e.hold)
	}
	if err != nil {
		c.xaErr(op, protocol.XAErRMFail, "forget of "+key+": "+err.Error())
		return
	}
	c.reply(protocol.StatusOK, "", op)
}

// recoverXA answers RECOVER: the keys of the prepared and the
// heuristically completed XA transactions, joined by "\r\n", sorted; with a
// qualifier, only those whose XID has it; with auth on, only the user's
// own (all for an admin).
func (c *conn) recoverXA(r *protocol.Request) {
	s := &c.b.txs
	var keys []string
	match := func(key string) bool {
		if r.TxQualifier == nil {
			return true
		}
		id, err := protocol.ParseTxKey([]byte(key))
		return err == nil && id.Qualifier == string(r.TxQualifier)
	}
	s.mu.Lock()
	for key, t := range s.xa {
		if t.state == txPrepared && match(key) && c.mayUse(t) {
			keys = append(keys, key)
		}
	}
	for key := range s.heur {
		if match(key) && (!c.b.config().Auth.Enabled || c.auth.user != nil && c.auth.user.Admin) {
			keys = append(keys, key)
		}
	}
	s.mu.Unlock()
	sort.Strings(keys)
	c.reply(protocol.StatusOK, strings.Join(keys, "\r\n"), r.Opaque)
}
