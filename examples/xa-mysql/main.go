// Command xa-mysql moves money between two accounts in MariaDB (or
// MySQL) and publishes a transfer-done event to metaq, both in one XA
// transaction: the builtin file coordinator (txn/file) logs the
// decision, txn/mysql and txn/metaqbroker are the two branches. Either
// both the transfer and the event happen, or neither, even if the
// process is killed -9 at any point: the next run recovers first.
//
// -pause STEP stops the transfer at STEP (work-done, prepared, decided,
// phase-two) and waits, printing "paused at STEP", so that you can kill
// -9 it there (see README.md).
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/signal"

	_ "github.com/go-sql-driver/mysql"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/txn"
	"github.com/metaq-go/metaq/txn/file"
	"github.com/metaq-go/metaq/txn/metaqbroker"
	"github.com/metaq-go/metaq/txn/mysql"
)

// config is what the flags set.
type config struct {
	addr, dsn, logPath, owner, topic string
	from, to, amount                 int64
	init                             bool
	pause                            string
}

// The steps -pause can stop at.
const (
	pauseWorkDone = "work-done" // balances updated and event produced, nothing prepared
	pausePrepared = "prepared"  // both branches prepared, no decision logged
	pauseDecided  = "decided"   // commit decision logged, phase two not begun
	pausePhaseTwo = "phase-two" // MariaDB committed, metaq not yet
)

func main() {
	var c config
	flag.StringVar(&c.addr, "addr", "127.0.0.1:8123", "broker address")
	flag.StringVar(&c.dsn, "dsn", "root@tcp(127.0.0.1:3306)/bank", "MariaDB DSN (go-sql-driver/mysql)")
	flag.StringVar(&c.logPath, "log", "xa-mysql.decisions", "decision log file of the coordinator")
	flag.StringVar(&c.owner, "owner", "xa-mysql", "owner of this instance's transactions")
	flag.StringVar(&c.topic, "topic", "transfer-done", "topic of the events")
	flag.Int64Var(&c.from, "from", 1, "account to debit")
	flag.Int64Var(&c.to, "to", 2, "account to credit")
	flag.Int64Var(&c.amount, "amount", 10, "amount to move")
	flag.BoolVar(&c.init, "init", false, "create the account table with accounts 1 (100) and 2 (0), and exit")
	flag.StringVar(&c.pause, "pause", "", "stop at this step and wait to be killed: work-done, prepared, decided, phase-two")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Stdout, c)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}

// run recovers what an earlier run left in doubt, then makes one
// transfer.
func run(ctx context.Context, out io.Writer, c config) error {
	db, err := sql.Open("mysql", c.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if c.init {
		return initBank(ctx, db)
	}
	switch c.pause {
	case "", pauseWorkDone, pausePrepared, pauseDecided, pausePhaseTwo:
	default:
		return fmt.Errorf("unknown -pause step %q", c.pause)
	}
	var connID int64 // the MariaDB session of the branch, for the pause message
	pause := func(step string) {
		if step == c.pause {
			fmt.Fprintf(out, "paused at %s (mariadb connection %d)\n", step, connID)
			<-ctx.Done() // until killed (or interrupted)
		}
	}

	coord, err := file.Open(c.logPath)
	if err != nil {
		return err
	}
	defer coord.Close()
	mgr, err := txn.NewManager(&pausingCoordinator{Coordinator: coord, pause: pause}, txn.ManagerOptions{Owner: c.owner})
	if err != nil {
		return err
	}
	cl, err := client.New(client.Brokers(c.addr), client.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	defer cl.Close(context.Background())
	xb, err := cl.XABroker(ctx, c.topic)
	if err != nil {
		return err
	}
	mq, err := metaqbroker.NewResource(xb, metaqbroker.Options{})
	if err != nil {
		return err
	}
	conn, err := db.Conn(ctx) // the branch's statements go through this session
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&connID); err != nil {
		return err
	}
	bank, err := mysql.NewResource(conn, "bank")
	if err != nil {
		return err
	}

	// Recover first: settle what a killed run left prepared.
	res, err := mgr.Recover(ctx, txn.RecoverOptions{Resources: []txn.Resource{bank, mq}})
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	fmt.Fprintf(out, "recovered: %d branches committed, %d rolled back\n", len(res.Committed), len(res.RolledBack))

	g, err := mgr.Begin(ctx)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		if rerr := g.Rollback(ctx); rerr != nil {
			return fmt.Errorf("%w (rollback: %v)", err, rerr)
		}
		return err
	}
	if _, err := g.Enlist(ctx, bank); err != nil {
		return fail(err)
	}
	r, err := conn.ExecContext(ctx, "UPDATE account SET balance = balance - ? WHERE id = ? AND balance >= ?", c.amount, c.from, c.amount)
	if err != nil {
		return fail(err)
	}
	if n, _ := r.RowsAffected(); n != 1 {
		return fail(fmt.Errorf("account %d has no %d to move", c.from, c.amount))
	}
	if _, err := conn.ExecContext(ctx, "UPDATE account SET balance = balance + ? WHERE id = ?", c.amount, c.to); err != nil {
		return fail(err)
	}
	// The broker's branch. Wrapped only to pause in phase two: the Manager
	// commits branches in enlistment order, so MariaDB commits first.
	if _, err := g.Enlist(ctx, &pausingResource{Resource: mq, pause: pause}); err != nil {
		return fail(err)
	}
	event := fmt.Sprintf(`{"xid":%q,"from":%d,"to":%d,"amount":%d}`, g.XID(), c.from, c.to, c.amount)
	if _, err := mq.Produce(ctx, &message.Message{Topic: c.topic, Body: []byte(event)}); err != nil {
		return fail(err)
	}
	pause(pauseWorkDone)
	if err := g.Commit(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "committed %s: %s\n", g.XID(), event)
	return nil
}

func initBank(ctx context.Context, db *sql.DB) error {
	for _, q := range []string{
		"CREATE TABLE IF NOT EXISTS account (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL) ENGINE=InnoDB",
		"INSERT INTO account VALUES (1, 100), (2, 0) ON DUPLICATE KEY UPDATE balance = VALUES(balance)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// pausingCoordinator pauses right after the decision is logged.
type pausingCoordinator struct {
	txn.Coordinator
	pause func(string)
}

func (p *pausingCoordinator) Commit(ctx context.Context, req *txn.CommitRequest) error {
	if err := p.Coordinator.Commit(ctx, req); err != nil {
		return err
	}
	p.pause(pauseDecided)
	return nil
}

// pausingResource is the broker's branch, pausing once it is prepared
// (every branch then is: it is enlisted last) and before its commit
// (MariaDB's is done).
type pausingResource struct {
	txn.Resource
	pause func(string)
}

func (p *pausingResource) Prepare(ctx context.Context, x txn.XID) (txn.Vote, error) {
	v, err := p.Resource.Prepare(ctx, x)
	if err == nil {
		p.pause(pausePrepared)
	}
	return v, err
}

func (p *pausingResource) Commit(ctx context.Context, x txn.XID, onePhase bool) error {
	p.pause(pausePhaseTwo)
	return p.Resource.Commit(ctx, x, onePhase)
}
