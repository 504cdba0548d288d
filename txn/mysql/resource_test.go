package mysql_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/txn"
	"github.com/metaq-go/metaq/txn/file"
	"github.com/metaq-go/metaq/txn/mysql"
	"github.com/metaq-go/metaq/txn/txntest"
)

// childEnv makes the test binary the application of a crash test: it
// runs one transfer and stops (blocks, to be killed) at the point named.
const childEnv = "METAQ_TXN_MYSQL_CHILD"

func TestMain(m *testing.M) {
	if stop := os.Getenv(childEnv); stop != "" {
		os.Exit(child(stop))
	}
	testsvc.Main(m)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func openDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// bank is the example's two databases: accounts in one, the
// transfer-done events in the other.
type bank struct {
	dsnA, dsnB string
	a, b       *sql.DB
}

func newBank(t *testing.T) *bank {
	t.Helper()
	bk := &bank{dsnA: testsvc.MariaDB(t), dsnB: testsvc.MariaDB(t)}
	bk.a, bk.b = openDB(t, bk.dsnA), openDB(t, bk.dsnB)
	_, err := bk.a.ExecContext(ctx(t), "CREATE TABLE account (id INT PRIMARY KEY, balance BIGINT NOT NULL) ENGINE=InnoDB")
	require.NoError(t, err)
	_, err = bk.a.ExecContext(ctx(t), "INSERT INTO account VALUES (1, 100), (2, 0)")
	require.NoError(t, err)
	_, err = bk.b.ExecContext(ctx(t), "CREATE TABLE event (id VARCHAR(64) PRIMARY KEY, what VARCHAR(64) NOT NULL) ENGINE=InnoDB")
	require.NoError(t, err)
	return bk
}

func (bk *bank) balances(t *testing.T) (int64, int64) {
	t.Helper()
	var x, y int64
	require.NoError(t, bk.a.QueryRowContext(ctx(t), "SELECT balance FROM account WHERE id = 1").Scan(&x))
	require.NoError(t, bk.a.QueryRowContext(ctx(t), "SELECT balance FROM account WHERE id = 2").Scan(&y))
	return x, y
}

func (bk *bank) events(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, bk.b.QueryRowContext(ctx(t), "SELECT COUNT(*) FROM event").Scan(&n))
	return n
}

func resource(t testing.TB, c context.Context, db *sql.DB, name string) *mysql.Resource {
	t.Helper()
	conn, err := db.Conn(c)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	r, err := mysql.NewResource(conn, name)
	require.NoError(t, err)
	return r
}

// transfer moves amount from account 1 to 2 in database A and records the
// event in database B, in one global transaction over ra and rb.
func transfer(c context.Context, m *txn.Manager, ra, rb *mysql.Resource, amount int, id string) error {
	g, err := m.Begin(c)
	if err != nil {
		return err
	}
	fail := func(err error) error { return fmt.Errorf("%w (rollback: %v)", err, g.Rollback(c)) }
	if _, err := g.Enlist(c, ra); err != nil {
		return fail(err)
	}
	if _, err := ra.Conn().ExecContext(c, "UPDATE account SET balance = balance - ? WHERE id = 1", amount); err != nil {
		return fail(err)
	}
	if _, err := ra.Conn().ExecContext(c, "UPDATE account SET balance = balance + ? WHERE id = 2", amount); err != nil {
		return fail(err)
	}
	if _, err := g.Enlist(c, rb); err != nil {
		return fail(err)
	}
	if _, err := rb.Conn().ExecContext(c, "INSERT INTO event VALUES (?, 'transfer-done')", id); err != nil {
		return fail(err)
	}
	return g.Commit(c)
}

