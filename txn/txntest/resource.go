package txntest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/txn"
)

// ResourceEnv is what the resource suite (RunResource) needs of one
// txn.Resource implementation, on a fresh resource manager state (a new
// table, a new topic) per subtest.
type ResourceEnv struct {
	// Open returns a new handle on the resource manager: a new session
	// (connection) of the application, with the same Name every time.
	// After Crash it is the restarted application's.
	Open func(t *testing.T) txn.Resource
	// Work makes one change, named tag, in the branch that r has started
	// (a row written, a message produced).
	Work func(t *testing.T, r txn.Resource, tag string)
	// Count returns how many times tag's change is committed, as another
	// client of the resource manager sees it.
	Count func(t *testing.T, tag string) int
	// Crash makes the application holding r die: its session goes
	// (unprepared work is lost or stays invisible, prepared branches
	// stay); r is not used again.
	Crash func(t *testing.T, r txn.Resource)
	// ReadOnlyVote says that a branch with no work votes
	// txn.VoteReadOnly at Prepare and is then complete. Otherwise it votes
	// VoteOK and must be committed or rolled back like any other.
	ReadOnlyVote bool
}

// ResourceOpener returns the environment of one subtest.
type ResourceOpener func(t *testing.T) *ResourceEnv

// RunResource runs the conformance suite of the txn.Resource contract:
// Start, End, Prepare, Commit (one and two phases), Rollback and Recover
// semantics; the read-only vote; the XA codes for unknown XIDs and calls
// out of order; a crash of the application between prepare and commit
// (the branch is listed by Recover of a new session, and completed from
// it); commit and rollback of a branch already completed after recovery
// (XAER_NOTA, the change stored once).
func RunResource(t *testing.T, open ResourceOpener) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, e *ResourceEnv)
	}{
		{"TwoPhaseCommit", testResTwoPhase},
		{"OnePhaseCommit", testResOnePhase},
		{"Rollback", testResRollback},
		{"ReadOnly", testResReadOnly},
		{"UnknownXID", testResUnknown},
		{"OutOfOrder", testResOutOfOrder},
		{"RecoverListsPrepared", testResRecover},
		{"CrashAfterPrepare", testResCrashAfterPrepare},
		{"CrashBeforePrepare", testResCrashBeforePrepare},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := open(t)
			require.NotNil(t, e)
			tc.fn(t, e)
		})
	}
}

// newXID returns a fresh branch XID (format 1, random gtrid, bqual "b").
func newXID(t *testing.T) txn.XID {
	var g [12]byte
	_, err := rand.Read(g[:])
	require.NoError(t, err)
	return txn.XID{FormatID: 1, Gtrid: []byte("conf-" + hex.EncodeToString(g[:])), Bqual: []byte("b")}
}

// requireXA checks that err is a *txn.XAError with one of codes.
func requireXA(t *testing.T, err error, codes ...txn.XACode) {
	t.Helper()
	var xe *txn.XAError
	require.True(t, errors.As(err, &xe), "want an XA error %v, got %v", codes, err)
	require.Contains(t, codes, xe.Code, "%v", err)
}

func listed(t *testing.T, r txn.Resource, x txn.XID) bool {
	t.Helper()
	xids, err := r.Recover(ctx(t))
	require.NoError(t, err)
	return slices.ContainsFunc(xids, x.Equal)
}

// prepared starts a branch on r, does the work tag in it, ends and
// prepares it.
func prepared(t *testing.T, e *ResourceEnv, r txn.Resource, tag string) txn.XID {
	t.Helper()
	x := newXID(t)
	require.NoError(t, r.Start(ctx(t), x))
	e.Work(t, r, tag)
	require.NoError(t, r.End(ctx(t), x))
	v, err := r.Prepare(ctx(t), x)
	require.NoError(t, err)
	require.Equal(t, txn.VoteOK, v, "a branch that did work votes OK")
	return x
}

// A prepared branch is invisible, listed by Recover, and committed in
// two phases: then visible once and no longer listed.
func testResTwoPhase(t *testing.T, e *ResourceEnv) {
	r := e.Open(t)
	x := prepared(t, e, r, "two-phase")
	require.Zero(t, e.Count(t, "two-phase"), "prepared, not committed")
	require.True(t, listed(t, r, x))
	require.NoError(t, r.Commit(ctx(t), x, false))
	require.Equal(t, 1, e.Count(t, "two-phase"))
	require.False(t, listed(t, r, x))
	// The handle takes the next branch.
	x2 := prepared(t, e, r, "two-phase-2")
	require.NoError(t, r.Commit(ctx(t), x2, false))
	require.Equal(t, 1, e.Count(t, "two-phase-2"))
}

