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
	k := offsetstore.Key{Group: "g", Topic: "t", BrokerID: 0, Partition: 0}
	batch := make([]offsetstore.Entry, 200)
	for n := int64(1); ; n++ {
		for i := range batch {
			batch[i] = offsetstore.Entry{Key: k, Offset: n, MsgID: n}
			batch[i].Partition = int32(i)
		}
		if err := s.Commit(context.Background(), batch); err != nil {
			os.Exit(4)
		}
	}
}

func TestConformance(t *testing.T) {
	offsetstoretest.Run(t, func(t *testing.T) offsetstore.Store {
		s, err := file.Open(filepath.Join(t.TempDir(), "offsets.json"))
		require.NoError(t, err)
		return s
	})
}

func TestConformanceWrapped(t *testing.T) {
	offsetstoretest.Run(t, func(t *testing.T) offsetstore.Store {
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
	path := filepath.Join(t.TempDir(), "offsets.json")
	offsetstoretest.RunDurable(t, func(t *testing.T) offsetstore.Store {
		s, err := file.Open(path)
		require.NoError(t, err)
		return s
	})
}

func TestBadConfig(t *testing.T) {
	s := file.New()
	err := s.Init(context.Background(), &offsetstore.InitRequest{})
	require.ErrorIs(t, err, offsetstore.ErrBadConfig)
	_, err = s.Load(context.Background(), []offsetstore.Key{{Group: "g", Topic: "t"}})
	require.ErrorIs(t, err, offsetstore.ErrNotInitialized)
	err = s.Init(context.Background(), &offsetstore.InitRequest{Config: map[string]string{"path": "x", "bogus": "1"}})
	require.ErrorIs(t, err, offsetstore.ErrBadConfig)
}

func TestCorruptFileRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "offsets.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"version":1,"groups":{"g":[{"topic":`), 0o644))
	_, err := file.Open(path)
	require.ErrorContains(t, err, "corrupt")
}

func TestLeftoverTempIgnored(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "offsets.json")
	s, err := file.Open(path)
	require.NoError(t, err)
	e := offsetstore.Entry{Key: offsetstore.Key{Group: "g", Topic: "t"}, Offset: 5, MsgID: 6}
	require.NoError(t, s.Commit(context.Background(), []offsetstore.Entry{e}))
	require.NoError(t, s.Close())
	// A crash between creating the temp file and renaming it.
	require.NoError(t, os.WriteFile(path+".tmp-123", []byte(`{"version":1,"gro`), 0o644))
	s, err = file.Open(path)
	require.NoError(t, err)
	defer s.Close()
	res, err := s.Load(context.Background(), []offsetstore.Key{e.Key})
	require.NoError(t, err)
	require.Equal(t, e, res[0].Entry)
	_, err = os.Stat(path + ".tmp-123")
	require.ErrorIs(t, err, os.ErrNotExist, "leftover temp file is removed")
}

// TestCrashMidWrite kills a process that commits in a tight loop and checks
// the file is whole: every partition holds the same, complete commit.
func TestCrashMidWrite(t *testing.T) {
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
		keys := make([]offsetstore.Key, 200)
		for i := range keys {
			keys[i] = offsetstore.Key{Group: "g", Topic: "t", Partition: int32(i)}
		}
		res, err := s.Load(context.Background(), keys)
		require.NoError(t, err)
		for i, r := range res {
			require.True(t, r.Found, "partition %d", i)
			require.Equal(t, res[0].Offset, r.Offset, "partition "+strconv.Itoa(i)+" from another commit: batch not atomic")
		}
		require.NoError(t, s.Close())
	}
}
