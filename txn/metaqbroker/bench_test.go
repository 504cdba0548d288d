package metaqbroker_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/txn"
	"github.com/metaq-go/metaq/txn/file"
	"github.com/metaq-go/metaq/txn/metaqbroker"
	"github.com/metaq-go/metaq/txn/mysql"
)

// phases accumulates the time of each step of the XA transactions.
type phases map[string]time.Duration

func (p phases) time(name string, f func() error) error {
	t0 := time.Now()
	err := f()
	p[name] += time.Since(t0)
	return err
}

// timedResource times each call of a Resource under prefix.
type timedResource struct {
	txn.Resource
	p      phases
	prefix string
}

func (r *timedResource) Start(ctx context.Context, x txn.XID) error {
	return r.p.time(r.prefix+"-start", func() error { return r.Resource.Start(ctx, x) })
}

func (r *timedResource) End(ctx context.Context, x txn.XID) error {
	return r.p.time(r.prefix+"-end", func() error { return r.Resource.End(ctx, x) })
}

func (r *timedResource) Prepare(ctx context.Context, x txn.XID) (txn.Vote, error) {
	var v txn.Vote
	err := r.p.time(r.prefix+"-prepare", func() (err error) { v, err = r.Resource.Prepare(ctx, x); return err })
	return v, err
}

func (r *timedResource) Commit(ctx context.Context, x txn.XID, onePhase bool) error {
	return r.p.time(r.prefix+"-commit", func() error { return r.Resource.Commit(ctx, x, onePhase) })
}

// timedCoordinator times the decision log's calls.
type timedCoordinator struct {
	txn.Coordinator
	p phases
}

func (c *timedCoordinator) Begin(ctx context.Context, req *txn.BeginRequest) (*txn.BeginResponse, error) {
	var r *txn.BeginResponse
	err := c.p.time("log-begin", func() (err error) { r, err = c.Coordinator.Begin(ctx, req); return err })
	return r, err
}

func (c *timedCoordinator) Commit(ctx context.Context, req *txn.CommitRequest) error {
	return c.p.time("log-decision", func() error { return c.Coordinator.Commit(ctx, req) })
}

func (c *timedCoordinator) Forget(ctx context.Context, req *txn.ForgetRequest) error {
	return c.p.time("log-forget", func() error { return c.Coordinator.Forget(ctx, req) })
}

// BenchmarkXA compares, in one run, an XA transaction over MariaDB and
// the broker (a row UPDATE and one 1 KiB message, through txn.Manager
// with the builtin file coordinator: END, PREPARE of both, the decision
// logged, COMMIT of both, the decision forgotten) with the same UPDATE
// in a plain MySQL transaction (BEGIN, UPDATE, COMMIT) on another row.
// MariaDB runs with its defaults (innodb_flush_log_at_trx_commit = 1, no
// binary log), the broker in group-commit mode, the decision log on the
// same disk.
//
// alternating runs one of each per op, timed apart, so that a shared
// machine's noise falls on both alike: xa/mysql is the ratio of their
// mean latencies, and the <step>-ns/op metrics say where the XA
// transaction's time goes (they add up to xa-ns/op but for the
// Manager's own work).
func BenchmarkXA(b *testing.B) {
	br := brokertest.Start(b, brokertest.Topics(topic), brokertest.Partitions(1), brokertest.Quiet())
	cl, err := client.New(client.Brokers(br.Addr()), client.Logger(slog.New(slog.DiscardHandler)))
	require.NoError(b, err)
	b.Cleanup(func() { _ = cl.Close(context.Background()) })
	ctx := context.Background()
	xb, err := cl.XABroker(ctx, topic)
	require.NoError(b, err)
	mq, err := metaqbroker.NewResource(xb, metaqbroker.Options{})
	require.NoError(b, err)

	db, err := sql.Open("mysql", testsvc.MariaDB(b))
	require.NoError(b, err)
	b.Cleanup(func() { db.Close() })
	table := fmt.Sprintf("bench_%d", time.Now().UnixNano())
	_, err = db.ExecContext(ctx, "CREATE TABLE "+table+" (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB")
	require.NoError(b, err)
	_, err = db.ExecContext(ctx, "INSERT INTO "+table+" VALUES (1, 0), (2, 0)")
	require.NoError(b, err)
	xaConn, err := db.Conn(ctx)
	require.NoError(b, err)
	b.Cleanup(func() { xaConn.Close() })
	rm, err := mysql.NewResource(xaConn, "mariadb")
	require.NoError(b, err)
	plainConn, err := db.Conn(ctx)
	require.NoError(b, err)
	b.Cleanup(func() { plainConn.Close() })

	fc, err := file.Open(filepath.Join(b.TempDir(), "decisions.log"))
	require.NoError(b, err)
	b.Cleanup(func() { fc.Close() })
	p := phases{}
	m, err := txn.NewManager(&timedCoordinator{Coordinator: fc, p: p}, txn.ManagerOptions{Owner: "bench-xa"})
	require.NoError(b, err)
	trm := &timedResource{Resource: rm, p: p, prefix: "mysql"}
	tmq := &timedResource{Resource: mq, p: p, prefix: "metaq"}
	body := make([]byte, 1024)

	xaOp := func(b *testing.B) {
		g, err := m.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := g.Enlist(ctx, trm); err != nil {
			b.Fatal(err)
		}
		if err := p.time("mysql-update", func() error {
			_, err := xaConn.ExecContext(ctx, "UPDATE "+table+" SET n = n + 1 WHERE id = 1")
			return err
		}); err != nil {
			b.Fatal(err)
		}
		if _, err := g.Enlist(ctx, tmq); err != nil {
			b.Fatal(err)
		}
		if err := p.time("metaq-produce", func() error {
			_, err := mq.Produce(ctx, &message.Message{Topic: topic, Body: body})
			return err
		}); err != nil {
			b.Fatal(err)
		}
		if err := g.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	plainOp := func(b *testing.B) {
		tx, err := plainConn.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "UPDATE "+table+" SET n = n + 1 WHERE id = 2"); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	xaOp(b) // warm up: connections, partitions
	plainOp(b)
	clear(p)

	b.Run("alternating", func(b *testing.B) {
		clear(p)
		var xaT, plainT time.Duration
		for b.Loop() {
			t0 := time.Now()
			xaOp(b)
			t1 := time.Now()
			plainOp(b)
			xaT += t1.Sub(t0)
			plainT += time.Since(t1)
		}
		n := float64(b.N)
		b.ReportMetric(float64(xaT.Nanoseconds())/n, "xa-ns/op")
		b.ReportMetric(float64(plainT.Nanoseconds())/n, "mysql-ns/op")
		b.ReportMetric(float64(xaT)/float64(plainT), "xa/mysql")
		names := make([]string, 0, len(p))
		for k := range p {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			b.ReportMetric(float64(p[k].Nanoseconds())/n, k+"-ns/op")
		}
	})
	b.Run("xa", func(b *testing.B) {
		for b.Loop() {
			xaOp(b)
		}
	})
	b.Run("mysql", func(b *testing.B) {
		for b.Loop() {
			plainOp(b)
		}
	})
}
