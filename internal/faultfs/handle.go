//go:build linux

package faultfs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// handle is an open file: reads pass through, changes are logged first.
// It does not implement fs.FilePassthroughFder: the kernel must send every
// write here.
type handle struct {
	lf   *fs.LoopbackFile
	fd   int
	ino  uint64
	sync bool // opened O_SYNC or O_DSYNC: every write is durable when it returns
	fsys *FS
}

var (
	_ fs.FileReader    = (*handle)(nil)
	_ fs.FileWriter    = (*handle)(nil)
	_ fs.FileGetattrer = (*handle)(nil)
	_ fs.FileStatxer   = (*handle)(nil)
	_ fs.FileLseeker   = (*handle)(nil)
	_ fs.FileFlusher   = (*handle)(nil)
	_ fs.FileReleaser  = (*handle)(nil)
	_ fs.FileFsyncer   = (*handle)(nil)
	_ fs.FileAllocater = (*handle)(nil)
)

// newHandle wraps a loopback file handle.
func (f *FS) newHandle(fh fs.FileHandle, flags uint32) (*handle, syscall.Errno) {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return nil, syscall.EIO
	}
	fd, ok := lf.PassthroughFd()
	if !ok {
		return nil, syscall.EBADF
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	return &handle{lf: lf, fd: fd, ino: st.Ino, sync: flags&syscall.O_DSYNC != 0, fsys: f}, 0
}

// Read passes through.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return h.lf.Read(ctx, dest, off)
}

// Write logs what the write overwrites, then writes.
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	done, errno := h.fsys.enter()
	if errno != 0 {
		return 0, errno
	}
	defer done()
	st, err := h.fsys.state(h.ino, reopenFd(h.fd))
	if err != nil {
		return 0, fs.ToErrno(err)
	}
	defer st.mu.Unlock()
	n, err := st.write(h.fd, data, off)
	if n > 0 {
		h.fsys.nWrites.Add(1)
		h.fsys.nBytes.Add(int64(n))
		if h.sync {
			st.commit(st.mark())
		}
	}
	return uint32(n), fs.ToErrno(err)
}

// truncate changes the size, logged.
func (h *handle) truncate(size int64) syscall.Errno {
	st, err := h.fsys.state(h.ino, reopenFd(h.fd))
	if err != nil {
		return fs.ToErrno(err)
	}
	defer st.mu.Unlock()
	err = st.truncate(size, func() error { return syscall.Ftruncate(h.fd, size) })
	if err == nil && h.sync {
		st.commit(st.mark())
	}
	return fs.ToErrno(err)
}

// Allocate supports plain preallocation (mode 0, which may extend the
// file, logged as a size change) and FALLOC_FL_KEEP_SIZE; other modes
// change data in ways the log does not model.
func (h *handle) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	if mode&^unix.FALLOC_FL_KEEP_SIZE != 0 {
		return syscall.EOPNOTSUPP
	}
	done, errno := h.fsys.enter()
	if errno != 0 {
		return errno
	}
	defer done()
	if mode != 0 {
		return fs.ToErrno(unix.Fallocate(h.fd, mode, int64(off), int64(size)))
	}
	st, err := h.fsys.state(h.ino, reopenFd(h.fd))
	if err != nil {
		return fs.ToErrno(err)
	}
	defer st.mu.Unlock()
	end := int64(off + size)
	alloc := func() error { return unix.Fallocate(h.fd, 0, int64(off), int64(size)) }
	if end <= st.size {
		return fs.ToErrno(alloc())
	}
	return fs.ToErrno(st.truncate(end, alloc))
}

// Fsync makes the file's writes before it durable.
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.fsys.fsyncFile(h.fd, h.ino, flags)
}

// Getattr passes through.
func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Getattr(ctx, out)
}

// Statx passes through.
func (h *handle) Statx(ctx context.Context, flags uint32, mask uint32, out *fuse.StatxOut) syscall.Errno {
	return h.lf.Statx(ctx, flags, mask, out)
}

// Lseek passes through.
func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return h.lf.Lseek(ctx, off, whence)
}

// Flush passes through.
func (h *handle) Flush(ctx context.Context) syscall.Errno { return h.lf.Flush(ctx) }

// Release closes the file.
func (h *handle) Release(ctx context.Context) syscall.Errno { return h.lf.Release(ctx) }
