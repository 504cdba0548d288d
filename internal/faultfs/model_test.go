//go:build linux

package faultfs_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/faultfs"
)

// minode is a file in the model: its live and durable contents.
type minode struct {
	live, durable []byte
	pending       []mop // changes since the last fsync, in order
}

// mop is one unsynced change: a write of data at off, or a truncate to
// size.
type mop struct {
	trunc bool
	off   int
	data  []byte
	size  int
}

// apply returns b after op; tornAt >= 0 applies a write only up to tornAt
// (nothing of it when tornAt is its start).
func (op mop) apply(b []byte, tornAt int) []byte {
	if op.trunc {
		if op.size <= len(b) {
			return b[:op.size]
		}
		return append(b, make([]byte, op.size-len(b))...)
	}
	data := op.data
	if tornAt >= 0 {
		data = data[:tornAt-op.off]
		if len(data) == 0 {
			return b
		}
	}
	if end := op.off + len(data); end > len(b) {
		b = append(b, make([]byte, end-len(b))...)
	}
	copy(b[op.off:], data)
	return b
}

func (i *minode) change(op mop) {
	i.live = op.apply(i.live, -1)
	i.pending = append(i.pending, op)
}

func (i *minode) sync() {
	i.durable = bytes.Clone(i.live)
	i.pending = nil
}

// mdir is a directory in the model: live and durable entries.
type mdir struct{ live, durable map[string]*minode }

// TestRandomOpsMatchModel runs random creates, writes, truncates, fsyncs,
// renames, unlinks and directory fsyncs on two directories, cuts in every
// mode, and compares the underlying tree with a model of the disk written
// independently of the harness: a file's durable content is its content at
// its last fsync plus the unsynced changes the cut report says it kept; a
// directory's durable entries are its entries at its last fsync.
func TestRandomOpsMatchModel(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { randomOpsMatchModel(t, seed) })
	}
}

