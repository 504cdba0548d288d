package offsetstore_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/offsetstore"
	"github.com/metaq-go/metaq/offsetstore/file"
	"github.com/metaq-go/metaq/offsetstore/offsetstoretest"
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
)

// helperEnv makes the test binary serve a store as a plugin (go-plugin's
// helper-process pattern): "file" or "memory".
const helperEnv = "METAQ_OFFSETSTORE_TEST_PLUGIN"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "file":
		offsetstore.Serve(file.New())
		os.Exit(0)
	case "memory":
		offsetstore.Serve(newMemStore())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// memKey is what memStore keeps a position under.
type memKey struct {
	group, topic string
	part         message.Partition
}

// memStore is an in-memory store for measuring the plugin boundary alone.
type memStore struct {
	mu     sync.Mutex
	m      map[memKey]message.Position
	closed bool
}

func newMemStore() offsetstore.Store { return &memStore{m: map[memKey]message.Position{}} }

func (s *memStore) Init(context.Context, *offsetstore.InitRequest) error { return nil }
func (s *memStore) Commit(_ context.Context, g string, ps []message.Position) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return offsets.ErrClosed
	}
	for _, p := range ps {
		s.m[memKey{g, p.Topic, p.Partition}] = p
	}
	return nil
}
func (s *memStore) Load(_ context.Context, g string, ps []message.Position) ([]message.Position, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, offsets.ErrClosed
	}
	out := make([]message.Position, len(ps))
	for i, p := range ps {
		out[i] = offsets.NotStored(p)
		if e, ok := s.m[memKey{g, p.Topic, p.Partition}]; ok {
			out[i] = e
		}
	}
	return out, nil
}
func (s *memStore) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

func quietSupervisor(t testing.TB) *host.Supervisor {
	sup := host.NewSupervisor(host.Options{Logger: hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Error})})
	t.Cleanup(func() { sup.Close() })
	return sup
}

// openRemote runs the test binary as an offsetstore plugin serving kind.
func openRemote(t testing.TB, sup *host.Supervisor, kind string, config map[string]string) offsetstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := offsetstore.Open(ctx, offsetstore.OpenOptions{
		Name:       "test-" + kind,
		Config:     config,
		Plugin:     &host.Spec{Kind: plugins.KindOffsetStore, Path: os.Args[0], Env: []string{helperEnv + "=" + kind, "GORACE=" + os.Getenv("GORACE")}},
		Supervisor: sup,
	})
	require.NoError(t, err)
	return s
}

func TestRemoteConformance(t *testing.T) {
	t.Parallel()
	offsetstoretest.Run(t, func(t *testing.T) offsets.Store {
		return openRemote(t, quietSupervisor(t), "file", map[string]string{"path": filepath.Join(t.TempDir(), "o.json")})
	})
}

func TestRemoteDurable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "o.json")
	offsetstoretest.RunDurable(t, func(t *testing.T) offsets.Store {
		// A new process each time: state lives only in the file.
		return openRemote(t, quietSupervisor(t), "file", map[string]string{"path": path})
	})
}

func TestRemoteBadConfigCrossesBoundary(t *testing.T) {
	t.Parallel()
	sup := quietSupervisor(t)
	_, err := offsetstore.Open(context.Background(), offsetstore.OpenOptions{
		Name:       "bad",
		Config:     map[string]string{"nope": "1"},
		Plugin:     &host.Spec{Path: os.Args[0], Env: []string{helperEnv + "=file", "GORACE=" + os.Getenv("GORACE")}},
		Supervisor: sup,
	})
	require.ErrorIs(t, err, offsetstore.ErrBadConfig)
	require.ErrorContains(t, err, `"path"`)
}

func TestRemoteInvalidEntryRejected(t *testing.T) {
	t.Parallel()
	s := openRemote(t, quietSupervisor(t), "memory", nil)
	err := s.Commit(context.Background(), "g", []message.Position{{Offset: 1}})
	require.ErrorIs(t, err, offsets.ErrInvalid)
}

// TestRemoteKilled: once the plugin process is gone, calls fail with
// plugins.ErrUnavailable (never a silent success).
func TestRemoteKilled(t *testing.T) {
	t.Parallel()
	sup := quietSupervisor(t)
	s := openRemote(t, sup, "memory", nil)
	e := []message.Position{{Topic: "t", Offset: 1, MsgID: 2}}
	require.NoError(t, s.Commit(context.Background(), "g", e))
	list := sup.List()
	require.Len(t, list, 1)
	require.NotZero(t, list[0].PID)
	require.NoError(t, syscall.Kill(list[0].PID, syscall.SIGKILL))
	var err error
	require.Eventually(t, func() bool {
		err = s.Commit(context.Background(), "g", e)
		return err != nil
	}, 5*time.Second, 10*time.Millisecond)
	require.ErrorIs(t, err, plugins.ErrUnavailable, "a dead plugin answers ErrUnavailable")
	_, err = s.Load(context.Background(), "g", e)
	if err != nil { // a restart (plugins/host) may already have brought it back
		require.ErrorIs(t, err, plugins.ErrUnavailable)
	}
	require.Greater(t, sup.List()[0].Errors, int64(0), "failures are counted")
}

// BenchmarkStore measures Commit in-process and across the plugin boundary.
// "builtin" and "remote" use the file store (fsync per commit); the
// "memory" pair isolates the per-call cost of the boundary.
func BenchmarkStore(b *testing.B) {
	type mk func(b *testing.B) offsetstore.Store
	cases := []struct {
		name string
		open mk
	}{
		{"builtin", func(b *testing.B) offsetstore.Store {
			s, err := offsetstore.Open(context.Background(), offsetstore.OpenOptions{Name: "file",
				Config:   map[string]string{"path": filepath.Join(b.TempDir(), "o.json")},
				Builtins: map[string]func() offsetstore.Store{"file": file.New}})
			require.NoError(b, err)
			return s
		}},
		{"remote", func(b *testing.B) offsetstore.Store {
			return openRemote(b, quietSupervisor(b), "file", map[string]string{"path": filepath.Join(b.TempDir(), "o.json")})
		}},
		{"builtin-memory", func(b *testing.B) offsetstore.Store {
			return offsetstore.Wrap(newMemStore(), 0)
		}},
		{"remote-memory", func(b *testing.B) offsetstore.Store {
			return openRemote(b, quietSupervisor(b), "memory", nil)
		}},
	}
	for _, c := range cases {
		for _, n := range []int{1, 16, 256} {
			b.Run(fmt.Sprintf("%s/batch=%d", c.name, n), func(b *testing.B) {
				s := c.open(b)
				defer s.Close()
				batch := make([]message.Position, n)
				for i := range batch {
					batch[i] = message.Position{Topic: "t", Partition: message.Partition{BrokerID: 1, Partition: int32(i)}}
				}
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for j := range batch {
						batch[j].Offset, batch[j].MsgID = int64(i), int64(i)
					}
					if err := s.Commit(ctx, "bench", batch); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "entries/s")
			})
		}
	}
}
