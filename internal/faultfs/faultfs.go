//go:build linux

package faultfs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// hiddenName is the directory at the root of the underlying tree that keeps
// unlinked inodes alive until a cut; stageName is where a cut builds the
// durable tree. The mount shows neither.
const (
	hiddenName = ".faultfs"
	stageName  = ".faultfs-stage"
)

// SectorSize is the unit a torn write is cut at.
const SectorSize = 512

// UnmountTimeout bounds how long an unmount waits for the mount to go away
// (plain unmount first, then a lazy one) and for the FUSE server to stop.
const UnmountTimeout = 5 * time.Second

// ErrUnavailable wraps the reason FUSE cannot be used on this machine
// (no /dev/fuse, not root, mount refused).
var ErrUnavailable = errors.New("faultfs: FUSE unavailable")

// ErrNotMounted is returned by Cut and Unmount when the file system is not
// mounted.
var ErrNotMounted = errors.New("faultfs: not mounted")

// Mode says what a cut keeps of each file's unsynced writes.
type Mode int

const (
	// DropAll keeps nothing that was not fsynced.
	DropAll Mode = iota
	// KeepPrefix keeps a random prefix (possibly empty, possibly all) of
	// each file's unsynced writes, in the order they were made.
	KeepPrefix
	// TearLast keeps every unsynced write of each file but the last one,
	// and of that one the part before a random 512-byte sector boundary
	// inside it (none of it when it spans no boundary). A last truncate
	// cannot tear: it is dropped.
	TearLast
	// PrefixTorn keeps a random prefix of each file's unsynced writes and
	// tears the next one, as TearLast does.
	PrefixTorn
	// KeepRandom ("torn") keeps a random subset of each file's unsynced
	// pages, not only a prefix: a disk with a volatile write cache
	// persists dirty pages in any order, so a later page may survive an
	// earlier one that is lost. Each unsynced write is split at page
	// (PageSize) boundaries into pieces; each piece survives
	// independently with a probability drawn per file, and in half the
	// files one lost piece is torn at a 512-byte sector boundary instead
	// (its bytes before the boundary kept). Truncates are kept or lost
	// like pieces. FileCut.Pieces says exactly what was kept.
	KeepRandom
)

