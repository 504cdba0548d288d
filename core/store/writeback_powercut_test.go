//go:build linux

package store

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/faultfs"
)

// TestPowerCutWriteBack drives checkpoints with their tails' write-back
// (writeBehind) through power cuts on the fault file system: 4 producers
// append durably to 4 journaled partitions, with checkpoints every 96 KiB
// of journal and every 10 ms, small segments (rolls) and small journal
// files (recycling), until a power cut of each faultfs mode in turn
// (torn random subsets included); the data directory as the cut left it
// then opens, and every acknowledged put of every round so far is there
// at its acknowledged offset with its bytes, and nothing is served that
// was never sent. Each cut comes while a
// checkpoint is held in a write-back wait (its segments' tails written,
// not fdatasynced), so the cut drops or tears tails whose write-back
// started.
func TestPowerCutWriteBack(t *testing.T) {
	t.Parallel()
	powerCutWriteBack(t, 4, false)
}

// TestPowerCutWriteBackSyncfs is TestPowerCutWriteBack for checkpoints
// made durable by one syncfs (at least syncfsMinSegments segments): 40
// partitions, checkpoints of many segments whose tails one worker writes
// back in paced steps, small tails too, and a syncfs that fsyncs every
// file of the data directory (FUSE has no syncfs of its own), cut while
// that worker waits for a step.
//
// make test cuts in two modes (a torn last write, and a random subset of
// the unsynced pages kept); make soak (METAQ_WRITEBACK_CUTS=all) in all
// five, as TestPowerCutWriteBack does.
func TestPowerCutWriteBackSyncfs(t *testing.T) {
	t.Parallel()
	powerCutWriteBack(t, syncfsMinSegments+8, true)
}

// fsyncTree is syncfs(2) for a file system without one: an fsync of every
// file and directory under dir.
func fsyncTree(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile (a recycled journal file)
			}
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		defer f.Close()
		return f.Sync()
	})
}

