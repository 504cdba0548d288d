//go:build linux

package faultfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// undoRec undoes one change to a file's data. For a write, off and n are
// its range; for a truncate (or an extending fallocate), off is the new
// size. oldSize is the size before the change and old the bytes it
// overwrote: [off, min(off+n, oldSize)) for a write, [off, oldSize) for a
// shrinking truncate.
type undoRec struct {
	trunc   bool
	off, n  int64
	oldSize int64
	old     []byte
}

// fileState is the undo log of one file inode since its last fsync.
type fileState struct {
	mu   sync.Mutex
	ino  uint64
	f    *os.File // the inode, read-write, for reading old bytes and undoing
	size int64    // live size
	log  []undoRec
	base int64 // records dropped from the front of log by fsyncs so far
	dead bool  // removed from FS.files: look it up again
}

// state returns ino's log, locked, creating it with open (a read-write
// descriptor of the inode) if there is none. The caller unlocks st.mu.
func (f *FS) state(ino uint64, open func() (*os.File, error)) (*fileState, error) {
	for i := 0; ; i++ {
		f.fmu.Lock()
		st := f.files[ino]
		if st == nil {
			fd, err := open()
			if err != nil {
				f.fmu.Unlock()
				return nil, err
			}
			var s syscall.Stat_t
			if err := syscall.Fstat(int(fd.Fd()), &s); err != nil {
				f.fmu.Unlock()
				fd.Close()
				return nil, err
			}
			if s.Ino != ino {
				f.fmu.Unlock()
				fd.Close()
				return nil, fmt.Errorf("faultfs: inode %d reopened as %d", ino, s.Ino)
			}
			st = &fileState{ino: ino, f: fd, size: s.Size}
			f.files[ino] = st
		}
		f.fmu.Unlock()
		st.mu.Lock()
		if !st.dead {
			return st, nil
		}
		st.mu.Unlock()
	}
}

// reopenFd opens the inode behind descriptor fd again, read-write.
func reopenFd(fd int) func() (*os.File, error) {
	return func() (*os.File, error) {
		return os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), os.O_RDWR, 0)
	}
}

// openPath opens path read-write; the caller holds ns, so the name cannot
// move meanwhile.
func openPath(path string) func() (*os.File, error) {
	return func() (*os.File, error) {
		return os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	}
}

// preRead returns a copy of the file's bytes in [off, end) that lie below
// size.
func (st *fileState) preRead(off, end int64) ([]byte, error) {
	end = min(end, st.size)
	if off >= end {
		return nil, nil
	}
	b := make([]byte, end-off)
	n, err := st.f.ReadAt(b, off)
	if n < len(b) {
		return nil, fmt.Errorf("faultfs: reading %d bytes at %d before overwriting them: %v", len(b), off, err)
	}
	return b, nil
}

// write applies a write of data at off through fd and logs it. st is
// locked.
func (st *fileState) write(fd int, data []byte, off int64) (int, error) {
	old, err := st.preRead(off, off+int64(len(data)))
	if err != nil {
		return 0, err
	}
	n, err := syscall.Pwrite(fd, data, off)
	if n > 0 {
		end := off + int64(n)
		if int64(len(old)) > int64(n) {
			old = old[:n]
		}
		st.log = append(st.log, undoRec{off: off, n: int64(n), oldSize: st.size, old: old})
		st.size = max(st.size, end)
	}
	return max(n, 0), err
}

// truncate applies a size change (do performs it) and logs it. st is
// locked.
func (st *fileState) truncate(size int64, do func() error) error {
	if size == st.size {
		return do()
	}
	old, err := st.preRead(size, st.size)
	if err != nil {
		return err
	}
	if err := do(); err != nil {
		return err
	}
	st.log = append(st.log, undoRec{trunc: true, off: size, oldSize: st.size, old: old})
	st.size = size
	return nil
}

// mark returns the position a following commit makes durable up to.
func (st *fileState) mark() int64 { return st.base + int64(len(st.log)) }

// commit makes the records before mark durable. st is locked.
func (st *fileState) commit(mark int64) {
	if k := mark - st.base; k > 0 {
		k = min(k, int64(len(st.log)))
		st.log = append(st.log[:0:0], st.log[k:]...)
		st.base += k
	}
}

