package store

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/internal/fsutil"
)

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
// goroutine) for as long.
type pinnedSync struct {
	call, blocking func(*os.File) error
	slow           time.Duration
	logf           func(string, ...any)
	off            atomic.Bool
}

func (p *pinnedSync) sync(f *os.File) error {
	if p.off.Load() {
		return p.blocking(f)
	}
	t0 := time.Now()
	err := p.call(f)
	if d := time.Since(t0); d > p.slow && !p.off.Swap(true) {
		p.logf("journal: an fdatasync of %s took %v: the journal's fdatasyncs are blocking calls from now on (docs/storage.md, \"The journal's fdatasync\")", f.Name(), d.Round(time.Millisecond))
	}
	return err
}
