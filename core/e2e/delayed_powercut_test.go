//go:build linux

package e2e

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/faultfs"
)

// TestDelayedPowerCut: TestDelayedKill9 on the power-loss harness
// (faultfs): each crash is a kill -9 and a power cut, in turn keeping
// nothing unsynced, tearing the last write and keeping a random subset
// of the unsynced pages (torn); make soak makes 10 cuts over a 60 s span. Every acknowledged delayed message is
// delivered, none early; duplicates (by msgId) are counted.
func TestDelayedPowerCut(t *testing.T) {
	t.Parallel()
	const topic, parts = "delayed", 16
	m, config, _, _ := powerLossDisk(t, topic, parts, "")
	modes := []faultfs.Mode{faultfs.DropAll, faultfs.TearLast, faultfs.KeepRandom}
	dups := delayedCrashes(t, topic, parts, delayedCrashRounds(t),
		func(int) *brokertest.Server { return startServer(t, config, filepath.Join(m.Dir(), "data")) },
		func(round int, srv *brokertest.Server) {
			srv.Kill()
			rep, err := m.Cut(modes[round%len(modes)])
			require.NoError(t, err)
			t.Logf("round %d (mode %v): cut dropped %d bytes of %d files", round, modes[round%len(modes)], rep.DroppedBytes, len(rep.Files))
			require.NoError(t, m.Remount())
		})
	if dups > 0 {
		t.Errorf("%d duplicate deliveries after power cuts (want exactly once)", dups)
	}
}