// String names the mode.
func (m Mode) String() string {
	switch m {
	case DropAll:
		return "drop-all"
	case KeepPrefix:
		return "keep-prefix"
	case TearLast:
		return "tear-last"
	case PrefixTorn:
		return "prefix-torn"
	case KeepRandom:
		return "torn"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Options configure a mount. The zero value is ready to use.
type Options struct {
	// Seed makes random cuts reproducible. Zero picks one from the clock
	// (Mount logs it).
	Seed uint64
	// MountPoint is where to mount. Empty: a fresh temporary directory
	// (removed by Close).
	MountPoint string
	// Debug logs every FUSE request (go-fuse's debug output).
	Debug bool
}

// FileCut is what a cut did to one file that had unsynced writes.
type FileCut struct {
	Path      string // durable path after the cut, relative to the root; "" when the file is gone
	Writes    int    // unsynced writes, truncates and fallocates at the cut
	Kept      int    // of those, kept whole (the first Kept; KeepRandom: none, see Pieces)
	TornAt    int64  // file offset where the next write was torn (a multiple of SectorSize, or its start); -1: none torn
	TornWrite int    // index of the torn write among the Writes; -1: none torn
	// Pieces, for KeepRandom only, are the unsynced changes split at
	// page boundaries, in the order the changes were made and, inside a
	// write, by offset, each kept or not. The file holds its content at
	// its last fsync with the kept pieces applied in that order, and the
	// torn piece's bytes before TornAt in its place.
	Pieces     []Piece
	SizeBefore int64 // size at the cut (the live size)
	SizeAfter  int64 // size after the cut
}

// PageSize is the unit KeepRandom keeps or loses.
const PageSize = 4096

// Piece is one part of an unsynced change that KeepRandom kept or lost
// as a unit: the part of a write inside one page, or a whole size change.
type Piece struct {
	Write    int   // index of its change among the file's unsynced changes
	Off, End int64 // its byte range; a size change: the new size, twice
	Trunc    bool  // a size change
	Kept     bool
	TornAt   int64 // a torn piece: its bytes before TornAt were kept; -1 otherwise
}

// CutReport describes one cut.
type CutReport struct {
	Mode   Mode
	Seed   uint64    // the mount's seed; the cut used rand.NewPCG(Seed, Number)
	Number uint64    // cuts of this FS before this one
	Files  []FileCut // files with unsynced writes, by Path then size

	KeptWrites, DroppedWrites, TornWrites int   // KeepRandom: pieces (Piece)
	KeptBytes, DroppedBytes               int64 // bytes of unsynced writes kept and not kept (a torn write's rest is dropped)

	Lost     []string // paths (relative) that existed before the cut and do not after, sorted
	Restored []string // paths that did not exist before the cut and do after, sorted
	Replaced []string // paths that name another inode after the cut, sorted
	Cycles   []string // durable directory entries skipped because they made a cycle
	Detached bool     // the unmount had to be lazy (something still held the mount)
}

// Stats are running counters of a mounted FS (since Open or the last
// Remount) plus the last cut.
type Stats struct {
	Writes        int64 // WRITE requests
	BytesWritten  int64
	Fsyncs        int64 // file fsyncs and fdatasyncs
	DirFsyncs     int64
	UnsyncedBytes int64 // bytes written since the files' last fsync, now
	DirtyFiles    int   // files with unsynced writes, now
	DirtyDirs     int   // directories with unsynced entries, now
	Hidden        int   // unlinked inodes kept for a cut, now
	Cuts          int   // cuts so far
	LastCut       *CutReport
}

// FS is a mounted (or cut) power-loss file system.
type FS struct {
	root   string // the underlying directory, absolute
	mnt    string
	ownMnt bool
	opts   Options
	seed   uint64

	srv    *fuse.Server
	connID uint32 // the FUSE connection's number under fusectlDir
	// gate: every changing request holds it shared; a cut takes it
	// exclusively to freeze the file system.
	gate    sync.RWMutex
	frozen  bool
	mounted bool
	// The stall trap (StallAtSync): trap is armed; stalled once it fired,
	// after which every changing request waits for stallCh, which the
	// next cut closes (they fail with EIO then).
	stallMu sync.Mutex
	trap    bool
	trapped chan struct{}
	stallCh chan struct{}
	stalled atomic.Bool

	// ns serializes namespace changes, directory fsyncs and the bookkeeping
	// of snapshots and hidden inodes.
	ns     sync.Mutex
	snaps  map[uint64]map[string]dentry // dir inode -> durable entries
	hidden map[uint64]string            // inode -> name in hiddenName

	fmu   sync.Mutex
	files map[uint64]*fileState

	nWrites, nBytes, nFsyncs, nDirFsyncs atomic.Int64

	cuts    uint64
	lastCut *CutReport
}

// Mount mounts a power-loss file system over dir for the test and
// unmounts it (without a cut) at the end. Without FUSE it skips the test,
// or fails it under CI=true. Other errors fail the test.
func Mount(t testing.TB, dir string, opts Options) *FS {
	t.Helper()
	if opts.MountPoint == "" {
		opts.MountPoint = t.TempDir()
	}
	f, err := Open(dir, opts)
	if err != nil {
		if errors.Is(err, ErrUnavailable) && os.Getenv("CI") != "true" {
			t.Skipf("faultfs: %v", err)
		}
		t.Fatalf("faultfs: %v", err)
	}
	t.Logf("faultfs: %s mounted on %s, seed %d", dir, f.mnt, f.seed)
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("faultfs: %v", err)
		}
	})
	return f
}

// Open mounts a power-loss file system over dir. Errors that mean FUSE is
// not usable here wrap ErrUnavailable.
func Open(dir string, opts Options) (*FS, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(root); err != nil {
		return nil, err
	} else if !st.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", root)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: mounting with DirectMount needs root", ErrUnavailable)
	}
	f := &FS{root: root, opts: opts, seed: opts.Seed}
	if f.seed == 0 {
		f.seed = uint64(time.Now().UnixNano())
	}
	f.mnt = opts.MountPoint
	if f.mnt == "" {
		if f.mnt, err = os.MkdirTemp("", "faultfs-mnt-"); err != nil {
			return nil, err
		}
		f.ownMnt = true
	}
	if err := f.mount(); err != nil {
		if f.ownMnt {
			os.Remove(f.mnt)
		}
		return nil, err
	}
	return f, nil
}

// Dir is the mount point: run the program under test on it.
func (f *FS) Dir() string { return f.mnt }

// Underlying is the directory the file system passes through to.
func (f *FS) Underlying() string { return f.root }

// Seed is the seed random cuts use.
func (f *FS) Seed() uint64 { return f.seed }