// An ended branch commits in one phase, without Prepare.
func testResOnePhase(t *testing.T, e *ResourceEnv) {
	r := e.Open(t)
	x := newXID(t)
	require.NoError(t, r.Start(ctx(t), x))
	e.Work(t, r, "one-phase")
	require.NoError(t, r.End(ctx(t), x))
	require.Zero(t, e.Count(t, "one-phase"))
	require.NoError(t, r.Commit(ctx(t), x, true))
	require.Equal(t, 1, e.Count(t, "one-phase"))
	require.False(t, listed(t, r, x))
}

// A branch rolled back, before or after Prepare, leaves nothing.
func testResRollback(t *testing.T, e *ResourceEnv) {
	r := e.Open(t)
	x := newXID(t)
	require.NoError(t, r.Start(ctx(t), x))
	e.Work(t, r, "rolled-ended")
	require.NoError(t, r.End(ctx(t), x))
	require.NoError(t, r.Rollback(ctx(t), x))
	x = prepared(t, e, r, "rolled-prepared")
	require.NoError(t, r.Rollback(ctx(t), x))
	require.False(t, listed(t, r, x))
	require.Zero(t, e.Count(t, "rolled-ended"))
	require.Zero(t, e.Count(t, "rolled-prepared"))
	x = prepared(t, e, r, "after-rollbacks")
	require.NoError(t, r.Commit(ctx(t), x, false))
	require.Equal(t, 1, e.Count(t, "after-rollbacks"))
}

// A branch with no work votes read-only and is complete, or (a resource
// manager that cannot tell) votes OK and commits.
func testResReadOnly(t *testing.T, e *ResourceEnv) {
	r := e.Open(t)
	x := newXID(t)
	require.NoError(t, r.Start(ctx(t), x))
	require.NoError(t, r.End(ctx(t), x))
	v, err := r.Prepare(ctx(t), x)
	require.NoError(t, err)
	if e.ReadOnlyVote {
		require.Equal(t, txn.VoteReadOnly, v)
		require.False(t, listed(t, r, x), "a read-only branch is complete")
		requireXA(t, r.Commit(ctx(t), x, false), txn.XAErNotA)
	} else {
		require.Equal(t, txn.VoteOK, v)
		require.NoError(t, r.Commit(ctx(t), x, false))
	}
	require.False(t, listed(t, r, x))
}

// Commit and Rollback of an XID the resource manager does not know fail
// with XAER_NOTA (what recovery relies on: a branch completed meanwhile);
// Prepare with XAER_NOTA or XAER_RMFAIL (MySQL checks the session's
// state first); a one-phase Commit with XAER_NOTA or XAER_INVAL (MySQL).
func testResUnknown(t *testing.T, e *ResourceEnv) {
	r := e.Open(t)
	x := newXID(t)
	_, err := r.Prepare(ctx(t), x)
	requireXA(t, err, txn.XAErNotA, txn.XAErRMFail)
	requireXA(t, r.Commit(ctx(t), x, false), txn.XAErNotA)
	requireXA(t, r.Commit(ctx(t), x, true), txn.XAErNotA, txn.XAErInval) // MySQL: INVAL
	requireXA(t, r.Rollback(ctx(t), x), txn.XAErNotA)
	// The handle still works.
	x = prepared(t, e, r, "after-unknown")
	require.NoError(t, r.Commit(ctx(t), x, false))
	require.Equal(t, 1, e.Count(t, "after-unknown"))
}

