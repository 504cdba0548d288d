// Package txntest is the conformance suites of the txn.Coordinator
// contract, which every coordinator passes: the builtin (txn/file), the
// remote adapter and the plugin binaries (cmd/metaq-txn-mysql). It checks
// the coordinator's calls directly, then drives it with a txn.Manager over
// in-memory resource managers (MemRM), including crashes of the
// application at each step of two-phase commit: after prepare, after the
// decision is logged but before phase two, and during phase two. After
// each crash a new coordinator handle on the same state ("the restarted
// process") and txn.Manager.Recover must bring every resource to the same
// outcome.
//
// RunResource is the suite of the txn.Resource contract, which every
// resource passes: txn/metaqbroker against a real broker and txn/mysql
// against real MariaDB.
package txntest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/txn"
)

// CallTimeout bounds each call the suite makes.
const CallTimeout = 20 * time.Second

// Opener gives a subtest a fresh backing state (a new file, database or
// table) and returns reopen: each call of reopen returns a new, ready
// coordinator on that state, as a restarted process would open it. The
// suite closes each handle before it calls reopen again, and closes the
// last one when the subtest ends.
type Opener func(t *testing.T) (reopen func() txn.Coordinator)

// Run runs the conformance suite.
func Run(t *testing.T, open Opener) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"Begin", testBegin},
		{"CommitRecoverForget", testCommitRecoverForget},
		{"Durable", testDurable},
		{"Invalid", testInvalid},
		{"Owners", testOwners},
		{"Concurrent", testConcurrent},
		{"TwoPhaseCommit", testTwoPhaseCommit},
		{"ReadOnly", testReadOnly},
		{"PrepareFails", testPrepareFails},
		{"Rollback", testRollback},
		{"CrashAfterPrepare", testCrashAfterPrepare},
		{"CrashAfterDecision", testCrashAfterDecision},
		{"CrashDuringPhaseTwo", testCrashDuringPhaseTwo},
		{"RecoverOtherOwner", testRecoverOtherOwner},
		{"RecoverSkipsInFlight", testRecoverSkipsInFlight},
		{"RecoverDuringTraffic", testRecoverDuringTraffic},
		{"CloseThenFail", testCloseThenFail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &harness{t: t, reopen: open(t)}
			t.Cleanup(h.close)
			h.c = h.reopen()
			require.NotNil(t, h.c)
			tc.fn(t, h)
		})
	}
}

// harness is one subtest's coordinator handle and its reopen.
type harness struct {
	t      *testing.T
	reopen func() txn.Coordinator
	mu     sync.Mutex
	c      txn.Coordinator
}

func (h *harness) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.c != nil {
		_ = h.c.Close()
		h.c = nil
	}
}

// restart closes the current handle (a crashed process's resources go
// with it) and opens a new one on the same state.
func (h *harness) restart() txn.Coordinator {
	h.close()
	c := h.reopen()
	require.NotNil(h.t, c)
	h.mu.Lock()
	h.c = c
	h.mu.Unlock()
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), CallTimeout)
	t.Cleanup(cancel)
	return c
}

// Owner returns a fresh owner name for one test.
func Owner(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	o := prefix + "-" + hex.EncodeToString(b[:])
	if len(o) > txn.MaxOwnerLen {
		o = o[len(o)-txn.MaxOwnerLen:]
	}
	return o
}

func manager(t *testing.T, c txn.Coordinator, owner string) *txn.Manager {
	t.Helper()
	m, err := txn.NewManager(c, txn.ManagerOptions{Owner: owner})
	require.NoError(t, err)
	return m
}

func decision(t *testing.T, c txn.Coordinator, owner string, resources ...string) txn.Decision {
	t.Helper()
	resp, err := c.Begin(ctx(t), &txn.BeginRequest{Owner: owner})
	require.NoError(t, err)
	d := txn.Decision{XID: resp.XID, Owner: owner}
	for i, r := range resources {
		d.Branches = append(d.Branches, txn.Branch{Resource: r, Bqual: []byte(strconv.Itoa(i + 1))})
	}
	return d
}

