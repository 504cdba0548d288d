package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/metaq-go/metaq/txn"
)

// DefaultTable is the decision log's table.
const DefaultTable = "metaq_txn_decision"

// forgetChunk bounds the XIDs of one DELETE.
const forgetChunk = 500

// errDupEntry is ER_DUP_ENTRY.
const errDupEntry = 1062

var tableName = regexp.MustCompile(`^[A-Za-z0-9_$]{1,64}$`)

// createTable is the decision log: one row per logged commit decision,
// deleted by Forget. id orders the decisions; (format_id, gtrid) is the
// global XID; owner names the application instance (every instance may
// read every other's decisions, which is what lets one recover another).
const createTable = "CREATE TABLE IF NOT EXISTS %s (\n" +
	"  `id` BIGINT NOT NULL AUTO_INCREMENT,\n" +
	"  `format_id` INT NOT NULL,\n" +
	"  `gtrid` VARBINARY(64) NOT NULL,\n" +
	"  `owner` VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n" +
	"  `branches` BLOB NOT NULL,\n" +
	"  `logged_at` BIGINT NOT NULL,\n" +
	"  PRIMARY KEY (`id`),\n" +
	"  UNIQUE KEY `uk_xid` (`format_id`, `gtrid`),\n" +
	"  KEY `k_owner` (`owner`, `id`)\n" +
	") ENGINE=InnoDB"

// Coordinator is a txn.Coordinator whose decision log is a MySQL/MariaDB
// table; cmd/metaq-txn-mysql serves it as a plugin. A decision is one
// INSERT, durable when InnoDB commits it: Init refuses a server whose
// innodb_flush_log_at_trx_commit is not 1 (a commit would not be on disk
// when acknowledged) unless config "durability_check" is "off".
//
// Config keys:
//
//	dsn               go-sql-driver DSN naming the database (required)
//	table             the table (default metaq_txn_decision), created if missing
//	durability_check  "on" (default) or "off"
type Coordinator struct {
	mu     sync.Mutex
	db     *sql.DB
	table  string // quoted
	closed bool
}

var _ txn.Coordinator = (*Coordinator)(nil)

// NewCoordinator returns an uninitialised MySQL coordinator.
func NewCoordinator() *Coordinator { return &Coordinator{} }

// Init connects, creates the table when missing and checks durability.
func (c *Coordinator) Init(ctx context.Context, req *txn.InitRequest) error {
	var conf map[string]string
	if req != nil {
		conf = req.Config
	}
	for k := range conf {
		if k != "dsn" && k != "table" && k != "durability_check" {
			return fmt.Errorf("%w: txn/mysql: unknown config key %q (known: dsn, table, durability_check)", txn.ErrBadConfig, k)
		}
	}
	dsn := strings.TrimSpace(conf["dsn"])
	if dsn == "" {
		return fmt.Errorf("%w: txn/mysql: config key \"dsn\" (user:password@tcp(host:port)/database) is required", txn.ErrBadConfig)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("%w: txn/mysql: dsn: %v", txn.ErrBadConfig, err)
	}
	if cfg.DBName == "" {
		return fmt.Errorf("%w: txn/mysql: dsn %q names no database (…/database)", txn.ErrBadConfig, redact(cfg))
	}
	table := DefaultTable
	if t, ok := conf["table"]; ok {
		table = strings.TrimSpace(t)
	}
	if !tableName.MatchString(table) {
		return fmt.Errorf("%w: txn/mysql: table %q: use 1 to 64 letters, digits, _ or $", txn.ErrBadConfig, table)
	}
	check := true
	switch v := conf["durability_check"]; v {
	case "", "on":
	case "off":
		check = false
	default:
		return fmt.Errorf("%w: txn/mysql: durability_check must be \"on\" or \"off\", got %q", txn.ErrBadConfig, v)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return txn.ErrClosed
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return fmt.Errorf("%w: txn/mysql: dsn: %v", txn.ErrBadConfig, err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(4)
	db.SetConnMaxLifetime(5 * time.Minute)
	if err := prepare(ctx, db, table, check); err != nil {
		db.Close()
		return fmt.Errorf("txn/mysql: %s on %s: %w", table, redact(cfg), err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		db.Close()
		return txn.ErrClosed
	}
	if c.db != nil {
		c.db.Close()
	}
	c.db, c.table = db, "`"+table+"`"
	return nil
}

func prepare(ctx context.Context, db *sql.DB, table string, check bool) error {
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	if check {
		var v string
		if err := db.QueryRowContext(ctx, "SELECT @@innodb_flush_log_at_trx_commit").Scan(&v); err != nil {
			return fmt.Errorf("read innodb_flush_log_at_trx_commit: %w", err)
		}
		if v != "1" {
			return fmt.Errorf("%w: innodb_flush_log_at_trx_commit is %s, so a logged decision could be lost in a crash; "+
				"set it to 1, or set durability_check = \"off\" to accept that", txn.ErrBadConfig, v)
		}
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf(createTable, "`"+table+"`")); err != nil {
		return fmt.Errorf("create table: %w", err)
	}
	return nil
}

// redact is cfg's DSN without the password, for error messages.
func redact(cfg *mysql.Config) string {
	c := cfg.Clone()
	if c.Passwd != "" {
		c.Passwd = "xxx"
	}
	return c.FormatDSN()
}

func (c *Coordinator) handle() (*sql.DB, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, "", txn.ErrClosed
	case c.db == nil:
		return nil, "", txn.ErrNotInitialized
	}
	return c.db, c.table, nil
}

func (c *Coordinator) wrapErr(op string, err error) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return fmt.Errorf("txn/mysql: %s: %w (%v)", op, txn.ErrClosed, err)
	}
	return fmt.Errorf("txn/mysql: %s: %w", op, err)
}

