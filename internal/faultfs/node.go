//go:build linux

package faultfs

import (
	"context"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is a loopback node that records what a cut must undo before it
// passes a change through.
type node struct {
	*fs.LoopbackNode
	fsys *FS
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeReaddirer      = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeSetxattrer     = (*node)(nil)
	_ fs.NodeRemovexattrer  = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
)

// WrapChild makes every node of the tree a *node.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), fsys: n.fsys}
}

// upath is the node's path in the underlying tree.
func (n *node) upath() string { return filepath.Join(n.fsys.root, n.Path(nil)) }

// enter admits one changing request; it fails with EIO once a cut has
// frozen the file system, and waits for the cut first once a StallAtSync
// trap has fired. Call the returned function when done.
func (f *FS) enter() (func(), syscall.Errno) {
	f.gate.RLock()
	if f.frozen {
		f.gate.RUnlock()
		return nil, syscall.EIO
	}
	if f.stalled.Load() {
		f.gate.RUnlock()
		f.waitStall()
		return nil, syscall.EIO
	}
	return f.gate.RUnlock, 0
}

// enterNS is enter plus the namespace lock.
func (f *FS) enterNS() (func(), syscall.Errno) {
	done, errno := f.enter()
	if errno != 0 {
		return nil, errno
	}
	f.ns.Lock()
	return func() { f.ns.Unlock(); done() }, 0
}

func hiddenAt(n *node, name string) bool {
	return n.IsRoot() && (name == hiddenName || name == stageName)
}

// Lookup hides the harness's own directories.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if hiddenAt(n, name) {
		return nil, syscall.ENOENT
	}
	return n.LoopbackNode.Lookup(ctx, name, out)
}

// OpendirHandle lists the directory without the harness's own
// directories, and leaves directory fsyncs to Fsync.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ds, errno := fs.NewLoopbackDirStream(n.upath())
	if errno != 0 {
		return nil, 0, errno
	}
	return &dirHandle{ds: ds, root: n.IsRoot()}, 0, 0
}

// Readdir is OpendirHandle's listing for callers that use it.
func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	ds, errno := fs.NewLoopbackDirStream(n.upath())
	if errno != 0 {
		return nil, errno
	}
	return &dirHandle{ds: ds, root: n.IsRoot()}, 0
}

// Fsync makes a directory's entries, or a file's data, durable.
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	f := n.fsys
	if n.IsDir() {
		done, errno := f.enterNS()
		if errno != 0 {
			return errno
		}
		defer done()
		p := n.upath()
		d, err := os.Open(p)
		if err != nil {
			return fs.ToErrno(err)
		}
		defer d.Close()
		if err := d.Sync(); err != nil {
			return fs.ToErrno(err)
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(int(d.Fd()), &st); err != nil {
			return fs.ToErrno(err)
		}
		f.nDirFsyncs.Add(1)
		if _, ok := f.snaps[st.Ino]; ok {
			delete(f.snaps, st.Ino)
			f.collect()
		}
		return 0
	}
	if h, ok := fh.(*handle); ok {
		return h.Fsync(ctx, flags)
	}
	d, err := os.Open(n.upath())
	if err != nil {
		return fs.ToErrno(err)
	}
	defer d.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(d.Fd()), &st); err != nil {
		return fs.ToErrno(err)
	}
	return f.fsyncFile(int(d.Fd()), st.Ino, flags)
}

// Create creates a file; the name is not durable until the directory is
// fsynced.
func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if hiddenAt(n, name) {
		return nil, nil, 0, syscall.EPERM
	}
	done, errno := n.fsys.enterNS()
	if errno != 0 {
		return nil, nil, 0, errno
	}
	defer done()
	dir := n.upath()
	if err := n.fsys.dirty(dir); err != nil {
		return nil, nil, 0, fs.ToErrno(err)
	}
	if flags&syscall.O_TRUNC != 0 {
		if errno := n.fsys.truncatePath(filepath.Join(dir, name), 0, true); errno != 0 {
			return nil, nil, 0, errno
		}
		flags &^= syscall.O_TRUNC
	}
	ch, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	h, errno := n.fsys.newHandle(fh, flags)
	if errno != 0 {
		fh.(fs.FileReleaser).Release(ctx)
		return nil, nil, 0, errno
	}
	return ch, h, fl, 0
}

// Open opens a file; O_TRUNC is applied (and logged) by the harness.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	trunc := flags&syscall.O_TRUNC != 0
	flags &^= syscall.O_TRUNC
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	h, errno := n.fsys.newHandle(fh, flags)
	if errno == 0 && trunc {
		errno = h.truncate(0)
	}
	if errno != 0 {
		fh.(fs.FileReleaser).Release(ctx)
		return nil, 0, errno
	}
	return h, fl, 0
}

