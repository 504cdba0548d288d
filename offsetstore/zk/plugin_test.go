package zk_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/offsetstore"
	"github.com/metaq-go/metaq/offsetstore/offsetstoretest"
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
	"github.com/metaq-go/metaq/sdk/offsets"
)

const pluginPkg = "github.com/metaq-go/metaq/cmd/metaq-offsetstore-zk"

// openPlugin launches the zk plugin binary through a supervisor, as the
// broker does, and returns the remote store Open gives.
func openPlugin(t *testing.T, sup *host.Supervisor, conf map[string]string) offsetstore.Store {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := offsetstore.Open(c, offsetstore.OpenOptions{
		Name:       "zk",
		Config:     conf,
		Supervisor: sup,
		Plugin:     &host.Spec{Kind: plugins.KindOffsetStore, Name: "zk", Path: testsvc.GoBuild(t, pluginPkg)},
	})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func newSupervisor(t *testing.T) *host.Supervisor {
	t.Helper()
	sup := host.NewSupervisor(host.Options{
		Logger: hclog.New(&hclog.LoggerOptions{Name: "plugins", Level: hclog.Warn, Output: os.Stderr}),
	})
	t.Cleanup(func() { sup.Close() })
	return sup
}

func TestPluginConformance(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	sup := newSupervisor(t)
	offsetstoretest.Run(t, func(t *testing.T) offsets.Store {
		return openPlugin(t, sup, map[string]string{"connect": addr, "root": "/plugin"})
	})
	offsetstoretest.RunDurable(t, func(t *testing.T) offsets.Store {
		return openPlugin(t, sup, map[string]string{"connect": addr, "root": "/plugin"})
	})
}

// TestPluginLayoutAndErrors: the plugin writes MetaQ's znodes, and its
// errors keep their identity across the process boundary.
func TestPluginLayoutAndErrors(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	sup := newSupervisor(t)
	s := openPlugin(t, sup, map[string]string{"connect": addr})
	g := fmt.Sprintf("plugin-%d", time.Now().UnixNano())
	require.NoError(t, commit(ctx(t), s, []entry{{Key: key{Group: g, Topic: "t", BrokerID: 2, Partition: 5}, Offset: 77, MsgID: 66}}))
	data, _, err := raw(t, addr).Get(zkpath.Offset(zkpath.DefaultRoot, g, "t", 2, 5))
	require.NoError(t, err)
	require.Equal(t, "66-77", string(data))

	err = commit(ctx(t), s, []entry{{Key: key{Group: "a/b", Topic: "t"}, Offset: 1}})
	require.ErrorIs(t, err, offsets.ErrInvalid)

	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = offsetstore.Open(c, offsetstore.OpenOptions{
		Name: "zk-bad", Config: map[string]string{"root": "/meta"}, Supervisor: sup,
		Plugin: &host.Spec{Kind: plugins.KindOffsetStore, Name: "zk-bad", Path: testsvc.GoBuild(t, pluginPkg)},
	})
	require.ErrorIs(t, err, offsetstore.ErrBadConfig, "a missing connect must come back as ErrBadConfig")
}

// TestPluginRestart: kill -9 the plugin; commits fail (never silently
// dropped) until the supervisor has restarted it, then work again with
// the store re-initialised.
func TestPluginRestart(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	sup := newSupervisor(t)
	s := openPlugin(t, sup, map[string]string{"connect": addr, "root": "/restart"})
	k := key{Group: fmt.Sprintf("r%d", time.Now().UnixNano()), Topic: "t", BrokerID: 1, Partition: 0}
	require.NoError(t, commit(ctx(t), s, []entry{{Key: k, Offset: 1, MsgID: 1}}))

	var pid int
	for _, inf := range sup.List() {
		if inf.Name == "zk" {
			pid = inf.PID
		}
	}
	require.NotZero(t, pid, "supervisor reports no pid for the plugin")
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))

	var sawFailure bool
	deadline := time.Now().Add(20 * time.Second)
	for off := int64(2); ; off++ {
		err := commit(ctx(t), s, []entry{{Key: k, Offset: off, MsgID: off}})
		if err == nil {
			res, lerr := load(ctx(t), s, []key{k})
			require.NoError(t, lerr)
			require.Equal(t, off, res[0].Offset, "a successful commit must be stored")
			break
		}
		if !sawFailure {
			t.Logf("commit while the plugin is down: %v (ErrUnavailable: %v)", err, errors.Is(err, plugins.ErrUnavailable))
		}
		sawFailure = true
		require.True(t, time.Now().Before(deadline), "plugin not back: %v", err)
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("saw a failed commit while the plugin was down: %v", sawFailure)
}
