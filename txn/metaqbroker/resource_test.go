package metaqbroker_test

import (
	"context"
	"iter"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/txn"
	"github.com/metaq-go/metaq/txn/file"
	"github.com/metaq-go/metaq/txn/metaqbroker"
	"github.com/metaq-go/metaq/txn/txntest"
)

const topic = "xa-events"

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func newClient(t *testing.T, opts ...client.Opt) *client.Client {
	t.Helper()
	cl, err := client.New(append([]client.Opt{client.Logger(slog.New(slog.DiscardHandler))}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close(context.Background()) })
	return cl
}

// reader pulls the topic's messages (one partition: in stored order).
func reader(t *testing.T, addr string) func() string {
	cl := newClient(t, client.Brokers(addr), client.ConsumeTopics(topic), client.FetchMaxWait(50*time.Millisecond))
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	next, stop := iter.Pull2(cl.Messages(c))
	t.Cleanup(func() { stop(); cancel() })
	return func() string {
		t.Helper()
		m, err, ok := next()
		require.True(t, ok)
		require.NoError(t, err)
		return string(m.Body)
	}
}

func resource(t *testing.T, cl *client.Client) *metaqbroker.Resource {
	t.Helper()
	xb, err := cl.XABroker(ctx(t), topic)
	require.NoError(t, err)
	r, err := metaqbroker.NewResource(xb, metaqbroker.Options{})
	require.NoError(t, err)
	return r
}

