package file_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/offsetstore"
	"github.com/metaq-go/metaq/offsetstore/file"
	"github.com/metaq-go/metaq/offsetstore/offsetstoretest"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
)

const crashEnv = "METAQ_FILESTORE_CRASH_HELPER"

func TestMain(m *testing.M) {
	if path := os.Getenv(crashEnv); path != "" {
		crashHelper(path)
		return
	}
	os.Exit(m.Run())
}

// crashHelper commits increasing offsets to path until it is killed.
func crashHelper(path string) {
	s, err := file.Open(path)
	if err != nil {
		os.Exit(3)
	}
	batch := make([]message.Position, 200)
	for n := int64(1); ; n++ {
		for i := range batch {
			batch[i] = message.Position{Topic: "t", Partition: message.Partition{Partition: int32(i)}, Offset: n, MsgID: n}
		}
		if err := s.Commit(context.Background(), "g", batch); err != nil {
			os.Exit(4)
		}
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	offsetstoretest.Run(t, func(t *testing.T) offsets.Store {
		s, err := file.Open(filepath.Join(t.TempDir(), "offsets.json"))
		require.NoError(t, err)
		return s
	})
}

func TestConformanceWrapped(t *testing.T) {
	t.Parallel()
	offsetstoretest.Run(t, func(t *testing.T) offsets.Store {
		s, err := offsetstore.Open(context.Background(), offsetstore.OpenOptions{
			Name:     file.Name,
			Config:   map[string]string{"path": filepath.Join(t.TempDir(), "sub", "offsets.json")},
			Builtins: map[string]func() offsetstore.Store{file.Name: file.New},
		})
		require.NoError(t, err)
		return s
	})
}

func TestDurable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "offsets.json")
	offsetstoretest.RunDurable(t, func(t *testing.T) offsets.Store {
		s, err := file.Open(path)
		require.NoError(t, err)
		return s
	})
}

func TestBadConfig(t *testing.T) {
	t.Parallel()
	s := file.New()
	err := s.Init(context.Background(), &offsetstore.InitRequest{})
	require.ErrorIs(t, err, offsetstore.ErrBadConfig)
	_, err = s.Load(context.Background(), "g", []message.Position{{Topic: "t"}})
	require.ErrorIs(t, err, offsetstore.ErrNotInitialized)
	err = s.Init(context.Background(), &offsetstore.InitRequest{Config: map[string]string{"path": "x", "bogus": "1"}})
	require.ErrorIs(t, err, offsetstore.ErrBadConfig)
}

func TestCorruptFileRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "offsets.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"version":1,"groups":{"g":[{"topic":`), 0o644))
	_, err := file.Open(path)
	require.ErrorContains(t, err, "corrupt")
}

func TestLeftoverTempIgnored(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "offsets.json")
	s, err := file.Open(path)
	require.NoError(t, err)
	e := message.Position{Topic: "t", Offset: 5, MsgID: 6}
	require.NoError(t, s.Commit(context.Background(), "g", []message.Position{e}))
	require.NoError(t, s.Close())
	// A crash between creating the temp file and renaming it.
	require.NoError(t, os.WriteFile(path+".tmp-123", []byte(`{"version":1,"gro`), 0o644))
	s, err = file.Open(path)
	require.NoError(t, err)
	defer s.Close()
	res, err := s.Load(context.Background(), "g", []message.Position{e})
	require.NoError(t, err)
	require.Equal(t, e, res[0])
	_, err = os.Stat(path + ".tmp-123")
	require.ErrorIs(t, err, os.ErrNotExist, "leftover temp file is removed")
}

// TestCrashMidWrite kills a process that commits in a tight loop and checks
// the file is whole: every partition holds the same, complete commit.
func TestCrashMidWrite(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for round := 0; round < 5; round++ {
		path := filepath.Join(t.TempDir(), "offsets.json")
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashEnv+"="+path)
		require.NoError(t, cmd.Start())
		time.Sleep(time.Duration(150+round*37) * time.Millisecond)
		require.NoError(t, cmd.Process.Kill())
		_ = cmd.Wait()

		b, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			continue // killed before the first rename
		}
		require.NoError(t, err)
		var doc map[string]any
		require.NoError(t, json.Unmarshal(b, &doc), "torn offset file after kill -9")
		s, err := file.Open(path)
		require.NoError(t, err)
		keys := make([]message.Position, 200)
		for i := range keys {
			keys[i] = message.Position{Topic: "t", Partition: message.Partition{Partition: int32(i)}}
		}
		res, err := s.Load(context.Background(), "g", keys)
		require.NoError(t, err)
		for i, r := range res {
			require.GreaterOrEqual(t, r.Offset, int64(0), "partition %d", i)
			require.Equal(t, res[0].Offset, r.Offset, "partition "+strconv.Itoa(i)+" from another commit: batch not atomic")
		}
		require.NoError(t, s.Close())
	}
}

// TestGroupsSurviveReopen commits one offset per group and reopens the
// file: every group Commit accepted must read back as committed. Invalid
// UTF-8 names used to be accepted and then collapse into one JSON key
// ("g\ufffd"), so both groups lost their offsets on restart; Commit now
// refuses them, and Load too.
func TestGroupsSurviveReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "offsets.json")
	s, err := file.Open(path)
	require.NoError(t, err)
	groups := []string{"g", "g\xff", "g\xfe", "日本", "a/b", "g\x01", "."}
	accepted := map[string]int64{}
	for i, g := range groups {
		e := message.Position{Topic: "t", Offset: int64(100 + i), MsgID: 1}
		if err := s.Commit(ctx, g, []message.Position{e}); err != nil {
			require.ErrorIs(t, err, offsets.ErrInvalid, "%q", g)
			_, err = s.Load(ctx, g, []message.Position{e})
			require.ErrorIs(t, err, offsets.ErrInvalid, "%q", g)
			continue
		}
		accepted[g] = e.Offset
	}
	require.NoError(t, s.Close())

	s, err = file.Open(path)
	require.NoError(t, err)
	defer s.Close()
	for g, off := range accepted {
		res, err := s.Load(ctx, g, []message.Position{{Topic: "t"}})
		require.NoError(t, err)
		require.GreaterOrEqual(t, res[0].Offset, int64(0), "group %q lost by a reopen", g)
		require.Equal(t, off, res[0].Offset, "group %q", g)
	}
	require.Equal(t, map[string]int64{"g": 100, "日本": 103}, accepted)
}
