//go:build linux

package e2e

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/faultfs"
)

// TestIdempotentPowerCut: TestIdempotentKill9 on the power-loss harness
// (faultfs). The real metaq-server, its data on a faultfs mount, is killed
// with -9 while a Client produces to 16 partitions with idempotence on, and
// the power is cut at a stalled fsync: once keeping nothing unsynced
// (drop-all), once keeping a random subset of the unsynced pages (torn). It restarts on
// the same port on what the disk kept; the producer retries what it had in
// flight with the same producer id and sequences, the broker rebuilds its
// producers' state from the log as the cut left it, and every message is
// stored exactly once, each acknowledged one at its acknowledged offset.
func TestIdempotentPowerCut(t *testing.T) {
	t.Parallel()
	for _, mode := range []faultfs.Mode{faultfs.DropAll, faultfs.KeepRandom} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			idemPowerCut(t, mode)
		})
	}
}

func idemPowerCut(t *testing.T, mode faultfs.Mode) {
	const topic, parts = "idem", 16
	m, config, _, _ := powerLossDisk(t, topic, parts, "")
	dataDir := filepath.Join(m.Dir(), "data")
	srv := startServer(t, config, dataDir)
	p, port := idemProducer(t, srv)
	n := idemMessages(t)
	var restarted *brokertest.Server
	done := make(chan struct{})
	h := idemRun(t, p, topic, n, func() {
		// The power fails at the next fsync of a file two or more writes
		// past its last one (as in TestPowerCuts64): the server
		// acknowledges nothing more, and the cut finds unsynced writes
		// (puts not acknowledged, retried after the restart) to drop or
		// tear. The producer goes on sending meanwhile (the fault runs
		// on its own goroutine), so the trap has writes to catch.
		trapped := m.StallAtSync()
		go func() {
			defer close(done)
			select {
			case <-trapped:
			case <-time.After(5 * time.Second):
				t.Errorf("no fsync with unsynced writes in 5s")
			}
			_ = srv.Cmd.Process.Kill() // it exits once the cut fails its stalled requests
			rep, err := m.Cut(mode)
			srv.Kill()
			if err != nil {
				t.Errorf("cut: %v", err)
				return
			}
			t.Logf("cut (%v) kept %d and dropped %d writes (%d torn) of %d files; %d files kept a page after a lost one",
				mode, rep.KeptWrites, rep.DroppedWrites, rep.TornWrites, len(rep.Files), reorderedFiles(rep))
			if err := m.Remount(); err != nil {
				t.Errorf("remount: %v", err)
				return
			}
			// No HTTP listener, as in TestIdempotentKill9. (A failed
			// start ends this goroutine and fails the test; the
			// producer's sends then fail at their timeout.)
			restarted = brokertest.StartServer(t, "--config", config, "--port", port, "--http-port", "0", "--data-dir", dataDir, "--host", "127.0.0.1")
		}()
	})
	<-done
	require.NotNil(t, restarted)
	require.Equal(t, srv.Addr, restarted.Addr)
	idemCheck(t, h, restarted.Addr, topic, parts, n)
	c := dial(t, restarted.Addr)
	defer c.close()
	st := serverStats(t, c)
	t.Logf("after the restart: idempotent_duplicates %s, idempotent_unknown_producer %s, idempotent_out_of_order %s",
		st["idempotent_duplicates"], st["idempotent_unknown_producer"], st["idempotent_out_of_order"])
}
