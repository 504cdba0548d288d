package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/offsetstore"
	"github.com/metaq-go/metaq/offsetstore/offsetstoretest"
	"github.com/metaq-go/metaq/plugins/host"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
)

// buildPlugin builds this example into a temp dir, once per test.
func buildPlugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "offsetstore-plugin")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Run())
	return bin
}

func openPlugin(t *testing.T, bin, path string) offsetstore.Store {
	t.Helper()
	sup := host.NewSupervisor(host.Options{Logger: hclog.New(&hclog.LoggerOptions{Output: io.Discard})})
	t.Cleanup(func() { sup.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := offsetstore.Open(ctx, offsetstore.OpenOptions{
		Name: "jsonl", Config: map[string]string{"path": path},
		Plugin: &host.Spec{Path: bin}, Supervisor: sup,
	})
	require.NoError(t, err)
	return s
}

// TestPluginConformance runs the built binary through the supervisor and
// the remote adapter.
func TestPluginConformance(t *testing.T) {
	t.Parallel()
	bin := buildPlugin(t)
	offsetstoretest.Run(t, func(t *testing.T) offsets.Store {
		return openPlugin(t, bin, filepath.Join(t.TempDir(), "o.jsonl"))
	})
	path := filepath.Join(t.TempDir(), "o.jsonl")
	offsetstoretest.RunDurable(t, func(t *testing.T) offsets.Store { return openPlugin(t, bin, path) })
}

// TestInProcessConformance runs the same store in-process.
func TestInProcessConformance(t *testing.T) {
	t.Parallel()
	open := func(t *testing.T, path string) offsetstore.Store {
		s := &store{}
		require.NoError(t, s.Init(context.Background(), &offsetstore.InitRequest{Config: map[string]string{"path": path}}))
		return s
	}
	offsetstoretest.Run(t, func(t *testing.T) offsets.Store { return open(t, filepath.Join(t.TempDir(), "o.jsonl")) })
	path := filepath.Join(t.TempDir(), "o.jsonl")
	offsetstoretest.RunDurable(t, func(t *testing.T) offsets.Store { return open(t, path) })
}

func TestTornTailIgnored(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "o.jsonl")
	data := `{"e":[{"g":"g","t":"t","b":0,"p":0,"o":5,"m":6}]}` + "\n" + `{"e":[{"g":"g","t":"t","b":0,"p":0,"o":9`
	require.NoError(t, os.WriteFile(path, []byte(data), 0o644))
	s := &store{}
	require.NoError(t, s.Init(context.Background(), &offsetstore.InitRequest{Config: map[string]string{"path": path}}))
	k := message.Position{Topic: "t"}
	res, err := s.Load(context.Background(), "g", []message.Position{k})
	require.NoError(t, err)
	require.Equal(t, message.Position{Topic: "t", Offset: 5, MsgID: 6}, res[0])
	require.NoError(t, s.Commit(context.Background(), "g", []message.Position{{Topic: "t", Offset: 7, MsgID: 8}}))
	require.NoError(t, s.Close())
	s = &store{}
	require.NoError(t, s.Init(context.Background(), &offsetstore.InitRequest{Config: map[string]string{"path": path}}))
	res, err = s.Load(context.Background(), "g", []message.Position{k})
	require.NoError(t, err)
	require.Equal(t, int64(7), res[0].Offset)
}
