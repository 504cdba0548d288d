//go:build linux

package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/faultfs"
)

// powerLossDisk is the set-up of a power-loss test: a config written by
// groupCommitConfig with 64 KiB segments (topicKeys may be ""), the metaq-server binary built
// before any clock starts, and a faultfs mount over the directory "disk"
// (under), where the broker's data goes.
func powerLossDisk(t *testing.T, topic string, parts int, topicKeys string) (m *faultfs.FS, config, dir, under string) {
	t.Helper()
	dir = t.TempDir()
	under = filepath.Join(dir, "disk")
	require.NoError(t, os.Mkdir(under, 0o755))
	config = groupCommitConfig(t, dir, topic, parts, 64<<10, topicKeys)
	brokertest.ServerBinary(t)
	return faultfs.Mount(t, under, faultfs.Options{}), config, dir, under
}

// groupCommitConfig writes dir/server.toml: a group-commit broker (ack
// after fdatasync) with segments of segSize bytes, so that rolls happen
// under load, and one topic of parts partitions with more keys for its
// table (topicKeys, TOML lines). The data directory is --data-dir's.
func groupCommitConfig(t *testing.T, dir, topic string, parts, segSize int, topicKeys string) string {
	t.Helper()
	config := filepath.Join(dir, "server.toml")
	require.NoError(t, os.WriteFile(config, []byte(fmt.Sprintf(`# e2e durability test
broker_id = 7
host = "127.0.0.1"
port = 8123
data_dir = "unused: --data-dir"
unflush_threshold = 0
max_segment_size = %d
max_message_size = 65536
max_transfer_size = 131072
journal_file_size = 4194304

[[topic]]
name = %q
num_partitions = %d
%s`, segSize, topic, parts, topicKeys)), 0o644))
	return config
}

// TestPowerLossGroupCommit runs the real metaq-server with its data
// directory on a faultfs mount, SIGKILLs it under load from 4 producers,
// cuts the power (nothing that was not fsynced survives), restarts the
// binary on the underlying directory, and checks that every acknowledged
// message is there exactly once, at its acknowledged offset, intact.
//
// The data directory and the partition directories are made durable
// first by a clean start and stop (TestPowerLossFreshDataDir covers a
// broker that creates them under load).
func TestPowerLossGroupCommit(t *testing.T) {
	t.Parallel()
	rounds := 3
	if testing.Short() {
		rounds = 1
	}
	powerLoss(t, rounds, false, 0)
}

// TestPowerLossFreshDataDir is TestPowerLossGroupCommit starting on an
// empty data directory. Before the broker fsynced the parent of every
// directory it creates (store.MkdirAllDurable), it lost every acknowledged
// message: the cut took the whole data_dir tree away.
func TestPowerLossFreshDataDir(t *testing.T) {
	t.Parallel()
	powerLoss(t, 1, true, 0)
}

// TestPowerLossIdle is TestPowerLossGroupCommit with the power cut 1.5 s
// after the load stopped: the checkpoints of the idle spell have written
// the segments and recycled journal files when the power goes.
func TestPowerLossIdle(t *testing.T) {
	t.Parallel()
	powerLoss(t, 1, false, 1500*time.Millisecond)
}

func powerLoss(t *testing.T, rounds int, fresh bool, idle time.Duration) {
	const (
		topic     = "powerloss"
		parts     = 3
		producers = 4
	)
	m, config, _, under := powerLossDisk(t, topic, parts, "")
	seed := m.Seed()
	rng := rand.New(rand.NewPCG(seed, 1))
	if !fresh {
		srv := startServer(t, config, filepath.Join(m.Dir(), "data"))
		require.NoError(t, srv.Cmd.Process.Signal(os.Interrupt))
		select {
		case <-srv.Exited:
		case <-time.After(20 * time.Second):
			t.Fatal("metaq-server did not exit within 20s of SIGINT")
		}
		require.NoError(t, m.Unmount()) // a clean unmount: everything durable
		require.NoError(t, m.Remount())
	}

	var acks []ack
	seqs := make([]int, producers)
	for round := 0; round < rounds; round++ {
		srv := startServer(t, config, filepath.Join(m.Dir(), "data"))
		delay := time.Duration(300+rng.IntN(700)) * time.Millisecond
		start := time.Now()
		got, sent := loadRound(t, srv, topic, parts, producers, round, seqs, seed, delay)
		elapsed := time.Since(start)
		acks = append(acks, got...)
		time.Sleep(idle)

		st := m.Stats()
		rep, err := m.Cut(faultfs.DropAll)
		require.NoError(t, err)
		t.Logf("round %d: killed after %v: %d sent, %d acknowledged (%.0f/s through the mount); %d writes, %d fsyncs, %d dir fsyncs; cut dropped %d bytes of %d files, lost %d names %v",
			round, delay, sent, len(got), float64(len(got))/elapsed.Seconds(), st.Writes, st.Fsyncs, st.DirFsyncs,
			rep.DroppedBytes, len(rep.Files), len(rep.Lost), firstN(rep.Lost, 8))

		// Restart on the disk as the power cut left it.
		srv = startServer(t, config, filepath.Join(under, "data"))
		n := verifyLog(t, srv.Addr, topic, parts, acks)
		t.Logf("round %d: after the cut %d records in the log, %d acknowledged so far", round, n, len(acks))
		srv.Kill()
		require.NoError(t, m.Remount())
	}
	require.NotEmpty(t, acks, "no put was ever acknowledged")
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// TestPowerLossThroughput compares group-commit put throughput with the
// data directory on a faultfs mount and directly on the disk (for
// information: set METAQ_FAULTFS_BENCH=1).
func TestPowerLossThroughput(t *testing.T) {
	t.Parallel()
	if os.Getenv("METAQ_FAULTFS_BENCH") == "" {
		t.Skip("set METAQ_FAULTFS_BENCH=1 to measure")
	}
	const (
		topic     = "powerloss"
		parts     = 3
		producers = 4
		d         = 3 * time.Second
	)
	m, config, dir, _ := powerLossDisk(t, topic, parts, "")
	for _, c := range []struct{ name, data string }{
		{"faultfs", filepath.Join(m.Dir(), "data")},
		{"disk", filepath.Join(dir, "direct")},
	} {
		srv := startServer(t, config, c.data)
		got, _ := loadRound(t, srv, topic, parts, producers, 0, make([]int, producers), 1, d)
		t.Logf("%s: %d acknowledged puts in %v: %.0f/s", c.name, len(got), d, float64(len(got))/d.Seconds())
	}
}