func recoverOwners(t *testing.T, c txn.Coordinator, owners ...string) []txn.Decision {
	t.Helper()
	resp, err := c.Recover(ctx(t), &txn.RecoverRequest{Owners: owners})
	require.NoError(t, err)
	return resp.Decisions
}

// requireDecisions checks got against want by XID, owner and branches.
func requireDecisions(t *testing.T, want, got []txn.Decision) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.True(t, want[i].XID.Equal(got[i].XID), "decision %d: xid %s, want %s", i, got[i].XID, want[i].XID)
		require.Equal(t, want[i].Owner, got[i].Owner)
		require.Equal(t, len(want[i].Branches), len(got[i].Branches))
		for j, b := range want[i].Branches {
			require.Equal(t, b.Resource, got[i].Branches[j].Resource)
			require.Equal(t, b.Bqual, got[i].Branches[j].Bqual)
		}
		require.False(t, got[i].LoggedAt.IsZero(), "LoggedAt is set")
	}
}

func testBegin(t *testing.T, h *harness) {
	owner := Owner("begin")
	seen := map[string]bool{}
	for range 50 {
		resp, err := h.c.Begin(ctx(t), &txn.BeginRequest{Owner: owner})
		require.NoError(t, err)
		x := resp.XID
		require.NoError(t, x.Validate())
		require.Equal(t, txn.FormatID, x.FormatID)
		require.Empty(t, x.Bqual, "a global xid has no bqual")
		o, ok := x.Owner()
		require.True(t, ok, "xid %s names its owner", x)
		require.Equal(t, owner, o)
		require.False(t, seen[x.String()], "xid %s handed out twice", x)
		seen[x.String()] = true
	}
	for _, bad := range []string{"", "has space", "colon:x", string(make([]byte, txn.MaxOwnerLen+1))} {
		_, err := h.c.Begin(ctx(t), &txn.BeginRequest{Owner: bad})
		require.ErrorIs(t, err, txn.ErrInvalid, "owner %q", bad)
	}
}

func testCommitRecoverForget(t *testing.T, h *harness) {
	owner := Owner("crf")
	require.Empty(t, recoverOwners(t, h.c, owner))
	d1 := decision(t, h.c, owner, "a", "b")
	d2 := decision(t, h.c, owner, "c")
	require.NoError(t, h.c.Commit(ctx(t), &txn.CommitRequest{Decision: d1}))
	require.NoError(t, h.c.Commit(ctx(t), &txn.CommitRequest{Decision: d2}))
	requireDecisions(t, []txn.Decision{d1, d2}, recoverOwners(t, h.c, owner))

	err := h.c.Commit(ctx(t), &txn.CommitRequest{Decision: d1})
	require.ErrorIs(t, err, txn.ErrInvalid, "a second decision for one xid is refused")

	require.NoError(t, h.c.Forget(ctx(t), &txn.ForgetRequest{XIDs: []txn.XID{d1.XID}}))
	requireDecisions(t, []txn.Decision{d2}, recoverOwners(t, h.c, owner))
	// Forget is idempotent and ignores unknown xids.
	unknown := decision(t, h.c, owner, "x").XID
	require.NoError(t, h.c.Forget(ctx(t), &txn.ForgetRequest{XIDs: []txn.XID{d1.XID, unknown}}))
	require.NoError(t, h.c.Forget(ctx(t), &txn.ForgetRequest{}))
	requireDecisions(t, []txn.Decision{d2}, recoverOwners(t, h.c, owner))
	require.NoError(t, h.c.Forget(ctx(t), &txn.ForgetRequest{XIDs: []txn.XID{d2.XID}}))
	require.Empty(t, recoverOwners(t, h.c, owner))
}

func testDurable(t *testing.T, h *harness) {
	owner := Owner("dur")
	var want []txn.Decision
	for i := range 5 {
		d := decision(t, h.c, owner, "r1", "r2", "r"+strconv.Itoa(i+3))
		require.NoError(t, h.c.Commit(ctx(t), &txn.CommitRequest{Decision: d}))
		want = append(want, d)
	}
	require.NoError(t, h.c.Forget(ctx(t), &txn.ForgetRequest{XIDs: []txn.XID{want[1].XID}}))
	want = append(want[:1], want[2:]...)
	c := h.restart()
	requireDecisions(t, want, recoverOwners(t, c, owner))
	require.NoError(t, c.Forget(ctx(t), &txn.ForgetRequest{XIDs: []txn.XID{want[0].XID}}))
	d := decision(t, c, owner, "z")
	require.NoError(t, c.Commit(ctx(t), &txn.CommitRequest{Decision: d}))
	want = append(want[1:], d)
	c = h.restart()
	requireDecisions(t, want, recoverOwners(t, c, owner))
}

