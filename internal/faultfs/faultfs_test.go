//go:build linux

package faultfs_test

import (
	"bytes"
	"github.com/metaq-go/metaq/internal/fsutil"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/faultfs"
)

// mount mounts a fresh underlying directory.
func mount(t *testing.T, seed uint64) (*faultfs.FS, string) {
	t.Helper()
	under := t.TempDir()
	return faultfs.Mount(t, under, faultfs.Options{Seed: seed}), under
}

// writeSynced creates path with data, fsyncs it and its directory: all of
// it durable.
func writeSynced(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	_, err = f.Write(data)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	syncDir(t, filepath.Dir(path))
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	require.NoError(t, err)
	require.NoError(t, d.Sync())
	require.NoError(t, d.Close())
}

func appendFile(t *testing.T, path string, data []byte, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(data)
	require.NoError(t, err)
	if sync {
		require.NoError(t, f.Sync())
	}
	require.NoError(t, f.Close())
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func requireGone(t *testing.T, path string) {
	t.Helper()
	_, err := os.Lstat(path)
	require.True(t, os.IsNotExist(err), "%s should not exist (err %v)", path, err)
}

func cut(t *testing.T, m *faultfs.FS, mode faultfs.Mode) *faultfs.CutReport {
	t.Helper()
	rep, err := m.Cut(mode)
	require.NoError(t, err)
	return rep
}

// TestFsyncSurvivesCut: fsynced data survives a cut, data written after
// the last fsync does not, and a truncate is undone too.
func TestFsyncSurvivesCut(t *testing.T) {
	t.Parallel()
	m, under := mount(t, 1)
	a := filepath.Join(m.Dir(), "a")
	writeSynced(t, a, []byte("hello"))
	appendFile(t, a, []byte(" world"), false)
	require.Equal(t, "hello world", readFile(t, a), "the live view has every write")
	require.Equal(t, "hello world", readFile(t, filepath.Join(under, "a")), "writes pass through at once")

	b := filepath.Join(m.Dir(), "b")
	writeSynced(t, b, nil)
	appendFile(t, b, []byte("unsynced"), false)

	c := filepath.Join(m.Dir(), "c")
	writeSynced(t, c, []byte("keep me"))
	require.NoError(t, os.WriteFile(c, []byte("x"), 0o644)) // O_TRUNC, then a write, no fsync

	d := filepath.Join(m.Dir(), "d")
	writeSynced(t, d, []byte("0123456789"))
	require.NoError(t, os.Truncate(d, 4))

	st := m.Stats()
	require.Equal(t, int64(len(" world")+len("unsynced")+1), st.UnsyncedBytes)
	require.Equal(t, 4, st.DirtyFiles)
	require.Equal(t, 0, st.DirtyDirs)

	rep := cut(t, m, faultfs.DropAll)
	require.Equal(t, "hello", readFile(t, filepath.Join(under, "a")))
	require.Equal(t, "", readFile(t, filepath.Join(under, "b")))
	require.Equal(t, "keep me", readFile(t, filepath.Join(under, "c")))
	require.Equal(t, "0123456789", readFile(t, filepath.Join(under, "d")))
	requireGone(t, filepath.Join(under, ".faultfs"))
	require.Equal(t, int64(len(" world")+len("unsynced")+1), rep.DroppedBytes)
	require.Zero(t, rep.KeptBytes)
	require.Empty(t, rep.Lost)
	require.Empty(t, rep.Restored)
	require.Len(t, rep.Files, 4)

	// After a remount the cut state is the new durable baseline.
	require.NoError(t, m.Remount())
	require.Equal(t, "hello", readFile(t, a))
	appendFile(t, a, []byte("!"), true)
	cut(t, m, faultfs.DropAll)
	require.Equal(t, "hello!", readFile(t, filepath.Join(under, "a")))
	require.Equal(t, 2, m.Stats().Cuts)
}

// TestRenameNeedsDirFsync: a rename without a directory fsync is undone by
// a cut; with one it is kept. Across directories, each directory keeps
// what its own last fsync saw.
func TestRenameNeedsDirFsync(t *testing.T) {
	t.Parallel()
	m, under := mount(t, 2)
	x := filepath.Join(m.Dir(), "x")
	writeSynced(t, x, []byte("data"))
	require.NoError(t, os.Rename(x, filepath.Join(m.Dir(), "y")))
	rep := cut(t, m, faultfs.DropAll)
	require.Equal(t, "data", readFile(t, filepath.Join(under, "x")))
	requireGone(t, filepath.Join(under, "y"))
	require.Equal(t, []string{"y"}, rep.Lost)
	require.Equal(t, []string{"x"}, rep.Restored)

	require.NoError(t, m.Remount())
	require.NoError(t, os.Rename(x, filepath.Join(m.Dir(), "y")))
	syncDir(t, m.Dir())
	cut(t, m, faultfs.DropAll)
	requireGone(t, filepath.Join(under, "x"))
	require.Equal(t, "data", readFile(t, filepath.Join(under, "y")))

	// Rename over an existing file, undone: the old target comes back.
	require.NoError(t, m.Remount())
	writeSynced(t, filepath.Join(m.Dir(), "z"), []byte("old z"))
	writeSynced(t, filepath.Join(m.Dir(), "new"), []byte("new z"))
	require.NoError(t, os.Rename(filepath.Join(m.Dir(), "new"), filepath.Join(m.Dir(), "z")))
	rep = cut(t, m, faultfs.DropAll)
	require.Equal(t, "old z", readFile(t, filepath.Join(under, "z")))
	require.Equal(t, "new z", readFile(t, filepath.Join(under, "new")))
	require.Equal(t, []string{"z"}, rep.Replaced)

	// The atomic-replace idiom: write tmp, fsync it, rename, fsync the
	// directory. Without the file fsync the new name is durable but its
	// data is not: the zero-length file.
	require.NoError(t, m.Remount())
	for _, syncTmp := range []bool{true, false} {
		tmp := filepath.Join(m.Dir(), "offsets.tmp")
		f, err := os.Create(tmp)
		require.NoError(t, err)
		_, err = f.Write([]byte("offset=42"))
		require.NoError(t, err)
		if syncTmp {
			require.NoError(t, f.Sync())
		}
		require.NoError(t, f.Close())
		require.NoError(t, os.Rename(tmp, filepath.Join(m.Dir(), "offsets")))
		syncDir(t, m.Dir())
		cut(t, m, faultfs.DropAll)
		want := "offset=42"
		if !syncTmp {
			want = ""
		}
		require.Equal(t, want, readFile(t, filepath.Join(under, "offsets")), "tmp fsynced: %v", syncTmp)
		requireGone(t, filepath.Join(under, "offsets.tmp"))
		require.NoError(t, m.Remount())
	}

	// Across directories, only the target directory fsynced: the source
	// still names the file after the cut, so it has two names.
	require.NoError(t, os.Mkdir(filepath.Join(m.Dir(), "d"), 0o755))
	syncDir(t, m.Dir())
	syncDir(t, filepath.Join(m.Dir(), "d"))
	require.NoError(t, os.Rename(filepath.Join(m.Dir(), "y"), filepath.Join(m.Dir(), "d", "y2")))
	syncDir(t, filepath.Join(m.Dir(), "d"))
	cut(t, m, faultfs.DropAll)
	require.Equal(t, "data", readFile(t, filepath.Join(under, "y")))
	require.Equal(t, "data", readFile(t, filepath.Join(under, "d", "y2")))
	s1, err := os.Stat(filepath.Join(under, "y"))
	require.NoError(t, err)
	s2, err := os.Stat(filepath.Join(under, "d", "y2"))
	require.NoError(t, err)
	require.True(t, os.SameFile(s1, s2), "one inode under both names")
}

// TestCreateWithoutDirFsyncVanishes: a file whose directory was never
// fsynced is gone after a cut even if the file itself was fsynced; an
// unlink without a directory fsync is undone; a new directory's children
// need the new directory fsynced.
func TestCreateWithoutDirFsyncVanishes(t *testing.T) {
	t.Parallel()
	m, under := mount(t, 3)
	writeSynced(t, filepath.Join(m.Dir(), "old"), []byte("durable"))
	require.NoError(t, os.Mkdir(filepath.Join(m.Dir(), "sub"), 0o750))
	syncDir(t, m.Dir())

	createSynced := func(path, data string) {
		f, err := os.Create(path)
		require.NoError(t, err)
		_, err = f.Write([]byte(data))
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		require.NoError(t, f.Close())
	}
	createSynced(filepath.Join(m.Dir(), "sub", "child"), "in a new directory")
	createSynced(filepath.Join(m.Dir(), "new"), "fsynced data, unsynced name")
	require.NoError(t, os.Remove(filepath.Join(m.Dir(), "old")))

	rep := cut(t, m, faultfs.DropAll)
	requireGone(t, filepath.Join(under, "new"))
	require.Equal(t, "durable", readFile(t, filepath.Join(under, "old")), "unlink without a dir fsync is undone")
	st, err := os.Stat(filepath.Join(under, "sub"))
	require.NoError(t, err)
	require.True(t, st.IsDir())
	require.Equal(t, os.FileMode(0o750), st.Mode().Perm())
	requireGone(t, filepath.Join(under, "sub", "child"))
	require.Equal(t, []string{"new", "sub/child"}, rep.Lost)
	require.Equal(t, []string{"old"}, rep.Restored)
	require.Empty(t, rep.Files, "fsynced data has nothing to undo")
}

// write is one unsynced write the partial-mode test makes.
type write struct {
	off  int64
	data []byte
}

const pageSize = 4096

// TestPartialModes: KeepPrefix, TearLast and PrefixTorn keep exactly the
// prefix the report names, and a torn write exactly up to a sector
// boundary.
func TestPartialModes(t *testing.T) {
	t.Parallel()
	m, under := mount(t, 4)
	rng := rand.New(rand.NewPCG(4, 4))
	randBytes := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		return b
	}
	tornSeen := 0
	for round := 0; round < 12; round++ {
		mode := []faultfs.Mode{faultfs.KeepPrefix, faultfs.TearLast, faultfs.PrefixTorn}[round%3]
		path := filepath.Join(m.Dir(), "f")
		base := randBytes(3000)
		writeSynced(t, path, base)

		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		require.NoError(t, err)
		var ws []write
		size := int64(len(base))
		for i := 0; i < 6; i++ {
			// The kernel sends one FUSE write per page a write touches:
			// keep each write inside one page.
			// Near a page's end, start at the next page (leaving a hole)
			// so that writes span several sectors.
			off := size
			if off%pageSize > pageSize-600 {
				off += pageSize - off%pageSize
			}
			w := write{off: off, data: randBytes(1 + rng.IntN(pageSize-int(off%pageSize)))}
			if i == 2 {
				w = write{off: 700, data: randBytes(1 + rng.IntN(pageSize-700))} // an overwrite inside the synced part
			}
			_, err := f.WriteAt(w.data, w.off)
			require.NoError(t, err)
			size = max(size, w.off+int64(len(w.data)))
			ws = append(ws, w)
		}
		require.NoError(t, f.Close())

		rep := cut(t, m, mode)
		require.Len(t, rep.Files, 1)
		fc := rep.Files[0]
		require.Equal(t, "f", fc.Path)
		require.Equal(t, len(ws), fc.Writes, "one FUSE write per WriteAt inside a page")
		require.Equal(t, size, fc.SizeBefore)

		want := bytes.Clone(base)
		apply := func(w write, n int) {
			end := w.off + int64(n)
			if int64(len(want)) < end {
				want = append(want, make([]byte, end-int64(len(want)))...)
			}
			copy(want[w.off:end], w.data[:n])
		}
		for _, w := range ws[:fc.Kept] {
			apply(w, len(w.data))
		}
		switch mode {
		case faultfs.KeepPrefix:
			require.Equal(t, int64(-1), fc.TornAt)
		case faultfs.TearLast:
			require.Equal(t, len(ws)-1, fc.Kept)
		}
		if mode != faultfs.KeepPrefix && fc.Kept < len(ws) {
			w := ws[fc.Kept]
			end := w.off + int64(len(w.data))
			require.True(t, fc.TornAt == w.off || (fc.TornAt > w.off && fc.TornAt < end && fc.TornAt%faultfs.SectorSize == 0),
				"torn at %d, write [%d,%d)", fc.TornAt, w.off, end)
			apply(w, int(fc.TornAt-w.off))
			if fc.TornAt > w.off {
				tornSeen++
			}
		}
		got, err := os.ReadFile(filepath.Join(under, "f"))
		require.NoError(t, err)
		require.Equal(t, len(want), len(got), "round %d (%v): size", round, mode)
		require.True(t, bytes.Equal(want, got), "round %d (%v): content differs", round, mode)
		require.Equal(t, int64(len(want)), fc.SizeAfter)
		t.Logf("round %d %v: kept %d of %d, torn at %d, size %d -> %d", round, mode, fc.Kept, fc.Writes, fc.TornAt, fc.SizeBefore, fc.SizeAfter)
		require.NoError(t, m.Remount())
	}
	require.NotZero(t, tornSeen, "no write was torn inside")
}

