package metaqbroker_test

import (
	"context"
	"database/sql"
	"fmt"
	"iter"
	"sort"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/txn"
	"github.com/metaq-go/metaq/txn/metaqbroker"
	"github.com/metaq-go/metaq/txn/mysql"
	"github.com/metaq-go/metaq/txn/txntest"
)

func TestMain(m *testing.M) { testsvc.Main(m) }

// zkCluster starts two brokers serving topic (one partition each),
// registered in a fresh root of the shared ZooKeeper, and returns the
// Client options that find them.
func zkCluster(t *testing.T) []client.Opt {
	t.Helper()
	zk := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/xa-zk-%d", time.Now().UnixNano())
	for id := 1; id <= 2; id++ {
		brokertest.Start(t, brokertest.Quiet(), brokertest.Topics(topic), brokertest.Partitions(1),
			brokertest.ZooKeeper(zk, root, id), brokertest.Edit(func(c *conf.Config) {
				c.ZooKeeper.SessionTimeout, c.ZooKeeper.ConnectionTimeout = 4000, 5000
			}))
	}
	return []client.Opt{client.ZooKeeper(zk, root), client.ZooKeeperSessionTimeout(5 * time.Second)}
}

// xaBrokers waits until the Client sees both brokers and returns a
// Resource for each, by broker id.
func xaBrokers(t *testing.T, cl *client.Client) []*metaqbroker.Resource {
	t.Helper()
	var xbs []*client.XABroker
	require.Eventually(t, func() bool {
		var err error
		xbs, err = cl.XABrokers(ctx(t), topic)
		return err == nil && len(xbs) == 2
	}, 20*time.Second, 20*time.Millisecond, "both brokers registered")
	rs := make([]*metaqbroker.Resource, len(xbs))
	for i, xb := range xbs {
		r, err := metaqbroker.NewResource(xb, metaqbroker.Options{})
		require.NoError(t, err)
		rs[i] = r
	}
	return rs
}

// zkReader collects the topic's bodies from both brokers.
func zkReader(t *testing.T, opts []client.Opt) func(n int) []string {
	cl := newClient(t, append(opts, client.ConsumeTopics(topic), client.FetchMaxWait(50*time.Millisecond),
		client.ConsumerGroup(fmt.Sprintf("xa-zk-reader-%d", time.Now().UnixNano())), client.ConsumeFrom(client.Earliest))...)
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	next, stop := iter.Pull2(cl.Messages(c))
	t.Cleanup(func() { stop(); cancel() })
	return func(n int) []string {
		t.Helper()
		var got []string
		for len(got) < n {
			m, err, ok := next()
			require.True(t, ok)
			require.NoError(t, err)
			got = append(got, string(m.Body))
		}
		sort.Strings(got)
		return got
	}
}

// account is one row of a fresh table in the shared MariaDB.
type account struct {
	dsn      string
	db       *sql.DB
	table    string
	sessions []int64
}

// waitGone waits until the server no longer lists the sessions (their
// prepared branches are then detached: recoverable from any session).
func (a *account) waitGone(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		left := 0
		for _, id := range a.sessions {
			var n int
			require.NoError(t, a.db.QueryRowContext(ctx(t), "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n))
			left += n
		}
		return left == 0
	}, 30*time.Second, 20*time.Millisecond, "the application's sessions close")
}

func newAccount(t *testing.T) *account {
	t.Helper()
	dsn := testsvc.MariaDB(t)
	db, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	a := &account{dsn: dsn, db: db, table: fmt.Sprintf("acct_%d", time.Now().UnixNano())}
	_, err = db.ExecContext(ctx(t), "CREATE TABLE "+a.table+" (id INT PRIMARY KEY, balance BIGINT NOT NULL) ENGINE=InnoDB")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx(t), "INSERT INTO "+a.table+" VALUES (1, 0), (2, 0)")
	require.NoError(t, err)
	return a
}

