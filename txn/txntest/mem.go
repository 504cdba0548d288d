package txntest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/metaq-go/metaq/txn"
)

// The operations of a Resource, as MemConn's hooks name them.
const (
	OpStart    = "start"
	OpEnd      = "end"
	OpPrepare  = "prepare"
	OpCommit   = "commit"
	OpRollback = "rollback"
	OpRecover  = "recover"
	OpForget   = "forget"
)

// MemRM is an in-memory XA resource manager for tests: a key-value store
// whose branches behave as a real resource manager's do across a crash of
// the application. Prepared branches survive Crash (as a database keeps
// them when the client dies); unprepared ones are rolled back with the
// connection. It is safe for concurrent use.
type MemRM struct {
	name string

	mu        sync.Mutex
	data      map[string]string
	branches  map[string]*memBranch // by XID.String()
	conns     []*MemConn
	committed []txn.XID
	rolled    []txn.XID
}

type memBranch struct {
	xid      txn.XID
	conn     *MemConn // the connection it is attached to (nil once prepared)
	writes   map[string]string
	ended    bool
	prepared bool
}

// NewMemRM returns an empty resource manager whose connections are named
// name (their Resource.Name).
func NewMemRM(name string) *MemRM {
	return &MemRM{name: name, data: map[string]string{}, branches: map[string]*memBranch{}}
}

// Connect returns a new connection: a txn.Resource.
func (m *MemRM) Connect() *MemConn {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := &MemConn{rm: m}
	m.conns = append(m.conns, c)
	return c
}

// Get returns the committed value of k.
func (m *MemRM) Get(k string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.data[k]
	return v, ok
}

// Data returns a copy of the committed data.
func (m *MemRM) Data() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.data)
}

// Prepared lists the prepared branches.
func (m *MemRM) Prepared() []txn.XID {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.preparedLocked()
}

// Committed and RolledBack list the branches completed so far, in order.
func (m *MemRM) Committed() []txn.XID {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.committed)
}

// RolledBack lists the branches rolled back so far (prepared or not), in
// order.
func (m *MemRM) RolledBack() []txn.XID {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.rolled)
}

func (m *MemRM) preparedLocked() []txn.XID {
	var out []txn.XID
	for _, b := range m.branches {
		if b.prepared {
			out = append(out, b.xid.Branch(b.xid.Bqual))
		}
	}
	slices.SortFunc(out, func(a, b txn.XID) int {
		if a.String() < b.String() {
			return -1
		}
		return 1
	})
	return out
}

// Crash is the application dying: every connection made so far fails from
// now on (XAER_RMFAIL), and the branches attached to them that are not
// prepared are rolled back. Prepared branches stay for recovery.
func (m *MemRM) Crash() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.conns {
		c.dead = true
	}
	m.conns = nil
	for k, b := range m.branches {
		if !b.prepared {
			delete(m.branches, k)
			m.rolled = append(m.rolled, b.xid)
		}
	}
}

// MemConn is one connection to a MemRM, and a txn.Resource. Set writes in
// the branch started on it. Before and After, when set, are called around
// each operation (OpStart…): an error from Before fails the operation
// without doing it; an error from After is returned although the
// operation was done (a connection lost just after the server acted).
type MemConn struct {
	rm     *MemRM
	Before func(op string, xid txn.XID) error
	After  func(op string, xid txn.XID) error

	dead bool       // under rm.mu
	cur  *memBranch // under rm.mu
}

var _ txn.Resource = (*MemConn)(nil)

// Name is the resource manager's name.
func (c *MemConn) Name() string { return c.rm.name }

// Set writes k=v in the branch active on the connection.
func (c *MemConn) Set(k, v string) error {
	m := c.rm
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.dead {
		return &txn.XAError{Code: txn.XAErRMFail, Msg: "connection lost"}
	}
	if c.cur == nil || c.cur.ended {
		return &txn.XAError{Code: txn.XAErOutside, Msg: "no branch active on the connection"}
	}
	c.cur.writes[k] = v
	return nil
}

func (c *MemConn) do(op string, xid txn.XID, fn func(m *MemRM) error) error {
	if c.Before != nil {
		if err := c.Before(op, xid); err != nil {
			return err
		}
	}
	m := c.rm
	m.mu.Lock()
	var err error
	if c.dead {
		err = &txn.XAError{Code: txn.XAErRMFail, Msg: "connection lost"}
	} else {
		err = fn(m)
	}
	m.mu.Unlock()
	if err != nil {
		return err
	}
	if c.After != nil {
		return c.After(op, xid)
	}
	return nil
}