// TestCutWithOpenFile: a cut does not hang on a file still open on the
// mount; it unmounts lazily, and the open file can change nothing more.
func TestCutWithOpenFile(t *testing.T) {
	t.Parallel()
	m, under := mount(t, 5)
	path := filepath.Join(m.Dir(), "open")
	writeSynced(t, path, []byte("synced"))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Write([]byte(" unsynced"))
	require.NoError(t, err)

	start := time.Now()
	rep := cut(t, m, faultfs.DropAll)
	t.Logf("cut with an open file took %v (detached %v)", time.Since(start), rep.Detached)
	require.True(t, rep.Detached)
	_, err = f.Write([]byte(" after the cut"))
	require.Error(t, err, "a write after the cut must fail")
	require.Equal(t, "synced", readFile(t, filepath.Join(under, "open")))
	f.Close() // ENOTCONN: the cut aborted the connection

}

// TestNoSyncfs: the harness's file system is not one whose syncfs(2)
// reaches every file (FUSE forwards syncfs to few servers), so the
// journal's checkpoints fdatasync each segment on it and the power-cut
// tests check that path; the file system underneath is told apart.
func TestNoSyncfs(t *testing.T) {
	t.Parallel()
	m, under := mount(t, 1)
	ok, name, _ := fsutil.SyncfsFS(m.Dir())
	require.False(t, ok, "a FUSE mount is not a syncfs file system (got %q)", name)
	if ok, name, _ := fsutil.SyncfsFS(under); ok {
		t.Logf("underlying file system: %s (syncfs covers it)", name)
	}
}