func (f *FS) mount() error {
	if err := os.RemoveAll(filepath.Join(f.root, hiddenName)); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(f.root, stageName)); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(f.root, hiddenName), 0o700); err != nil {
		return err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(f.root, &st); err != nil {
		return err
	}
	f.snaps = map[uint64]map[string]dentry{}
	f.hidden = map[uint64]string{}
	f.files = map[uint64]*fileState{}
	f.nWrites.Store(0)
	f.nBytes.Store(0)
	f.nFsyncs.Store(0)
	f.nDirFsyncs.Store(0)

	lr := &fs.LoopbackRoot{Path: f.root, Dev: uint64(st.Dev)}
	rootNode := &node{LoopbackNode: &fs.LoopbackNode{RootData: lr}, fsys: f}
	lr.RootNode = rootNode
	sec := time.Second
	o := &fs.Options{
		EntryTimeout: &sec,
		AttrTimeout:  &sec,
		MountOptions: fuse.MountOptions{
			AllowOther:        true,
			DirectMount:       true,
			DirectMountStrict: true,
			FsName:            "faultfs:" + f.root,
			Name:              "faultfs",
			// Passthrough would let the kernel write to the underlying
			// files without telling us.
			DisabledCapabilities: fuse.CAP_PASSTHROUGH,
			Debug:                f.opts.Debug,
		},
	}
	srv, err := fs.Mount(f.mnt, rootNode, o)
	if err != nil {
		os.RemoveAll(filepath.Join(f.root, hiddenName))
		return fmt.Errorf("%w: mount %s: %v", ErrUnavailable, f.mnt, err)
	}
	var mst syscall.Stat_t
	if err := syscall.Stat(f.mnt, &mst); err == nil {
		f.connID = unix.Minor(mst.Dev)
	}
	f.gate.Lock()
	f.srv, f.frozen, f.mounted = srv, false, true
	f.gate.Unlock()
	return nil
}

// fusectlDir is where the kernel lists FUSE connections (the fusectl file
// system); writing to a connection's abort file ends it.
const fusectlDir = "/sys/fs/fuse/connections"

// abort ends the FUSE connection: requests in flight and later ones fail
// (ENOTCONN) and the server stops. It mounts fusectl when it is not
// mounted. It reports whether it could.
func (f *FS) abort() bool {
	file := filepath.Join(fusectlDir, strconv.FormatUint(uint64(f.connID), 10), "abort")
	if _, err := os.Stat(file); err != nil {
		if syscall.Mount("fusectl", fusectlDir, "fusectl", 0, "") != nil {
			return false
		}
	}
	return os.WriteFile(file, []byte("1"), 0) == nil
}

// freeze makes every later change fail with EIO and waits for the changes
// in flight. It reports whether the file system was mounted.
func (f *FS) freeze() bool {
	f.gate.Lock()
	defer f.gate.Unlock()
	was := f.mounted && !f.frozen
	f.frozen = true
	return was
}

