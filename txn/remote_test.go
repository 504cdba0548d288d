package txn_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
	"github.com/metaq-go/metaq/txn"
	"github.com/metaq-go/metaq/txn/file"
	"github.com/metaq-go/metaq/txn/txntest"
)

// helperEnv makes the test binary serve the file coordinator as a plugin
// (go-plugin's helper-process pattern).
const helperEnv = "METAQ_TXN_TEST_PLUGIN"

// helperEnvs is the plugin's environment: helperEnv=file and the test's
// $GORACE (the plugin host passes on no other variable), so that a plugin
// process exits as the test binary does (make test: atexit_sleep_ms=0, not
// the race detector's 1 s sleep at every exit of a plugin).
func helperEnvs() []string {
	return []string{helperEnv + "=file", "GORACE=" + os.Getenv("GORACE")}
}

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "file" {
		txn.Serve(file.New())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func quietLogger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Error})
}

// openRemote runs the test binary as a coordinator plugin on the log at
// path, under a supervisor of its own (closed with the coordinator).
func openRemote(t testing.TB, path string, sup *host.Supervisor) txn.Coordinator {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := txn.Open(ctx, txn.OpenOptions{
		Name:       "test-file",
		Config:     map[string]string{"path": path},
		Plugin:     &host.Spec{Path: os.Args[0], Env: helperEnvs()},
		Supervisor: sup,
		Logger:     quietLogger(),
	})
	require.NoError(t, err)
	return c
}

// TestRemoteConformance: the remote adapter passes the suite; every
// reopen is a new plugin process on the same log.
func TestRemoteConformance(t *testing.T) {
	t.Parallel()
	txntest.Run(t, func(t *testing.T) func() txn.Coordinator {
		path := filepath.Join(t.TempDir(), "d.log")
		return func() txn.Coordinator { return openRemote(t, path, nil) }
	})
}

// TestBuiltinConformance: the builtin as Open returns it (middleware
// included) passes the suite.
func TestBuiltinConformance(t *testing.T) {
	t.Parallel()
	txntest.Run(t, func(t *testing.T) func() txn.Coordinator {
		path := filepath.Join(t.TempDir(), "d.log")
		return func() txn.Coordinator {
			c, err := txn.Open(context.Background(), txn.OpenOptions{Name: file.Name,
				Config: map[string]string{"path": path}, Builtins: map[string]func() txn.Coordinator{file.Name: file.New}})
			require.NoError(t, err)
			return c
		}
	})
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	_, err := txn.Open(context.Background(), txn.OpenOptions{Name: "nope"})
	require.ErrorIs(t, err, txn.ErrUnknownCoordinator)
	_, err = txn.Open(context.Background(), txn.OpenOptions{Name: "x",
		Plugin: &host.Spec{Kind: plugins.KindSelector, Path: os.Args[0]}})
	require.ErrorIs(t, err, plugins.ErrWrongKind)
	// A bad config crosses the process boundary as ErrBadConfig.
	_, err = txn.Open(context.Background(), txn.OpenOptions{Name: "bad", Config: map[string]string{"nope": "1"},
		Plugin: &host.Spec{Path: os.Args[0], Env: helperEnvs()}, Logger: quietLogger()})
	require.ErrorIs(t, err, txn.ErrBadConfig)
	require.ErrorContains(t, err, `"path"`)
}

// TestRemoteKilled: once the plugin process is gone, calls fail with
// plugins.ErrUnavailable (a Commit is never silently dropped); after the
// supervisor's restart the coordinator works again on the same log.
func TestRemoteKilled(t *testing.T) {
	t.Parallel()
	sup := host.NewSupervisor(host.Options{Logger: quietLogger()})
	t.Cleanup(func() { sup.Close() })
	path := filepath.Join(t.TempDir(), "d.log")
	c := openRemote(t, path, sup)
	owner := txntest.Owner("killed")
	resp, err := c.Begin(context.Background(), &txn.BeginRequest{Owner: owner})
	require.NoError(t, err)
	d := txn.Decision{XID: resp.XID, Owner: owner, Branches: []txn.Branch{{Resource: "r", Bqual: []byte("1")}}}
	require.NoError(t, c.Commit(context.Background(), &txn.CommitRequest{Decision: d}))

	list := sup.List()
	require.Len(t, list, 1)
	require.NoError(t, syscall.Kill(list[0].PID, syscall.SIGKILL))
	var sawUnavailable bool
	require.Eventually(t, func() bool {
		_, err := c.Recover(context.Background(), &txn.RecoverRequest{Owners: []string{owner}})
		if err != nil {
			require.ErrorIs(t, err, plugins.ErrUnavailable)
			sawUnavailable = true
			return false
		}
		return sawUnavailable || sup.List()[0].Restarts > 0
	}, 20*time.Second, 5*time.Millisecond)
	var got *txn.RecoverResponse
	require.Eventually(t, func() bool {
		got, err = c.Recover(context.Background(), &txn.RecoverRequest{Owners: []string{owner}})
		return err == nil
	}, 20*time.Second, 20*time.Millisecond)
	require.Len(t, got.Decisions, 1, "the restarted plugin reads the decision from its log")
	require.True(t, got.Decisions[0].XID.Equal(d.XID))
	require.Greater(t, sup.List()[0].Errors+sup.List()[0].Restarts, int64(0))
}

// BenchmarkCoordinator measures one transaction's coordinator calls
// (Begin, Commit of a decision with n branches, Forget) in process and
// across the plugin boundary, both on the file log (one fsync per Commit).
func BenchmarkCoordinator(b *testing.B) {
	for _, kind := range []string{"builtin", "remote"} {
		for _, n := range []int{1, 16} {
			b.Run(kind+"/branches="+strconv.Itoa(n), func(b *testing.B) {
				path := filepath.Join(b.TempDir(), "d.log")
				var c txn.Coordinator
				if kind == "remote" {
					c = openRemote(b, path, nil)
				} else {
					var err error
					c, err = txn.Open(context.Background(), txn.OpenOptions{Name: file.Name,
						Config: map[string]string{"path": path}, Builtins: map[string]func() txn.Coordinator{file.Name: file.New}})
					require.NoError(b, err)
				}
				defer c.Close()
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					resp, err := c.Begin(ctx, &txn.BeginRequest{Owner: "bench"})
					if err != nil {
						b.Fatal(err)
					}
					d := txn.Decision{XID: resp.XID, Owner: "bench"}
					for i := range n {
						d.Branches = append(d.Branches, txn.Branch{Resource: "r" + strconv.Itoa(i), Bqual: []byte(strconv.Itoa(i + 1))})
					}
					if err := c.Commit(ctx, &txn.CommitRequest{Decision: d}); err != nil {
						b.Fatal(err)
					}
					if err := c.Forget(ctx, &txn.ForgetRequest{XIDs: []txn.XID{d.XID}}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "txns/s")
			})
		}
	}
}