// Mkdir creates a directory whose own entries are not durable until it is
// fsynced.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if hiddenAt(n, name) {
		return nil, syscall.EPERM
	}
	done, errno := n.fsys.enterNS()
	if errno != 0 {
		return nil, errno
	}
	defer done()
	dir := n.upath()
	if err := n.fsys.dirty(dir); err != nil {
		return nil, fs.ToErrno(err)
	}
	ch, errno := n.LoopbackNode.Mkdir(ctx, name, mode, out)
	if errno != 0 {
		return nil, errno
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(dir, name), &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	n.fsys.snaps[st.Ino] = map[string]dentry{}
	return ch, 0
}

// Mknod creates a special file.
func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	done, errno := n.enterDirty(name)
	if errno != 0 {
		return nil, errno
	}
	defer done()
	return n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
}

// Symlink creates a symbolic link.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	done, errno := n.enterDirty(name)
	if errno != 0 {
		return nil, errno
	}
	defer done()
	return n.LoopbackNode.Symlink(ctx, target, name, out)
}

// Link adds a hard link.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	done, errno := n.enterDirty(name)
	if errno != 0 {
		return nil, errno
	}
	defer done()
	return n.LoopbackNode.Link(ctx, target, name, out)
}

// Unlink removes a name; the inode is kept for a cut.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	done, errno := n.fsys.enterNS()
	if errno != 0 {
		return errno
	}
	defer done()
	dir := n.upath()
	if err := n.fsys.dirty(dir); err != nil {
		return fs.ToErrno(err)
	}
	if err := n.fsys.keep(filepath.Join(dir, name)); err != nil {
		return fs.ToErrno(err)
	}
	return n.LoopbackNode.Unlink(ctx, name)
}

// Rmdir removes an empty directory: it moves into the hidden directory.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	done, errno := n.fsys.enterNS()
	if errno != 0 {
		return errno
	}
	defer done()
	dir := n.upath()
	p := filepath.Join(dir, name)
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return fs.ToErrno(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return syscall.ENOTDIR
	}
	if errno := emptyDir(p); errno != 0 {
		return errno
	}
	if err := n.fsys.dirty(dir); err != nil {
		return fs.ToErrno(err)
	}
	return fs.ToErrno(n.fsys.hideDir(p, st.Ino))
}

// emptyDir returns ENOTEMPTY unless directory p is empty.
func emptyDir(p string) syscall.Errno {
	d, err := os.Open(p)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer d.Close()
	if names, _ := d.Readdirnames(1); len(names) > 0 {
		return syscall.ENOTEMPTY
	}
	return 0
}

// Rename moves a name; an overwritten inode is kept for a cut.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if hiddenAt(np, newName) || hiddenAt(n, name) {
		return syscall.EPERM
	}
	f := n.fsys
	done, errno := f.enterNS()
	if errno != 0 {
		return errno
	}
	defer done()
	src, dstDir := n.upath(), np.upath()
	if err := f.dirty(src); err != nil {
		return fs.ToErrno(err)
	}
	if err := f.dirty(dstDir); err != nil {
		return fs.ToErrno(err)
	}
	src = filepath.Join(src, name)
	dst := filepath.Join(dstDir, newName)
	var hidDir uint64
	if flags&(unix.RENAME_EXCHANGE|unix.RENAME_NOREPLACE) == 0 {
		var sst, dst_ syscall.Stat_t
		if err := syscall.Lstat(dst, &dst_); err == nil && syscall.Lstat(src, &sst) == nil && sst.Ino != dst_.Ino {
			if dst_.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				if sst.Mode&syscall.S_IFMT == syscall.S_IFDIR && emptyDir(dst) == 0 {
					if err := f.hideDir(dst, dst_.Ino); err != nil {
						return fs.ToErrno(err)
					}
					hidDir = dst_.Ino
				}
			} else if err := f.keep(dst); err != nil {
				return fs.ToErrno(err)
			}
		}
	}
	errno = n.LoopbackNode.Rename(ctx, name, np.LoopbackNode, newName, flags)
	if errno != 0 && hidDir != 0 {
		if os.Rename(filepath.Join(f.root, hiddenName, f.hidden[hidDir]), dst) == nil {
			delete(f.hidden, hidDir)
		}
	}
	return errno
}

// Setattr logs a size change, then passes the rest through.
func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	done, errno := n.fsys.enter()
	if errno != 0 {
		return errno
	}
	defer done()
	h, _ := fh.(*handle)
	if sz, ok := in.GetSize(); ok {
		if h != nil {
			errno = h.truncate(int64(sz))
		} else {
			n.fsys.ns.Lock()
			errno = n.fsys.truncatePath(n.upath(), int64(sz), false)
			n.fsys.ns.Unlock()
		}
		if errno != 0 {
			return errno
		}
		in.Valid &^= fuse.FATTR_SIZE
	}
	if h != nil {
		return h.lf.Setattr(ctx, in, out)
	}
	return n.LoopbackNode.Setattr(ctx, nil, in, out)
}

