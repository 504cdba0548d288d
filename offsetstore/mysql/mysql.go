// Package mysql is the MySQL/MariaDB offset store, MetaQ's
// MysqlOffsetStorage (reference §7) with BIGINT offsets and msgIds. It
// keeps one row per (topic, partition, group) in the table
// meta_topic_partition_group_offset, created at Init when missing:
//
//	id        BIGINT AUTO_INCREMENT PRIMARY KEY
//	topic     VARCHAR(255)   the topic
//	partition VARCHAR(255)   "<brokerId>-<partition>", as MetaQ writes it
//	group_id  VARCHAR(255)   the consumer group
//	offset    BIGINT         the next offset to fetch
//	msg_id    BIGINT         the last consumed message's id (-1: unknown)
//	UNIQUE KEY (topic, partition, group_id)
//
// The store ships as the plugin binary cmd/metaq-offsetstore-mysql, so the
// broker never links the MySQL driver. Config keys (strings, from
// [plugin.config] in server.toml):
//
//	dsn    go-sql-driver DSN naming the database (required), for example
//	       "user:password@tcp(127.0.0.1:3306)/metaq"
//	table  the table's name (default meta_topic_partition_group_offset)
//
// Commit is one transaction of upserts (INSERT ... ON DUPLICATE KEY
// UPDATE): a batch is stored whole or not at all. Load is one SELECT per
// batch (per 500 keys).
package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"

	"github.com/metaq-go/metaq/internal/backoff"
	"github.com/metaq-go/metaq/offsetstore"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
)

// Defaults and limits.
const (
	// DefaultTable is MetaQ's table name.
	DefaultTable = "meta_topic_partition_group_offset"
	// MaxNameLength is the longest group or topic, in characters (the
	// VARCHAR(255) columns).
	MaxNameLength = 255
	// rowsPerStatement bounds the rows of one INSERT and the keys of one
	// SELECT (well under the protocol's 65535 placeholders).
	rowsPerStatement = 500
	// txAttempts bounds the retries of a commit that InnoDB chose as a
	// deadlock victim (or that timed out waiting for a row lock).
	txAttempts = 4
)

// txRetry is the pause before retrying such a commit: 10 ms doubling, with
// jitter so that the two victims of a deadlock do not collide again.
var txRetry = backoff.Policy{Min: 10 * time.Millisecond, Max: 200 * time.Millisecond, Jitter: 0.5}

// The MariaDB/MySQL error numbers a commit retries on.
const (
	errLockWaitTimeout = 1205
	errDeadlock        = 1213
)

var tableName = regexp.MustCompile(`^[A-Za-z0-9_$]{1,64}$`)

// Store is the MySQL offset store. Use New, then Init.
type Store struct {
	mu     sync.Mutex
	db     *sql.DB
	table  string // quoted with backticks
	closed bool
}

var _ offsetstore.Store = (*Store)(nil)

// New returns an uninitialised store.
func New() *Store { return &Store{} }

// createTable is the DDL. Unlike MetaQ's wiki DDL (int(11) offset and
// msg_id, a plain index), offset and msg_id are BIGINT because msgIds and
// offsets are 64-bit, and (topic, partition, group_id) is a UNIQUE key: a
// deliberate improvement over MetaQ's non-unique index, which lets a commit
// be a single upsert and makes duplicate rows for one position impossible.
// The key columns use a binary collation: names are case-sensitive, as in
// ZooKeeper and MetaQ. Three utf8mb4 VARCHAR(255) columns make a 3060-byte
// key, within InnoDB's 3072. id is BIGINT too: InnoDB uses up an
// AUTO_INCREMENT value for every upserted row, updates included, so an INT
// id would run out after 2^31 rows (four months at 1000 partitions
// committed every 5 s).
const createTable = "CREATE TABLE IF NOT EXISTS %s (\n" +
	"  `id` BIGINT NOT NULL AUTO_INCREMENT,\n" +
	"  `topic` VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n" +
	"  `partition` VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n" +
	"  `group_id` VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n" +
	"  `offset` BIGINT NOT NULL,\n" +
	"  `msg_id` BIGINT NOT NULL DEFAULT -1,\n" +
	"  PRIMARY KEY (`id`),\n" +
	"  UNIQUE KEY `uk_topic_partition_group` (`topic`, `partition`, `group_id`)\n" +
	") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"