// Begin returns a new global XID; it writes nothing.
func (c *Coordinator) Begin(_ context.Context, req *txn.BeginRequest) (*txn.BeginResponse, error) {
	if _, _, err := c.handle(); err != nil {
		return nil, err
	}
	x, err := txn.NewGlobalXID(req.Owner)
	if err != nil {
		return nil, err
	}
	return &txn.BeginResponse{XID: x}, nil
}

type branchJSON struct {
	Resource string `json:"resource"`
	Bqual    []byte `json:"bqual"`
}

// Commit inserts the decision (autocommit: durable when it returns).
func (c *Coordinator) Commit(ctx context.Context, req *txn.CommitRequest) error {
	d := req.Decision
	if err := d.Validate(); err != nil {
		return err
	}
	db, table, err := c.handle()
	if err != nil {
		return err
	}
	bs := make([]branchJSON, len(d.Branches))
	for i, b := range d.Branches {
		bs[i] = branchJSON{Resource: b.Resource, Bqual: b.Bqual}
	}
	j, err := json.Marshal(bs)
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, "INSERT INTO "+table+" (`format_id`, `gtrid`, `owner`, `branches`, `logged_at`) VALUES (?, ?, ?, ?, ?)",
		d.XID.FormatID, d.XID.Gtrid, d.Owner, j, time.Now().UnixNano())
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == errDupEntry {
		return fmt.Errorf("%w: a decision for %s is logged already", txn.ErrInvalid, d.XID)
	}
	if err != nil {
		return c.wrapErr("commit", err)
	}
	return nil
}

// Forget deletes the decisions of the XIDs.
func (c *Coordinator) Forget(ctx context.Context, req *txn.ForgetRequest) error {
	for _, x := range req.XIDs {
		if err := x.Validate(); err != nil {
			return err
		}
	}
	db, table, err := c.handle()
	if err != nil {
		return err
	}
	xs := req.XIDs
	for len(xs) > 0 {
		n := min(len(xs), forgetChunk)
		var q strings.Builder
		q.WriteString("DELETE FROM " + table + " WHERE ")
		args := make([]any, 0, 2*n)
		for i, x := range xs[:n] {
			if i > 0 {
				q.WriteString(" OR ")
			}
			q.WriteString("(`format_id` = ? AND `gtrid` = ?)")
			args = append(args, x.FormatID, x.Gtrid)
		}
		if _, err := db.ExecContext(ctx, q.String(), args...); err != nil {
			return c.wrapErr("forget", err)
		}
		xs = xs[n:]
	}
	return nil
}

// Recover selects the decisions of req.Owners (all when empty), oldest
// first.
func (c *Coordinator) Recover(ctx context.Context, req *txn.RecoverRequest) (*txn.RecoverResponse, error) {
	for _, o := range req.Owners {
		if err := txn.ValidateOwner(o); err != nil {
			return nil, err
		}
	}
	db, table, err := c.handle()
	if err != nil {
		return nil, err
	}
	q := "SELECT `format_id`, `gtrid`, `owner`, `branches`, `logged_at` FROM " + table
	var args []any
	if len(req.Owners) > 0 {
		q += " WHERE `owner` IN (?" + strings.Repeat(", ?", len(req.Owners)-1) + ")"
		for _, o := range req.Owners {
			args = append(args, o)
		}
	}
	rows, err := db.QueryContext(ctx, q+" ORDER BY `id`", args...)
	if err != nil {
		return nil, c.wrapErr("recover", err)
	}
	defer rows.Close()
	resp := &txn.RecoverResponse{Decisions: []txn.Decision{}}
	for rows.Next() {
		var d txn.Decision
		var bj []byte
		var at int64
		if err := rows.Scan(&d.XID.FormatID, &d.XID.Gtrid, &d.Owner, &bj, &at); err != nil {
			return nil, c.wrapErr("recover", err)
		}
		var bs []branchJSON
		if err := json.Unmarshal(bj, &bs); err != nil {
			return nil, c.wrapErr("recover", fmt.Errorf("decision %s: branches: %w", d.XID, err))
		}
		for _, b := range bs {
			d.Branches = append(d.Branches, txn.Branch{Resource: b.Resource, Bqual: b.Bqual})
		}
		d.LoggedAt = time.Unix(0, at)
		resp.Decisions = append(resp.Decisions, d)
	}
	if err := rows.Err(); err != nil {
		return nil, c.wrapErr("recover", err)
	}
	return resp, nil
}

// Close closes the database handle. Idempotent; later calls fail with
// txn.ErrClosed.
func (c *Coordinator) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.db != nil {
		return c.db.Close()
	}
	return nil
}
