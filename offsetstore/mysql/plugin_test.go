package mysql_test

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/offsetstore"
	"github.com/metaq-go/metaq/offsetstore/offsetstoretest"
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
	"github.com/metaq-go/metaq/sdk/offsets"
)

const pluginPkg = "github.com/metaq-go/metaq/cmd/metaq-offsetstore-mysql"

func newSupervisor(t *testing.T) *host.Supervisor {
	t.Helper()
	sup := host.NewSupervisor(host.Options{
		Logger: hclog.New(&hclog.LoggerOptions{Name: "plugins", Level: hclog.Warn, Output: os.Stderr}),
	})
	t.Cleanup(func() { sup.Close() })
	return sup
}

// openPlugin launches the mysql plugin binary through a supervisor, as
// the broker does, and returns the remote store Open gives.
func openPlugin(t *testing.T, sup *host.Supervisor, name string, conf map[string]string) (offsetstore.Store, error) {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := offsetstore.Open(c, offsetstore.OpenOptions{
		Name:       name,
		Config:     conf,
		Supervisor: sup,
		Plugin:     &host.Spec{Kind: plugins.KindOffsetStore, Name: name, Path: testsvc.GoBuild(t, pluginPkg)},
	})
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

func TestPluginConformance(t *testing.T) {
	t.Parallel()
	dsn := testsvc.MariaDB(t)
	sup := newSupervisor(t)
	newStore := func(t *testing.T) offsets.Store {
		s, err := openPlugin(t, sup, "mysql", map[string]string{"dsn": dsn})
		require.NoError(t, err)
		return s
	}
	offsetstoretest.Run(t, newStore)
	offsetstoretest.RunDurable(t, newStore)
}

// TestPluginErrorsAndRestart: errors keep their identity across the
// process boundary; after kill -9 of the plugin, commits fail until the
// supervisor has restarted it, then work again (re-initialised).
func TestPluginErrorsAndRestart(t *testing.T) {
	t.Parallel()
	dsn := testsvc.MariaDB(t)
	sup := newSupervisor(t)
	_, err := openPlugin(t, sup, "mysql-bad", map[string]string{"table": "x"})
	require.ErrorIs(t, err, offsetstore.ErrBadConfig, "a missing dsn must come back as ErrBadConfig")

	s, err := openPlugin(t, sup, "mysql", map[string]string{"dsn": dsn, "table": "restart"})
	require.NoError(t, err)
	require.ErrorIs(t, commit(ctx(t), s, []entry{{Key: key{Group: "g ", Topic: "t"}, Offset: 1}}), offsets.ErrInvalid)
	k := key{Group: fmt.Sprintf("r%d", time.Now().UnixNano()), Topic: "t", BrokerID: 1, Partition: 0}
	require.NoError(t, commit(ctx(t), s, []entry{{Key: k, Offset: 1, MsgID: 1}}))

	var pid int
	for _, inf := range sup.List() {
		if inf.Name == "mysql" {
			pid = inf.PID
		}
	}
	require.NotZero(t, pid, "supervisor reports no pid for the plugin")
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	deadline := time.Now().Add(20 * time.Second)
	for off := int64(2); ; off++ {
		err := commit(ctx(t), s, []entry{{Key: k, Offset: off, MsgID: off}})
		if err == nil {
			res, lerr := load(ctx(t), s, []key{k})
			require.NoError(t, lerr)
			require.Equal(t, off, res[0].Offset, "a successful commit must be stored")
			break
		}
		require.True(t, time.Now().Before(deadline), "plugin not back: %v", err)
		time.Sleep(20 * time.Millisecond)
	}
}