// Calls out of order fail with an XA error (XAER_PROTO, or the resource
// manager's own: XAER_RMFAIL for a call its state forbids, XAER_INVAL,
// XAER_DUPID) and change nothing:
// a second Start of the branch, a two-phase Commit of a branch not
// prepared, a one-phase Commit of a prepared one. The branch can still
// be completed.
func testResOutOfOrder(t *testing.T, e *ResourceEnv) {
	r := e.Open(t)
	x := newXID(t)
	require.NoError(t, r.Start(ctx(t), x))
	requireXA(t, r.Start(ctx(t), x), txn.XAErProto, txn.XAErRMFail, txn.XAErDupID)
	e.Work(t, r, "out-of-order")
	require.NoError(t, r.End(ctx(t), x))
	requireXA(t, r.Commit(ctx(t), x, false), txn.XAErProto, txn.XAErRMFail, txn.XAErInval)
	require.Zero(t, e.Count(t, "out-of-order"))
	v, err := r.Prepare(ctx(t), x)
	require.NoError(t, err)
	require.Equal(t, txn.VoteOK, v)
	requireXA(t, r.Commit(ctx(t), x, true), txn.XAErProto, txn.XAErRMFail, txn.XAErInval)
	require.Zero(t, e.Count(t, "out-of-order"))
	require.NoError(t, r.Commit(ctx(t), x, false))
	require.Equal(t, 1, e.Count(t, "out-of-order"))
}

// Recover of another session lists the prepared branches of every
// session. (Completing a branch from another session while the one that
// prepared it lives is not required: MySQL answers XAER_NOTA then, which
// txn.Manager takes as still in doubt; CrashAfterPrepare completes them
// from another session once the first is gone.)
func testResRecover(t *testing.T, e *ResourceEnv) {
	r1, r2, r3 := e.Open(t), e.Open(t), e.Open(t)
	require.Equal(t, r1.Name(), r2.Name(), "Open gives the same Name")
	x := prepared(t, e, r1, "recover-commit")
	y := prepared(t, e, r2, "recover-rollback")
	require.True(t, listed(t, r3, x))
	require.True(t, listed(t, r3, y))
	require.True(t, listed(t, r1, y))
	require.NoError(t, r1.Commit(ctx(t), x, false))
	require.NoError(t, r2.Rollback(ctx(t), y))
	require.False(t, listed(t, r3, x))
	require.False(t, listed(t, r3, y))
	require.Equal(t, 1, e.Count(t, "recover-commit"))
	require.Zero(t, e.Count(t, "recover-rollback"))
}

// The application dies between prepare and commit: the restarted one
// finds the branches with Recover and completes them; completing them
// again (another recovering instance, a retried phase two) fails with
// XAER_NOTA and stores nothing twice.
func testResCrashAfterPrepare(t *testing.T, e *ResourceEnv) {
	r := e.Open(t)
	x := prepared(t, e, r, "crash-commit")
	r2 := e.Open(t)
	y := prepared(t, e, r2, "crash-rollback")
	e.Crash(t, r)
	e.Crash(t, r2)
	require.Zero(t, e.Count(t, "crash-commit"), "prepared, not committed")

	q := e.Open(t) // the restarted application
	require.True(t, listed(t, q, x), "a prepared branch outlives its application")
	require.True(t, listed(t, q, y))
	require.NoError(t, q.Commit(ctx(t), x, false))
	require.NoError(t, q.Rollback(ctx(t), y))
	require.Equal(t, 1, e.Count(t, "crash-commit"))
	require.Zero(t, e.Count(t, "crash-rollback"))
	require.False(t, listed(t, q, x))
	require.False(t, listed(t, q, y))

	q2 := e.Open(t)
	requireXA(t, q2.Commit(ctx(t), x, false), txn.XAErNotA)
	requireXA(t, q2.Rollback(ctx(t), y), txn.XAErNotA)
	requireXA(t, q2.Rollback(ctx(t), x), txn.XAErNotA)
	require.Equal(t, 1, e.Count(t, "crash-commit"), "stored once")
	require.Zero(t, e.Count(t, "crash-rollback"))
}

// The application dies with a branch ended but not prepared: it is not
// listed by Recover and its work is never visible.
func testResCrashBeforePrepare(t *testing.T, e *ResourceEnv) {
	r := e.Open(t)
	x := newXID(t)
	require.NoError(t, r.Start(ctx(t), x))
	e.Work(t, r, "crash-unprepared")
	require.NoError(t, r.End(ctx(t), x))
	e.Crash(t, r)
	q := e.Open(t)
	require.False(t, listed(t, q, x), "an unprepared branch is not in doubt")
	require.Zero(t, e.Count(t, "crash-unprepared"))
	x2 := prepared(t, e, q, "after-crash")
	require.NoError(t, q.Commit(ctx(t), x2, false))
	require.Equal(t, 1, e.Count(t, "after-crash"))
	require.Zero(t, e.Count(t, "crash-unprepared"))
}