func fileCoordinator(t *testing.T, path string) *file.Coordinator {
	t.Helper()
	c, err := file.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestTwoResourcesCommitRollback: two MySQL resources (two databases, two
// connections) in one global transaction commit together and roll back
// together.
func TestTwoResourcesCommitRollback(t *testing.T) {
	t.Parallel()
	bk := newBank(t)
	c := fileCoordinator(t, filepath.Join(t.TempDir(), "d.log"))
	m, err := txn.NewManager(c, txn.ManagerOptions{Owner: txntest.Owner("two")})
	require.NoError(t, err)
	ra, rb := resource(t, ctx(t), bk.a, "bank"), resource(t, ctx(t), bk.b, "events")

	require.NoError(t, transfer(ctx(t), m, ra, rb, 10, "t1"))
	x, y := bk.balances(t)
	require.Equal(t, [2]int64{90, 10}, [2]int64{x, y})
	require.Equal(t, 1, bk.events(t))

	// The same connections carry the next transaction; a failure in B (a
	// duplicate event id) rolls A back too.
	err = transfer(ctx(t), m, ra, rb, 10, "t1")
	require.Error(t, err)
	x, y = bk.balances(t)
	require.Equal(t, [2]int64{90, 10}, [2]int64{x, y}, "A rolled back with B")
	require.Equal(t, 1, bk.events(t))

	require.NoError(t, transfer(ctx(t), m, ra, rb, 5, "t2"))
	x, _ = bk.balances(t)
	require.Equal(t, int64(85), x)
	xids, err := ra.Recover(ctx(t))
	require.NoError(t, err)
	require.Empty(t, ours(xids, m.Owner()), "nothing left prepared")
	resp, err := c.Recover(ctx(t), &txn.RecoverRequest{Owners: []string{m.Owner()}})
	require.NoError(t, err)
	require.Empty(t, resp.Decisions, "every decision forgotten")
}

func ours(xids []txn.XID, owner string) []txn.XID {
	var out []txn.XID
	for _, x := range xids {
		if o, ok := x.Owner(); ok && o == owner {
			out = append(out, x)
		}
	}
	return out
}

// TestResourceXA checks the statements and error codes against the
// server: RECOVER lists a prepared branch with binary gtrid and bqual
// exactly; commit of an unknown xid is XAER_NOTA; a second START with a
// live xid is refused.
func TestResourceXA(t *testing.T) {
	t.Parallel()
	dsn := testsvc.MariaDB(t)
	db := openDB(t, dsn)
	_, err := db.ExecContext(ctx(t), "CREATE TABLE t (k INT PRIMARY KEY) ENGINE=InnoDB")
	require.NoError(t, err)
	r1, r2 := resource(t, ctx(t), db, "one"), resource(t, ctx(t), db, "two")
	x := txn.XID{FormatID: 7, Gtrid: []byte{0, 1, 0xff, ':', '\''}, Bqual: []byte{0, 0x27, 0x5c}}
	require.NoError(t, r1.Start(ctx(t), x))
	_, err = r1.Conn().ExecContext(ctx(t), "INSERT INTO t VALUES (1)")
	require.NoError(t, err)
	err = r2.Start(ctx(t), x)
	requireCode(t, err, txn.XAErDupID)
	require.NoError(t, r1.End(ctx(t), x))
	v, err := r1.Prepare(ctx(t), x)
	require.NoError(t, err)
	require.Equal(t, txn.VoteOK, v)
	xids, err := r2.Recover(ctx(t))
	require.NoError(t, err)
	found := false
	for _, y := range xids {
		found = found || y.Equal(x)
	}
	require.True(t, found, "RECOVER lists %s: %v", x, xids)
	require.NoError(t, r1.Commit(ctx(t), x, false))
	var n int
	require.NoError(t, db.QueryRowContext(ctx(t), "SELECT COUNT(*) FROM t").Scan(&n))
	require.Equal(t, 1, n)

	requireCode(t, r1.Commit(ctx(t), x, false), txn.XAErNotA)
	requireCode(t, r1.Rollback(ctx(t), x), txn.XAErNotA)
	// One phase from the ended state.
	y := txn.XID{FormatID: 7, Gtrid: []byte("g2")}
	require.NoError(t, r2.Start(ctx(t), y))
	_, err = r2.Conn().ExecContext(ctx(t), "INSERT INTO t VALUES (2)")
	require.NoError(t, err)
	require.NoError(t, r2.End(ctx(t), y))
	require.NoError(t, r2.Commit(ctx(t), y, true))
	require.NoError(t, db.QueryRowContext(ctx(t), "SELECT COUNT(*) FROM t").Scan(&n))
	require.Equal(t, 2, n)

	_, err = mysql.NewResource(nil, "x")
	require.ErrorIs(t, err, txn.ErrInvalid)
	conn, err := db.Conn(ctx(t))
	require.NoError(t, err)
	defer conn.Close()
	_, err = mysql.NewResource(conn, "bad name")
	require.ErrorIs(t, err, txn.ErrInvalid)
}

func requireCode(t *testing.T, err error, code txn.XACode) {
	t.Helper()
	var xe *txn.XAError
	require.ErrorAs(t, err, &xe)
	require.Equal(t, code, xe.Code, "%v", err)
}

// The crash points of the child.
const (
	stopAfterPrepare  = "after-prepare"  // both branches prepared, no decision
	stopAfterDecision = "after-decision" // decision logged, phase two not begun
	stopInPhaseTwo    = "in-phase-two"   // bank committed, events not
)

// TestCrashRecovery kills -9 the application (a child process running a
// transfer) at each point of two-phase commit, then recovers in a new
// process's place: the bank and the events end with the same outcome,
// committed exactly when the decision was logged.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		stop      string
		committed bool
	}{
		{stopAfterPrepare, false},
		{stopAfterDecision, true},
		{stopInPhaseTwo, true},
	} {
		t.Run(tc.stop, func(t *testing.T) {
			bk := newBank(t)
			logPath := filepath.Join(t.TempDir(), "d.log")
			owner := txntest.Owner("crash")
			ids := runChild(t, tc.stop, bk, logPath, owner)
			waitGone(t, bk.a, ids)

			// Before recovery: nothing of the transfer is visible except
			// what phase two reached.
			x, _ := bk.balances(t)
			if tc.stop == stopInPhaseTwo {
				require.Equal(t, int64(90), x, "the bank branch was committed before the crash")
			} else {
				require.Equal(t, int64(100), x)
			}
			require.Equal(t, 0, bk.events(t))

			c := fileCoordinator(t, logPath)
			m, err := txn.NewManager(c, txn.ManagerOptions{Owner: owner})
			require.NoError(t, err)
			ra, rb := resource(t, ctx(t), bk.a, "bank"), resource(t, ctx(t), bk.b, "events")
			prepared, err := ra.Recover(ctx(t))
			require.NoError(t, err)
			want := 2
			if tc.stop == stopInPhaseTwo {
				want = 1
			}
			require.Len(t, ours(prepared, owner), want, "the server kept the prepared branches of the dead process")

			res, err := m.Recover(ctx(t), txn.RecoverOptions{Resources: []txn.Resource{ra, rb}})
			require.NoError(t, err)
			x, y := bk.balances(t)
			if tc.committed {
				require.Len(t, res.Committed, want)
				require.Equal(t, [2]int64{90, 10}, [2]int64{x, y})
				require.Equal(t, 1, bk.events(t))
				require.Len(t, res.Forgotten, 1)
			} else {
				require.Len(t, res.RolledBack, want)
				require.Equal(t, [2]int64{100, 0}, [2]int64{x, y})
				require.Equal(t, 0, bk.events(t))
			}
			left, err := rb.Recover(ctx(t))
			require.NoError(t, err)
			require.Empty(t, ours(left, owner))
			resp, err := c.Recover(ctx(t), &txn.RecoverRequest{Owners: []string{owner}})
			require.NoError(t, err)
			require.Empty(t, resp.Decisions)

			// The recovered instance goes on working.
			require.NoError(t, transfer(ctx(t), m, ra, rb, 1, "after"))
		})
	}
}

