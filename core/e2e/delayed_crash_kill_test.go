package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/stretchr/testify/require"
)

// TestDelayedKill9: the real metaq-server takes delayed messages (due
// over the next 3 s, 16 partitions, METAQ_DELAYED_CRASH_PARTS) and is killed with -9 at random
// moments three times (make soak: 10 over a 60 s span), restarted on its data each time: every
// acknowledged delayed message is delivered, none before its time, and
// the duplicates (by msgId) are counted (docs/delayed.md, "Durability").
func TestDelayedKill9(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const topic = "delayed"
	parts := 16
	if s := os.Getenv("METAQ_DELAYED_CRASH_PARTS"); s != "" { // the 64 (make soak)
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "METAQ_DELAYED_CRASH_PARTS")
		parts = n
	}
	config := groupCommitConfig(t, dir, topic, parts, 1<<20, "")
	dataDir := filepath.Join(dir, "data")
	dups := delayedCrashes(t, topic, parts, delayedCrashRounds(t),
		func(int) *brokertest.Server { return startServer(t, config, dataDir) },
		func(_ int, srv *brokertest.Server) { srv.Kill() })
	if dups > 0 {
		t.Errorf("%d duplicate deliveries after kill -9 (want exactly once)", dups)
	}
}