func testInvalid(t *testing.T, h *harness) {
	owner := Owner("inv")
	good := decision(t, h.c, owner, "a")
	cases := map[string]func(d *txn.Decision){
		"bqual on global":   func(d *txn.Decision) { d.XID.Bqual = []byte("1") },
		"empty gtrid":       func(d *txn.Decision) { d.XID.Gtrid = nil },
		"foreign format":    func(d *txn.Decision) { d.XID.FormatID = 7 },
		"other owner":       func(d *txn.Decision) { d.Owner = owner + "x" },
		"no branches":       func(d *txn.Decision) { d.Branches = nil },
		"bad resource name": func(d *txn.Decision) { d.Branches[0].Resource = "a b" },
		"empty bqual":       func(d *txn.Decision) { d.Branches[0].Bqual = nil },
		"duplicate bqual": func(d *txn.Decision) {
			d.Branches = append(d.Branches, txn.Branch{Resource: "b", Bqual: d.Branches[0].Bqual})
		},
		"long bqual": func(d *txn.Decision) { d.Branches[0].Bqual = make([]byte, txn.MaxBqualSize+1) },
	}
	for name, mutate := range cases {
		d := good
		d.XID = good.XID.Global()
		d.Branches = append([]txn.Branch(nil), good.Branches...)
		mutate(&d)
		err := h.c.Commit(ctx(t), &txn.CommitRequest{Decision: d})
		require.ErrorIs(t, err, txn.ErrInvalid, name)
	}
	require.Empty(t, recoverOwners(t, h.c, owner), "nothing invalid was logged")
	_, err := h.c.Recover(ctx(t), &txn.RecoverRequest{Owners: []string{"bad owner"}})
	require.ErrorIs(t, err, txn.ErrInvalid)
	err = h.c.Forget(ctx(t), &txn.ForgetRequest{XIDs: []txn.XID{{FormatID: txn.FormatID}}})
	require.ErrorIs(t, err, txn.ErrInvalid)
}

func testOwners(t *testing.T, h *harness) {
	a, b := Owner("own-a"), Owner("own-b")
	da := decision(t, h.c, a, "r")
	db := decision(t, h.c, b, "r")
	require.NoError(t, h.c.Commit(ctx(t), &txn.CommitRequest{Decision: da}))
	require.NoError(t, h.c.Commit(ctx(t), &txn.CommitRequest{Decision: db}))
	requireDecisions(t, []txn.Decision{da}, recoverOwners(t, h.c, a))
	requireDecisions(t, []txn.Decision{db}, recoverOwners(t, h.c, b))
	requireDecisions(t, []txn.Decision{da, db}, recoverOwners(t, h.c, a, b))
	all := recoverOwners(t, h.c)
	n := 0
	for _, d := range all {
		if d.Owner == a || d.Owner == b {
			n++
		}
	}
	require.Equal(t, 2, n, "an empty owner list means every owner")
	require.NoError(t, h.c.Forget(ctx(t), &txn.ForgetRequest{XIDs: []txn.XID{da.XID, db.XID}}))
}

func testConcurrent(t *testing.T, h *harness) {
	owner := Owner("conc")
	m := manager(t, h.c, owner)
	rmA, rmB := NewMemRM("conc-a"), NewMemRM("conc-b")
	const n = 24
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- transfer(ctx(t), m, rmA.Connect(), rmB.Connect(), "k"+strconv.Itoa(i), strconv.Itoa(i))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for i := range n {
		requireValue(t, rmA, "k"+strconv.Itoa(i), strconv.Itoa(i))
		requireValue(t, rmB, "k"+strconv.Itoa(i), strconv.Itoa(i))
	}
	require.Empty(t, recoverOwners(t, h.c, owner), "every decision is forgotten after phase two")
}

