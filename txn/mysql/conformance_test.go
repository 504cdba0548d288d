package mysql_test

import (
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/txn"
	"github.com/metaq-go/metaq/txn/mysql"
	"github.com/metaq-go/metaq/txn/txntest"
)

// TestResourceConformance runs the txn.Resource suite against real
// MariaDB: each subtest on a table of its own; a session is a connection
// of a pool of its own, a crash closes that pool and waits until the
// server has let the session go; the work is one row.
func TestResourceConformance(t *testing.T) {
	t.Parallel()
	dsn := testsvc.MariaDB(t)
	admin := openDB(t, dsn)
	n := 0
	txntest.RunResource(t, func(t *testing.T) *txntest.ResourceEnv {
		n++
		table := fmt.Sprintf("conf_%d_%d", time.Now().UnixNano(), n)
		_, err := admin.ExecContext(ctx(t), "CREATE TABLE "+table+" (tag VARCHAR(64) NOT NULL) ENGINE=InnoDB")
		require.NoError(t, err)
		var mu sync.Mutex
		type session struct {
			db *sql.DB
			id int64
		}
		sessions := map[txn.Resource]session{}
		return &txntest.ResourceEnv{
			Open: func(t *testing.T) txn.Resource {
				db, err := sql.Open("mysql", dsn)
				require.NoError(t, err)
				t.Cleanup(func() { db.Close() })
				r := resource(t, ctx(t), db, "mariadb")
				var id int64
				require.NoError(t, r.Conn().QueryRowContext(ctx(t), "SELECT CONNECTION_ID()").Scan(&id))
				mu.Lock()
				sessions[r] = session{db, id}
				mu.Unlock()
				return r
			},
			Work: func(t *testing.T, r txn.Resource, tag string) {
				_, err := r.(*mysql.Resource).Conn().ExecContext(ctx(t), "INSERT INTO "+table+" VALUES (?)", tag)
				require.NoError(t, err)
			},
			Count: func(t *testing.T, tag string) int {
				var c int
				require.NoError(t, admin.QueryRowContext(ctx(t), "SELECT COUNT(*) FROM "+table+" WHERE tag = ?", tag).Scan(&c))
				return c
			},
			Crash: func(t *testing.T, r txn.Resource) {
				mu.Lock()
				s := sessions[r]
				mu.Unlock()
				require.NoError(t, r.(*mysql.Resource).Conn().Close())
				require.NoError(t, s.db.Close())
				require.Eventually(t, func() bool {
					var c int
					require.NoError(t, admin.QueryRowContext(ctx(t), "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", s.id).Scan(&c))
					return c == 0
				}, 30*time.Second, 20*time.Millisecond, "the server lets session %d go", s.id)
			},
		}
	})
}
