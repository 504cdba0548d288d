package mysql_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
	"github.com/metaq-go/metaq/txn"
	"github.com/metaq-go/metaq/txn/mysql"
	"github.com/metaq-go/metaq/txn/txntest"
)

const pluginPkg = "github.com/metaq-go/metaq/cmd/metaq-txn-mysql"

func openCoordinator(t *testing.T, conf map[string]string) txn.Coordinator {
	t.Helper()
	c := mysql.NewCoordinator()
	require.NoError(t, c.Init(ctx(t), &txn.InitRequest{Config: conf}))
	return c
}

// TestCoordinatorConformance: the MySQL coordinator in process.
func TestCoordinatorConformance(t *testing.T) {
	t.Parallel()
	txntest.Run(t, func(t *testing.T) func() txn.Coordinator {
		dsn := testsvc.MariaDB(t)
		return func() txn.Coordinator { return openCoordinator(t, map[string]string{"dsn": dsn}) }
	})
}

func pluginLogger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "plugins", Level: hclog.Warn, Output: os.Stderr})
}

// openPlugin launches the cmd/metaq-txn-mysql binary, as an application
// does, under a supervisor closed with the coordinator.
func openPlugin(t *testing.T, conf map[string]string) (txn.Coordinator, error) {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return txn.Open(c, txn.OpenOptions{
		Name:   "mysql",
		Config: conf,
		Plugin: &host.Spec{Kind: plugins.KindCoordinator, Path: testsvc.GoBuild(t, pluginPkg)},
		Logger: pluginLogger(),
	})
}

// TestPluginConformance: the plugin binary; every reopen is a new plugin
// process on the same table.
func TestPluginConformance(t *testing.T) {
	t.Parallel()
	txntest.Run(t, func(t *testing.T) func() txn.Coordinator {
		dsn := testsvc.MariaDB(t)
		return func() txn.Coordinator {
			c, err := openPlugin(t, map[string]string{"dsn": dsn, "table": "decisions"})
			require.NoError(t, err)
			return c
		}
	})
}

func TestPluginBadConfig(t *testing.T) {
	t.Parallel()
	_, err := openPlugin(t, map[string]string{"table": "x"})
	require.ErrorIs(t, err, txn.ErrBadConfig, "a missing dsn comes back as ErrBadConfig")
	_, err = openPlugin(t, map[string]string{"dsn": testsvc.MariaDB(t), "durability_check": "maybe"})
	require.ErrorIs(t, err, txn.ErrBadConfig)
}

// TestInstancesRecoverEachOther: two instances of an application, each
// with its own coordinator plugin process on one decision table. The
// first dies after its commit decision is logged; the second recovers
// the first's transaction (naming its owner) and leaves its own alone.
func TestInstancesRecoverEachOther(t *testing.T) {
	t.Parallel()
	bk := newBank(t)
	logDSN := testsvc.MariaDB(t)
	c1, err := openPlugin(t, map[string]string{"dsn": logDSN})
	require.NoError(t, err)
	c2, err := openPlugin(t, map[string]string{"dsn": logDSN})
	require.NoError(t, err)
	defer c2.Close()
	owner1, owner2 := txntest.Owner("app1"), txntest.Owner("app2")
	dbA, dbB := openDB(t, bk.dsnA), openDB(t, bk.dsnB)
	m1, err := txn.NewManager(&afterLog{Coordinator: c1}, txn.ManagerOptions{Owner: owner1})
	require.NoError(t, err)
	ra, rb := resource(t, ctx(t), dbA, "bank"), resource(t, ctx(t), dbB, "events")
	require.ErrorIs(t, transfer(ctx(t), m1, ra, rb, 10, "t1"), txn.ErrInDoubt)
	// Instance 1 is gone: its sessions and its plugin process.
	require.NoError(t, ra.Conn().Close())
	require.NoError(t, rb.Conn().Close())
	require.NoError(t, dbA.Close())
	require.NoError(t, dbB.Close())
	require.NoError(t, c1.Close())

	m2, err := txn.NewManager(c2, txn.ManagerOptions{Owner: owner2})
	require.NoError(t, err)
	qa, qb := resource(t, ctx(t), bk.a, "bank"), resource(t, ctx(t), bk.b, "events")
	res, err := m2.Recover(ctx(t), txn.RecoverOptions{Resources: []txn.Resource{qa, qb}})
	require.NoError(t, err)
	require.Empty(t, res.Committed, "its own recovery leaves another owner's transactions alone")
	var res2 *txn.RecoverResult
	require.Eventually(t, func() bool { // until the server has dropped instance 1's sessions
		res2, err = m2.Recover(ctx(t), txn.RecoverOptions{Resources: []txn.Resource{qa, qb}, Owners: []string{owner1}})
		return err == nil
	}, 30*time.Second, 20*time.Millisecond)
	require.Len(t, res2.Forgotten, 1)
	x, y := bk.balances(t)
	require.Equal(t, [2]int64{90, 10}, [2]int64{x, y})
	require.Equal(t, 1, bk.events(t))
	resp, err := c2.Recover(ctx(t), &txn.RecoverRequest{})
	require.NoError(t, err)
	require.Empty(t, resp.Decisions)
}