func randomOpsMatchModel(t *testing.T, seed uint64) {
	m, under := mount(t, seed)
	rng := rand.New(rand.NewPCG(seed, 6))
	dirNames := []string{".", "sub"}
	require.NoError(t, os.Mkdir(filepath.Join(m.Dir(), "sub"), 0o755))
	syncDir(t, m.Dir())
	dirs := map[string]*mdir{}
	for _, d := range dirNames {
		dirs[d] = &mdir{live: map[string]*minode{}, durable: map[string]*minode{}}
	}
	names := []string{"a", "b", "c", "d"}

	for round := 0; round < 10; round++ {
		for op := 0; op < 80; op++ {
			dn := dirNames[rng.IntN(len(dirNames))]
			d := dirs[dn]
			name := names[rng.IntN(len(names))]
			path := filepath.Join(m.Dir(), dn, name)
			ino := d.live[name]
			switch k := rng.IntN(10); {
			case k < 2: // create (or truncate an existing file)
				f, err := os.Create(path)
				require.NoError(t, err)
				require.NoError(t, f.Close())
				if ino == nil {
					d.live[name] = &minode{}
				} else if len(ino.live) > 0 {
					ino.change(mop{trunc: true})
				}
			case k < 5 && ino != nil: // write somewhere
				off := rng.IntN(len(ino.live) + 100)
				data := []byte(fmt.Sprintf("r%d-o%d-%s", round, op, bytes.Repeat([]byte{'x'}, rng.IntN(1500))))
				// One FUSE write per WriteAt: stay inside a page.
				data = data[:min(len(data), pageSize-off%pageSize)]
				f, err := os.OpenFile(path, os.O_WRONLY, 0)
				require.NoError(t, err)
				_, err = f.WriteAt(data, int64(off))
				require.NoError(t, err)
				synced := rng.IntN(3) == 0
				if synced {
					require.NoError(t, f.Sync())
				}
				require.NoError(t, f.Close())
				ino.change(mop{off: off, data: data})
				if synced {
					ino.sync()
				}
			case k == 5 && ino != nil: // fsync
				f, err := os.OpenFile(path, os.O_RDONLY, 0)
				require.NoError(t, err)
				require.NoError(t, f.Sync())
				require.NoError(t, f.Close())
				ino.sync()
			case k == 6 && ino != nil: // truncate
				n := rng.IntN(len(ino.live) + 1)
				require.NoError(t, os.Truncate(path, int64(n)))
				if n != len(ino.live) {
					ino.change(mop{trunc: true, size: n})
				}
			case k == 7 && ino != nil: // unlink
				require.NoError(t, os.Remove(path))
				delete(d.live, name)
			case k == 8 && ino != nil: // rename, maybe across directories, maybe over a file
				tn := dirNames[rng.IntN(len(dirNames))]
				td := dirs[tn]
				to := names[rng.IntN(len(names))]
				if tn == dn && to == name {
					continue
				}
				require.NoError(t, os.Rename(path, filepath.Join(m.Dir(), tn, to)))
				delete(d.live, name)
				td.live[to] = ino
			case k == 9: // directory fsync
				syncDir(t, filepath.Join(m.Dir(), dn))
				d.durable = map[string]*minode{}
				for n, i := range d.live {
					d.durable[n] = i
				}
			}
		}
		mode := []faultfs.Mode{faultfs.DropAll, faultfs.KeepPrefix, faultfs.TearLast, faultfs.PrefixTorn, faultfs.KeepRandom}[round%5]
		rep, err := m.Cut(mode)
		require.NoError(t, err)
		t.Logf("round %d %v: %d files with unsynced changes: kept %d, dropped %d, torn %d; lost %d names, restored %d",
			round, mode, len(rep.Files), rep.KeptWrites, rep.DroppedWrites, rep.TornWrites, len(rep.Lost), len(rep.Restored))
		cuts := map[string]faultfs.FileCut{}
		for _, fc := range rep.Files {
			if fc.Path != "" {
				cuts[fc.Path] = fc
			}
		}
		// What each durable file keeps, by the report (under one of its
		// durable names).
		paths := map[*minode][]string{}
		for _, dn := range dirNames {
			for n, ino := range dirs[dn].durable {
				paths[ino] = append(paths[ino], filepath.Join(dn, n))
			}
		}
		for ino, ps := range paths {
			var fc faultfs.FileCut
			ok := false
			for _, p := range ps {
				if c, found := cuts[p]; found {
					fc, ok = c, true
				}
			}
			if !ok {
				require.Empty(t, ino.pending, "round %d: %v has unsynced changes, the report none", round, ps)
				continue
			}
			require.Equal(t, len(ino.pending), fc.Writes, "round %d (%v): %v: unsynced changes", round, mode, ps)
			if mode == faultfs.KeepRandom {
				for _, pc := range fc.Pieces {
					op := ino.pending[pc.Write]
					switch {
					case pc.Trunc:
						require.True(t, op.trunc)
						if pc.Kept {
							ino.durable = op.apply(ino.durable, -1)
						}
					case pc.Kept:
						ino.durable = mop{off: int(pc.Off), data: op.data[int(pc.Off)-op.off : int(pc.End)-op.off]}.apply(ino.durable, -1)
					case pc.TornAt > pc.Off:
						ino.durable = mop{off: int(pc.Off), data: op.data[int(pc.Off)-op.off : int(pc.TornAt)-op.off]}.apply(ino.durable, -1)
					}
				}
				ino.pending = nil
				continue
			}
			for _, op := range ino.pending[:fc.Kept] {
				ino.durable = op.apply(ino.durable, -1)
			}
			if fc.TornAt >= 0 {
				op := ino.pending[fc.Kept]
				require.False(t, op.trunc)
				ino.durable = op.apply(ino.durable, int(fc.TornAt))
			}
			ino.pending = nil
		}
		for _, dn := range dirNames {
			d := dirs[dn]
			ents, err := os.ReadDir(filepath.Join(under, dn))
			require.NoError(t, err)
			var got []string
			for _, e := range ents {
				if dn == "." && e.Name() == "sub" {
					continue
				}
				got = append(got, e.Name())
			}
			var want []string
			for n := range d.durable {
				want = append(want, n)
			}
			sort.Strings(want)
			require.Equal(t, want, got, "round %d: entries of %s", round, dn)
			for n, ino := range d.durable {
				b, err := os.ReadFile(filepath.Join(under, dn, n))
				require.NoError(t, err)
				require.True(t, bytes.Equal(ino.durable, b), "round %d: %s/%s: %d bytes, model %d", round, dn, n, len(b), len(ino.durable))
			}
		}
		// The cut state is the new start: live = durable everywhere.
		for _, d := range dirs {
			d.live = map[string]*minode{}
			for n, i := range d.durable {
				i.live = bytes.Clone(i.durable)
				i.pending = nil
				d.live[n] = i
			}
		}
		require.NoError(t, m.Remount())
	}
}