// Setxattr passes through (xattrs are never rolled back).
func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	done, errno := n.fsys.enter()
	if errno != 0 {
		return errno
	}
	defer done()
	return n.LoopbackNode.Setxattr(ctx, attr, data, flags)
}

// Removexattr passes through.
func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	done, errno := n.fsys.enter()
	if errno != 0 {
		return errno
	}
	defer done()
	return n.LoopbackNode.Removexattr(ctx, attr)
}

// Tmpfile is not supported: an unnamed inode that gets a name with
// linkat would escape the bookkeeping.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// CopyFileRange is not supported; the kernel falls back to reads and
// writes, which are logged.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.EOPNOTSUPP
}

// truncatePath truncates the file at path to size, logged. With ifExists a
// missing file is no error. The caller holds ns and has entered.
func (f *FS) truncatePath(path string, size int64, ifExists bool) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		if ifExists && err == syscall.ENOENT {
			return 0
		}
		return fs.ToErrno(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return fs.ToErrno(syscall.Truncate(path, size))
	}
	s, err := f.state(st.Ino, openPath(path))
	if err != nil {
		return fs.ToErrno(err)
	}
	defer s.mu.Unlock()
	fd := int(s.f.Fd())
	return fs.ToErrno(s.truncate(size, func() error { return syscall.Ftruncate(fd, size) }))
}

// fsyncFile makes ino's writes before the call durable, fsyncing fd.
func (f *FS) fsyncFile(fd int, ino uint64, flags uint32) syscall.Errno {
	f.fmu.Lock()
	st := f.files[ino]
	f.fmu.Unlock()
	if f.springTrap(st) {
		f.waitStall()
		return syscall.EIO
	}
	done, errno := f.enter()
	if errno != 0 {
		return errno
	}
	defer done()
	var mark int64
	if st != nil {
		st.mu.Lock()
		mark = st.mark()
		st.mu.Unlock()
	}
	var err error
	if flags&1 != 0 {
		err = syscall.Fdatasync(fd)
	} else {
		err = syscall.Fsync(fd)
	}
	if err != nil {
		return fs.ToErrno(err)
	}
	f.nFsyncs.Add(1)
	if st != nil {
		st.mu.Lock()
		st.commit(mark)
		st.mu.Unlock()
	}
	return 0
}

// dirHandle is a directory listing without the harness's directories at
// the root. It does not implement Fsyncdir, so directory fsyncs reach
// node.Fsync.
type dirHandle struct {
	ds   fs.DirStream
	root bool
	next *fuse.DirEntry
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.DirStream        = (*dirHandle)(nil)
)

func (d *dirHandle) skip(e fuse.DirEntry) bool {
	return d.root && (e.Name == hiddenName || e.Name == stageName)
}

// Readdirent returns the next entry, nil at the end.
func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if e := d.next; e != nil {
		d.next = nil
		return e, 0
	}
	for d.ds.HasNext() {
		e, errno := d.ds.Next()
		if errno != 0 {
			return nil, errno
		}
		if !d.skip(e) {
			return &e, 0
		}
	}
	return nil, 0
}

// Seekdir passes through.
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.next = nil
	if sd, ok := d.ds.(fs.FileSeekdirer); ok {
		return sd.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

// Releasedir closes the listing.
func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) { d.ds.Close() }

// HasNext is the DirStream form of Readdirent.
func (d *dirHandle) HasNext() bool {
	if d.next != nil {
		return true
	}
	e, errno := d.Readdirent(context.Background())
	if errno != 0 || e == nil {
		return false
	}
	d.next = e
	return true
}

// Next returns the entry HasNext found.
func (d *dirHandle) Next() (fuse.DirEntry, syscall.Errno) {
	if !d.HasNext() {
		return fuse.DirEntry{}, syscall.ENOENT
	}
	e := *d.next
	d.next = nil
	return e, 0
}

// Close closes the listing.
func (d *dirHandle) Close() { d.ds.Close() }

// enterDirty starts a namespace change of name in this directory: name
// must not be the harness's hidden directory, and the directory is marked
// changed since its last fsync. The caller defers done.
func (n *node) enterDirty(name string) (done func(), errno syscall.Errno) {
	if hiddenAt(n, name) {
		return nil, syscall.EPERM
	}
	done, errno = n.fsys.enterNS()
	if errno != 0 {
		return nil, errno
	}
	if err := n.fsys.dirty(n.upath()); err != nil {
		done()
		return nil, fs.ToErrno(err)
	}
	return done, 0
}