// transfer runs one global transaction writing k=v on a and b.
func transfer(c context.Context, m *txn.Manager, a, b *MemConn, k, v string) error {
	g, err := m.Begin(c)
	if err != nil {
		return err
	}
	for _, r := range []*MemConn{a, b} {
		if _, err := g.Enlist(c, r); err != nil {
			return errors.Join(err, g.Rollback(c))
		}
		if err := r.Set(k, v); err != nil {
			return errors.Join(err, g.Rollback(c))
		}
	}
	return g.Commit(c)
}

func requireValue(t *testing.T, rm *MemRM, k, want string) {
	t.Helper()
	v, ok := rm.Get(k)
	require.True(t, ok, "%s: %s is not committed", rm.name, k)
	require.Equal(t, want, v)
}

func requireAbsent(t *testing.T, rm *MemRM, k string) {
	t.Helper()
	v, ok := rm.Get(k)
	require.False(t, ok, "%s: %s=%q is committed", rm.name, k, v)
}

func testTwoPhaseCommit(t *testing.T, h *harness) {
	owner := Owner("2pc")
	m := manager(t, h.c, owner)
	rmA, rmB := NewMemRM("a"), NewMemRM("b")
	a, b := rmA.Connect(), rmB.Connect()
	var order []string
	var omu sync.Mutex
	trace := func(name string) func(op string, _ txn.XID) error {
		return func(op string, _ txn.XID) error {
			omu.Lock()
			order = append(order, name+":"+op)
			omu.Unlock()
			return nil
		}
	}
	a.After, b.After = trace("a"), trace("b")
	g, err := m.Begin(ctx(t))
	require.NoError(t, err)
	xa, err := g.Enlist(ctx(t), a)
	require.NoError(t, err)
	xb, err := g.Enlist(ctx(t), b)
	require.NoError(t, err)
	require.True(t, xa.SameGlobal(g.XID()) && xb.SameGlobal(g.XID()))
	require.NotEqual(t, string(xa.Bqual), string(xb.Bqual), "each branch has its own bqual")
	_, err = g.Enlist(ctx(t), rmA.Connect())
	require.ErrorIs(t, err, txn.ErrInvalid, "a resource is enlisted once")
	require.NoError(t, a.Set("x", "1"))
	require.NoError(t, b.Set("y", "2"))
	require.NoError(t, g.Commit(ctx(t)))
	requireValue(t, rmA, "x", "1")
	requireValue(t, rmB, "y", "2")
	require.Equal(t, []string{"a:start", "b:start", "a:end", "b:end", "a:prepare", "b:prepare", "a:commit", "b:commit"}, order)
	require.Empty(t, recoverOwners(t, h.c, owner))
	require.ErrorIs(t, g.Commit(ctx(t)), txn.ErrDone)
	require.ErrorIs(t, g.Rollback(ctx(t)), txn.ErrDone)
	_, err = g.Enlist(ctx(t), rmB.Connect())
	require.ErrorIs(t, err, txn.ErrDone)

	// A lone branch goes through prepare too, so its outcome is recoverable.
	order = nil
	g, err = m.Begin(ctx(t))
	require.NoError(t, err)
	_, err = g.Enlist(ctx(t), a)
	require.NoError(t, err)
	require.NoError(t, a.Set("x", "3"))
	require.NoError(t, g.Commit(ctx(t)))
	require.Equal(t, []string{"a:start", "a:end", "a:prepare", "a:commit"}, order)
	requireValue(t, rmA, "x", "3")
}

