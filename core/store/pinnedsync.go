package store

import (
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/internal/fsutil"
)

// gomaxprocs is runtime.GOMAXPROCS(0).
func gomaxprocs() int { return runtime.GOMAXPROCS(0) }

// pinnedSlow is the fdatasync duration past which a journal stops
// holding its P in the call (pinnedSync).
const pinnedSlow = time.Second

// holdPOK reports whether the journal in dir may make its rounds'
// fdatasync holding the syncer's P (fsutil.FdatasyncHoldingP), and if
// not, why: only on a local file system whose calls are short and that
// no process serves (FUSE: a server in this very process could not run
// while a stop-the-world waited for the call), and only with another P
// for the rest of the broker to run on.
func holdPOK(dir string, procs int) (bool, string) {
	if procs < 2 {
		return false, fmt.Sprintf("GOMAXPROCS %d", procs)
	}
	if ok, _, _ := fsutil.SyncfsFS(dir); !ok {
		return false, "not a local ext4, xfs, btrfs or tmpfs"
	}
	return true, ""
}

// pinnedSync is the journal syncer's fdatasync holding its P, which
// turns to the blocking call for good once a call took longer than slow:
// a disk that stalls for seconds would otherwise hold up every
// stop-the-world of the process (garbage collections, and so every
// goroutine) for as long. A call made while GOMAXPROCS is below 2 (it
// follows a container's CPU limit) is the blocking one too.
type pinnedSync struct {
	call, blocking func(*os.File) error
	slow           time.Duration
	logf           func(string, ...any)
	procs          func() int // runtime.GOMAXPROCS(0)
	off            atomic.Bool
}

func (p *pinnedSync) sync(f *os.File) error {
	if p.off.Load() || p.procs() < 2 {
		return p.blocking(f)
	}
	t0 := time.Now()
	err := p.call(f)
	if d := time.Since(t0); d > p.slow && !p.off.Swap(true) {
		p.logf("journal: an fdatasync of %s took %v: the journal's fdatasyncs are blocking calls from now on (docs/storage.md, \"The journal's fdatasync\")", f.Name(), d.Round(time.Millisecond))
	}
	return err
}
