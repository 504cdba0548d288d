//go:build linux

package fsutil

import (
	"os"

	"golang.org/x/sys/unix"
)

// Local file systems whose syncfs(2) writes back every file's data and
// metadata and flushes the device cache (sync_filesystem), from statfs's
// f_type.
var syncfsTypes = map[int64]string{
	unix.EXT4_SUPER_MAGIC:  "ext4", // also ext2 and ext3
	unix.XFS_SUPER_MAGIC:   "xfs",
	unix.BTRFS_SUPER_MAGIC: "btrfs",
	unix.TMPFS_MAGIC:       "tmpfs", // nothing to write back
}

// SyncfsFS reports whether dir's file system is one whose syncfs makes
// every file written before it durable (a local ext4, xfs or btrfs, or
// tmpfs), and that file system's name and device. FUSE, network and other
// file systems answer false: their syncfs may not reach every file (FUSE
// forwards it to few servers), so callers fsync each file there.
func SyncfsFS(dir string) (ok bool, name string, dev uint64) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, "", 0
	}
	name, ok = syncfsTypes[int64(st.Type)]
	if !ok {
		return false, "", 0
	}
	var s unix.Stat_t
	if err := unix.Stat(dir, &s); err != nil {
		return false, "", 0
	}
	return true, name, uint64(s.Dev)
}

// Device returns the device number of the file system holding path.
func Device(path string) (uint64, bool) {
	var s unix.Stat_t
	if err := unix.Stat(path, &s); err != nil {
		return 0, false
	}
	return uint64(s.Dev), true
}

// Syncfs writes back every dirty page and inode of f's file system and
// waits for it (syncfs(2)): one call instead of an fsync per file. Since
// Linux 5.8 it reports a writeback error of any file of the file system
// that happened since f was opened or since the last Syncfs of f, once;
// like an fsync error, it must not be retried. EINTR is retried.
func Syncfs(f *os.File) error {
	return syncCall(f, "syncfs", unix.Syncfs)
}
