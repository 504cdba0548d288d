//go:build linux

package faultfs

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
)

// dnode is one entry of the durable tree.
type dnode struct {
	rel  string // path relative to the root
	ino  uint64
	mode uint32
}

func isDir(mode uint32) bool { return mode&syscall.S_IFMT == syscall.S_IFDIR }

// cut brings the underlying tree to its post-power-loss state. The file
// system is frozen and unmounted, and the caller holds ns.
func (f *FS) cut(mode Mode, rng *rand.Rand, rep *CutReport) error {
	defer f.reset()
	byIno, live, rootIno, err := f.index()
	if err != nil {
		return err
	}
	tree, err := f.durableTree(rootIno, byIno, rep)
	if err != nil {
		return err
	}
	durable := make(map[string]uint64, len(tree))
	durablePath := map[uint64]string{}
	for _, d := range tree {
		durable[d.rel] = d.ino
		if _, ok := durablePath[d.ino]; !ok {
			durablePath[d.ino] = d.rel
		}
	}

	if err := f.rollback(mode, rng, rep, durablePath); err != nil {
		return err
	}

	for rel, ino := range live {
		switch d, ok := durable[rel]; {
		case !ok:
			rep.Lost = append(rep.Lost, rel)
		case d != ino:
			rep.Replaced = append(rep.Replaced, rel)
		}
	}
	for rel := range durable {
		if _, ok := live[rel]; !ok {
			rep.Restored = append(rep.Restored, rel)
		}
	}
	sort.Strings(rep.Lost)
	sort.Strings(rep.Restored)
	sort.Strings(rep.Replaced)
	if len(rep.Lost)+len(rep.Restored)+len(rep.Replaced) == 0 {
		return os.RemoveAll(filepath.Join(f.root, hiddenName))
	}
	return f.rebuild(tree, byIno)
}

// index walks the underlying tree, the hidden directory included: byIno
// finds a path for every inode, live maps the visible paths to inodes.
func (f *FS) index() (byIno map[uint64]string, live map[string]uint64, rootIno uint64, err error) {
	byIno = map[uint64]string{}
	live = map[string]uint64{}
	err = filepath.WalkDir(f.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(f.root, p)
		if rel == stageName {
			return filepath.SkipDir
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("faultfs: no inode number for %s", p)
		}
		if rel == "." {
			rootIno = st.Ino
		}
		if _, ok := byIno[st.Ino]; !ok {
			byIno[st.Ino] = p
		}
		if rel != "." && rel != hiddenName && !strings.HasPrefix(rel, hiddenName+"/") {
			live[rel] = st.Ino
		}
		return nil
	})
	return byIno, live, rootIno, err
}