// TestKeepRandom: a torn cut keeps exactly the pages the report says
// survived, in any order (a later page kept while an earlier one is lost,
// as a disk with a volatile write cache may), splits writes at page
// boundaries, and tears at most one lost piece at a sector boundary.
func TestKeepRandom(t *testing.T) {
	t.Parallel()
	m, under := mount(t, 7)
	rng := rand.New(rand.NewPCG(7, 7))
	laterKept, torn, split := 0, 0, 0
	for round := 0; round < 12; round++ {
		path := filepath.Join(m.Dir(), "f")
		base := bytes.Repeat([]byte{'s'}, 1000)
		writeSynced(t, path, base)
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		require.NoError(t, err)
		var ws []write
		size := int64(len(base))
		for i := 0; i < 6; i++ {
			// Appends, some inside a page and some across several (the
			// kernel may send a large write as one request), as a
			// journal round's or a segment's unsynced writes are.
			n := 1 + rng.IntN(pageSize-int(size%pageSize))
			if i%2 == 1 {
				n = 3000 + rng.IntN(3*pageSize)
			}
			w := write{off: size, data: bytes.Repeat([]byte{byte('a' + i)}, n)}
			_, err := f.WriteAt(w.data, w.off)
			require.NoError(t, err)
			size += int64(n)
			ws = append(ws, w)
		}
		require.NoError(t, f.Close())

		rep := cut(t, m, faultfs.KeepRandom)
		require.Len(t, rep.Files, 1)
		fc := rep.Files[0]
		want := bytes.Clone(base)
		apply := func(off int64, b []byte) {
			if len(b) == 0 {
				return // a piece torn at its start keeps nothing, not even its offset
			}
			end := off + int64(len(b))
			if int64(len(want)) < end {
				want = append(want, make([]byte, end-int64(len(want)))...)
			}
			copy(want[off:end], b)
		}
		// The pieces cover every unsynced write (the kernel's requests:
		// it may split a WriteAt), in order, each inside one page.
		next, lostBefore := 0, false
		for _, pc := range fc.Pieces {
			require.False(t, pc.Trunc)
			if pc.Write != next {
				require.Equal(t, next+1, pc.Write)
				next++
			}
			k := slices.IndexFunc(ws, func(w write) bool { return pc.Off >= w.off && pc.Off < w.off+int64(len(w.data)) })
			require.GreaterOrEqual(t, k, 0, "piece [%d,%d) in no write", pc.Off, pc.End)
			w := ws[k]
			require.LessOrEqual(t, pc.End, w.off+int64(len(w.data)))
			require.Equal(t, (pc.Off)/faultfs.PageSize, (pc.End-1)/faultfs.PageSize, "a piece inside one page")
			if pc.Off > w.off {
				split++
			}
			data := w.data[pc.Off-w.off : pc.End-w.off]
			switch {
			case pc.Kept:
				apply(pc.Off, data)
				if lostBefore {
					laterKept++
				}
			case pc.TornAt >= 0:
				require.True(t, pc.TornAt == pc.Off || (pc.TornAt > pc.Off && pc.TornAt < pc.End && pc.TornAt%faultfs.SectorSize == 0),
					"torn at %d, piece [%d,%d)", pc.TornAt, pc.Off, pc.End)
				require.Equal(t, pc.TornAt, fc.TornAt)
				require.Equal(t, pc.Write, fc.TornWrite)
				apply(pc.Off, data[:pc.TornAt-pc.Off])
				torn++
				lostBefore = true
			default:
				lostBefore = true
			}
		}
		require.Equal(t, fc.Writes-1, next, "every write has pieces")
		got, err := os.ReadFile(filepath.Join(under, "f"))
		require.NoError(t, err)
		require.Equal(t, len(want), len(got), "round %d: size", round)
		require.True(t, bytes.Equal(want, got), "round %d: content differs", round)
		require.Equal(t, int64(len(want)), fc.SizeAfter)
		t.Logf("round %d: %d writes, %d pieces, %d kept, %d dropped, torn %d; size %d -> %d",
			round, fc.Writes, len(fc.Pieces), rep.KeptWrites, rep.DroppedWrites, rep.TornWrites, fc.SizeBefore, fc.SizeAfter)
		require.NoError(t, m.Remount())
	}
	require.NotZero(t, laterKept, "no cut kept a page after a lost one")
	require.NotZero(t, torn, "no piece was torn")
	require.NotZero(t, split, "no write was split at a page boundary")
}

