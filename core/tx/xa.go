package tx

import (
	"sort"
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
// journal failed, which is logged). The caller holds mu.
func (m *Manager) recordHeuristicLocked(key string, out heurOut) int64 {
	e := &heurEntry{out: out, hold: &tx{key: key}}
	pos, err := m.j.write(e.hold, txRecHeuristic, encodeTxHeuristic(key, out))
	if err != nil {
		m.errorf("transaction %s: heuristic record: %v", key, err)
	}
	m.heur[key] = e
	m.logf("transaction %s: heuristically %s", key, out)
	return pos
}

// mayUse reports whether s's user may act on t.
func (m *Manager) mayUse(s *Session, t *tx) bool {
	if !m.config().Auth {
		return true
	}
	name, admin := s.peer.TxUser()
	return name != "" && (admin || name == t.user)
}

// lookupXALocked returns the XA transaction key, or the XA error why it
// cannot be used (unknown, heuristically completed, another user's). The
// caller holds mu and checks the state.
func (m *Manager) lookupXALocked(s *Session, key string) (*tx, error) {
	t := m.xa[key]
	if t == nil {
		if h, ok := m.heur[key]; ok {
			return nil, xaErr(h.out.code(), "transaction "+key+" was heuristically "+h.out.String())
		}
		return nil, xaErr(protocol.XAErNotA, "unknown XID "+key)
	}
	if !m.mayUse(s, t) {
		return nil, xaErr(protocol.XAErRMErr, "transaction "+key+" belongs to another user")
	}
	return t, nil
}

// lookupXAPutLocked is lookupXALocked for a put: the transaction must be
// active.
func (m *Manager) lookupXAPutLocked(s *Session, key string) (*tx, error) {
	t, err := m.lookupXALocked(s, key)
	if t != nil && t.state != txActive {
		return nil, xaErr(protocol.XAErProto, "transaction "+key+" is "+t.state.String()+": it takes no more messages")
	}
	return t, err
}

// BeginXA begins XA transaction key for s's user.
func (m *Manager) BeginXA(s *Session, key, session string, timeoutSec int64) error {
	m.mu.Lock()
	if _, ok := m.xa[key]; ok {
		m.mu.Unlock()
		return xaErr(protocol.XAErDupID, "transaction "+key+" already exists")
	}
	if _, ok := m.heur[key]; ok {
		m.mu.Unlock()
		return xaErr(protocol.XAErDupID, "transaction "+key+" was heuristically completed and not forgotten")
	}
	user, _ := s.peer.TxUser()
	t := &tx{key: key, xa: true, user: user, session: showToken(session),
		began: time.Now(), timeout: m.timeoutOf(timeoutSec)}
	m.xa[key] = t
	m.open[t] = struct{}{}
	t.timer = time.AfterFunc(t.timeout, func() { m.expire(t) })
	m.mu.Unlock()
	m.xaBegins.Add(1)
	return nil
}

// Prepare prepares XA transaction key and returns PREPARE's answer: "0"
// (prepared, durably here and on a sync master's slave) or "3" (read-only:
// nothing to commit, the branch is over).
func (m *Manager) Prepare(s *Session, key string) (string, error) {
	m.mu.Lock()
	t, err := m.lookupXALocked(s, key)
	if t == nil {
		m.mu.Unlock()
		return "", err
	}
	if t.state != txActive {
		m.mu.Unlock()
		return "", xaErr(protocol.XAErProto, "transaction "+key+" is "+t.state.String()+": it cannot be prepared")
	}
	if len(t.msgs) == 0 {
		t.state = txDone
		m.unregisterLocked(t)
		m.mu.Unlock()
		return "3", nil
	}
	pos, err := m.j.write(t, txRecPrepare, encodeTxPrepare(key, t.user))
	if err != nil {
		m.mu.Unlock()
		return "", xaErr(protocol.XAErRMFail, "prepare of "+key+": "+err.Error())
	}
	t.state = txPrepared
	t.timer.Stop()
	m.mu.Unlock()
	if err := m.finishPrepare(t, pos); err != nil { // repl.go
		return "", err
	}
	return "0", nil
}

// How is how an XA transaction is committed.
type How uint8

const (
	OnePhase        How = iota + 1 // COMMIT_ONE_PHASE: from active
	TwoPhase                       // COMMIT_TWO_PHASE: from prepared
	HeuristicCommit                // HEURISTIC_COMMIT (an admin's): from active or prepared, recorded as such
)

// CommitXA commits XA transaction key; the answer to opaque comes through
// s's Peer, once the batches are stored.
func (m *Manager) CommitXA(s *Session, key string, how How, opaque int32) {
	m.mu.Lock()
	t, err := m.lookupXALocked(s, key)
	if t == nil {
		m.mu.Unlock()
		s.peer.TxDone(opaque, "", err)
		return
	}
	var refusal string
	switch how {
	case OnePhase:
		if t.state != txActive {
			refusal = "transaction " + key + " is " + t.state.String() + ": it cannot be committed in one phase"
		}
	case TwoPhase:
		if t.state != txPrepared {
			refusal = "transaction " + key + " is " + t.state.String() + ", not prepared: it cannot be committed in two phases"
		}
	case HeuristicCommit:
		if t.state != txActive && t.state != txPrepared {
			refusal = "transaction " + key + " is " + t.state.String() + ": it cannot be committed heuristically"
		}
	}
	if refusal != "" {
		m.mu.Unlock()
		s.peer.TxDone(opaque, "", xaErr(protocol.XAErProto, refusal))
		return
	}
	if how == HeuristicCommit {
		s.peer.TxHeuristic("xid", key, "outcome", "commit", "state", t.state.String())
	}
	m.startCommitLocked(s, t, opaque, how == HeuristicCommit)
}

// RollbackXA rolls back XA transaction key (heuristic: an admin's
// HEURISTIC_ROLLBACK, recorded as such).
func (m *Manager) RollbackXA(s *Session, key string, heuristic bool) error {
	m.mu.Lock()
	t, err := m.lookupXALocked(s, key)
	if t == nil {
		m.mu.Unlock()
		return err
	}
	if t.state != txActive && t.state != txPrepared {
		m.mu.Unlock()
		return xaErr(protocol.XAErProto, "transaction "+key+" is "+t.state.String()+": it cannot be rolled back")
	}
	sm := m.host.Master()
	if err := m.rollbackRefusal(sm, t); err != nil { // repl.go
		m.mu.Unlock()
		return xaErr(protocol.XAErRMFail, err.Error())
	}
	wasPrepared := t.state == txPrepared
	t.state = txDone
	m.unregisterLocked(t)
	t.msgs = nil
	pos := m.journalEnd(t, txRecRollback)
	if heuristic {
		pos = max(pos, m.recordHeuristicLocked(key, heurRolledBack))
		s.peer.TxHeuristic("xid", key, "outcome", "rollback", "prepared", wasPrepared)
	}
	m.mu.Unlock()
	ferr := m.j.force(pos)
	m.j.release(t)
	m.rollbacks.Add(1)
	if ferr != nil {
		m.errorf("transaction %s: rollback record: %v", key, ferr)
	}
	if wasPrepared {
		m.shipRollback(sm, key) // repl.go
	}
	return nil
}

// Forget removes a heuristically completed transaction from the
// heuristic list.
func (m *Manager) Forget(key string) error {
	m.mu.Lock()
	e, ok := m.heur[key]
	if !ok {
		m.mu.Unlock()
		return xaErr(protocol.XAErNotA, "transaction "+key+" was not heuristically completed")
	}
	pos, err := m.j.write(nil, txRecForget, appendStr(nil, key))
	if err == nil {
		delete(m.heur, key)
	}
	m.mu.Unlock()
	if err == nil {
		err = m.j.force(pos)
		m.j.release(e.hold)
	}
	if err != nil {
		return xaErr(protocol.XAErRMFail, "forget of "+key+": "+err.Error())
	}
	return nil
}

// Recover is RECOVER's answer: the keys of the prepared and the
// heuristically completed XA transactions, sorted; with a qualifier
// (non-nil), only those whose XID has it; with auth on, only the user's
// own (all for an admin).
func (m *Manager) Recover(s *Session, qualifier []byte) []string {
	var keys []string
	match := func(key string) bool {
		if qualifier == nil {
			return true
		}
		id, err := protocol.ParseTxKey([]byte(key))
		return err == nil && id.Qualifier == string(qualifier)
	}
	_, admin := s.peer.TxUser()
	m.mu.Lock()
	for key, t := range m.xa {
		if t.state == txPrepared && match(key) && m.mayUse(s, t) {
			keys = append(keys, key)
		}
	}
	for key := range m.heur {
		if match(key) && (!m.config().Auth || admin) {
			keys = append(keys, key)
		}
	}
	m.mu.Unlock()
	sort.Strings(keys)
	return keys
}
