//go:build linux

package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/faultfs"
)

// TestJournalMarkSyncedIdle: the mark record written after an idle
// journal's last round is fdatasynced by itself within markSyncDelay, so
// a power cut after that (DropAll: nothing unsynced survives) still
// leaves the last acknowledged round under a durable mark, and a bit
// flip in it is damage that refuses the start (the segments, never
// fsynced, do not hold it), not a torn tail cut silently. The control:
// with the delay out of reach the same cut loses the mark record, and the
// same flip is cut as a torn tail (the window this closes). Puts spaced
// closer than the delay add no fdatasync: a later round's records carry
// the mark (on FUSE a put may take longer than the delay: logged only).
func TestJournalMarkSyncedIdle(t *testing.T) {
	t.Parallel()
	under := t.TempDir()
	m := faultfs.Mount(t, under, faultfs.Options{})
	for i, tc := range []struct {
		name   string
		delay  time.Duration
		synced bool
	}{{"synced", 0, true}, {"window", time.Hour, false}} {
		if i > 0 {
			require.NoError(t, m.Remount())
		}
		dir := filepath.Join(m.Dir(), tc.name)
		opts := JournalOptions{FileSize: 64 << 10, CheckpointBytes: 1 << 40, CheckpointInterval: time.Hour, Logf: t.Logf,
			hooks: &journalHooks{smallFiles: true, markSyncDelay: tc.delay}}
		j, err := OpenJournal(dir, opts)
		require.NoError(t, err, tc.name)
		logs := make([]*Log, 2)
		for p := range logs {
			logs[p], err = Open(filepath.Join(dir, partName(p)), Options{IDs: &seqIDs{}, MaxSegmentSize: 16 << 10, Journal: j})
			require.NoError(t, err, tc.name)
		}
		// A burst of back-to-back puts: their mark records are made
		// durable by the next rounds, not by fdatasyncs of their own.
		for i := range 30 {
			_, _, err := logs[i%2].AppendSync([]Entry{entry(fmt.Appendf(nil, "%s-%d-payload-of-some-length", tc.name, i))})
			require.NoError(t, err, tc.name)
		}
		st := j.Stats()
		require.Positive(t, st.Marks, tc.name)
		require.LessOrEqual(t, st.MarkSyncs, st.Marks, tc.name)
		t.Logf("%s: 30 puts: %d mark records, %d of them fdatasynced by themselves (a gap of over the delay between puts)", tc.name, st.Marks, st.MarkSyncs)
		if tc.synced {
			// Wait for the last mark record written to be durable. Under
			// load a put may take longer than the delay, so an earlier
			// mark record of the burst may still be in its own fdatasync
			// when the burst ends: counting increments would mistake it
			// for the idle one (the checkpointer syncs them in order, and
			// counts a sync before it raises durMarked).
			deadline := time.Now().Add(10 * time.Second)
			for j.durMarked.Load() < j.marked.Load() {
				require.True(t, time.Now().Before(deadline), "%s: the idle journal's mark record was never fdatasynced: %+v", tc.name, j.Stats())
				time.Sleep(2 * time.Millisecond)
			}
			n := j.Stats().MarkSyncs
			require.Greater(t, n, int64(0), "%s: the idle mark record was fdatasynced by itself", tc.name)
			time.Sleep(50 * time.Millisecond)
			require.Equal(t, n, j.Stats().MarkSyncs, "%s: nothing more while idle", tc.name)
		} else {
			time.Sleep(50 * time.Millisecond)
			require.Equal(t, st.MarkSyncs, j.Stats().MarkSyncs, tc.name)
		}
		rep, err := m.Cut(faultfs.DropAll)
		require.NoError(t, err, tc.name)
		t.Logf("%s: cut: kept %d, dropped %d writes", tc.name, rep.KeptWrites, rep.DroppedWrites)
		for _, l := range logs {
			_ = l.Close() // failed: the file system is gone
		}
		_ = j.Close()

		pdir := filepath.Join(under, tc.name)
		recs := walkJournal(t, filepath.Join(pdir, JournalDirName))
		k := len(recs) - 1
		for k >= 0 && recs[k].typ != recData {
			k--
		}
		require.GreaterOrEqual(t, k, 0, tc.name)
		last := recs[k]
		covered := last.end < maxMark(recs)+markUnit
		require.Equal(t, tc.synced, covered, "%s: the last acknowledged round lies under a durable mark after the cut", tc.name)
		require.Equal(t, tc.synced, slices.ContainsFunc(recs[k+1:], func(r jrec) bool { return r.typ == recMark }),
			"%s: the mark record survived the cut", tc.name)

		flipJournal(t, filepath.Join(pdir, JournalDirName), last.end-2, 0x20)
		err = openErr(pdir, JournalOptions{FileSize: 64 << 10, Logf: t.Logf, hooks: &journalHooks{smallFiles: true}})
		if tc.synced {
			require.True(t, errors.Is(err, ErrCorrupt), "%s: a flip in the last acknowledged round refuses the start: %v", tc.name, err)
		} else {
			require.NoError(t, err, "%s: without the mark record the flip reads as a torn tail", tc.name)
		}
	}
}