// Init opens the database named by the dsn, creates the table when it is
// missing, and checks that an existing one has BIGINT offset and msg_id
// columns and a unique key on (topic, partition, group_id): a MetaQ table
// with int(11) columns or a plain index is refused with the ALTER TABLE
// that fixes it, rather than silently truncating ids or duplicating rows.
func (s *Store) Init(ctx context.Context, req *offsetstore.InitRequest) error {
	var conf map[string]string
	if req != nil {
		conf = req.Config
	}
	for k := range conf {
		if k != "dsn" && k != "table" {
			return fmt.Errorf("%w: mysql: unknown config key %q (known: dsn, table)", offsetstore.ErrBadConfig, k)
		}
	}
	dsn := strings.TrimSpace(conf["dsn"])
	if dsn == "" {
		return fmt.Errorf("%w: mysql: config key \"dsn\" (user:password@tcp(host:port)/database) is required", offsetstore.ErrBadConfig)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("%w: mysql: dsn: %v", offsetstore.ErrBadConfig, err)
	}
	if cfg.DBName == "" {
		return fmt.Errorf("%w: mysql: dsn %q names no database (…/database)", offsetstore.ErrBadConfig, redact(cfg))
	}
	table := DefaultTable
	if t, ok := conf["table"]; ok {
		table = strings.TrimSpace(t)
	}
	if !tableName.MatchString(table) {
		return fmt.Errorf("%w: mysql: table %q: use 1 to 64 letters, digits, _ or $", offsetstore.ErrBadConfig, table)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return offsets.ErrClosed
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return fmt.Errorf("%w: mysql: dsn: %v", offsetstore.ErrBadConfig, err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(4)
	db.SetConnMaxLifetime(5 * time.Minute)
	if err := s.prepareTable(ctx, db, table); err != nil {
		db.Close()
		return fmt.Errorf("offsetstore/mysql: %s on %s: %w", table, redact(cfg), err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		db.Close()
		return offsets.ErrClosed
	}
	if s.db != nil {
		s.db.Close()
	}
	s.db, s.table = db, "`"+table+"`"
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

func (s *Store) prepareTable(ctx context.Context, db *sql.DB, table string) error {
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf(createTable, "`"+table+"`")); err != nil {
		return fmt.Errorf("create table: %w", err)
	}
	return checkTable(ctx, db, table)
}

// checkTable refuses a table this store cannot use correctly.
func checkTable(ctx context.Context, db *sql.DB, table string) error {
	rows, err := db.QueryContext(ctx, "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS "+
		"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", table)
	if err != nil {
		return fmt.Errorf("read columns: %w", err)
	}
	types := map[string]string{}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			rows.Close()
			return err
		}
		types[strings.ToLower(name)] = strings.ToLower(typ)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var problems, fixes []string
	for _, c := range []string{"topic", "partition", "group_id", "offset", "msg_id"} {
		if _, ok := types[c]; !ok {
			problems = append(problems, "no column "+c)
		}
	}
	for _, c := range []string{"offset", "msg_id"} {
		if typ, ok := types[c]; ok && typ != "bigint" {
			problems = append(problems, fmt.Sprintf("column %s is %s, not BIGINT (msgIds are 64-bit)", c, typ))
			fixes = append(fixes, fmt.Sprintf("MODIFY `%s` BIGINT NOT NULL", c))
		}
	}
	unique, err := hasUniqueKey(ctx, db, table)
	if err != nil {
		return err
	}
	if !unique {
		problems = append(problems, "no UNIQUE key on (topic, partition, group_id)")
		fixes = append(fixes, "ADD UNIQUE KEY `uk_topic_partition_group` (`topic`, `partition`, `group_id`)")
	}
	if len(problems) == 0 {
		return nil
	}
	msg := "existing table: " + strings.Join(problems, "; ")
	if len(fixes) > 0 {
		msg += fmt.Sprintf("; fix it with ALTER TABLE `%s` %s (after removing duplicate rows)", table, strings.Join(fixes, ", "))
	}
	return fmt.Errorf("%w: %s", offsetstore.ErrBadConfig, msg)
}

// hasUniqueKey reports whether table has a unique index on exactly
// (topic, partition, group_id), in any order.
func hasUniqueKey(ctx context.Context, db *sql.DB, table string) (bool, error) {
	rows, err := db.QueryContext(ctx, "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "+
		"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND NON_UNIQUE = 0", table)
	if err != nil {
		return false, fmt.Errorf("read indexes: %w", err)
	}
	defer rows.Close()
	cols := map[string][]string{}
	for rows.Next() {
		var idx, col string
		if err := rows.Scan(&idx, &col); err != nil {
			return false, err
		}
		cols[idx] = append(cols[idx], strings.ToLower(col))
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	for _, cs := range cols {
		sort.Strings(cs)
		if strings.Join(cs, ",") == "group_id,partition,topic" {
			return true, nil
		}
	}
	return false, nil
}

// handle returns the database for a call, or why there is none.
func (s *Store) handle() (*sql.DB, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, "", offsets.ErrClosed
	case s.db == nil:
		return nil, "", offsetstore.ErrNotInitialized
	}
	return s.db, s.table, nil
}

// wrapErr names the operation, and reports offsets.ErrClosed for calls cut short
// by Close.
func (s *Store) wrapErr(op string, err error) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("offsetstore/mysql: %s: %w (%v)", op, offsets.ErrClosed, err)
	}
	return fmt.Errorf("offsetstore/mysql: %s: %w", op, err)
}

