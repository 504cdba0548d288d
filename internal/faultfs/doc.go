// Package faultfs is a power-loss harness for tests: a FUSE file system
// that passes every operation through to an underlying directory and can
// then "cut the power", leaving that directory holding exactly what a disk
// would hold after a power loss. It is the idea of LazyFS (the file system
// Jepsen used to find acknowledged writes lost by NATS 2.12.1), written for
// this repository on github.com/hanwen/go-fuse/v2.
//
// # Use
//
//	m := faultfs.Mount(t, dataDir, faultfs.Options{})
//	// run the program under test with its files under m.Dir()
//	// SIGKILL it and wait for it to be reaped, then:
//	rep, err := m.Cut(faultfs.DropAll)
//	// dataDir now holds the post-power-loss state: restart on it
//	// directly, or m.Remount() and restart on m.Dir() again.
//
// Mount mounts with MountOptions.DirectMount (mount(2) as root, no
// fusermount). When FUSE is not usable (no /dev/fuse, not root, mount
// refused) Mount skips the test, except under CI=true where it fails it.
// Open is the same without a testing.TB.
//
// # The disk model
//
// The model is the worst case POSIX allows and ext4 without its
// conveniences can show:
//
//   - A file's data is durable up to its last fsync or fdatasync (both
//     are treated alike: size changes are data). Writes through a handle
//     opened with O_SYNC or O_DSYNC are durable when they return.
//   - A directory's entries are durable as of its last fsync. Creating,
//     linking, unlinking and renaming a name changes only the directories
//     that hold the name; fsyncing a file never makes its name durable. So
//     a file created in a directory that is never fsynced vanishes at a
//     cut, and a rename without an fsync of both directories is undone
//     (in the source directory and in the target directory, each as that
//     directory's own last fsync left it).
//   - A new directory's own entries start out empty: its children are
//     durable only once it is fsynced.
//   - Metadata other than names and sizes (mode, owner, times, xattrs) is
//     passed through and never rolled back.
//
// What a cut keeps of each file's unsynced writes is chosen by the Mode:
// nothing (DropAll), a random prefix (KeepPrefix), all but the last with
// the last one torn at a 512-byte sector boundary (TearLast), a random
// prefix followed by one torn write (PrefixTorn), or a random subset of
// the unsynced pages (KeepRandom, "torn" cuts: a disk with a volatile
// write cache that persists a later dirty page and loses an earlier one),
// maybe with one of the lost pages torn. StallAtSync makes the power fail
// at the next fsync of a file with two or more unsynced writes, while the
// program runs (it sees that fsync and every later change hang, then
// EIO at the cut), so that a cut finds the most to tear. Unsynced directory
// changes are dropped in every mode. A "write" is one FUSE WRITE request:
// the kernel splits a write(2) that crosses page (4 KiB) boundaries into
// several, much as writeback would persist its pages independently, and
// sends one for a write(2) inside a page. Random choices come from Options.Seed and the cut's number, and the
// CutReport says what was kept of each file, so a test can compute the
// exact expected content.
//
// # Design: write through, undo at the cut
//
// Every operation is applied to the underlying directory at once, so the
// live view is an ordinary loopback mount (reads, mmap, sendfile and
// directory listings need nothing special), and the harness keeps just
// enough to undo what was not made durable:
//
//   - Per file inode, an undo log of the WRITE, truncate and fallocate
//     requests since the last fsync, in the order they were applied. A
//     write records the file size before it and the bytes it overwrote
//     (appends, the common case, overwrite nothing and cost no memory); a
//     truncate records the old size and the bytes it cut off. Undoing
//     records from the newest back gives the file's exact content after
//     any prefix of its writes, so every Mode is exact; a torn write is
//     undone from its tear point on. An fsync drops the records that were
//     applied before it began. The log holds an open descriptor of the
//     inode, so it survives renames and unlinks.
//   - Per directory inode, a snapshot of its entries (name to inode
//     number) taken at its first change after its last fsync; an fsync of
//     the directory drops the snapshot. A directory without a snapshot is
//     durable as it is.
//   - An unlinked or overwritten name's inode is kept alive by a hard link
//     (a removed directory by a rename) in a hidden directory, ".faultfs",
//     at the root of the underlying tree, so a cut can bring it back and
//     its inode number is never reused while a snapshot names it. The
//     mount never shows that directory; a cut or an unmount removes it.
//
// A cut first freezes the file system (every later change fails with EIO,
// which is what a process still alive would see), unmounts it (if it is
// busy: lazily, then aborting the FUSE connection through fusectl, which
// it mounts on /sys/fs/fuse/connections when needed; bounded in time), undoes each file's log as the Mode says,
// and, when some directory's durable entries differ from its live ones,
// rebuilds the tree from the root's durable entries down: durable files
// are hard-linked into a staging directory under their durable names,
// directories are recreated, and the staging tree replaces the old one.
// The underlying tree must be one file system (hard links and renames
// never cross one).
package faultfs