// runChild starts the test binary as the application, waits until it
// reports reaching stop, kills it with SIGKILL and returns the MariaDB
// connection ids it had.
func runChild(t *testing.T, stop string, bk *bank, logPath, owner string) []int64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+stop, "CHILD_DSN_A="+bk.dsnA, "CHILD_DSN_B="+bk.dsnB,
		"CHILD_LOG="+logPath, "CHILD_OWNER="+owner)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("the child did not reach its stop in 60s")
	}
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	f := strings.Fields(line)
	require.True(t, len(f) == 3 && f[0] == "READY", "child said %q", line)
	var ids []int64
	for _, s := range f[1:] {
		id, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	return ids
}

// waitGone waits until the server has seen the killed process's
// connections close (their prepared branches are then detached and
// recoverable from any connection).
func waitGone(t *testing.T, db *sql.DB, ids []int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		require.NoError(t, db.QueryRowContext(ctx(t),
			"SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID IN (?, ?)", ids[0], ids[1]).Scan(&n))
		if n == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "the server still lists the dead process's connections %v", ids)
		time.Sleep(20 * time.Millisecond)
	}
}

// stopper reports on stdout that the child reached its stop, then blocks
// until the parent kills it.
type stopper struct{ ids string }

func (s *stopper) stop() {
	fmt.Println("READY " + s.ids)
	select {}
}

