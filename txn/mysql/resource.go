// Package mysql is MySQL/MariaDB for txn: a txn.Resource (XA branches on
// one dedicated connection) and a txn.Coordinator that keeps its decision
// log in a table (served as the plugin binary cmd/metaq-txn-mysql).
//
// A Resource runs XA START, END, PREPARE, COMMIT, ROLLBACK and RECOVER
// through go-sql-driver/mysql on one *sql.Conn (db.Conn): XA state belongs
// to a session, so the application's statements of a branch go through
// that same connection, between Enlist and Commit/Rollback:
//
//	conn, _ := db.Conn(ctx)
//	r, _ := mysql.NewResource(conn, "accounts")
//	g, _ := manager.Begin(ctx)
//	g.Enlist(ctx, r)
//	conn.ExecContext(ctx, "UPDATE account SET balance = balance - 10 WHERE id = 1")
//	g.Commit(ctx)
//
// MariaDB keeps a prepared XA transaction when its client disconnects
// (10.5 and later) and so does MySQL (5.7.7 and later): after the
// application dies, Manager.Recover commits or rolls it back through any
// new connection. XA RECOVER needs the privilege MySQL 8 calls
// XA_RECOVER_ADMIN (MariaDB: SUPER).
package mysql

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/go-sql-driver/mysql"

	"github.com/metaq-go/metaq/txn"
)

// Resource is one MySQL/MariaDB session as a txn.Resource. It is used by
// one global transaction at a time (as its connection is); Recover may run
// on it between transactions.
type Resource struct {
	conn *sql.Conn
	name string
}

var _ txn.Resource = (*Resource)(nil)

// NewResource returns a Resource on conn, a connection dedicated to it
// (db.Conn). name names it in the decision log (txn.ValidateResourceName)
// and must stay the same across restarts: use one name per database.
func NewResource(conn *sql.Conn, name string) (*Resource, error) {
	if conn == nil {
		return nil, fmt.Errorf("%w: txn/mysql: nil connection", txn.ErrInvalid)
	}
	if err := txn.ValidateResourceName(name); err != nil {
		return nil, err
	}
	return &Resource{conn: conn, name: name}, nil
}

// Name is the resource's name.
func (r *Resource) Name() string { return r.name }

// Conn is the resource's connection, for the branch's statements.
func (r *Resource) Conn() *sql.Conn { return r.conn }

// xidSQL is x as MySQL's xid: X'gtrid',X'bqual',formatID.
func xidSQL(x txn.XID) (string, error) {
	if err := x.Validate(); err != nil {
		return "", err
	}
	if x.FormatID < 0 {
		return "", fmt.Errorf("%w: txn/mysql: format id %d (MySQL's is unsigned)", txn.ErrInvalid, x.FormatID)
	}
	return "X'" + hex.EncodeToString(x.Gtrid) + "',X'" + hex.EncodeToString(x.Bqual) + "'," + strconv.FormatInt(int64(x.FormatID), 10), nil
}

func (r *Resource) exec(ctx context.Context, op string, x txn.XID, suffix string) error {
	s, err := xidSQL(x)
	if err != nil {
		return err
	}
	if _, err := r.conn.ExecContext(ctx, "XA "+op+" "+s+suffix); err != nil {
		return xaError("XA "+op+" "+x.String(), err)
	}
	return nil
}

// Start runs XA START.
func (r *Resource) Start(ctx context.Context, x txn.XID) error { return r.exec(ctx, "START", x, "") }

// End runs XA END.
func (r *Resource) End(ctx context.Context, x txn.XID) error { return r.exec(ctx, "END", x, "") }

// Prepare runs XA PREPARE. MySQL does not report read-only branches, so
// the vote is always txn.VoteOK.
func (r *Resource) Prepare(ctx context.Context, x txn.XID) (txn.Vote, error) {
	if err := r.exec(ctx, "PREPARE", x, ""); err != nil {
		return txn.VoteOK, err
	}
	return txn.VoteOK, nil
}

// Commit runs XA COMMIT, with ONE PHASE when onePhase.
func (r *Resource) Commit(ctx context.Context, x txn.XID, onePhase bool) error {
	suffix := ""
	if onePhase {
		suffix = " ONE PHASE"
	}
	return r.exec(ctx, "COMMIT", x, suffix)
}

// Rollback runs XA ROLLBACK.
func (r *Resource) Rollback(ctx context.Context, x txn.XID) error {
	return r.exec(ctx, "ROLLBACK", x, "")
}

// Recover runs XA RECOVER: the prepared XA transactions of the whole
// server, of every client.
func (r *Resource) Recover(ctx context.Context) ([]txn.XID, error) {
	rows, err := r.conn.QueryContext(ctx, "XA RECOVER")
	if err != nil {
		return nil, xaError("XA RECOVER", err)
	}
	defer rows.Close()
	var out []txn.XID
	for rows.Next() {
		var format, gl, bl int64
		var data []byte
		if err := rows.Scan(&format, &gl, &bl, &data); err != nil {
			return nil, xaError("XA RECOVER", err)
		}
		if gl < 0 || bl < 0 || gl+bl != int64(len(data)) || format < -1<<31 || format >= 1<<31 {
			return nil, &txn.XAError{Code: txn.XAErRMErr, Msg: fmt.Sprintf("XA RECOVER: row with format %d, lengths %d+%d, %d bytes of data", format, gl, bl, len(data))}
		}
		x := txn.XID{FormatID: int32(format), Gtrid: data[:gl:gl], Bqual: data[gl:]}
		if bl == 0 {
			x.Bqual = nil
		}
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		return nil, xaError("XA RECOVER", err)
	}
	return out, nil
}

// Forget does nothing: MySQL makes no heuristic decisions, so there is
// never a heuristic branch to forget.
func (r *Resource) Forget(context.Context, txn.XID) error { return nil }

// The server's XA error numbers (ER_XAER_*, ER_XA_RB*).
var xaErrors = map[uint16]txn.XACode{
	1397: txn.XAErNotA,     // ER_XAER_NOTA
	1398: txn.XAErInval,    // ER_XAER_INVAL
	1399: txn.XAErRMFail,   // ER_XAER_RMFAIL: not allowed in this XA state
	1400: txn.XAErOutside,  // ER_XAER_OUTSIDE
	1401: txn.XAErRMErr,    // ER_XAER_RMERR
	1402: txn.XARBRollback, // ER_XA_RBROLLBACK
	1440: txn.XAErDupID,    // ER_XAER_DUPID
	1613: txn.XARBTimeout,  // ER_XA_RBTIMEOUT
	1614: txn.XARBDeadlock, // ER_XA_RBDEADLOCK
	1213: txn.XARBDeadlock, // ER_LOCK_DEADLOCK: the transaction was rolled back
}

// xaError turns a driver error into a *txn.XAError: the server's XA
// errors by number (other server errors are XAER_RMERR); anything else (a
// lost connection, a cancelled context) is XAER_RMFAIL.
func xaError(what string, err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		code, ok := xaErrors[me.Number]
		if !ok {
			code = txn.XAErRMErr
		}
		return &txn.XAError{Code: code, Msg: what + ": " + me.Message, Err: err}
	}
	return &txn.XAError{Code: txn.XAErRMFail, Msg: what + ": " + err.Error(), Err: err}
}