// durableTree lists the durable tree, parents before children: each
// directory's entries are its snapshot if it has one, else its live
// entries.
func (f *FS) durableTree(rootIno uint64, byIno map[uint64]string, rep *CutReport) ([]dnode, error) {
	var out []dnode
	visited := map[uint64]bool{rootIno: true}
	var walk func(ino uint64, rel string) error
	walk = func(ino uint64, rel string) error {
		ents, ok := f.snaps[ino]
		if !ok {
			p, ok := byIno[ino]
			if !ok {
				return fmt.Errorf("faultfs: durable directory %q (inode %d) is gone", rel, ino)
			}
			var err error
			if ents, err = f.readEntries(p); err != nil {
				return err
			}
		}
		names := make([]string, 0, len(ents))
		for name := range ents {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			e := ents[name]
			r := filepath.Join(rel, name)
			if _, ok := byIno[e.ino]; !ok {
				return fmt.Errorf("faultfs: durable entry %q (inode %d) is gone", r, e.ino)
			}
			if isDir(e.mode) {
				if visited[e.ino] {
					rep.Cycles = append(rep.Cycles, r)
					continue
				}
				visited[e.ino] = true
			}
			out = append(out, dnode{rel: r, ino: e.ino, mode: e.mode})
			if isDir(e.mode) {
				if err := walk(e.ino, r); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return out, walk(rootIno, "")
}

// rollback undoes each durable file's unsynced writes as mode says, files
// in order of their durable paths (so a seed gives the same cut again).
// Files that are not durable are only reported.
func (f *FS) rollback(mode Mode, rng *rand.Rand, rep *CutReport, durablePath map[uint64]string) error {
	var dirty []*fileState
	for _, st := range f.files {
		if len(st.log) > 0 {
			dirty = append(dirty, st)
		}
	}
	slices.SortFunc(dirty, func(a, b *fileState) int {
		pa, oka := durablePath[a.ino]
		pb, okb := durablePath[b.ino]
		switch {
		case oka != okb:
			if oka {
				return -1
			}
			return 1
		case pa != pb:
			return strings.Compare(pa, pb)
		}
		return int(a.size - b.size)
	})
	for _, st := range dirty {
		fc := FileCut{Path: durablePath[st.ino], Writes: len(st.log), TornAt: -1, TornWrite: -1, SizeBefore: st.size}
		if fc.Path == "" {
			rep.Files = append(rep.Files, fc)
			continue
		}
		if err := f.rollbackFile(st, mode, rng, rep, &fc); err != nil {
			return fmt.Errorf("faultfs: rolling back %s: %v", fc.Path, err)
		}
		var s syscall.Stat_t
		if err := syscall.Fstat(int(st.f.Fd()), &s); err != nil {
			return err
		}
		fc.SizeAfter = s.Size
		rep.Files = append(rep.Files, fc)
	}
	return nil
}

// rollbackFile undoes one file's log back to what mode keeps.
func (f *FS) rollbackFile(st *fileState, mode Mode, rng *rand.Rand, rep *CutReport, fc *FileCut) error {
	n := len(st.log)
	k, tear := n, false
	switch mode {
	case KeepRandom:
		return f.rollbackRandom(st, rng, rep, fc)
	case DropAll:
		k = 0
	case KeepPrefix:
		k = rng.IntN(n + 1)
	case TearLast:
		k, tear = n-1, true
	case PrefixTorn:
		k = rng.IntN(n + 1)
		tear = k < n
	default:
		return fmt.Errorf("unknown mode %v", mode)
	}
	fc.Kept = k
	for i := n - 1; i >= k; i-- {
		r := st.log[i]
		t := int64(-1)
		if i == k && tear && !r.trunc {
			t = tearPoint(r, rng)
			fc.TornAt, fc.TornWrite = t, i
			rep.TornWrites++
			rep.KeptBytes += t - r.off
			rep.DroppedBytes += r.off + r.n - t
		} else {
			rep.DroppedWrites++
			if !r.trunc {
				rep.DroppedBytes += r.n
			}
		}
		if err := st.undo(r, t); err != nil {
			return err
		}
	}
	for _, r := range st.log[:k] {
		rep.KeptWrites++
		if !r.trunc {
			rep.KeptBytes += r.n
		}
	}
	return nil
}

// rollbackRandom undoes every unsynced change of the file and applies
// again, in order, a random subset of their pages (KeepRandom): each
// piece (a write's part inside one page, or a size change) is kept with a
// probability drawn for the file, and in half the files one of the write
// pieces not kept is torn (its bytes before a sector boundary kept).
// Undoing from the newest back, the file holds each write's own bytes
// just before its undo: they are read then, for the replay.
func (f *FS) rollbackRandom(st *fileState, rng *rand.Rand, rep *CutReport, fc *FileCut) error {
	var pieces []Piece
	for i, r := range st.log {
		if r.trunc {
			pieces = append(pieces, Piece{Write: i, Off: r.off, End: r.off, Trunc: true, TornAt: -1})
			continue
		}
		for off := r.off; off < r.off+r.n; {
			end := min((off/PageSize+1)*PageSize, r.off+r.n)
			pieces = append(pieces, Piece{Write: i, Off: off, End: end, TornAt: -1})
			off = end
		}
	}
	p := rng.Float64()
	var lost []int
	for k := range pieces {
		pieces[k].Kept = rng.Float64() < p
		if !pieces[k].Kept && !pieces[k].Trunc {
			lost = append(lost, k)
		}
	}
	if len(lost) > 0 && rng.IntN(2) == 0 {
		k := lost[rng.IntN(len(lost))]
		pc := &pieces[k]
		pc.TornAt = tearPoint(undoRec{off: pc.Off, n: pc.End - pc.Off}, rng)
		fc.TornWrite, fc.TornAt = pc.Write, pc.TornAt
	}
	data := make([][]byte, len(st.log))
	for i := len(st.log) - 1; i >= 0; i-- {
		r := st.log[i]
		if !r.trunc {
			data[i] = make([]byte, r.n)
			if _, err := st.f.ReadAt(data[i], r.off); err != nil {
				return fmt.Errorf("reading write %d [%d,%d): %v", i, r.off, r.off+r.n, err)
			}
		}
		if err := st.undo(r, -1); err != nil {
			return err
		}
	}
	fd := int(st.f.Fd())
	for _, pc := range pieces {
		r := st.log[pc.Write]
		switch {
		case pc.Trunc && pc.Kept:
			if err := syscall.Ftruncate(fd, pc.Off); err != nil {
				return err
			}
			rep.KeptWrites++
		case pc.Trunc:
			rep.DroppedWrites++
		case pc.Kept:
			if _, err := syscall.Pwrite(fd, data[pc.Write][pc.Off-r.off:pc.End-r.off], pc.Off); err != nil {
				return err
			}
			rep.KeptWrites++
			rep.KeptBytes += pc.End - pc.Off
		case pc.TornAt >= 0:
			if pc.TornAt > pc.Off {
				if _, err := syscall.Pwrite(fd, data[pc.Write][pc.Off-r.off:pc.TornAt-r.off], pc.Off); err != nil {
					return err
				}
			}
			rep.TornWrites++
			rep.KeptBytes += pc.TornAt - pc.Off
			rep.DroppedBytes += pc.End - pc.TornAt
		default:
			rep.DroppedWrites++
			rep.DroppedBytes += pc.End - pc.Off
		}
	}
	fc.Pieces = pieces
	return nil
}

// tearPoint picks a sector boundary strictly inside write r, or its start
// when it spans none.
func tearPoint(r undoRec, rng *rand.Rand) int64 {
	first := (r.off/SectorSize + 1) * SectorSize
	end := r.off + r.n
	if first >= end {
		return r.off
	}
	count := (end-1-first)/SectorSize + 1
	return first + SectorSize*rng.Int64N(count)
}

// rebuild replaces the underlying tree with the durable one: files are
// hard-linked under their durable names into a staging directory,
// directories recreated, and the staging tree then takes the old one's
// place.
func (f *FS) rebuild(tree []dnode, byIno map[uint64]string) error {
	stage := filepath.Join(f.root, stageName)
	if err := os.RemoveAll(stage); err != nil {
		return err
	}
	if err := os.Mkdir(stage, 0o700); err != nil {
		return err
	}
	for _, d := range tree {
		dst := filepath.Join(stage, d.rel)
		src := byIno[d.ino]
		if !isDir(d.mode) {
			if err := os.Link(src, dst); err != nil {
				return fmt.Errorf("faultfs: rebuild: %v", err)
			}
			continue
		}
		if err := syscall.Mkdir(dst, 0o700); err != nil {
			return fmt.Errorf("faultfs: rebuild: mkdir %s: %v", dst, err)
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(src, &st); err == nil {
			syscall.Chmod(dst, st.Mode&0o7777)
			syscall.Lchown(dst, int(st.Uid), int(st.Gid))
		}
	}
	old, err := os.ReadDir(f.root)
	if err != nil {
		return err
	}
	for _, e := range old {
		if e.Name() == stageName {
			continue
		}
		if err := os.RemoveAll(filepath.Join(f.root, e.Name())); err != nil {
			return err
		}
	}
	staged, err := os.ReadDir(stage)
	if err != nil {
		return err
	}
	for _, e := range staged {
		if err := os.Rename(filepath.Join(stage, e.Name()), filepath.Join(f.root, e.Name())); err != nil {
			return err
		}
	}
	return os.Remove(stage)
}