// validTopics checks what offsets.ValidateLoad leaves to the store: it
// has checked the group (message.ValidateGroup: UTF-8, at most 255 bytes,
// no spaces); the topics are checked here.
func validTopics(ps []message.Position) error {
	for _, p := range ps {
		switch {
		case !utf8.ValidString(p.Topic):
			return fmt.Errorf("%w: topic %s is not UTF-8", offsets.ErrInvalid, strconv.QuoteToASCII(p.Topic))
		case utf8.RuneCountInString(p.Topic) > MaxNameLength:
			return fmt.Errorf("%w: topic is longer than %d characters", offsets.ErrInvalid, MaxNameLength)
		case strings.HasSuffix(p.Topic, " "):
			// VARCHAR comparison ignores trailing spaces: "t " would be "t".
			return fmt.Errorf("%w: topic %q ends in a space", offsets.ErrInvalid, p.Topic)
		}
	}
	return nil
}

// Commit upserts positions in one transaction.
func (s *Store) Commit(ctx context.Context, group string, ps []message.Position) error {
	if err := offsets.ValidateCommit(group, ps); err != nil {
		return err
	}
	if err := validTopics(ps); err != nil {
		return err
	}
	db, table, err := s.handle()
	if err != nil || len(ps) == 0 {
		return err
	}
	// The later position of a partition wins; rows go in key order so
	// that concurrent commits take their row locks in the same order.
	type key struct {
		topic string
		part  message.Partition
	}
	last := make(map[key]message.Position, len(ps))
	for _, p := range ps {
		last[key{p.Topic, p.Partition}] = p
	}
	batch := make([]message.Position, 0, len(last))
	for _, p := range last {
		batch = append(batch, p)
	}
	sort.Slice(batch, func(i, j int) bool { return positionLess(batch[i], batch[j]) })

	for attempt := 1; ; attempt++ {
		err = s.commitTx(ctx, db, table, group, batch)
		if err == nil || attempt == txAttempts || !retryable(err) || ctx.Err() != nil {
			break
		}
		_ = txRetry.Sleep(ctx, attempt) // a done ctx ends the loop above
	}
	if err != nil {
		return s.wrapErr("commit", err)
	}
	return nil
}