func powerCutWriteBack(t *testing.T, parts int, syncfs bool) {
	under := t.TempDir()
	m := faultfs.Mount(t, under, faultfs.Options{})
	rng := rand.New(rand.NewPCG(m.Seed(), 25))
	rec := &wbRecorder{}
	var syncfsCalls atomic.Int64
	opts := func(wb bool) JournalOptions {
		o := JournalOptions{FileSize: 256 << 10, CheckpointBytes: 96 << 10, CheckpointInterval: 10 * time.Millisecond, Logf: t.Logf,
			hooks: &journalHooks{smallFiles: true}}
		if syncfs {
			// Checkpoints of more than syncfsMinSegments segments.
			o.FileSize, o.CheckpointBytes, o.CheckpointInterval = 1<<20, 512<<10, 100*time.Millisecond
			o.hooks.syncfsFS = true
			o.hooks.syncfs = func(f *os.File) error {
				syncfsCalls.Add(1)
				return fsyncTree(f.Name())
			}
		}
		if wb {
			o.hooks.writeBack = rec.writeBack
		}
		return o
	}
	logOpts := Options{MaxSegmentSize: 64 << 10, Logf: t.Logf}
	acked := make([]map[int64]string, parts) // every round's, by offset
	for p := range acked {
		acked[p] = map[int64]string{}
	}
	var sentMu sync.Mutex
	sent := map[string]int{} // data -> partition
	modes := []faultfs.Mode{faultfs.DropAll, faultfs.KeepPrefix, faultfs.TearLast, faultfs.PrefixTorn, faultfs.KeepRandom}
	if syncfs && os.Getenv("METAQ_WRITEBACK_CUTS") != "all" {
		modes = []faultfs.Mode{faultfs.TearLast, faultfs.KeepRandom}
	}
	for round, mode := range modes {
		dir := m.Dir()
		j, err := OpenJournal(dir, opts(true))
		require.NoError(t, err, "round %d", round)
		logs := make([]*Log, parts)
		for p := range parts {
			o := logOpts
			o.IDs, o.Journal = &seqIDs{}, j
			logs[p], err = Open(filepath.Join(dir, partName(p)), o)
			require.NoError(t, err, "round %d", round)
		}
		ckpts0, wb0, fs0 := j.Stats().Checkpoints, len(rec.snapshot()), syncfsCalls.Load()
		var stop atomic.Bool
		var amu sync.Mutex
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(m.Seed(), uint64(round*10+w)))
				for i := 0; !stop.Load(); i++ {
					p := r.IntN(parts)
					data := fmt.Sprintf("r%d-w%d-i%d-p%d-%s", round, w, i, p, strings.Repeat(string(rune('a'+i%26)), 100+r.IntN(3000)))
					sentMu.Lock()
					sent[data] = p
					sentMu.Unlock()
					_, off, err := logs[p].AppendSync([]Entry{entry([]byte(data))})
					if err != nil {
						return // the cut
					}
					amu.Lock()
					acked[p][off] = data
					amu.Unlock()
				}
			})
		}
		// Run until the write-back has run in a few checkpoints.
		deadline := time.Now().Add(30 * time.Second)
		for j.Stats().Checkpoints < ckpts0+3 || len(rec.snapshot()) < wb0+6 || syncfs && syncfsCalls.Load() < fs0+2 {
			require.True(t, time.Now().Before(deadline), "round %d: no checkpoints with write-back: %+v", round, j.Stats())
			time.Sleep(5 * time.Millisecond)
		}
		// Cut in the middle of a checkpoint: its tails written and their
		// write-back started, waiting for a step before its fdatasync,
		// while commit rounds go on.
		block := make(chan struct{})
		rec.mu.Lock()
		rec.block, rec.waiting = block, make(chan struct{}, 1)
		waiting := rec.waiting
		rec.mu.Unlock()
		select {
		case <-waiting:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: no checkpoint reached a write-back wait", round)
		}
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
		rep, err := m.Cut(mode)
		require.NoError(t, err, "round %d", round)
		rec.mu.Lock()
		rec.block = nil
		rec.mu.Unlock()
		close(block)
		stop.Store(true)
		wg.Wait()
		for _, l := range logs {
			_ = l.Close() // failed: the file system is gone
		}
		_ = j.Close()
		t.Logf("round %d: cut %s: %d checkpoints (%d by syncfs), %d write-back calls so far; kept %d, dropped %d, torn %d writes",
			round, mode, j.Stats().Checkpoints-ckpts0, syncfsCalls.Load()-fs0, len(rec.snapshot()), rep.KeptWrites, rep.DroppedWrites, rep.TornWrites)

		// What the disk holds after the cut.
		j2, err := OpenJournal(under, opts(false))
		require.NoError(t, err, "round %d: %s cut: open", round, mode)
		total := 0
		for p := range parts {
			o := logOpts
			o.IDs, o.Journal = &seqIDs{}, j2
			l, err := Open(filepath.Join(under, partName(p)), o)
			require.NoError(t, err, "round %d: %s cut: partition %d", round, mode, p)
			got := map[int64]string{}
			for _, r := range readAllRecords(t, l, 1<<20) {
				sentMu.Lock()
				sp, ok := sent[string(r.Data)]
				sentMu.Unlock()
				require.True(t, ok && sp == p, "round %d: %s cut: partition %d serves a record never sent to it at %d", round, mode, p, r.Offset)
				got[r.Offset] = string(r.Data)
			}
			for off, data := range acked[p] {
				g, ok := got[off]
				require.True(t, ok, "round %d: %s cut: partition %d lost the acknowledged put at %d", round, mode, p, off)
				require.Equal(t, data, g, "round %d: %s cut: partition %d at %d", round, mode, p, off)
			}
			total += len(acked[p])
			require.NoError(t, l.Close())
		}
		require.NoError(t, j2.Close())
		t.Logf("round %d: %d acknowledged puts in place", round, total)
		if round+1 < len(modes) {
			require.NoError(t, m.Remount())
		}
	}
	segs := 0
	for name := range writeBackFiles(rec) {
		if strings.HasSuffix(name, segmentSuffix) {
			segs++
		}
	}
	require.Positive(t, segs, "segments written back")
	if syncfs {
		require.Positive(t, syncfsCalls.Load(), "checkpoints made durable by syncfs")
	}
}