func testReadOnly(t *testing.T, h *harness) {
	owner := Owner("ro")
	m := manager(t, h.c, owner)
	rmA, rmB := NewMemRM("a"), NewMemRM("b")
	a, b := rmA.Connect(), rmB.Connect()
	commits := 0
	b.Before = func(op string, _ txn.XID) error {
		if op == OpCommit {
			commits++
		}
		return nil
	}
	g, err := m.Begin(ctx(t))
	require.NoError(t, err)
	_, err = g.Enlist(ctx(t), a)
	require.NoError(t, err)
	_, err = g.Enlist(ctx(t), b)
	require.NoError(t, err)
	require.NoError(t, a.Set("x", "1")) // b writes nothing: read-only
	require.NoError(t, g.Commit(ctx(t)))
	requireValue(t, rmA, "x", "1")
	require.Zero(t, commits, "a read-only branch takes no part in phase two")

	// All read-only: nothing is logged (a coordinator that fails Commit
	// would make this fail).
	g, err = m.Begin(ctx(t))
	require.NoError(t, err)
	_, err = g.Enlist(ctx(t), a)
	require.NoError(t, err)
	_, err = g.Enlist(ctx(t), b)
	require.NoError(t, err)
	h.close()
	require.NoError(t, g.Commit(ctx(t)), "an all read-only transaction needs no decision log")
}

func testPrepareFails(t *testing.T, h *harness) {
	owner := Owner("pf")
	m := manager(t, h.c, owner)
	rmA, rmB := NewMemRM("a"), NewMemRM("b")
	a, b := rmA.Connect(), rmB.Connect()
	b.Before = func(op string, _ txn.XID) error {
		if op == OpPrepare {
			return &txn.XAError{Code: txn.XARBDeadlock, Msg: "deadlock"}
		}
		return nil
	}
	err := transfer(ctx(t), m, a, b, "k", "v")
	require.ErrorIs(t, err, txn.ErrRolledBack)
	var xe *txn.XAError
	require.ErrorAs(t, err, &xe)
	require.Equal(t, txn.XARBDeadlock, xe.Code)
	requireAbsent(t, rmA, "k")
	requireAbsent(t, rmB, "k")
	require.Empty(t, rmA.Prepared(), "the prepared branch was rolled back")
	require.Len(t, rmA.RolledBack(), 1)
	require.Empty(t, recoverOwners(t, h.c, owner), "nothing is logged for a rollback (presumed abort)")
}

func testRollback(t *testing.T, h *harness) {
	owner := Owner("rb")
	m := manager(t, h.c, owner)
	rmA, rmB := NewMemRM("a"), NewMemRM("b")
	a, b := rmA.Connect(), rmB.Connect()
	g, err := m.Begin(ctx(t))
	require.NoError(t, err)
	_, err = g.Enlist(ctx(t), a)
	require.NoError(t, err)
	_, err = g.Enlist(ctx(t), b)
	require.NoError(t, err)
	require.NoError(t, a.Set("k", "v"))
	require.NoError(t, g.Rollback(ctx(t)))
	requireAbsent(t, rmA, "k")
	require.Len(t, rmA.RolledBack(), 1)
	require.Len(t, rmB.RolledBack(), 1)
	require.ErrorIs(t, g.Commit(ctx(t)), txn.ErrDone)
}

// crashAt makes the application "die" at a point: every resource
// manager's connections are dropped and the coordinator handle is closed.
type crash struct {
	h   *harness
	rms []*MemRM
	hit bool
}

func (c *crash) now() error {
	c.hit = true
	for _, rm := range c.rms {
		rm.Crash()
	}
	c.h.close()
	return errors.New("txntest: the application crashed here")
}

// afterCommit wraps a coordinator to run fn after a successful Commit
// (the decision is logged, phase two has not begun).
type afterCommit struct {
	txn.Coordinator
	fn func() error
}

func (a *afterCommit) Commit(ctx context.Context, req *txn.CommitRequest) error {
	if err := a.Coordinator.Commit(ctx, req); err != nil {
		return err
	}
	return a.fn()
}

func crashSetup(t *testing.T, h *harness, prefix string) (owner string, rmA, rmB *MemRM, a, b *MemConn, cr *crash) {
	owner = Owner(prefix)
	rmA, rmB = NewMemRM("a"), NewMemRM("b")
	a, b = rmA.Connect(), rmB.Connect()
	return owner, rmA, rmB, a, b, &crash{h: h, rms: []*MemRM{rmA, rmB}}
}