// TestStallAtSync: the trap lets an fsync of a file with one unsynced
// write through, fires at the next fsync of a file with two or more: that
// fsync and later changes hang (no error) until the cut, which fails them
// and finds the writes the fsync would have made durable unsynced.
func TestStallAtSync(t *testing.T) {
	t.Parallel()
	m, under := mount(t, 8)
	a, b := filepath.Join(m.Dir(), "a"), filepath.Join(m.Dir(), "b")
	writeSynced(t, a, []byte("a0"))
	writeSynced(t, b, []byte("b0"))
	trapped := m.StallAtSync()
	appendFile(t, a, []byte(" a1"), true) // one unsynced write: synced
	select {
	case <-trapped:
		t.Fatal("the trap fired at a file with one unsynced write")
	default:
	}
	f, err := os.OpenFile(b, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt([]byte(" b1"), 2)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte(" b2"), 5)
	require.NoError(t, err)
	synced := make(chan error, 1)
	go func() { synced <- f.Sync() }()
	select {
	case <-trapped:
	case <-time.After(10 * time.Second):
		t.Fatal("the trap did not fire")
	}
	wrote := make(chan error, 1)
	go func() { _, err := f.WriteAt([]byte(" b3"), 8); wrote <- err }()
	select {
	case err := <-synced:
		t.Fatalf("the stalled fsync returned (%v) before the cut", err)
	case err := <-wrote:
		t.Fatalf("a write after the trap returned (%v) before the cut", err)
	case <-time.After(200 * time.Millisecond):
	}
	rep := cut(t, m, faultfs.KeepRandom)
	require.Error(t, <-synced, "the stalled fsync fails at the cut")
	require.Error(t, <-wrote)
	require.Equal(t, "a0 a1", readFile(t, filepath.Join(under, "a")))
	got := readFile(t, filepath.Join(under, "b"))
	require.Len(t, rep.Files, 1, "b's two writes were never synced")
	require.Equal(t, 2, rep.Files[0].Writes)
	require.Contains(t, []string{"b0", "b0 b1", "b0\x00\x00\x00 b2", "b0 b1 b2"}, got)
	require.NoError(t, m.Remount())
	writeSynced(t, filepath.Join(m.Dir(), "c"), []byte("after"))
	require.Equal(t, "after", readFile(t, filepath.Join(under, "c")), "the stall ends with the cut")
}