func manager(t *testing.T, dir, owner string) (*txn.Manager, *file.Coordinator) {
	t.Helper()
	c, err := file.Open(filepath.Join(dir, "decisions.log"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	m, err := txn.NewManager(c, txn.ManagerOptions{Owner: owner})
	require.NoError(t, err)
	return m, c
}

func requireCode(t *testing.T, err error, code txn.XACode) {
	t.Helper()
	var xe *txn.XAError
	require.ErrorAs(t, err, &xe)
	require.Equal(t, code, xe.Code, "%v", err)
}

func plain(t *testing.T, cl *client.Client, body string) {
	t.Helper()
	_, err := cl.ProduceSync(ctx(t), &message.Message{Topic: topic, Body: []byte(body)})
	require.NoError(t, err)
}

// TestBrokerResource: a global transaction over the broker commits its
// messages together, in order; a rolled back one stores nothing; a
// branch that produced nothing is read-only and sends nothing; the
// broker's XA codes come back as *txn.XAError.
func TestBrokerResource(t *testing.T) {
	t.Parallel()
	br := brokertest.Start(t, brokertest.Topics(topic), brokertest.Partitions(1), brokertest.Quiet())
	cl := newClient(t, client.Brokers(br.Addr()))
	next := reader(t, br.Addr())
	m, _ := manager(t, t.TempDir(), txntest.Owner("xa"))
	r := resource(t, cl)
	require.Equal(t, "metaq-broker-0", r.Name())

	// Commit.
	g, err := m.Begin(ctx(t))
	require.NoError(t, err)
	_, err = r.Produce(ctx(t), &message.Message{Topic: topic, Body: []byte("early")})
	requireCode(t, err, txn.XAErProto) // not enlisted yet
	_, err = g.Enlist(ctx(t), r)
	require.NoError(t, err)
	res, err := r.Produce(ctx(t), &message.Message{Topic: topic, Body: []byte("a")}, &message.Message{Topic: topic, Body: []byte("b")})
	require.NoError(t, err)
	require.Equal(t, int64(-1), res[0].Offset)
	plain(t, cl, "p1")
	require.Equal(t, "p1", next(), "the open branch stores nothing")
	require.NoError(t, g.Commit(ctx(t)))

	// Rollback.
	g, err = m.Begin(ctx(t))
	require.NoError(t, err)
	_, err = g.Enlist(ctx(t), r)
	require.NoError(t, err)
	_, err = r.Produce(ctx(t), &message.Message{Topic: topic, Body: []byte("rolled")})
	require.NoError(t, err)
	require.NoError(t, g.Rollback(ctx(t)))

	// Read-only: nothing to log, nothing sent.
	g, err = m.Begin(ctx(t))
	require.NoError(t, err)
	_, err = g.Enlist(ctx(t), r)
	require.NoError(t, err)
	require.NoError(t, g.Commit(ctx(t)))
	plain(t, cl, "p2")
	require.Equal(t, []string{"a", "b", "p2"}, []string{next(), next(), next()})

	// The wire's XA codes.
	x := txn.XID{FormatID: 9, Gtrid: []byte("g-codes"), Bqual: []byte("1")}
	requireCode(t, r.Commit(ctx(t), x, false), txn.XAErNotA)
	require.NoError(t, r.Start(ctx(t), x))
	requireCode(t, r.Start(ctx(t), x), txn.XAErProto)
	_, err = r.Produce(ctx(t), &message.Message{Topic: topic, Body: []byte("c")})
	require.NoError(t, err)
	require.NoError(t, r.End(ctx(t), x))
	requireCode(t, r.Commit(ctx(t), x, false), txn.XAErProto) // two phases need prepare
	require.NoError(t, r.Commit(ctx(t), x, true))
	require.Equal(t, "c", next())
}

// TestBrokerResourceRecover: a branch prepared by an application that
// then died is listed by RECOVER through a new Client and settled by
// Manager.Recover: committed with a logged decision, rolled back without
// (presumed abort).
func TestBrokerResourceRecover(t *testing.T) {
	t.Parallel()
	br := brokertest.Start(t, brokertest.Topics(topic), brokertest.Partitions(1), brokertest.Quiet())
	next := reader(t, br.Addr())
	dir := t.TempDir()
	owner := txntest.Owner("xarec")

	// The first application: two branches prepared, one decision logged.
	prepared := func(cl *client.Client, m *txn.Manager, body string) txn.XID {
		g, err := m.Begin(ctx(t))
		require.NoError(t, err)
		r := resource(t, cl)
		bx := g.XID().Branch([]byte("1"))
		require.NoError(t, r.Start(ctx(t), bx))
		_, err = r.Produce(ctx(t), &message.Message{Topic: topic, Body: []byte(body)})
		require.NoError(t, err)
		require.NoError(t, r.End(ctx(t), bx))
		v, err := r.Prepare(ctx(t), bx)
		require.NoError(t, err)
		require.Equal(t, txn.VoteOK, v)
		return bx
	}
	m1, c1 := manager(t, dir, owner)
	cl1, err := client.New(client.Brokers(br.Addr()), client.Logger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	commitX := prepared(cl1, m1, "decided")
	abortX := prepared(cl1, m1, "undecided")
	require.NoError(t, c1.Commit(ctx(t), &txn.CommitRequest{Decision: txn.Decision{XID: commitX.Global(), Owner: owner,
		Branches: []txn.Branch{{Resource: "metaq-broker-0", Bqual: commitX.Bqual}}}}))
	require.NoError(t, cl1.Close(ctx(t))) // its connections go; the prepared branches stay
	require.NoError(t, c1.Close())

	// The restarted application.
	m2, _ := manager(t, dir, owner)
	cl2 := newClient(t, client.Brokers(br.Addr()))
	r := resource(t, cl2)
	xids, err := r.Recover(ctx(t))
	require.NoError(t, err)
	require.Len(t, xids, 2)
	got, err := m2.Recover(ctx(t), txn.RecoverOptions{Resources: []txn.Resource{r}})
	require.NoError(t, err)
	require.Len(t, got.Committed, 1)
	require.True(t, got.Committed[0].Equal(commitX))
	require.Len(t, got.RolledBack, 1)
	require.True(t, got.RolledBack[0].Equal(abortX))
	xids, err = r.Recover(ctx(t))
	require.NoError(t, err)
	require.Empty(t, xids)
	plain(t, cl2, "after")
	require.Equal(t, []string{"decided", "after"}, []string{next(), next()})
}