func notA(xid txn.XID) error {
	return &txn.XAError{Code: txn.XAErNotA, Msg: "unknown xid " + xid.String()}
}

// Start begins branch xid on the connection.
func (c *MemConn) Start(_ context.Context, xid txn.XID) error {
	return c.do(OpStart, xid, func(m *MemRM) error {
		if c.cur != nil {
			return &txn.XAError{Code: txn.XAErProto, Msg: "a branch is active on the connection"}
		}
		if _, ok := m.branches[xid.String()]; ok {
			return &txn.XAError{Code: txn.XAErDupID, Msg: "xid exists " + xid.String()}
		}
		b := &memBranch{xid: xid.Branch(xid.Bqual), conn: c, writes: map[string]string{}}
		m.branches[xid.String()] = b
		c.cur = b
		return nil
	})
}

// End ends the connection's branch xid.
func (c *MemConn) End(_ context.Context, xid txn.XID) error {
	return c.do(OpEnd, xid, func(m *MemRM) error {
		b := m.branches[xid.String()]
		if b == nil {
			return notA(xid)
		}
		if b.conn != c || b.ended {
			return &txn.XAError{Code: txn.XAErProto, Msg: "branch not active on this connection"}
		}
		b.ended = true
		return nil
	})
}

// Prepare prepares branch xid: read-only when it wrote nothing.
func (c *MemConn) Prepare(_ context.Context, xid txn.XID) (txn.Vote, error) {
	vote := txn.VoteOK
	err := c.do(OpPrepare, xid, func(m *MemRM) error {
		b := m.branches[xid.String()]
		if b == nil {
			return notA(xid)
		}
		if !b.ended || b.prepared {
			return &txn.XAError{Code: txn.XAErProto, Msg: "branch not ended, or prepared already"}
		}
		if b.conn == c {
			c.cur = nil
		}
		b.conn = nil
		if len(b.writes) == 0 {
			delete(m.branches, xid.String())
			vote = txn.VoteReadOnly
			return nil
		}
		b.prepared = true
		return nil
	})
	return vote, err
}

// Commit commits branch xid (prepared, or ended with onePhase).
func (c *MemConn) Commit(_ context.Context, xid txn.XID, onePhase bool) error {
	return c.do(OpCommit, xid, func(m *MemRM) error {
		b := m.branches[xid.String()]
		if b == nil {
			return notA(xid)
		}
		if (onePhase && (!b.ended || b.prepared)) || (!onePhase && !b.prepared) {
			return &txn.XAError{Code: txn.XAErProto, Msg: "branch not in a committable state"}
		}
		if b.conn != nil && b.conn.cur == b {
			b.conn.cur = nil
		}
		maps.Copy(m.data, b.writes)
		delete(m.branches, xid.String())
		m.committed = append(m.committed, b.xid)
		return nil
	})
}

// Rollback rolls branch xid back.
func (c *MemConn) Rollback(_ context.Context, xid txn.XID) error {
	return c.do(OpRollback, xid, func(m *MemRM) error {
		b := m.branches[xid.String()]
		if b == nil {
			return notA(xid)
		}
		if b.conn != nil && b.conn.cur == b {
			b.conn.cur = nil
		}
		delete(m.branches, xid.String())
		m.rolled = append(m.rolled, b.xid)
		return nil
	})
}

// Recover lists the prepared branches.
func (c *MemConn) Recover(context.Context) ([]txn.XID, error) {
	var out []txn.XID
	err := c.do(OpRecover, txn.XID{}, func(m *MemRM) error {
		out = m.preparedLocked()
		return nil
	})
	return out, err
}

// Forget does nothing (MemRM makes no heuristic decisions) but fail for
// an unknown XID.
func (c *MemConn) Forget(_ context.Context, xid txn.XID) error {
	return c.do(OpForget, xid, func(m *MemRM) error {
		if m.branches[xid.String()] == nil {
			return notA(xid)
		}
		return nil
	})
}

// String names the connection.
func (c *MemConn) String() string { return fmt.Sprintf("mem:%s", c.rm.name) }
