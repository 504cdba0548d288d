package store

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startupFigures are what opening many journaled partitions cost the
// journal.
type startupFigures struct {
	open        time.Duration // OpenJournal and every Open
	quiet       time.Duration // until the journal stopped writing
	checkpoints int64
	bytes       int64
	rounds      int64
}

// openManyPartitions opens the journal of dataDir with the default
// checkpoint settings and n journaled partitions, one after the other as
// the broker does, then waits until the journal has written nothing for
// two checkpoint intervals, and reports what that cost.
func openManyPartitions(t *testing.T, dataDir string, n int) (*Journal, []*Log, startupFigures) {
	t.Helper()
	opts := JournalOptions{Logf: func(string, ...any) {}} // the defaults, as the broker's
	start := time.Now()
	j, err := OpenJournal(dataDir, opts)
	require.NoError(t, err)
	logs := make([]*Log, n)
	for p := range n {
		logs[p], err = Open(filepath.Join(dataDir, partName(p)), Options{IDs: &seqIDs{}, Journal: j})
		require.NoError(t, err)
	}
	var f startupFigures
	f.open = time.Since(start)
	last, lastAt := j.Stats(), time.Now()
	for time.Since(lastAt) < 2*DefaultJournalCheckpointInterval {
		require.Less(t, time.Since(start), 2*time.Minute, "the journal kept writing: %+v", last)
		time.Sleep(20 * time.Millisecond)
		if st := j.Stats(); st.Bytes != last.Bytes || st.Checkpoints != last.Checkpoints || j.ckptBusy.Load() {
			last, lastAt = st, time.Now()
		}
	}
	f.quiet = lastAt.Sub(start)
	st := j.Stats()
	f.checkpoints, f.bytes, f.rounds = st.Checkpoints, st.Bytes, st.Rounds
	return j, logs, f
}

// TestJournalStartupManyPartitions measures what opening 1,000 journaled
// partitions costs the journal, on a fresh data directory and again after
// a clean stop (docs/storage.md, "Register records"): checkpoints made
// durable, journal bytes written, and the time to open them all. A
// registration does not ask for a checkpoint: a partition's first journal
// record names it instead, so opening partitions that take no puts writes
// nothing to the journal but the regular checkpoints that list them (one
// per checkpoint interval while they open). Before, every registration
// asked for a checkpoint of its own, listing every partition: about 950
// checkpoints and 11 MB of journal for 1,000 partitions.
func TestJournalStartupManyPartitions(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("1,000 partitions")
	}
	const n = 1000
	dataDir := t.TempDir()
	for _, run := range []string{"fresh", "restart"} {
		j, logs, f := openManyPartitions(t, dataDir, n)
		t.Logf("%s, %d partitions: opened in %v, journal quiet after %v: %d checkpoints, %d journal bytes in %d rounds",
			run, n, f.open.Round(time.Millisecond), f.quiet.Round(time.Millisecond), f.checkpoints, f.bytes, f.rounds)
		// The recovery checkpoint, then at most one per interval while
		// the partitions opened, and the one after (a table of n entries
		// of at most 40 bytes each).
		most := 2 + int64(f.quiet/DefaultJournalCheckpointInterval)
		require.LessOrEqual(t, f.checkpoints, most, run)
		require.LessOrEqual(t, f.bytes, most*int64(n*40+200), run)
		for _, l := range logs {
			require.NoError(t, l.Close())
		}
		require.NoError(t, j.Close())
	}
}