type stopAfter struct {
	*mysql.Resource
	op string
	s  *stopper
}

func (r *stopAfter) Prepare(ctx context.Context, x txn.XID) (txn.Vote, error) {
	v, err := r.Resource.Prepare(ctx, x)
	if err == nil && r.op == "prepare" {
		r.s.stop()
	}
	return v, err
}

func (r *stopAfter) Commit(ctx context.Context, x txn.XID, onePhase bool) error {
	err := r.Resource.Commit(ctx, x, onePhase)
	if err == nil && r.op == "commit" {
		r.s.stop()
	}
	return err
}

type stopAfterCommit struct {
	txn.Coordinator
	s *stopper
}

func (c *stopAfterCommit) Commit(ctx context.Context, req *txn.CommitRequest) error {
	if err := c.Coordinator.Commit(ctx, req); err != nil {
		return err
	}
	c.s.stop()
	return nil
}

// child is the application of TestCrashRecovery: one transfer, stopped at
// stop. It returns only on failure.
func child(stop string) int {
	c := context.Background()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child:", err); return 3 }
	coord, err := file.Open(os.Getenv("CHILD_LOG"))
	if err != nil {
		return fail(err)
	}
	conns := make([]*mysql.Resource, 2)
	var ids []string
	for i, dsn := range []string{os.Getenv("CHILD_DSN_A"), os.Getenv("CHILD_DSN_B")} {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return fail(err)
		}
		conn, err := db.Conn(c)
		if err != nil {
			return fail(err)
		}
		var id int64
		if err := conn.QueryRowContext(c, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			return fail(err)
		}
		ids = append(ids, strconv.FormatInt(id, 10))
		conns[i], err = mysql.NewResource(conn, []string{"bank", "events"}[i])
		if err != nil {
			return fail(err)
		}
	}
	s := &stopper{ids: strings.Join(ids, " ")}
	var co txn.Coordinator = coord
	ra, rb := conns[0], conns[1]
	var wa, wb txn.Resource = ra, rb
	switch stop {
	case stopAfterPrepare:
		wb = &stopAfter{Resource: rb, op: "prepare", s: s}
	case stopAfterDecision:
		co = &stopAfterCommit{Coordinator: coord, s: s}
	case stopInPhaseTwo:
		wa = &stopAfter{Resource: ra, op: "commit", s: s}
	default:
		return fail(fmt.Errorf("unknown stop %q", stop))
	}
	m, err := txn.NewManager(co, txn.ManagerOptions{Owner: os.Getenv("CHILD_OWNER")})
	if err != nil {
		return fail(err)
	}
	g, err := m.Begin(c)
	if err != nil {
		return fail(err)
	}
	if _, err := g.Enlist(c, wa); err != nil {
		return fail(err)
	}
	if _, err := ra.Conn().ExecContext(c, "UPDATE account SET balance = balance - 10 WHERE id = 1"); err != nil {
		return fail(err)
	}
	if _, err := ra.Conn().ExecContext(c, "UPDATE account SET balance = balance + 10 WHERE id = 2"); err != nil {
		return fail(err)
	}
	if _, err := g.Enlist(c, wb); err != nil {
		return fail(err)
	}
	if _, err := rb.Conn().ExecContext(c, "INSERT INTO event VALUES ('t1', 'transfer-done')"); err != nil {
		return fail(err)
	}
	err = g.Commit(c)
	return fail(fmt.Errorf("commit returned (%v) without reaching the stop", err))
}