// restartAndRecover is the restarted application: a new coordinator
// handle, a new Manager with the same owner, fresh connections, Recover.
func restartAndRecover(t *testing.T, h *harness, owner string, rms ...*MemRM) *txn.RecoverResult {
	t.Helper()
	c := h.restart()
	m := manager(t, c, owner)
	var rs []txn.Resource
	for _, rm := range rms {
		rs = append(rs, rm.Connect())
	}
	res, err := m.Recover(ctx(t), txn.RecoverOptions{Resources: rs})
	require.NoError(t, err)
	for _, rm := range rms {
		require.Empty(t, rm.Prepared(), "%s: nothing is left in doubt", rm.name)
	}
	require.Empty(t, recoverOwners(t, c, owner), "every decision is forgotten")
	// Recovery is idempotent.
	again, err := m.Recover(ctx(t), txn.RecoverOptions{Resources: rs})
	require.NoError(t, err)
	require.Empty(t, again.Committed)
	require.Empty(t, again.RolledBack)
	return res
}

func testCrashAfterPrepare(t *testing.T, h *harness) {
	owner, rmA, rmB, a, b, cr := crashSetup(t, h, "cap")
	b.After = func(op string, _ txn.XID) error {
		if op == OpPrepare {
			return cr.now() // both branches are prepared, nothing is logged
		}
		return nil
	}
	m := manager(t, h.c, owner)
	err := transfer(ctx(t), m, a, b, "k", "v")
	require.Error(t, err)
	require.True(t, cr.hit)
	require.Len(t, rmA.Prepared(), 1, "a is prepared and in doubt")
	require.Len(t, rmB.Prepared(), 1, "b is prepared and in doubt")

	res := restartAndRecover(t, h, owner, rmA, rmB)
	require.Len(t, res.RolledBack, 2, "presumed abort: no logged commit, both roll back")
	require.Empty(t, res.Committed)
	requireAbsent(t, rmA, "k")
	requireAbsent(t, rmB, "k")
}

func testCrashAfterDecision(t *testing.T, h *harness) {
	owner, rmA, rmB, a, b, cr := crashSetup(t, h, "cad")
	m := manager(t, &afterCommit{Coordinator: h.c, fn: cr.now}, owner)
	err := transfer(ctx(t), m, a, b, "k", "v")
	require.Error(t, err)
	require.True(t, cr.hit)
	require.Len(t, rmA.Prepared(), 1)
	require.Len(t, rmB.Prepared(), 1)
	requireAbsent(t, rmA, "k")

	res := restartAndRecover(t, h, owner, rmA, rmB)
	require.Len(t, res.Committed, 2, "the logged decision commits both")
	require.Len(t, res.Forgotten, 1)
	requireValue(t, rmA, "k", "v")
	requireValue(t, rmB, "k", "v")
}

func testCrashDuringPhaseTwo(t *testing.T, h *harness) {
	owner, rmA, rmB, a, b, cr := crashSetup(t, h, "cp2")
	a.After = func(op string, _ txn.XID) error {
		if op == OpCommit {
			return cr.now() // a committed, b not yet
		}
		return nil
	}
	m := manager(t, h.c, owner)
	err := transfer(ctx(t), m, a, b, "k", "v")
	require.Error(t, err)
	requireValue(t, rmA, "k", "v")
	requireAbsent(t, rmB, "k")

	res := restartAndRecover(t, h, owner, rmA, rmB)
	require.Len(t, res.Committed, 1, "only b was left")
	requireValue(t, rmB, "k", "v")
}

func testRecoverOtherOwner(t *testing.T, h *harness) {
	dead, rmA, rmB, a, b, cr := crashSetup(t, h, "dead")
	m := manager(t, &afterCommit{Coordinator: h.c, fn: cr.now}, dead)
	require.Error(t, transfer(ctx(t), m, a, b, "k", "v"))
	// A second in-doubt transaction of the dead owner, never decided.
	rmC := NewMemRM("c")
	c := h.restart()
	m2 := manager(t, c, dead)
	g, err := m2.Begin(ctx(t))
	require.NoError(t, err)
	cc := rmC.Connect()
	_, err = g.Enlist(ctx(t), cc)
	require.NoError(t, err)
	require.NoError(t, cc.Set("k", "v"))
	require.NoError(t, cc.End(ctx(t), g.XID().Branch([]byte("1"))))
	_, err = cc.Prepare(ctx(t), g.XID().Branch([]byte("1")))
	require.NoError(t, err)
	rmC.Crash()

	other := manager(t, c, Owner("alive"))
	rs := []txn.Resource{rmA.Connect(), rmB.Connect(), rmC.Connect()}
	res, err := other.Recover(ctx(t), txn.RecoverOptions{Resources: rs})
	require.NoError(t, err)
	require.Empty(t, res.Committed, "by default an instance recovers only its own transactions")
	require.Empty(t, res.RolledBack)
	require.Len(t, rmA.Prepared(), 1)

	res, err = other.Recover(ctx(t), txn.RecoverOptions{Resources: rs, Owners: []string{dead}})
	require.NoError(t, err)
	require.Len(t, res.Committed, 2)
	require.Len(t, res.RolledBack, 1)
	requireValue(t, rmA, "k", "v")
	requireValue(t, rmB, "k", "v")
	requireAbsent(t, rmC, "k")
	require.Empty(t, recoverOwners(t, c, dead))
}