// undo undoes r on the file; tear > r.off keeps the write's bytes before
// tear.
func (st *fileState) undo(r undoRec, tear int64) error {
	fd := int(st.f.Fd())
	if r.trunc {
		if err := syscall.Ftruncate(fd, r.oldSize); err != nil {
			return err
		}
		if len(r.old) > 0 {
			if _, err := syscall.Pwrite(fd, r.old, r.off); err != nil {
				return err
			}
		}
		return nil
	}
	from, size := r.off, r.oldSize
	if tear > r.off {
		// The bytes before tear reached the disk: the size covers them.
		from, size = tear, max(r.oldSize, tear)
	}
	if err := syscall.Ftruncate(fd, size); err != nil {
		return err
	}
	if skip := from - r.off; skip < int64(len(r.old)) {
		if _, err := syscall.Pwrite(fd, r.old[skip:], from); err != nil {
			return err
		}
	}
	return nil
}

// dentry is one directory entry of a snapshot.
type dentry struct {
	ino  uint64
	mode uint32
}

// readEntries lists directory path as name -> entry, leaving out the
// harness's own directories at the root.
func (f *FS) readEntries(path string) (map[string]dentry, error) {
	d, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	atRoot := path == f.root
	m := make(map[string]dentry, len(names))
	for _, name := range names {
		if atRoot && (name == hiddenName || name == stageName) {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(path, name), &st); err != nil {
			return nil, err
		}
		m[name] = dentry{ino: st.Ino, mode: st.Mode}
	}
	return m, nil
}

// dirty records directory path's durable entries before its first change
// since its last fsync. The caller holds ns.
func (f *FS) dirty(path string) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return err
	}
	if _, ok := f.snaps[st.Ino]; ok {
		return nil
	}
	m, err := f.readEntries(path)
	if err != nil {
		return err
	}
	f.snaps[st.Ino] = m
	return nil
}

// keep hard-links the file at path into the hidden directory before its
// name goes away, so a cut can bring it back. The caller holds ns.
func (f *FS) keep(path string) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		if err == syscall.ENOENT {
			return nil
		}
		return err
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return nil
	}
	if _, ok := f.hidden[st.Ino]; ok {
		return nil
	}
	name := "f" + strconv.FormatUint(st.Ino, 10)
	if err := os.Link(path, filepath.Join(f.root, hiddenName, name)); err != nil {
		return err
	}
	f.hidden[st.Ino] = name
	return nil
}

// hideDir moves the empty directory at path into the hidden directory
// instead of removing it. The caller holds ns.
func (f *FS) hideDir(path string, ino uint64) error {
	name := "d" + strconv.FormatUint(ino, 10)
	if err := os.Rename(path, filepath.Join(f.root, hiddenName, name)); err != nil {
		return err
	}
	f.hidden[ino] = name
	return nil
}

// collect drops hidden inodes that no snapshot names any more: no cut can
// need them. A hidden directory's own snapshot goes with it. The caller
// holds ns.
func (f *FS) collect() {
	for changed := true; changed; {
		changed = false
		named := map[uint64]bool{}
		for _, m := range f.snaps {
			for _, e := range m {
				named[e.ino] = true
			}
		}
		for ino, name := range f.hidden {
			if named[ino] {
				continue
			}
			p := filepath.Join(f.root, hiddenName, name)
			if name[0] == 'd' {
				if err := syscall.Rmdir(p); err != nil {
					continue
				}
				if _, ok := f.snaps[ino]; ok {
					delete(f.snaps, ino)
					changed = true
				}
			} else {
				if err := syscall.Unlink(p); err != nil {
					continue
				}
				f.forgetIfUnlinked(ino)
			}
			delete(f.hidden, ino)
		}
	}
}

// forgetIfUnlinked drops ino's log when the inode has no name left: its
// number may be reused, and no cut can bring it back.
func (f *FS) forgetIfUnlinked(ino uint64) {
	f.fmu.Lock()
	defer f.fmu.Unlock()
	st := f.files[ino]
	if st == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	var s syscall.Stat_t
	if err := syscall.Fstat(int(st.f.Fd()), &s); err == nil && s.Nlink > 0 {
		return
	}
	st.dead = true
	st.f.Close()
	delete(f.files, ino)
}