func (a *account) balance(t *testing.T, id int) int64 {
	t.Helper()
	var b int64
	require.NoError(t, a.db.QueryRowContext(ctx(t), "SELECT balance FROM "+a.table+" WHERE id = ?", id).Scan(&b))
	return b
}

// app is an application's own connection pool: closing it closes the
// sessions, as the application's death does.
func (a *account) app(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", a.dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// resource is a txn/mysql Resource on a dedicated connection of db; its
// session id is added to a.sessions.
func (a *account) resource(t *testing.T, db *sql.DB) *mysql.Resource {
	t.Helper()
	conn, err := db.Conn(ctx(t))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	var id int64
	require.NoError(t, conn.QueryRowContext(ctx(t), "SELECT CONNECTION_ID()").Scan(&id))
	a.sessions = append(a.sessions, id)
	r, err := mysql.NewResource(conn, "mariadb")
	require.NoError(t, err)
	return r
}

func (a *account) add(t *testing.T, r *mysql.Resource, id, n int) {
	t.Helper()
	_, err := r.Conn().ExecContext(ctx(t), "UPDATE "+a.table+" SET balance = balance + ? WHERE id = ?", n, id)
	require.NoError(t, err)
}

// TestXAZooKeeperMySQL: a Client in ZooKeeper mode (two brokers) runs XA
// transactions over MariaDB and a broker through txn.Manager: a commit
// stores the row change and the message, a rollback neither. Then an
// application prepares two transactions on both resources and dies (one
// with its commit decision logged, one without); a new application, a
// new Client through ZooKeeper, recovers them with every broker's
// Resource: the decided one committed on both, the other rolled back on
// both (presumed abort).
func TestXAZooKeeperMySQL(t *testing.T) {
	t.Parallel()
	opts := zkCluster(t)
	read := zkReader(t, opts)
	acct := newAccount(t)
	dir := t.TempDir()
	owner := txntest.Owner("xazk")

	cl := newClient(t, opts...)
	brokers := xaBrokers(t, cl)
	appDB := acct.app(t)
	rm := acct.resource(t, appDB)
	m, c := manager(t, dir, owner)
	for i, commit := range []bool{true, false} {
		g, err := m.Begin(ctx(t))
		require.NoError(t, err)
		_, err = g.Enlist(ctx(t), rm)
		require.NoError(t, err)
		acct.add(t, rm, 1, 10)
		rb := brokers[i%2]
		_, err = g.Enlist(ctx(t), rb)
		require.NoError(t, err)
		_, err = rb.Produce(ctx(t), &message.Message{Topic: topic, Body: []byte(fmt.Sprintf("live-%v", commit))})
		require.NoError(t, err)
		if commit {
			require.NoError(t, g.Commit(ctx(t)))
		} else {
			require.NoError(t, g.Rollback(ctx(t)))
		}
	}
	require.Equal(t, int64(10), acct.balance(t, 1))

	// The first application prepares two transactions by hand, as
	// Global.Commit does up to its decision, and dies.
	// A MariaDB session that prepared a branch takes no other until the
	// branch is decided: one connection per prepared branch.
	rms := []*mysql.Resource{rm}
	prepare := func(rb *metaqbroker.Resource, body string, row, n int) txn.XID {
		rm := acct.resource(t, appDB)
		rms = append(rms, rm)
		g, err := m.Begin(ctx(t))
		require.NoError(t, err)
		bm, bb := g.XID().Branch([]byte("m")), g.XID().Branch([]byte("b"))
		require.NoError(t, rm.Start(ctx(t), bm))
		acct.add(t, rm, row, n) // a row of its own: a prepared branch keeps its locks
		require.NoError(t, rm.End(ctx(t), bm))
		require.NoError(t, rb.Start(ctx(t), bb))
		_, err = rb.Produce(ctx(t), &message.Message{Topic: topic, Body: []byte(body)})
		require.NoError(t, err)
		require.NoError(t, rb.End(ctx(t), bb))
		for _, p := range []struct {
			r txn.Resource
			x txn.XID
		}{{rm, bm}, {rb, bb}} {
			v, err := p.r.Prepare(ctx(t), p.x)
			require.NoError(t, err)
			require.Equal(t, txn.VoteOK, v)
		}
		return g.XID()
	}
	decided := prepare(brokers[0], "decided", 1, 100)
	prepare(brokers[1], "undecided", 2, 1000)
	require.NoError(t, c.Commit(ctx(t), &txn.CommitRequest{Decision: txn.Decision{XID: decided, Owner: owner,
		Branches: []txn.Branch{{Resource: rm.Name(), Bqual: []byte("m")}, {Resource: brokers[0].Name(), Bqual: []byte("b")}}}}))
	for _, r := range rms {
		require.NoError(t, r.Conn().Close())
	}
	require.NoError(t, appDB.Close()) // the application's sessions go; the prepared branches stay
	acct.waitGone(t)
	require.NoError(t, cl.Close(ctx(t)))
	require.NoError(t, c.Close())
	require.Equal(t, int64(10), acct.balance(t, 1), "prepared, not committed")

	// The restarted application.
	cl2 := newClient(t, opts...)
	resources := []txn.Resource{acct.resource(t, acct.app(t))}
	for _, r := range xaBrokers(t, cl2) {
		resources = append(resources, r)
	}
	m2, _ := manager(t, dir, owner)
	got, err := m2.Recover(ctx(t), txn.RecoverOptions{Resources: resources})
	require.NoError(t, err)
	require.Len(t, got.Committed, 2, "the decided transaction's two branches")
	require.Len(t, got.RolledBack, 2, "the undecided one's two branches")
	require.Empty(t, got.Pending)
	require.Equal(t, int64(110), acct.balance(t, 1))
	require.Equal(t, int64(0), acct.balance(t, 2))
	_, err = cl2.ProduceSync(ctx(t), &message.Message{Topic: topic, Body: []byte("plain")})
	require.NoError(t, err)
	require.Equal(t, []string{"decided", "live-true", "plain"}, read(3))
	for _, r := range resources {
		xids, err := r.Recover(ctx(t))
		require.NoError(t, err)
		for _, x := range xids {
			o, _ := x.Owner()
			require.NotEqual(t, owner, o, "%s still lists %s", r.Name(), x)
		}
	}
}

// startAuthBroker starts a broker with auth on: alice and bob may publish
// to topic, nobody but root (admin) to "secret".
func startAuthBroker(t *testing.T) string {
	t.Helper()
	var users []conf.User
	for _, u := range []conf.User{
		{Name: "alice", Publish: []string{topic}},
		{Name: "bob", Publish: []string{topic}},
		{Name: "root", Admin: true},
	} {
		u.PasswordHash = hashPassword(t, u.Name+"-pw")
		users = append(users, u)
	}
	br := brokertest.Start(t, brokertest.Quiet(), brokertest.Topics(topic, "secret"), brokertest.Partitions(1),
		brokertest.Auth(conf.Auth{Enabled: true, FailureDelay: 10, Users: users}))
	return br.Addr()
}

// TestXAAuth: with auth on, through the SDK: a transaction needs publish
// on every topic it touches (a put to another is refused and the whole
// transaction rolls back); a prepared XA branch is seen by RECOVER and
// may be completed only by the user who began it or an admin: another
// user gets XAER_RMERR for commit and rollback and an empty RECOVER.
func TestXAAuth(t *testing.T) {
	t.Parallel()
	addr := startAuthBroker(t)
	as := func(user string, opts ...client.Opt) *client.Client {
		return newClient(t, append([]client.Opt{client.Brokers(addr), client.SASLPlain(user, user+"-pw")}, opts...)...)
	}
	rootRead := as("root", client.ConsumeTopics(topic), client.FetchMaxWait(50*time.Millisecond))
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	next, stop := iter.Pull2(rootRead.Messages(c))
	defer stop()
	read := func() string {
		t.Helper()
		m, err, ok := next()
		require.True(t, ok)
		require.NoError(t, err)
		return string(m.Body)
	}

	// A local transaction over topic and secret: alice may not publish to
	// secret, so nothing of it is stored. She has no right on secret at
	// all, so the broker does not even describe it to her (core/security:
	// the client learns partitions from stats topics, which lists only
	// her topics, and gets the 403 of stats secret).
	alice := as("alice")
	tx, err := alice.BeginTransaction(ctx(t))
	require.NoError(t, err)
	_, err = tx.Produce(ctx(t), &message.Message{Topic: topic, Body: []byte("local-1")})
	require.NoError(t, err)
	_, err = tx.Produce(ctx(t), &message.Message{Topic: "secret", Body: []byte("local-2")})
	require.ErrorIs(t, err, client.ErrForbidden)
	require.ErrorContains(t, err, `user "alice" may not see topic "secret" (it needs publish or subscribe)`)
	require.ErrorIs(t, tx.Commit(ctx(t)), client.ErrTransactionRolledBack)
	tx, err = alice.BeginTransaction(ctx(t))
	require.NoError(t, err)
	_, err = tx.Produce(ctx(t), &message.Message{Topic: topic, Body: []byte("local-ok")})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx(t)))
	require.Equal(t, "local-ok", read())

	// alice prepares two XA branches and goes away.
	dir := t.TempDir()
	owner := txntest.Owner("xaauth")
	m, coord := manager(t, dir, owner)
	ra := resource(t, alice)
	var xs []txn.XID
	for _, body := range []string{"by-root", "by-alice"} {
		g, err := m.Begin(ctx(t))
		require.NoError(t, err)
		x := g.XID().Branch([]byte("1"))
		require.NoError(t, ra.Start(ctx(t), x))
		_, err = ra.Produce(ctx(t), &message.Message{Topic: topic, Body: []byte(body)})
		require.NoError(t, err)
		require.NoError(t, ra.End(ctx(t), x))
		v, err := ra.Prepare(ctx(t), x)
		require.NoError(t, err)
		require.Equal(t, txn.VoteOK, v)
		require.NoError(t, coord.Commit(ctx(t), &txn.CommitRequest{Decision: txn.Decision{XID: g.XID(), Owner: owner,
			Branches: []txn.Branch{{Resource: ra.Name(), Bqual: []byte("1")}}}}))
		xs = append(xs, x)
	}
	require.NoError(t, alice.Close(ctx(t)))
	require.NoError(t, coord.Close())
	m, _ = manager(t, dir, owner) // the restarted application's

	// bob sees nothing and may complete nothing.
	rb := resource(t, as("bob"))
	got, err := rb.Recover(ctx(t))
	require.NoError(t, err)
	require.Empty(t, got, "RECOVER lists only the user's own branches")
	requireCode(t, rb.Commit(ctx(t), xs[0], false), txn.XAErRMErr)
	requireCode(t, rb.Rollback(ctx(t), xs[0]), txn.XAErRMErr)
	require.NotEqual(t, ra.Name(), rb.Name(), "one Name per user: bob's RECOVER is no authority on alice's branches")
	res, err := m.Recover(ctx(t), txn.RecoverOptions{Resources: []txn.Resource{rb}})
	require.NoError(t, err)
	require.Empty(t, res.Committed)
	require.Empty(t, res.Forgotten, "alice's decisions are kept")

	// root (admin) sees both and commits the first.
	rr := resource(t, as("root"))
	got, err = rr.Recover(ctx(t))
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.NoError(t, rr.Commit(ctx(t), xs[0], false))
	require.Equal(t, "by-root", read())

	// alice, back with a new Client, sees her other branch and recovers it.
	ra2 := resource(t, as("alice"))
	got, err = ra2.Recover(ctx(t))
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.True(t, got[0].Equal(xs[1]))
	res, err = m.Recover(ctx(t), txn.RecoverOptions{Resources: []txn.Resource{ra2}})
	require.NoError(t, err)
	require.Len(t, res.Committed, 1, "%+v", res)
	require.Equal(t, "by-alice", read())
}

func hashPassword(t *testing.T, pw string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
	require.NoError(t, err)
	return string(h)
}