func positionLess(a, b message.Position) bool {
	if a.Topic != b.Topic {
		return a.Topic < b.Topic
	}
	return a.Partition.Compare(b.Partition) < 0
}

func retryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == errDeadlock || me.Number == errLockWaitTimeout)
}

func (s *Store) commitTx(ctx context.Context, db *sql.DB, table, group string, batch []message.Position) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for len(batch) > 0 {
		n := min(len(batch), rowsPerStatement)
		var q strings.Builder
		q.WriteString("INSERT INTO ")
		q.WriteString(table)
		q.WriteString(" (`topic`, `partition`, `group_id`, `offset`, `msg_id`) VALUES ")
		args := make([]any, 0, 5*n)
		for i, p := range batch[:n] {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?)")
			args = append(args, p.Topic, p.Partition.String(), group, p.Offset, p.MsgID)
		}
		q.WriteString(" ON DUPLICATE KEY UPDATE `offset` = VALUES(`offset`), `msg_id` = VALUES(`msg_id`)")
		if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
			return err
		}
		batch = batch[n:]
	}
	return tx.Commit()
}

// rowKey identifies a row by its three key columns.
type rowKey struct{ topic, partition, group string }

// Load reads positions with one SELECT per 500 partitions.
func (s *Store) Load(ctx context.Context, group string, ps []message.Position) ([]message.Position, error) {
	if err := offsets.ValidateLoad(group, ps); err != nil {
		return nil, err
	}
	if err := validTopics(ps); err != nil {
		return nil, err
	}
	db, table, err := s.handle()
	if err != nil {
		return nil, err
	}
	out := make([]message.Position, len(ps))
	for i, p := range ps {
		out[i] = offsets.NotStored(p)
	}
	if len(ps) == 0 {
		return out, nil
	}
	want := make(map[rowKey][]int, len(ps)) // row -> indexes in ps
	var order []rowKey
	for i, p := range ps {
		rk := rowKey{p.Topic, p.Partition.String(), group}
		if _, ok := want[rk]; !ok {
			order = append(order, rk)
		}
		want[rk] = append(want[rk], i)
	}
	for len(order) > 0 {
		n := min(len(order), rowsPerStatement)
		if err := s.loadChunk(ctx, db, table, order[:n], want, out); err != nil {
			return nil, s.wrapErr("load", err)
		}
		order = order[n:]
	}
	return out, nil
}

func (s *Store) loadChunk(ctx context.Context, db *sql.DB, table string, chunk []rowKey, want map[rowKey][]int, out []message.Position) error {
	var q strings.Builder
	q.WriteString("SELECT `topic`, `partition`, `group_id`, `offset`, `msg_id` FROM ")
	q.WriteString(table)
	q.WriteString(" WHERE ")
	args := make([]any, 0, 3*len(chunk))
	for i, rk := range chunk {
		if i > 0 {
			q.WriteString(" OR ")
		}
		q.WriteString("(`topic` = ? AND `partition` = ? AND `group_id` = ?)")
		args = append(args, rk.topic, rk.partition, rk.group)
	}
	rows, err := db.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var rk rowKey
		var off, id int64
		if err := rows.Scan(&rk.topic, &rk.partition, &rk.group, &off, &id); err != nil {
			return err
		}
		for _, i := range want[rk] {
			out[i].Offset, out[i].MsgID = off, id
		}
	}
	return rows.Err()
}

// Close closes the database handle. Idempotent; later calls fail with
// offsets.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.db != nil {
		return s.db.Close()
	}
	return nil
}