// unmount takes the mount away: a plain unmount, retried while busy, then
// a lazy one and an abort of the connection; then it waits (bounded) for
// the server to stop. It reports whether the unmount had to be lazy.
//
// Without the abort, a process holding a file on a lazily unmounted mount
// keeps the server busy; and when that process is the test itself, its
// exit closes the file, which sends a request to a server that is exiting
// with it: the process never finishes exiting.
func (f *FS) unmount() (detached bool, err error) {
	deadline := time.Now().Add(UnmountTimeout / 5)
	for {
		err = syscall.Unmount(f.mnt, 0)
		if err == nil || err == syscall.EINVAL || err == syscall.ENOENT {
			err = nil
			break
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		if err = syscall.Unmount(f.mnt, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL {
			return true, fmt.Errorf("unmount %s: %v", f.mnt, err)
		}
		detached, err = true, nil
	}
	done := make(chan struct{})
	srv := f.srv
	go func() { srv.Wait(); close(done) }()
	if detached {
		select {
		case <-done:
		case <-time.After(100 * time.Millisecond):
			f.abort()
		}
	}
	select {
	case <-done:
	case <-time.After(UnmountTimeout * 4 / 5):
		// A process still holds files on the detached mount. The file
		// system is frozen: it can change nothing any more.
		detached = true
	}
	f.mounted = false
	return detached, nil
}

// Cut cuts the power: it freezes the file system, unmounts it, and leaves
// the underlying directory holding what a disk would hold after a power
// loss (see the package doc), as mode says. Kill every process that uses
// the mount (SIGKILL) and reap it before calling Cut: a process still
// alive gets EIO for every change from the cut on, and makes the unmount
// lazy.
func (f *FS) Cut(mode Mode) (*CutReport, error) {
	if !f.freeze() {
		return nil, ErrNotMounted
	}
	f.releaseStall()
	detached, err := f.unmount()
	if err != nil {
		return nil, err
	}
	f.ns.Lock()
	defer f.ns.Unlock()
	rng := rand.New(rand.NewPCG(f.seed, f.cuts))
	rep := &CutReport{Mode: mode, Seed: f.seed, Number: f.cuts, Detached: detached}
	f.cuts++
	err = f.cut(mode, rng, rep)
	f.lastCut = rep
	return rep, err
}

// StallAtSync arms a trap for the power cut that tears the most: the next
// fsync or fdatasync of a file with at least two unsynced writes does not
// happen, and from then on every changing request (that one included)
// hangs, as on a disk whose power failed just before the flush, until the
// next Cut or Unmount fails them with EIO. The process under test sees no
// error before it is killed (so it acknowledges nothing more), and the cut
// finds the unsynced writes the fsync would have made durable. Killing a
// process that waits in a stalled request takes effect once the cut
// releases it. The returned channel is closed when the trap fires. On
// FUSE a write waits for an fsync of its file in progress, so without the
// trap a killed process rarely leaves a file more than one write past its
// last fsync.
func (f *FS) StallAtSync() <-chan struct{} {
	f.stallMu.Lock()
	defer f.stallMu.Unlock()
	f.trap = true
	f.trapped = make(chan struct{})
	f.stallCh = make(chan struct{})
	return f.trapped
}

// springTrap fires the StallAtSync trap, if it is armed, for an fsync of
// st: it reports whether the fsync must stall.
func (f *FS) springTrap(st *fileState) bool {
	if st == nil {
		return false
	}
	st.mu.Lock()
	n := len(st.log)
	st.mu.Unlock()
	f.stallMu.Lock()
	defer f.stallMu.Unlock()
	if !f.trap || n < 2 {
		return false
	}
	f.trap = false
	f.stalled.Store(true)
	close(f.trapped)
	return true
}

// waitStall waits until the cut releases the stalled requests.
func (f *FS) waitStall() {
	f.stallMu.Lock()
	ch := f.stallCh
	f.stallMu.Unlock()
	if ch != nil {
		<-ch
	}
}

// releaseStall lets the stalled requests fail (the file system is frozen
// by then) and disarms the trap.
func (f *FS) releaseStall() {
	f.stallMu.Lock()
	defer f.stallMu.Unlock()
	if f.stallCh != nil {
		close(f.stallCh)
	}
	f.trap, f.trapped, f.stallCh = false, nil, nil
	f.stalled.Store(false)
}

// Remount mounts the file system again over the underlying directory
// (after a Cut or an Unmount), with nothing unsynced.
func (f *FS) Remount() error {
	f.gate.RLock()
	mounted := f.mounted
	f.gate.RUnlock()
	if mounted {
		return errors.New("faultfs: remount: already mounted")
	}
	return f.mount()
}

// Unmount unmounts without a cut: the underlying directory keeps
// everything, as after a clean shutdown.
func (f *FS) Unmount() error {
	if !f.freeze() {
		return ErrNotMounted
	}
	f.releaseStall()
	if _, err := f.unmount(); err != nil {
		return err
	}
	f.ns.Lock()
	defer f.ns.Unlock()
	f.reset()
	return os.RemoveAll(filepath.Join(f.root, hiddenName))
}

// Close unmounts (without a cut) if mounted and removes a mount point Open
// created.
func (f *FS) Close() error {
	var err error
	if e := f.Unmount(); e != nil && !errors.Is(e, ErrNotMounted) {
		err = e
	}
	if f.ownMnt {
		if e := os.Remove(f.mnt); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// Stats returns the counters.
func (f *FS) Stats() Stats {
	s := Stats{
		Writes:       f.nWrites.Load(),
		BytesWritten: f.nBytes.Load(),
		Fsyncs:       f.nFsyncs.Load(),
		DirFsyncs:    f.nDirFsyncs.Load(),
	}
	f.fmu.Lock()
	for _, st := range f.files {
		st.mu.Lock()
		if len(st.log) > 0 {
			s.DirtyFiles++
			for _, r := range st.log {
				if !r.trunc {
					s.UnsyncedBytes += r.n
				}
			}
		}
		st.mu.Unlock()
	}
	f.fmu.Unlock()
	f.ns.Lock()
	s.DirtyDirs = len(f.snaps)
	s.Hidden = len(f.hidden)
	s.Cuts = int(f.cuts)
	s.LastCut = f.lastCut
	f.ns.Unlock()
	return s
}

// reset forgets all unsynced state and closes the logs' descriptors. The
// caller holds ns and the file system is frozen.
func (f *FS) reset() {
	f.fmu.Lock()
	for _, st := range f.files {
		st.mu.Lock()
		st.dead = true
		st.f.Close()
		st.mu.Unlock()
	}
	f.files = map[uint64]*fileState{}
	f.fmu.Unlock()
	f.snaps = map[uint64]map[string]dentry{}
	f.hidden = map[uint64]string{}
}