func testRecoverSkipsInFlight(t *testing.T, h *harness) {
	owner := Owner("skip")
	rmA, rmB := NewMemRM("a"), NewMemRM("b")
	var m *txn.Manager
	var during *txn.RecoverResult
	var duringErr error
	m = manager(t, &afterCommit{Coordinator: h.c, fn: func() error {
		// Recover runs between the commit point and phase two.
		during, duringErr = m.Recover(ctx(t), txn.RecoverOptions{Resources: []txn.Resource{rmA.Connect(), rmB.Connect()}})
		return nil
	}}, owner)
	require.NoError(t, transfer(ctx(t), m, rmA.Connect(), rmB.Connect(), "k", "v"))
	require.NoError(t, duringErr)
	require.NotNil(t, during)
	require.Empty(t, during.Committed, "Recover leaves a transaction in flight alone")
	require.Empty(t, during.RolledBack)
	require.Empty(t, during.Forgotten)
	requireValue(t, rmA, "k", "v")
	requireValue(t, rmB, "k", "v")
	require.Empty(t, recoverOwners(t, h.c, owner))
}

// testRecoverDuringTraffic runs Recover in a loop while transactions
// commit: it must neither touch them nor report errors for branches that
// complete between its RECOVER and its action.
func testRecoverDuringTraffic(t *testing.T, h *harness) {
	owner := Owner("traffic")
	m := manager(t, h.c, owner)
	rmA, rmB := NewMemRM("a"), NewMemRM("b")
	stop := make(chan struct{})
	recovered := make(chan error, 1)
	go func() {
		rs := []txn.Resource{rmA.Connect(), rmB.Connect()}
		for {
			select {
			case <-stop:
				recovered <- nil
				return
			default:
			}
			res, err := m.Recover(ctx(t), txn.RecoverOptions{Resources: rs})
			if err == nil && (len(res.Committed)+len(res.RolledBack)+len(res.Forgotten) > 0) {
				err = fmt.Errorf("recover acted on transactions in flight: %+v", res)
			}
			if err != nil {
				recovered <- err
				return
			}
		}
	}()
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- transfer(ctx(t), m, rmA.Connect(), rmB.Connect(), "k"+strconv.Itoa(i), "v")
		}()
	}
	wg.Wait()
	close(stop)
	require.NoError(t, <-recovered)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, rmA.Data(), n)
	require.Len(t, rmB.Data(), n)
	require.Empty(t, rmA.RolledBack())
	require.Empty(t, recoverOwners(t, h.c, owner))
}

func testCloseThenFail(t *testing.T, h *harness) {
	c := h.c
	owner := Owner("close")
	d := decision(t, c, owner, "a")
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "Close is idempotent")
	_, err := c.Begin(ctx(t), &txn.BeginRequest{Owner: owner})
	require.ErrorIs(t, err, txn.ErrClosed)
	require.ErrorIs(t, c.Commit(ctx(t), &txn.CommitRequest{Decision: d}), txn.ErrClosed)
	require.ErrorIs(t, c.Forget(ctx(t), &txn.ForgetRequest{XIDs: []txn.XID{d.XID}}), txn.ErrClosed)
	_, err = c.Recover(ctx(t), &txn.RecoverRequest{})
	require.ErrorIs(t, err, txn.ErrClosed)
}