// TestRecoverAttachedBranch: a restarted instance recovers while the
// server still has the old session (it has not noticed the client died):
// whatever the server answers for a branch attached to a live session,
// the decision is kept until the branch is really complete.
func TestRecoverAttachedBranch(t *testing.T) {
	t.Parallel()
	bk := newBank(t)
	logPath := filepath.Join(t.TempDir(), "d.log")
	owner := txntest.Owner("attached")
	c := fileCoordinator(t, logPath)
	dbA, dbB := openDB(t, bk.dsnA), openDB(t, bk.dsnB)
	ra, rb := resource(t, ctx(t), dbA, "bank"), resource(t, ctx(t), dbB, "events")
	// The first instance's commit point passes; it stalls before phase two
	// with its sessions open.
	m1, err := txn.NewManager(&afterLog{Coordinator: c}, txn.ManagerOptions{Owner: owner})
	require.NoError(t, err)
	err = transfer(ctx(t), m1, ra, rb, 10, "t1")
	require.ErrorIs(t, err, txn.ErrInDoubt)

	m2, err := txn.NewManager(c, txn.ManagerOptions{Owner: owner})
	require.NoError(t, err)
	qa, qb := resource(t, ctx(t), bk.a, "bank"), resource(t, ctx(t), bk.b, "events")
	res, err := m2.Recover(ctx(t), txn.RecoverOptions{Resources: []txn.Resource{qa, qb}})
	t.Logf("recover with the sessions attached: %+v, %v", res, err)
	resp, rerr := c.Recover(ctx(t), &txn.RecoverRequest{Owners: []string{owner}})
	require.NoError(t, rerr)
	if len(res.Committed) < 2 {
		require.Error(t, err, "a branch left in doubt is an error")
		require.Len(t, resp.Decisions, 1, "the decision is kept while a branch is in doubt")
	}
	// The old sessions go; recovery completes.
	require.NoError(t, ra.Conn().Close())
	require.NoError(t, rb.Conn().Close())
	require.NoError(t, dbA.Close())
	require.NoError(t, dbB.Close())
	require.Eventually(t, func() bool {
		_, err := m2.Recover(ctx(t), txn.RecoverOptions{Resources: []txn.Resource{qa, qb}})
		return err == nil
	}, 30*time.Second, 50*time.Millisecond)
	x, y := bk.balances(t)
	require.Equal(t, [2]int64{90, 10}, [2]int64{x, y})
	require.Equal(t, 1, bk.events(t))
	resp, err = c.Recover(ctx(t), &txn.RecoverRequest{Owners: []string{owner}})
	require.NoError(t, err)
	require.Empty(t, resp.Decisions)
}

// afterLog logs the decision, then fails as if the log write's answer was
// lost: the Manager stops before phase two (ErrInDoubt).
type afterLog struct{ txn.Coordinator }

func (a *afterLog) Commit(ctx context.Context, req *txn.CommitRequest) error {
	if err := a.Coordinator.Commit(ctx, req); err != nil {
		return err
	}
	return fmt.Errorf("test: the answer of the decision log was lost")
}
