package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/internal/fsutil"
)

// Journal defaults (conf keys journal_file_size, journal_checkpoint_bytes
// and journal_checkpoint_interval).
const (
	DefaultJournalFileSize           int64 = 64 << 20
	DefaultJournalCheckpointBytes    int64 = 64 << 20
	DefaultJournalCheckpointInterval       = time.Second
	// MinJournalFileSize is the smallest journal file accepted.
	MinJournalFileSize int64 = 1 << 20
)

// JournalDirName is the journal's directory inside a data directory.
const JournalDirName = "journal"

// Spare journal files (pre-written, following the current one):
// prepare keeps wantSpareJournalFiles of them, creating files when there
// are fewer; free renames freed files forward while there are fewer than
// maxSpareJournalFiles and deletes the rest. The one extra a freed file
// may add keeps recycling ahead of creation: a file filled is then
// replaced by one freed, not by a new zero-filled one.
const (
	wantSpareJournalFiles = 2
	maxSpareJournalFiles  = wantSpareJournalFiles + 1
)

// JournalOptions configures a Journal. The zero value gives the defaults.
type JournalOptions struct {
	// FileSize is the size of each journal file in bytes (at least
	// MinJournalFileSize); default DefaultJournalFileSize.
	FileSize int64
	// CheckpointBytes starts a checkpoint after this many journal bytes;
	// default DefaultJournalCheckpointBytes.
	CheckpointBytes int64
	// CheckpointInterval starts a checkpoint this long after the last one
	// when anything was written since; default
	// DefaultJournalCheckpointInterval.
	CheckpointInterval time.Duration
	// Logf, if set, receives recovery, checkpoint and failure reports.
	Logf func(format string, args ...any)
	// Recovery says what OpenJournal does when a damaged journal record
	// with valid records after it held data its partition's segment does
	// not hold either (docs/storage.md, "Damaged journal records"):
	// RecoverQuarantine (the default) refuses with a *JournalCorruptError,
	// RecoverTruncate cuts the partition where that data started.
	Recovery RecoveryMode
	// Observer, if set, is told how long each journal fdatasync took and
	// how many appends each group-commit round committed (metrics).
	Observer Observer
	// CheckpointSync is how a checkpoint makes the segments it wrote
	// durable: CheckpointSyncAuto (the default) or CheckpointSyncFsync.
	CheckpointSync CheckpointSync

	// RoundSync is how the journal's syncer calls fdatasync for the
	// group-commit rounds (conf key journal_fdatasync; docs/storage.md,
	// "The journal's fdatasync"): RoundSyncAuto (the default) or
	// RoundSyncBlocking.
	RoundSync RoundSync

	hooks *journalHooks
}

// RoundSync is how the journal's syncer calls fdatasync for its rounds.
type RoundSync int

const (
	// RoundSyncAuto makes the call holding the syncer's P
	// (fsutil.FdatasyncHoldingP) where the journal is on a local ext4,
	// xfs, btrfs or tmpfs and GOMAXPROCS is at least 2, until a call
	// takes longer than a second; the blocking call elsewhere and after.
	RoundSyncAuto RoundSync = iota
	// RoundSyncBlocking always makes the blocking call.
	RoundSyncBlocking
)

// CheckpointSync is how a checkpoint makes the segments it wrote durable
// (conf key journal_checkpoint_sync; docs/storage.md, "Checkpoint sync").
type CheckpointSync int

const (
	// CheckpointSyncAuto fdatasyncs each segment, except that a checkpoint
	// of at least syncfsMinSegments segments on a local ext4, xfs or
	// btrfs data directory makes them durable with one syncfs(2) of the
	// file system (segments on another file system are still
	// fdatasynced).
	CheckpointSyncAuto CheckpointSync = iota
	// CheckpointSyncFsync always fdatasyncs each segment.
	CheckpointSyncFsync
)

// syncfsMinSegments is the smallest checkpoint (in segments) that
// CheckpointSyncAuto makes durable with syncfs: below it, a few
// fdatasyncs cost less than writing back whatever else the file system
// holds dirty.
const syncfsMinSegments = 32

// journalHooks are the test seams of a Journal; nil fields keep the real
// operation.
type journalHooks struct {
	writeAt func(f *os.File, b []byte, off int64) (int, error) // journal file write
	sync    func(f *os.File) error                             // journal file fdatasync
	// writeBack replaces the write-back of checkpoints' segment tails
	// (sync_file_range, writeBehind).
	writeBack writeBackFunc
	// smallFiles allows files below MinJournalFileSize.
	smallFiles bool
	// replayLimit, if positive, makes recovery stop with errReplayStopped
	// after writing that many records (a crash during replay).
	replayLimit int
	// syncfs replaces syncfs(2) of the checkpoints; with syncfsFS set it is
	// used whatever the file system (CheckpointSyncAuto).
	syncfs   func(f *os.File) error
	syncfsFS bool
	// noRegisters writes the journal of a binary from before register
	// records: none, checkpoints without their section, and a checkpoint
	// asked for by every registration.
	noRegisters bool
	// markSyncDelay replaces defaultMarkSyncDelay.
	markSyncDelay time.Duration
}

// errReplayStopped is returned by a recovery stopped by a test hook.
var errReplayStopped = errors.New("store: replay stopped by a test hook")

// JournalStats are cumulative counters of a Journal since it was opened.
type JournalStats struct {
	Rounds      int64 // group-commit rounds that wrote records
	Fsyncs      int64 // fdatasyncs of journal files
	Bytes       int64 // journal bytes written
	Checkpoints int64 // checkpoint records made durable
	Recycled    int64 // freed journal files renamed forward for reuse
	// Syncfs counts checkpoints whose segments one syncfs(2) of the file
	// system made durable instead of an fdatasync each
	// (JournalOptions.CheckpointSync).
	Syncfs int64
	// Led counts rounds run by the appending goroutine itself, on an
	// idle journal (Log.AppendLead).
	Led int64
	// Marks counts mark records written: a round's completion found no
	// record written since its fdatasync returned that carried a durable
	// mark past it (docs/storage.md, "Mark records").
	Marks int64
	// MarkSyncs counts mark records fdatasynced by themselves: no later
	// round made a mark as high durable within 10 ms (an idle journal).
	MarkSyncs int64
	Replayed  int64 // data records written to segments by recovery
	Skipped   int64 // data records recovery found already in place
	// Behind is the journal bytes written after the last durable
	// checkpoint's start: what a restart would replay (journal lag).
	Behind int64
	// LastCheckpoint is when the last checkpoint became durable (zero
	// before the first one of this run).
	LastCheckpoint time.Time
	// UpToDate: nothing was written after the last durable checkpoint's
	// record. An idle journal makes no checkpoints, so LastCheckpoint then
	// ages without anything being behind.
	UpToDate bool
}

// jfile is one journal file: positions [start, start+size).
type jfile struct {
	start, size int64
	f           *os.File
}

func (f *jfile) end() int64 { return f.start + f.size }

// piece is a part of the round buffer that goes to one journal file.
type piece struct {
	f    *jfile
	from int // in Journal.buf
}

// ckptJob is a checkpoint in progress: the segments to fsync before its
// record may be written.
type ckptJob struct {
	c checkpoint
	// closeSeq is Journal.closeSeq when the snapshot was taken: every
	// log closed before it is wholly before c.from.
	closeSeq int64
	segs     []dirtySeg
	err      error // set by the checkpointer if an fsync failed
	// skip is set by the checkpointer if writing a segment's tail failed
	// (ENOSPC, EIO on write()): the checkpoint is not made, the segments
	// go back to their logs' dirty lists, and the next checkpoint tries
	// again. The records are safe in the journal meanwhile.
	skip error
	// fresh: the record starts the next journal file, which c.from is the
	// start of (finalCheckpoint).
	fresh bool
}

// dirtySeg is a segment written since the last checkpoint snapshot, with a
// reference held, and the end of its bytes at the snapshot: the tail below
// it is written to the file before the fsync.
type dirtySeg struct {
	seg  *segment
	log  *Log
	upTo int64
}

// Journal is the broker-wide write-ahead journal of one data directory
// (<data_dir>/journal/): every group-commit Log of that directory is
// committed through it, with one fdatasync per round for all of them.
// See docs/storage.md and the package documentation.
type Journal struct {
	dir, dataDir string
	fileSize     int64
	ckptBytes    int64
	ckptInterval time.Duration
	logf         func(format string, args ...any)
	writeAt      func(f *os.File, b []byte, off int64) (int, error)
	syncFile     func(f *os.File) error
	roundSync    func(f *os.File) error // the syncer's fdatasync of the rounds' journal files
	roundSyncHow string                 // how roundSync calls fdatasync, for the log
	// writeBack paces the write-back of the segment tails checkpoints
	// write (writeBehind); nil when there is none (not Linux).
	writeBack writeBackFunc
	// noWriteBack: sync_file_range failed as unsupported here (logged
	// once); checkpoints still try it, each worker giving up at once.
	noWriteBack atomic.Bool
	replayLimit int
	noRegisters bool // journalHooks.noRegisters
	recovery    RecoveryMode
	observer    Observer
	// ckptObs is observer as a CheckpointObserver, nil when it is not one.
	ckptObs CheckpointObserver

	failErr  atomic.Pointer[error] // set once: a journal write or fsync failed
	isClosed atomic.Bool

	mu      sync.Mutex
	cond    sync.Cond
	ready   []*Log         // logs with pending appends, each once
	groups  []*atomicGroup // AppendAtomic groups waiting for a round
	logs    map[*Log]struct{}
	closed  bool
	due     bool // the ticker says a checkpoint may be due
	tableCh bool // a log registered or left since the last checkpoint
	// retryCkpt (committer-owned) asks for a checkpoint at the next
	// interval although nothing was written: the last one was skipped.
	retryCkpt bool
	ckptRec   *ckptJob // fsynced by the checkpointer, record not yet written
	// idle says the committer is parked with nothing to do; leading that
	// an appending goroutine is running a round itself (leadRound), during
	// which the committer stays parked. prevAppends is the number of
	// appends of the last round staged.
	idle, leading bool
	prevAppends   int
	// trusted holds, from recovery until each partition's Open takes it,
	// how much of each partition recovery vouches for (restart.go).
	trusted map[string]trustPoint
	// closedEnds holds the partitions closed (fsynced) since they last
	// registered, and those recovery vouched for that have not
	// registered yet: the checkpoints' closed table (restart.go).
	closedEnds map[string]closedEnd
	// ckptWake, guarded by mu, is closed (and replaced) when a checkpoint
	// is durable and on Close: it wakes appends waiting for a checkpoint
	// (waitCheckpoint, restart.go).
	ckptWake chan struct{}
	// ckptFrom is the from of the last durable checkpoint, ckptAt when it
	// became durable (UnixNano); basePos the journal position nBytes
	// counts from; maxBehind the journal bytes after ckptFrom beyond
	// which appends wait.
	ckptFrom, ckptAt atomic.Int64
	// ckptEnd is the journal position just past the last durable
	// checkpoint's record (the last record of its round).
	ckptEnd atomic.Int64
	// synced is the journal position up to which the journal is known
	// durable: the end of the last round whose fdatasync returned (at
	// open, where recovery resumes writing: everything before it is in
	// fsynced segments). Each round's records carry it as their durable
	// mark, the way a WAL records its flushed position, so that recovery
	// tells an unsynced torn tail from damage (tornCandidate).
	synced atomic.Int64
	// marked is the highest durable mark carried by a record written so
	// far (a round's records or a mark record); roundEnd the journal
	// position past the last round's records (mark records after it
	// hold nothing a restart replays). Both only rise, under wmu.
	marked, roundEnd atomic.Int64
	// durMarked is the highest durable mark known durable on disk: carried
	// by a round's records whose fdatasync returned, or by a mark record
	// the checkpointer fdatasynced (syncMark).
	durMarked atomic.Int64
	// markMu guards markPend, the last mark record written (its mark and
	// file), and markArmed: markTimer will ask the checkpointer to
	// fdatasync it (syncMark). A leaf lock.
	markMu    sync.Mutex
	markPend  pendingMark
	markArmed bool
	markTimer *time.Timer
	markDue   chan struct{}
	markDelay time.Duration
	// closeSeq counts logs unregistered and removed partitions forgotten
	// (under mu); ckptClosedSeq is the closeSeq of the last durable
	// checkpoint's snapshot (CheckpointClosed, ForgetRemoved).
	closeSeq           int64
	ckptClosedSeq      atomic.Int64
	basePos, maxBehind int64

	// fmu guards files; it is a leaf lock.
	fmu   sync.Mutex
	files []*jfile // ascending and contiguous: live files, then spares
	// prepMu serialises creating, renaming and removing journal files.
	prepMu sync.Mutex

	// wmu guards the journal's write state (pos, cur, wpos, rmark, wfile,
	// buf, pieces, newerInFiles): the committer (or a leading appender,
	// or commitNow) holds it while it stages a round, and a round's
	// completion while it writes a mark record (cover). Locks taken under
	// it: a Log's mu, fmu, prepMu.
	wmu sync.Mutex
	// Owned by the committer goroutine (and by OpenJournal before it);
	// the write state among them under wmu.
	pos   int64  // next record position
	epoch uint32 // of this run
	cur   *jfile // file containing pos
	wpos  int64  // position after the records buffered this round
	// rmark is the durable mark of the round being staged: synced when
	// it began (the records' headers carry it).
	rmark     int64
	wfile     *jfile
	buf       []byte
	pieces    []piece
	sinceCkpt int64 // journal bytes since the last checkpoint snapshot
	// newerInFiles: the journal files may hold register or mark records
	// (this run wrote one, or recovery found one), which a binary from
	// before them takes for the end of the journal; the final checkpoint
	// then starts a file of its own (finalCheckpoint).
	newerInFiles bool
	roundSeq     int64 // rounds staged (Log.roundSeq)
	lastCkpt     time.Time
	curStart     atomic.Int64 // cur.start, for the recycler
	// ckptBusy: a checkpoint is between its snapshot and the completion
	// of the round holding its record (set by the committer, cleared by
	// the committer or the completer).
	ckptBusy atomic.Bool

	// slots holds the free round slots (indexes into each Log's rounds):
	// the committer takes one before staging a round, the completer gives
	// it back after completing it. Rounds complete in the order they are
	// staged, so a slot handed back is free in every log.
	slots chan int

	jobs    chan *ckptJob
	recycle chan int64 // free files wholly before this position
	prep    chan struct{}
	syncq   chan *jround // staged rounds for the syncer (one per slot)
	doneq   chan *jround // synced rounds for the completer
	swg     sync.WaitGroup

	done     chan struct{}
	cwg, wg  sync.WaitGroup
	lock     *os.File
	closeErr error
	once     sync.Once

	nRounds, nFsyncs, nBytes, nCheckpoints, nRecycled, nReplayed, nSkipped atomic.Int64
	nSyncfs, nLed, nMarks, nMarkSyncs                                      atomic.Int64

	// syncfs is how a checkpoint makes many segments durable at once
	// (syncSegments); nil when each segment is fdatasynced. fsDev is
	// the device of the data directory's file system and fsName its type.
	syncfs func(f *os.File) error
	fsDev  uint64
	fsName string
	// fsDir is the data directory, opened for syncfs at the first
	// checkpoint that needs it (by whoever runs checkpoints, one at a time).
	fsDir *os.File
}

// OpenJournal opens (creating it if needed) the journal of dataDir and
// recovers: it finds the last checkpoint, replays every later data record
// into the partition segments of dataDir (skipping those already there),
// cuts what no record covers off the end of the partitions it names,
// makes all of that durable, and writes a checkpoint. It must run before
// any Log of dataDir is opened. A later crash during any of this replays
// again to the same result.
func OpenJournal(dataDir string, opts JournalOptions) (*Journal, error) {
	j := &Journal{
		dir:          filepath.Join(dataDir, JournalDirName),
		dataDir:      filepath.Clean(dataDir),
		fileSize:     opts.FileSize,
		ckptBytes:    opts.CheckpointBytes,
		ckptInterval: opts.CheckpointInterval,
		logf:         opts.Logf,
		recovery:     opts.Recovery,
		observer:     opts.Observer,
		writeAt:      (*os.File).WriteAt,
		syncFile:     fdatasync,
		logs:         make(map[*Log]struct{}),
		jobs:         make(chan *ckptJob, 1),
		recycle:      make(chan int64, 1),
		prep:         make(chan struct{}, 1),
		syncq:        make(chan *jround, roundSlots),
		doneq:        make(chan *jround, 1),
		slots:        make(chan int, roundSlots),
		done:         make(chan struct{}),
		markDue:      make(chan struct{}, 1),
		markDelay:    defaultMarkSyncDelay,
	}
	j.ckptObs, _ = opts.Observer.(CheckpointObserver)
	if j.fileSize <= 0 {
		j.fileSize = DefaultJournalFileSize
	}
	if j.fileSize < MinJournalFileSize && (opts.hooks == nil || !opts.hooks.smallFiles) {
		return nil, fmt.Errorf("store: journal file size %d below the minimum %d", j.fileSize, MinJournalFileSize)
	}
	if j.ckptBytes <= 0 {
		j.ckptBytes = DefaultJournalCheckpointBytes
	}
	if j.ckptInterval <= 0 {
		j.ckptInterval = DefaultJournalCheckpointInterval
	}
	if j.logf == nil {
		j.logf = func(string, ...any) {}
	}
	if fsutil.WriteBackSupported {
		j.writeBack = writeBack
	}
	if h := opts.hooks; h != nil {
		if h.writeAt != nil {
			j.writeAt = h.writeAt
		}
		if h.sync != nil {
			j.syncFile = h.sync
		}
		if h.writeBack != nil {
			j.writeBack = h.writeBack
		}
		j.replayLimit = h.replayLimit
		j.noRegisters = h.noRegisters
		if h.markSyncDelay > 0 {
			j.markDelay = h.markSyncDelay
		}
	}
	j.syncFile = observeSync(j.syncFile, opts.Observer)
	j.roundSync = j.syncFile
	if opts.CheckpointSync == CheckpointSyncAuto {
		if ok, name, dev := fsutil.SyncfsFS(dataDir); ok {
			j.syncfs, j.fsName, j.fsDev = fsutil.Syncfs, name, dev
		}
		if h := opts.hooks; h != nil && h.syncfsFS {
			j.syncfs, j.fsName = h.syncfs, "test"
			j.fsDev, _ = fsutil.Device(dataDir)
		}
	}
	j.cond.L = &j.mu
	j.ckptWake = make(chan struct{})
	j.maxBehind = 2 * j.ckptBytes
	if err := MkdirAllDurable(j.dir, 0o755); err != nil {
		return nil, fmt.Errorf("store: create %s: %w", j.dir, err)
	}
	switch {
	case opts.RoundSync != RoundSyncAuto:
		j.roundSyncHow = "blocking (journal_fdatasync = \"blocking\")"
	case opts.hooks != nil && opts.hooks.sync != nil:
		j.roundSyncHow = "blocking (a test's fdatasync)"
	default:
		if ok, why := holdPOK(j.dir, runtime.GOMAXPROCS(0)); ok {
			ps := &pinnedSync{call: fsutil.FdatasyncHoldingP, blocking: fdatasync, slow: pinnedSlow, logf: j.logf, procs: gomaxprocs}
			j.roundSync = observeSync(ps.sync, opts.Observer)
			j.roundSyncHow = "holding its P"
		} else {
			j.roundSyncHow = "blocking (" + why + ")"
		}
	}
	lock, err := lockDir(j.dir)
	if err != nil {
		return nil, err
	}
	j.lock = lock
	if err := j.recover(); err != nil {
		j.closeFiles()
		return nil, err
	}
	j.lastCkpt = time.Now()
	j.basePos = j.pos - j.nBytes.Load()
	j.curStart.Store(j.cur.start)
	for s := range roundSlots {
		j.slots <- s
	}
	j.swg.Add(2)
	go j.syncer()
	go j.completer()
	j.cwg.Add(1)
	go j.committer()
	j.wg.Add(1)
	go j.checkpointer()
	j.requestPrep()
	return j, nil
}

// Dir returns the journal's directory.
func (j *Journal) Dir() string { return j.dir }

// Err returns the error that failed the journal, or nil. A failed journal
// write or fdatasync is final: every later durable append fails with it.
func (j *Journal) Err() error {
	if p := j.failErr.Load(); p != nil {
		return *p
	}
	return nil
}

// refuse returns why appends through the journal are refused, if they are.
func (j *Journal) refuse() error {
	if err := j.Err(); err != nil {
		return err
	}
	if j.isClosed.Load() {
		return fmt.Errorf("%w: journal %s closed", ErrClosed, j.dir)
	}
	return nil
}

// fail records err as the journal's failure (first one wins) and returns
// the error appends get.
func (j *Journal) fail(err error) error {
	e := fmt.Errorf("%w: journal %s: %w", ErrFailed, j.dir, err)
	if j.failErr.CompareAndSwap(nil, &e) {
		j.logf("store: journal %s failed, refusing every durable append until restart: %v", j.dir, err)
		return e
	}
	return j.Err()
}

// Stats returns the journal's counters.
func (j *Journal) Stats() JournalStats {
	return JournalStats{
		Rounds:      j.nRounds.Load(),
		Fsyncs:      j.nFsyncs.Load(),
		Bytes:       j.nBytes.Load(),
		Checkpoints: j.nCheckpoints.Load(),
		Recycled:    j.nRecycled.Load(),
		Syncfs:      j.nSyncfs.Load(),
		Led:         j.nLed.Load(),
		Marks:       j.nMarks.Load(),
		MarkSyncs:   j.nMarkSyncs.Load(),
		Replayed:    j.nReplayed.Load(),
		Skipped:     j.nSkipped.Load(),
		Behind:      j.behind(),
		LastCheckpoint: func() time.Time {
			if at := j.ckptAt.Load(); at != 0 {
				return time.Unix(0, at)
			}
			return time.Time{}
		}(),
		UpToDate: j.ckptAt.Load() != 0 && j.roundEnd.Load() <= j.ckptEnd.Load(),
	}
}

// Close waits for the logs' queued appends, writes a final checkpoint (so
// the next open replays nothing) and releases the files. Close the Logs
// using the journal first. It returns the journal's failure, if any.
func (j *Journal) Close() error {
	j.once.Do(func() {
		j.mu.Lock()
		j.closed = true
		j.isClosed.Store(true)
		j.cond.Broadcast()
		close(j.ckptWake)
		j.mu.Unlock()
		j.cwg.Wait()
		close(j.syncq)
		j.swg.Wait()
		close(j.done)
		j.wg.Wait()
		j.markMu.Lock()
		if j.markTimer != nil {
			j.markTimer.Stop()
		}
		j.markMu.Unlock()
		j.closeFiles()
		j.closeErr = j.Err()
	})
	return j.closeErr
}

func (j *Journal) closeFiles() {
	j.fmu.Lock()
	for _, f := range j.files {
		_ = f.f.Close()
	}
	j.files = nil
	j.fmu.Unlock()
	if j.lock != nil {
		_ = unlockDir(j.lock)
		j.lock = nil
	}
	if j.fsDir != nil {
		_ = j.fsDir.Close()
		j.fsDir = nil
	}
}

// register adds l to the journal; its end goes into the next checkpoint,
// at the next interval. Until a checkpoint lists it, the register record
// written before its first data record names it for recovery
// (addRegister): a registration does not ask for a checkpoint of its own
// (each listed every partition; opening 1,000 partitions wrote about 900
// checkpoints and 10 to 12 MB of journal).
func (j *Journal) register(l *Log) {
	j.mu.Lock()
	j.logs[l] = struct{}{}
	delete(j.closedEnds, l.jname)
	j.tableCh = true
	if j.noRegisters {
		j.due = true
		j.cond.Signal()
	}
	j.mu.Unlock()
}

// unregister removes a closed l, whose segments are fsynced; c, if set,
// is its end and last id for the checkpoints' closed table.
func (j *Journal) unregister(l *Log, c *closedEnd) {
	j.mu.Lock()
	delete(j.logs, l)
	if c != nil {
		if j.closedEnds == nil {
			j.closedEnds = make(map[string]closedEnd)
		}
		j.closedEnds[l.jname] = *c
	}
	j.tableCh = true
	j.closeSeq++
	j.mu.Unlock()
}

// CheckpointClosed waits until a checkpoint taken after every Log closed
// so far is durable: the journal then holds nothing a restart would replay
// into those partitions, and their directories may be removed (deleting
// a topic). It asks for that checkpoint at once rather than at the next
// interval. It returns ctx's error if ctx ends first, or the journal's
// failure.
func (j *Journal) CheckpointClosed(ctx context.Context) error {
	j.mu.Lock()
	target := j.closeSeq
	j.tableCh, j.due = true, true
	j.cond.Signal()
	j.mu.Unlock()
	for {
		j.mu.Lock()
		wake := j.ckptWake
		closed := j.closed
		j.mu.Unlock()
		if j.ckptClosedSeq.Load() >= target {
			return nil
		}
		if err := j.Err(); err != nil {
			return err
		}
		if closed {
			return fmt.Errorf("%w: journal %s closed", ErrClosed, j.dir)
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(j.ckptInterval):
			// A checkpoint skipped while another was busy: ask again.
			j.mu.Lock()
			j.tableCh, j.due = true, true
			j.cond.Signal()
			j.mu.Unlock()
		}
	}
}

// ForgetRemoved drops what the journal holds of the closed partitions
// whose directories dirs were removed (a deleted topic's): their entries
// in the checkpoints' closed table and their trust points, and waits,
// like CheckpointClosed, until a checkpoint without them is durable.
// Without that, a topic created again under the same name inherited the
// old one's trusted end: a crash at a roll before the new partition's
// first journal round was durable left an empty gap its restart refused
// instead of removing (dropPastGap), and a walk of replayed records could
// start at an end that is no record boundary of the new partition. A dir
// of an open log, or not in the journal's data directory, is skipped.
func (j *Journal) ForgetRemoved(ctx context.Context, dirs []string) error {
	j.mu.Lock()
	open := make(map[string]bool, len(j.logs))
	for l := range j.logs {
		open[l.jname] = true
	}
	for _, d := range dirs {
		name, err := j.partitionName(d)
		if err != nil || open[name] {
			continue
		}
		delete(j.closedEnds, name)
		delete(j.trusted, name)
	}
	j.closeSeq++
	j.mu.Unlock()
	return j.CheckpointClosed(ctx)
}

// enqueue hands l, which has pending appends, to the committer. It
// returns false if the journal has closed (the committer may be gone).
// With lead set, when the journal is idle (the committer parked, no
// round in flight or waiting, no checkpoint record to write, and the
// previous round small) it hands l to no one and returns leads: the
// caller then runs the round itself with leadRound, which saves the two
// goroutine handoffs of a lone synchronous put.
func (j *Journal) enqueue(l *Log, lead bool) (ok, leads bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return false, false
	}
	if lead && j.idle && !j.leading && len(j.ready) == 0 && len(j.groups) == 0 &&
		j.ckptRec == nil && !j.due && len(j.slots) == roundSlots &&
		j.prevAppends <= inlineMaxAppends {
		j.leading = true
		return true, true
	}
	j.ready = append(j.ready, l)
	if len(j.ready) == 1 {
		j.cond.Signal()
	}
	return true, false
}

// leadRound stages, fdatasyncs and completes l's pending appends as one
// round on the calling goroutine, after enqueue returned leads; the
// committer stays parked meanwhile, so the round owns the committer's
// state as a round of its own would. Waiters of the round (l's other
// appends taken with it too) are completed on this goroutine.
func (j *Journal) leadRound(l *Log) {
	slot := <-j.slots // free: enqueue saw every slot free, and the committer is parked
	r := j.stage([]*Log{l}, nil, nil, slot)
	j.syncRound(r)
	j.complete(r)
	j.nLed.Add(1)
	j.mu.Lock()
	j.leading = false
	j.prevAppends = r.appends
	if j.sinceCkpt >= j.ckptBytes {
		j.due = true // the committer starts the checkpoint
	}
	if len(j.ready) > 0 || len(j.groups) > 0 || j.ckptRec != nil || j.due || j.closed {
		j.cond.Signal()
	}
	j.mu.Unlock()
}

// roundSlots is the number of commit rounds that can be between staging
// and completion at once (one staging, one waiting for or in the syncer,
// two synced and waiting for or in the completer); each Log has as many
// round buffers.
const roundSlots = 4

// inlineMaxAppends is the largest round (in appends) that the committer
// fdatasyncs and completes itself, when no other round is in flight and
// the previous round was that small too: a lone synchronous put then
// costs one fdatasync and no goroutine handoffs. (Under load the rounds
// are larger and go through the pipeline; inlining a small round between
// two large ones would stall the pipeline for an fdatasync.)
const inlineMaxAppends = 4

// noSlot is the slot of a round staged outside the pipeline (commitNow).
const noSlot = -1

// jround is one commit round: staged (tails filled, journal written with
// write()) by the committer, then fdatasynced by the syncer goroutine while
// the committer stages the next round, then completed by the completer
// goroutine while the next one is synced.
type jround struct {
	logs    []*Log
	slot    int      // which of each log's round buffers it uses
	appends int      // appends taken
	ck      *ckptJob // checkpoint record in this round, if any
	ckBytes int64    // the size of ck's record
	ckEnd   int64    // the journal position past it
	files   []*jfile // journal files written, to fdatasync
	end     int64    // the journal position past its records
	// mark is the durable mark its records carry (-1: it wrote none):
	// durable on disk once its fdatasync returns (durMarked).
	mark int64
	err  error // staging or sync failure: every append of the round fails
}

// committer runs the group-commit rounds of every log of the journal,
// pipelined: while the syncer fdatasyncs and the completer acknowledges
// earlier rounds, the committer stages the next ones (their tails and
// journal write()) as soon as appends arrive and a slot is free. The
// syncer takes every round staged by the time it is free and covers them
// with one fdatasync per journal file, so an append waits for at most the
// rest of the fdatasync in progress and then its own, and the rounds of
// one fdatasync hold every append that arrived during the one before.
func (j *Journal) committer() {
	defer j.cwg.Done()
	var logs []*Log
	var groups []*atomicGroup
	for {
		j.mu.Lock()
		for j.leading || len(j.ready) == 0 && len(j.groups) == 0 && j.ckptRec == nil && !j.due && !j.closed {
			j.idle = !j.leading
			j.cond.Wait()
		}
		j.idle = false
		closed := j.closed
		work := len(j.ready) > 0 || len(j.groups) > 0 || j.ckptRec != nil
		if closed && !work {
			j.mu.Unlock()
			j.drain()
			if !j.ckptBusy.Load() {
				j.finalCheckpoint()
				return
			}
			// Closing: wait for the checkpointer's fsyncs.
			j.mu.Lock()
			for j.ckptRec == nil {
				j.cond.Wait()
			}
			j.mu.Unlock()
			continue
		}
		j.mu.Unlock()
		slot := noSlot
		if work {
			// Take a free slot first: appends arriving while the
			// completer frees one join this round.
			slot = <-j.slots
		}
		j.mu.Lock()
		var ck *ckptJob
		if work {
			// Only with a slot: logs that became ready since the check
			// above wait for the next round otherwise (taking them here
			// without staging them would lose their appends).
			logs, j.ready = j.ready, logs[:0]
			// The atomic groups are taken in the same step, so all the
			// parts of one are staged in one round.
			groups, j.groups = j.groups, groups[:0]
			ck = j.ckptRec
			j.ckptRec = nil
		}
		due := j.due
		j.due = false
		tableCh := j.tableCh
		j.mu.Unlock()

		if work {
			idle := len(j.slots) == roundSlots-1 // no other round in flight
			r := j.stage(logs, groups, ck, slot)
			logs = make([]*Log, 0, cap(logs)) // r owns the slice now
			clear(groups)
			if idle && r.appends <= inlineMaxAppends && j.prevAppends <= inlineMaxAppends {
				j.syncRound(r)
				j.complete(r)
			} else {
				j.syncq <- r // never waits: there is room for every slot
			}
			j.mu.Lock()
			j.prevAppends = r.appends
			j.mu.Unlock()
		}
		if !j.ckptBusy.Load() && j.Err() == nil && !closed &&
			(j.sinceCkpt >= j.ckptBytes ||
				(due || time.Since(j.lastCkpt) >= j.ckptInterval) && (j.sinceCkpt > 0 || tableCh || j.retryCkpt)) {
			j.startCheckpoint()
		}
	}
}

// drain waits until every staged round has been completed.
func (j *Journal) drain() {
	for range roundSlots {
		<-j.slots
	}
	for s := range roundSlots {
		j.slots <- s
	}
}

// syncer fdatasyncs staged rounds in order and hands them to the
// completer. It takes every round staged by the time it is free as one
// batch: one fdatasync of each journal file the batch wrote covers them
// all, since each was written before the fdatasync started.
func (j *Journal) syncer() {
	defer j.swg.Done()
	defer close(j.doneq)
	batch := make([]*jround, 0, roundSlots)
	var files []*jfile
	for r := range j.syncq {
		batch = append(batch[:0], r)
	more:
		for len(batch) < roundSlots {
			select {
			case r2, ok := <-j.syncq:
				if !ok {
					break more
				}
				batch = append(batch, r2)
			default:
				break more
			}
		}
		j.syncBatch(batch, files[:0])
		for i, r := range batch {
			j.doneq <- r
			batch[i] = nil
		}
	}
}

// syncBatch fdatasyncs, once each, the journal files that the rounds of
// batch wrote (files is scratch space), and fails each round of the batch
// that has not failed already if one fdatasync fails.
func (j *Journal) syncBatch(batch []*jround, files []*jfile) {
	if len(batch) == 1 {
		j.syncRound(batch[0])
		return
	}
	for _, r := range batch {
		if r.err != nil {
			continue
		}
		for _, f := range r.files {
			if !slices.Contains(files, f) {
				files = append(files, f)
			}
		}
	}
	var err error
	for _, f := range files {
		e := j.roundSync(f.f)
		j.nFsyncs.Add(1)
		if e != nil {
			err = j.fail(fmt.Errorf("fdatasync %s: %w", journalName(f.start), e))
			break
		}
	}
	if err == nil {
		err = j.Err() // a round staged before an earlier one failed fails too
	}
	for _, r := range batch {
		if r.err == nil {
			r.err = err
		}
	}
	if err == nil {
		j.noteSynced(batch[len(batch)-1].end)
		for _, r := range batch {
			raise(&j.durMarked, r.mark)
		}
	}
	clear(files)
}

// noteSynced raises the durable mark to end, the end of a round whose
// fdatasync returned (rounds are synced in order, so everything before
// it is durable too).
func (j *Journal) noteSynced(end int64) { raise(&j.synced, end) }

// raise raises v to x if x is higher.
func raise(v *atomic.Int64, x int64) {
	for {
		cur := v.Load()
		if x <= cur || v.CompareAndSwap(cur, x) {
			return
		}
	}
}

// completer completes synced rounds in order (so each log's readable mark
// only rises) and frees their slots.
func (j *Journal) completer() {
	defer j.swg.Done()
	for r := range j.doneq {
		j.complete(r)
	}
}

// stage writes the pending appends of logs to their segments and their
// journal records (and ck's checkpoint record) to the journal, with
// write()s only.
func (j *Journal) stage(logs []*Log, groups []*atomicGroup, ck *ckptJob, slot int) *jround {
	j.wmu.Lock()
	defer j.wmu.Unlock()
	r := &jround{logs: logs, slot: slot}
	failed := j.Err()
	j.buf = j.buf[:0]
	j.pieces = append(j.pieces[:0], piece{f: j.cur, from: 0})
	j.wpos, j.wfile = j.pos, j.cur
	j.rmark = j.synced.Load()
	j.roundSeq++
	var need int64
	for _, l := range logs {
		l.roundSeq = j.roundSeq
		b, n := l.takeRound(slot)
		need += b
		r.appends += n
	}
	need += j.stageGroups(r, groups) // atomic.go; may add logs to r.logs
	for _, l := range r.logs {
		if l.regPending {
			// Its end and last id before this round's bytes, for its
			// register record.
			l.mu.Lock()
			l.regEnd = l.active.end()
			l.mu.Unlock()
			l.regID = l.stagedID
			need += jRegisterSize(l.jname)
		}
	}
	if failed == nil && len(r.logs) > 0 {
		// Make sure the journal files the records need exist before any
		// segment is written: a journal file that cannot be created
		// (ENOSPC) then fails the round's appends and nothing else.
		if err := j.reserve(need); err != nil {
			err = fmt.Errorf("store: journal %s: %w", j.dir, err)
			for _, l := range r.logs {
				l.failRound(slot, err) // the groups' parts too
			}
			groups = nil
		}
	}
	j.writeSegments(r.logs, slot, failed)
	j.writeGroups(r, groups, failed)
	if failed == nil {
		failed = j.Err() // writeGroups' cannot-happen failure
	}
	for _, l := range r.logs {
		if err := l.journalRound(j, slot); err != nil && failed == nil {
			failed = j.fail(err) // cannot happen: the space was reserved
		}
	}
	if err := j.journalGroups(r, groups); err != nil && failed == nil {
		failed = j.fail(err) // cannot happen either
	}
	if ck != nil {
		if ck.err != nil {
			j.ckptBusy.Store(false) // the journal failed; the checkpointer reported it
		} else if ck.skip != nil {
			j.logf("store: journal %s: checkpoint skipped, retried at the next one: %v", j.dir, ck.skip)
			j.retryCkpt = true
			j.ckptBusy.Store(false)
		} else if n, err := j.addCheckpoint(ck); err != nil {
			j.logf("store: journal %s: checkpoint skipped: %v", j.dir, err)
			j.ckptBusy.Store(false)
		} else {
			r.ck, r.ckBytes, r.ckEnd = ck, n, j.wpos
		}
	}
	if failed != nil {
		r.err = failed
		return r
	}
	r.mark = -1
	if len(j.buf) > 0 {
		r.err = j.writeRound(r)
		r.mark = j.rmark
	}
	if r.err == nil && j.rmark > j.marked.Load() {
		j.marked.Store(j.rmark)
	}
	r.end = j.pos
	if j.observer != nil && r.appends > 0 {
		j.observer.ObserveCommitRound(r.appends)
	}
	return r
}

// syncRound fdatasyncs the journal files the round wrote. A failure is
// final for the journal.
func (j *Journal) syncRound(r *jround) {
	if r.err != nil {
		return
	}
	for _, f := range r.files {
		err := j.roundSync(f.f)
		j.nFsyncs.Add(1)
		if err != nil {
			r.err = j.fail(fmt.Errorf("fdatasync %s: %w", journalName(f.start), err))
			return
		}
	}
	// A round staged before an earlier one failed must fail too.
	if err := j.Err(); err != nil {
		r.err = err
		return
	}
	j.noteSynced(r.end)
	raise(&j.durMarked, r.mark)
}

// complete acknowledges (or fails) the appends of a synced round,
// finishes its checkpoint and frees its slot. Before the round's bytes
// become readable or acknowledged, a record written since its fdatasync
// returned carries a durable mark past it (cover).
func (j *Journal) complete(r *jround) {
	if r.err == nil && len(r.logs) > 0 {
		j.cover(r.end)
	}
	for _, l := range r.logs {
		l.finishJournaled(r.err, r.slot)
	}
	clear(r.logs)
	if r.ck != nil {
		j.ckptBusy.Store(false)
		if r.err == nil {
			j.nCheckpoints.Add(1)
			j.ckptFrom.Store(r.ck.c.from)
			j.ckptEnd.Store(r.ckEnd)
			j.ckptClosedSeq.Store(r.ck.closeSeq)
			j.ckptAt.Store(time.Now().UnixNano())
			j.mu.Lock()
			if !j.closed {
				close(j.ckptWake) // appends waiting for a checkpoint
				j.ckptWake = make(chan struct{})
			}
			j.mu.Unlock()
			j.requestRecycle(r.ck.c.from)
		}
	}
	if r.slot != noSlot {
		j.slots <- r.slot
	}
}

// requestRecycle asks the checkpointer to free the files before from,
// replacing a request it has not taken yet.
func (j *Journal) requestRecycle(from int64) {
	select {
	case j.recycle <- from:
	default:
		select {
		case <-j.recycle: // replace a stale request with the newer one
		default:
		}
		select {
		case j.recycle <- from:
		default:
		}
	}
}

// commitNow stages, syncs and completes a round holding only ck's record
// (recovery and Close, with no round in flight and no slot taken).
func (j *Journal) commitNow(ck *ckptJob) error {
	r := j.stage(nil, nil, ck, noSlot)
	j.syncRound(r)
	j.complete(r)
	return r.err
}

// writeSegments adds the taken appends of logs to their segments' tails
// (memory copies; a roll creates a file). Since the tails, this is a
// small part of a round even at hundreds of partitions, so it runs on the
// committer alone.
func (j *Journal) writeSegments(logs []*Log, slot int, failed error) {
	for _, l := range logs {
		l.writeRound(slot, failed)
	}
}

// reserve makes sure journal files exist for need more bytes of records
// from the round's write position (with room for the records split at
// file ends and the skip records).
func (j *Journal) reserve(need int64) error {
	f := j.wfile
	left := f.end() - j.wpos
	for left < need+jHeaderSize*4+maxPartitionName {
		next, err := j.fileAfter(f)
		if err != nil {
			return err
		}
		f = next
		left += f.size - 2*(jHeaderSize+2+maxPartitionName+jDataFixed)
	}
	return nil
}

// room returns the bytes left in the file being filled.
func (j *Journal) room() int64 { return j.wfile.end() - j.wpos }

// nextFile moves the round's write position to the start of the next
// journal file, ending the current one with a skip record if it has room
// for one.
func (j *Journal) nextFile() error {
	if j.room() >= jHeaderSize {
		start := len(j.buf)
		j.buf = append(j.buf, make([]byte, jHeaderSize)...)
		sealJRecord(j.buf[start:], j.wpos, j.epoch, j.rmark, recSkip)
	}
	next, err := j.fileAfter(j.wfile)
	if err != nil {
		return err
	}
	j.wpos, j.wfile = next.start, next
	j.pieces = append(j.pieces, piece{f: next, from: len(j.buf)})
	return nil
}

// addData appends data records for bytes b of partition name, which
// belong at offset of the segment starting at segStart; a run that does
// not fit in the current file continues in a record in the next one.
func (j *Journal) addData(name string, segStart, offset int64, b []byte) error {
	_, err := j.addDataCount(name, segStart, offset, b)
	return err
}

// addDataCount is addData, also returning the number of data records.
func (j *Journal) addDataCount(name string, segStart, offset int64, b []byte) (int, error) {
	records := 0
	fixed := int64(jHeaderSize + 2 + len(name) + jDataFixed)
	for len(b) > 0 {
		room := j.room()
		if room <= fixed {
			if err := j.nextFile(); err != nil {
				return records, err
			}
			continue
		}
		n := int(min(int64(len(b)), room-fixed))
		start := len(j.buf)
		j.buf = append(j.buf, make([]byte, jHeaderSize)...)
		j.buf = appendDataPayload(j.buf, name, segStart, offset, b[:n])
		sealJRecord(j.buf[start:], j.wpos, j.epoch, j.rmark, recData)
		j.wpos += int64(len(j.buf) - start)
		b = b[n:]
		offset += int64(n)
		records++
	}
	return records, nil
}

// addRegister appends l's register record, if it is not written yet:
// right before l's first data record, in the same round. Its end and
// last id were taken when the round was staged, before its bytes went to
// the segment.
func (j *Journal) addRegister(l *Log) error {
	if !l.regPending {
		return nil
	}
	if j.noRegisters {
		l.regPending = false
		return nil
	}
	p := appendRegisterPayload(nil, registerRecord{name: l.jname, end: l.regEnd, lastID: l.regID})
	if _, err := j.addRecord(recRegister, p); err != nil {
		return err
	}
	l.regPending = false
	j.newerInFiles = true
	return nil
}

// addCheckpoint appends ck's checkpoint record and returns its size.
func (j *Journal) addCheckpoint(ck *ckptJob) (int64, error) {
	p := appendCheckpointPayload(nil, ck.c)
	need := int64(jHeaderSize + len(p))
	if need > j.fileSize {
		return 0, fmt.Errorf("checkpoint record of %d bytes does not fit in a journal file of %d", need, j.fileSize)
	}
	if ck.fresh && j.wpos != j.wfile.start {
		if err := j.nextFile(); err != nil {
			return 0, err
		}
		if j.wpos != ck.c.from {
			return 0, fmt.Errorf("checkpoint record for %d at %d", ck.c.from, j.wpos)
		}
	}
	return j.addRecord(recCheckpoint, p)
}

// addRecord appends a record of type typ with payload p to the round, at
// the start of the next file if it does not fit in the rest of this one,
// and returns its size.
func (j *Journal) addRecord(typ byte, p []byte) (int64, error) {
	need := int64(jHeaderSize + len(p))
	if j.room() < need {
		if err := j.nextFile(); err != nil {
			return 0, err
		}
		if j.room() < need {
			return 0, fmt.Errorf("record of type %d and %d bytes does not fit in journal file %s", typ, need, journalName(j.wfile.start))
		}
	}
	start := len(j.buf)
	j.buf = append(j.buf, make([]byte, jHeaderSize)...)
	j.buf = append(j.buf, p...)
	sealJRecord(j.buf[start:], j.wpos, j.epoch, j.rmark, typ)
	j.wpos += need
	return need, nil
}

// writeRound writes the round buffer to its journal files with write()
// and notes them for the round's fdatasync. Any error is final for the
// journal.
func (j *Journal) writeRound(r *jround) error {
	n := j.wpos - j.pos
	if err := j.writeBuf(&r.files); err != nil {
		return err
	}
	j.nRounds.Add(1)
	j.nBytes.Add(n)
	// A checkpoint record does not make the next checkpoint due: an idle
	// journal would otherwise write one every interval for good (each
	// listing every partition), since each counted as written since the
	// last.
	j.sinceCkpt += n - r.ckBytes
	j.roundEnd.Store(j.pos)
	return nil
}

// writeBuf writes the round buffer to its journal files with write(),
// adding them to files, and moves the journal position past it. Any
// error is final for the journal.
func (j *Journal) writeBuf(files *[]*jfile) error {
	for i, p := range j.pieces {
		to := len(j.buf)
		if i+1 < len(j.pieces) {
			to = j.pieces[i+1].from
		}
		if to == p.from {
			continue
		}
		off := j.pos - p.f.start
		if i > 0 {
			off = 0
		}
		b := j.buf[p.from:to]
		n, err := j.writeAt(p.f.f, b, off)
		if err == nil && n < len(b) {
			err = fmt.Errorf("short write of %d of %d bytes", n, len(b))
		}
		if err != nil {
			return j.fail(fmt.Errorf("write %s at %d: %w", journalName(p.f.start), off, err))
		}
		*files = append(*files, p.f)
	}
	j.pos = j.wpos
	if j.cur != j.wfile {
		j.cur = j.wfile
		j.curStart.Store(j.cur.start)
		j.requestPrep()
	}
	return nil
}

// cover makes sure that a record written since the fdatasync that made
// the journal durable up to end (the end of a synced round) carries a
// durable mark at or past end, writing a mark record if none does: a
// round staged after that fdatasync returned carries it already (under
// load, often the next one); otherwise (the journal went idle, or every
// later round was staged while this one was being synced) a mark record
// of 24 bytes, written but not synced, carries it. It runs before the
// round's appends are acknowledged, so that a kill -9 at any moment
// leaves every acknowledged round under a later mark in the page cache,
// and recovery never takes damage in one for a torn tail. The mark record
// is not fdatasynced on the put path: once a next round is staged, that
// round's records carry a mark at least as high (and its fdatasync covers
// the mark record too when they share a file); when none is synced within
// markDelay (the journal went idle), the checkpointer fdatasyncs the mark
// record by itself (syncMark), so a power cut can lose it only within
// that delay (docs/storage.md, "Mark records").
func (j *Journal) cover(end int64) {
	if j.marked.Load() >= end {
		return
	}
	j.wmu.Lock()
	defer j.wmu.Unlock()
	if j.marked.Load() >= end || j.Err() != nil {
		return
	}
	j.buf = j.buf[:0]
	j.pieces = append(j.pieces[:0], piece{f: j.cur, from: 0})
	j.wpos, j.wfile = j.pos, j.cur
	j.rmark = j.synced.Load()
	n := j.wpos
	if _, err := j.addRecord(recMark, nil); err != nil {
		j.fail(fmt.Errorf("mark record: %w", err))
		return
	}
	n = j.wpos - n
	var files [2]*jfile
	written := files[:0]
	if err := j.writeBuf(&written); err != nil {
		return
	}
	j.nBytes.Add(n)
	j.nMarks.Add(1)
	j.newerInFiles = true
	j.marked.Store(j.rmark)
	j.markLater(pendingMark{mark: j.rmark, f: written[len(written)-1], end: j.pos})
}

// defaultMarkSyncDelay is how long a mark record may stay the journal's last
// durable word on its rounds before it is fdatasynced by itself: a round
// staged after it carries a mark at least as high, made durable by its
// own fdatasync, so under load (any put within the delay) no fdatasync
// is added; an idle journal adds one after its last round.
const defaultMarkSyncDelay = 10 * time.Millisecond

// pendingMark is a mark record written and perhaps not durable yet.
type pendingMark struct {
	mark int64
	f    *jfile
	end  int64 // the journal position past it
}

// markLater notes the mark record just written (p) and arms the timer that has the checkpointer fdatasync it after
// markDelay (defaultMarkSyncDelay) unless a later round's fdatasync made a mark as high
// durable by then (syncMark). Callers hold wmu.
func (j *Journal) markLater(p pendingMark) {
	j.markMu.Lock()
	defer j.markMu.Unlock()
	j.markPend = p
	j.armMarkLocked()
}

// armMarkLocked arms the mark record's timer unless it is armed.
// Callers hold markMu.
func (j *Journal) armMarkLocked() {
	if j.markArmed {
		return
	}
	j.markArmed = true
	if j.markTimer == nil {
		j.markTimer = time.AfterFunc(j.markDelay, func() {
			select {
			case j.markDue <- struct{}{}:
			default:
			}
		})
		return
	}
	j.markTimer.Reset(j.markDelay)
}

// syncMark fdatasyncs the last mark record written if no round's
// fdatasync made a mark as high durable since: it closes the window in
// which a power cut could lose the only record saying the last
// acknowledged rounds were synced (docs/storage.md, "Mark records"). It
// runs on the checkpointer, which alone frees journal files, so the file
// stays open meanwhile. A failure is final for the journal, as any
// journal fdatasync's.
func (j *Journal) syncMark() {
	j.markMu.Lock()
	p := j.markPend
	j.markArmed = false
	j.markMu.Unlock()
	if p.f == nil || j.durMarked.Load() >= p.mark || j.Err() != nil {
		return
	}
	if j.roundEnd.Load() > j.synced.Load() {
		// A round is being synced (a slow device, or pipelined rounds):
		// if it was staged after the mark record, its records carry a
		// mark at least as high, which its fdatasync makes durable; if
		// before, its completion writes a later mark record or finds a
		// round covering it. Look again then rather than add one.
		j.markMu.Lock()
		if j.markPend == p {
			j.armMarkLocked()
		}
		j.markMu.Unlock()
		return
	}
	j.fmu.Lock()
	live := slices.Contains(j.files, p.f)
	j.fmu.Unlock()
	if !live {
		return // freed: a later checkpoint's round carried the mark
	}
	if err := j.syncFile(p.f.f); err != nil {
		j.fail(fmt.Errorf("fdatasync %s (a mark record): %w", journalName(p.f.start), err))
		return
	}
	j.nMarkSyncs.Add(1)
	raise(&j.durMarked, p.mark)
}

// startCheckpoint snapshots, at a round boundary, the position every
// earlier record is behind, the end of every registered log and the
// segments written since the last snapshot, and hands them to the
// checkpointer to fsync.
func (j *Journal) startCheckpoint() {
	job := j.snapshot()
	j.ckptBusy.Store(true)
	j.jobs <- job // never full: one checkpoint at a time
}

func (j *Journal) snapshot() *ckptJob {
	j.mu.Lock()
	logs := make([]*Log, 0, len(j.logs))
	for l := range j.logs {
		logs = append(logs, l)
	}
	j.tableCh = false
	closed := j.closedTableLocked()
	seq := j.closeSeq
	j.mu.Unlock()
	j.wmu.Lock() // a round's completion may be writing a mark record
	from := j.pos
	j.wmu.Unlock()
	job := &ckptJob{c: checkpoint{from: from, ends: make(map[string]int64, len(logs)), lastIDs: make(map[string]int64, len(logs)), closed: closed,
		registers: !j.noRegisters}, closeSeq: seq}
	for _, l := range logs {
		l.mu.Lock()
		for _, s := range l.dirty {
			job.segs = append(job.segs, dirtySeg{seg: s, log: l, upTo: s.size.Load()})
		}
		clear(l.dirty)
		l.dirty = l.dirty[:0]
		// Everything staged, which is in the segment and before from in
		// the journal: a durable checkpoint record implies every record
		// before it is durable too.
		// stagedID under mu too: Truncate sets it (and the end) with mu
		// held while the log is idle, which a snapshot does not wait for;
		// read together, the two are of the same moment.
		end, lastID := l.active.end(), l.stagedID
		l.mu.Unlock()
		job.c.ends[l.jname] = end
		job.c.lastIDs[l.jname] = lastID
	}
	j.sinceCkpt = 0
	j.retryCkpt = false
	j.lastCkpt = time.Now()
	return job
}

// ckptSync fsyncs f, a segment of l, for a checkpoint: timed as a
// checkpoint fsync when the journal's Observer tells them apart, else as
// one of l's segment fsyncs.
func (j *Journal) ckptSync(l *Log, f *os.File) error {
	if j.ckptObs == nil {
		return l.syncFile(f)
	}
	t0 := time.Now()
	err := l.rawSync(f)
	j.ckptObs.ObserveCheckpointFsync(time.Since(t0))
	return err
}

// syncSegments writes the job's segments' tails and makes them durable,
// then drops their references: an fdatasync each, or, for a checkpoint of
// many segments on a file system whose syncfs covers them, one syncfs
// after every tail is written (CheckpointSyncAuto).
func (j *Journal) syncSegments(job *ckptJob) {
	useFS := j.syncfs != nil && len(job.segs) >= syncfsMinSegments
	if useFS && j.fsDir == nil {
		d, err := os.Open(j.dataDir)
		if err != nil {
			j.logf("store: journal %s: checkpoint: %v; fdatasyncing each segment", j.dir, err)
			useFS = false
		} else {
			j.fsDir = d
		}
	}
	covered := func(d dirtySeg) bool { return useFS && d.log.devOK && d.log.dev == j.fsDev }
	workers, behind := min(len(job.segs), ckptSyncWorkers), int64(ckptWriteBehind)
	if useFS {
		// The workers are there for concurrent fsyncs; a syncfs
		// checkpoint has none of those (but for segments on another file
		// system) and writes its tails with one worker whose paced
		// write-back keeps at most 512 KiB queued ahead of the
		// journal (docs/benchmarks.md, "Tail at 512 partitions, again").
		workers, behind = 1, syncfsWriteBehind
	}
	var next atomic.Int64
	var emu sync.Mutex
	var wg sync.WaitGroup
	// Several segments at once: the file system commits the metadata of
	// concurrent fsyncs (the blocks the writes allocated, the sizes) in
	// shared journal transactions instead of one each, which is most of a
	// checkpoint's cost at hundreds of partitions.
	wbFail := func(wb *writeBehind) {
		if wb == nil || wb.err == nil {
			return
		}
		emu.Lock()
		if job.err == nil {
			job.err = j.fail(fmt.Errorf("checkpoint write-back: %w", wb.err))
		}
		emu.Unlock()
	}
	for range workers {
		wg.Go(func() {
			wb := j.newWriteBehind(behind, workers)
			defer func() {
				// Before the files are released (closed).
				wb.finish()
				wbFail(wb)
				if wb != nil && wb.unsupported && j.noWriteBack.CompareAndSwap(false, true) {
					j.logf("store: journal %s: no write-back of segment tails here (sync_file_range unsupported); checkpoints fdatasync them whole", j.dir)
				}
			}()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(job.segs) {
					return
				}
				d := job.segs[i]
				writes, n, err := d.seg.flushTail(d.upTo, d.log.writeAt, wb)
				d.log.nWrites.Add(int64(writes))
				d.log.nBytes.Add(n)
				wbFail(wb)
				if err != nil {
					emu.Lock()
					if job.skip == nil {
						job.skip = err
					}
					emu.Unlock()
					continue
				}
				emu.Lock()
				failed := job.err != nil
				emu.Unlock()
				if failed || covered(d) {
					continue
				}
				// The fdatasync would wait for all of it anyway; a range
				// left pending would be waited for after this file's
				// fdatasync, by which time it is written.
				wb.finish()
				if wbFail(wb); wb != nil && wb.err != nil {
					continue
				}
				if err := j.ckptSync(d.log, d.seg.f); err != nil {
					emu.Lock()
					if job.err == nil {
						job.err = j.fail(fmt.Errorf("checkpoint fsync %s: %w", d.seg.path, err))
					}
					emu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if useFS && job.err == nil && job.skip == nil {
		// Every tail is written: one syncfs makes them durable, with
		// their sizes (and everything else the file system holds dirty).
		// Its error, like an fsync's, is final.
		t0 := time.Now()
		err := j.syncfs(j.fsDir)
		if j.ckptObs != nil {
			j.ckptObs.ObserveCheckpointFsync(time.Since(t0))
		}
		if err != nil {
			job.err = j.fail(fmt.Errorf("checkpoint syncfs of %s (%s): %w", j.dataDir, j.fsName, err))
		} else {
			j.nSyncfs.Add(1)
		}
	}
	for _, d := range job.segs {
		if job.skip != nil && job.err == nil {
			d.log.redirty(d.seg) // the next checkpoint writes and fsyncs it
		}
		d.seg.release()
	}
	job.segs = nil
}

// ckptBehind says a checkpoint in progress is falling behind: the journal
// is more than three quarters of maxBehind past the last durable
// checkpoint (it starts at about half of it), so appends will soon wait
// for the checkpoint (waitCheckpoint); its write-back then stops pacing
// itself (writeBehind.hurry).
func (j *Journal) ckptBehind() bool { return j.behind() > j.maxBehind/4*3 }

// newWriteBehind returns the write-back pacing of one of workers writers
// of the journal's checkpoint tails or new files, sharing total bytes per
// step, hurried when the checkpoint falls behind (ckptBehind), or nil
// when there is none (not Linux, or sync_file_range found unsupported
// here).
func (j *Journal) newWriteBehind(total int64, workers int) *writeBehind {
	if j.noWriteBack.Load() {
		return nil
	}
	wb := newWriteBehind(j.writeBack, total, workers)
	if wb != nil {
		wb.hurry = j.ckptBehind
	}
	return wb
}

// ckptSyncWorkers is the number of segment fsyncs a checkpoint runs at
// once.
const ckptSyncWorkers = 16

// finalCheckpoint makes a checkpoint synchronously (Close), so that the
// next open has nothing to replay.
//
// If the journal files may hold register records, the checkpoint starts
// the next file and the files before it are freed: a binary from before
// register records stops its scan at the first one (an unknown type ends
// the journal), and would otherwise replay from an earlier checkpoint up
// to there and cut every partition at its end then, losing what was
// written after. So a downgrade after a clean Close finds the final
// checkpoint first and nothing to replay.
func (j *Journal) finalCheckpoint() {
	if j.Err() != nil {
		return
	}
	job := j.snapshot()
	if j.newerInFiles && j.pos != j.cur.start {
		job.fresh, job.c.from = true, j.cur.end()
	}
	free := j.newerInFiles
	j.syncSegments(job)
	if job.skip != nil {
		j.logf("store: journal %s: final checkpoint skipped, the next open replays the journal: %v", j.dir, job.skip)
		return
	}
	if job.err != nil {
		return
	}
	if err := j.commitNow(job); err != nil {
		return // logged and kept by fail
	}
	if free {
		if err := j.free(job.c.from); err != nil {
			j.logf("store: journal %s: freeing the files before the final checkpoint: %v", j.dir, err)
		}
	}
}

// checkpointer fsyncs the segments of checkpoints, frees journal files
// behind them and prepares spare files, off the commit path.
func (j *Journal) checkpointer() {
	defer j.wg.Done()
	t := time.NewTicker(j.ckptInterval)
	defer t.Stop()
	for {
		select {
		case <-j.done:
			return
		case <-t.C:
			j.mu.Lock()
			j.due = true
			j.cond.Signal()
			j.mu.Unlock()
		case job := <-j.jobs:
			j.syncSegments(job)
			j.mu.Lock()
			j.ckptRec = job
			j.cond.Signal()
			j.mu.Unlock()
		case from := <-j.recycle:
			if err := j.free(from); err != nil {
				j.logf("store: journal %s: freeing files: %v", j.dir, err)
			}
		case <-j.markDue:
			j.syncMark()
		case <-j.prep:
			if err := j.prepare(); err != nil {
				j.logf("store: journal %s: preparing a spare file: %v", j.dir, err)
			}
		}
	}
}

func (j *Journal) requestPrep() {
	select {
	case j.prep <- struct{}{}:
	default:
	}
}

// fileAfter returns the journal file following f, creating (pre-writing)
// it if no spare is ready.
func (j *Journal) fileAfter(f *jfile) (*jfile, error) {
	j.fmu.Lock()
	next := j.lookupLocked(f.end())
	j.fmu.Unlock()
	if next != nil {
		return next, nil
	}
	j.prepMu.Lock()
	defer j.prepMu.Unlock()
	j.fmu.Lock()
	next = j.lookupLocked(f.end())
	j.fmu.Unlock()
	if next != nil {
		return next, nil
	}
	return j.createFileLocked(f.end())
}

// sparesLocked returns the number of files after the current one, which
// starts at cur. The caller holds fmu.
func (j *Journal) sparesLocked(cur int64) int {
	n := 0
	for _, f := range j.files {
		if f.start > cur {
			n++
		}
	}
	return n
}

func (j *Journal) lookupLocked(start int64) *jfile {
	for _, f := range j.files {
		if f.start == start {
			return f
		}
	}
	return nil
}

// prepare makes sure wantSpareJournalFiles spare files follow the current
// one, so that a round that fills a file never has to create (zero-fill)
// the next one on the commit path, even when the file after it fills
// before the checkpointer is back (about 0.5 s per 64 MiB file at full
// speed).
func (j *Journal) prepare() error {
	for {
		j.prepMu.Lock()
		cur := j.curStart.Load()
		j.fmu.Lock()
		last := j.files[len(j.files)-1]
		spares := j.sparesLocked(cur)
		j.fmu.Unlock()
		if spares >= wantSpareJournalFiles {
			j.prepMu.Unlock()
			return nil
		}
		_, err := j.createFileLocked(last.end())
		j.prepMu.Unlock()
		if err != nil {
			return err
		}
	}
}

// zeroFillStep is the write() size of a journal file's zero fill.
const zeroFillStep = 256 << 10

// createFileLocked creates the journal file starting at start, zero-fills
// it and makes it and its directory entry durable, so that later
// fdatasyncs never change its size. The caller holds prepMu.
func (j *Journal) createFileLocked(start int64) (*jfile, error) {
	// The file is pre-written under a temporary name and renamed when it
	// is whole and durable: a crash in the middle of the zero fill leaves
	// a .new file, which the next open deletes, never a short journal
	// file that would later be taken for a whole one (and lose its
	// records' bytes to a power cut: they would sit past the fdatasynced
	// size).
	path := filepath.Join(j.dir, journalName(start))
	tmp := path + journalNewSuffix
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("store: create journal file: %w", err)
	}
	// The zeros' write-back is paced as a checkpoint's tails are
	// (writeBehind): 64 MiB written at once and then fdatasynced held
	// the journal's fdatasyncs behind them on the device.
	wb := j.newWriteBehind(ckptWriteBehind, 1)
	for off := int64(0); off < j.fileSize; {
		n := min(j.fileSize-off, zeroFillStep)
		if err := fsutil.ZeroFill(f, off, off+n); err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
			return nil, fmt.Errorf("store: pre-write journal file %s: %w", path, err)
		}
		wb.wrote(f, off, n)
		off += n
	}
	wb.finish()
	if wb != nil && wb.err != nil {
		_ = f.Close()
		return nil, j.fail(fmt.Errorf("write-back of new file %s: %w", tmp, wb.err))
	}
	if err := fdatasync(f); err != nil {
		_ = f.Close()
		return nil, j.fail(fmt.Errorf("fdatasync new file %s: %w", tmp, err))
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("store: create journal file %s: %w", path, err)
	}
	if err := syncPath(j.dir); err != nil {
		_ = f.Close()
		return nil, j.fail(err)
	}
	jf := &jfile{start: start, size: j.fileSize, f: f}
	j.fmu.Lock()
	j.files = append(j.files, jf)
	slices.SortFunc(j.files, func(a, b *jfile) int { return cmpInt64(a.start, b.start) })
	j.fmu.Unlock()
	return jf, nil
}

// free renames the journal files wholly before from (and before the
// current file) forward, to follow the last file, keeping at most
// maxSpareJournalFiles spares, and deletes the rest. Each rename or
// delete is made durable before the next, so a power loss leaves the
// files contiguous.
func (j *Journal) free(from int64) error {
	j.prepMu.Lock()
	defer j.prepMu.Unlock()
	cur := j.curStart.Load()
	for {
		j.fmu.Lock()
		if len(j.files) < 2 {
			j.fmu.Unlock()
			return nil
		}
		first, last := j.files[0], j.files[len(j.files)-1]
		if first.end() > from || first.end() > cur {
			j.fmu.Unlock()
			return nil
		}
		spares := j.sparesLocked(cur)
		j.fmu.Unlock()

		oldPath := filepath.Join(j.dir, journalName(first.start))
		if spares >= maxSpareJournalFiles {
			if err := os.Remove(oldPath); err != nil {
				return err
			}
			if err := syncPath(j.dir); err != nil {
				return err
			}
			j.fmu.Lock()
			j.files = j.files[1:]
			j.fmu.Unlock()
			_ = first.f.Close()
			continue
		}
		moved := &jfile{start: last.end(), size: first.size, f: first.f}
		if err := os.Rename(oldPath, filepath.Join(j.dir, journalName(moved.start))); err != nil {
			return err
		}
		if err := syncPath(j.dir); err != nil {
			return err
		}
		j.fmu.Lock()
		j.files = append(j.files[1:], moved)
		j.fmu.Unlock()
		j.nRecycled.Add(1)
	}
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// partitionName returns the name journal records give the log in dir, or
// an error if dir is not directly inside the journal's data directory.
func (j *Journal) partitionName(dir string) (string, error) {
	parent, name := filepath.Dir(filepath.Clean(dir)), filepath.Base(dir)
	same := parent == j.dataDir
	if !same {
		a, err1 := filepath.Abs(parent)
		b, err2 := filepath.Abs(j.dataDir)
		same = err1 == nil && err2 == nil && a == b
	}
	if !same || !validPartitionName(name) {
		return "", fmt.Errorf("store: log %s is not a partition directory of journal %s's data directory", dir, j.dir)
	}
	return name, nil
}

var errNoJournalFiles = errors.New("no journal files")

// listJournalFiles opens the journal files of dir, ascending.
func listJournalFiles(dir string, logf func(string, ...any)) ([]*jfile, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("store: list %s: %w", dir, err)
	}
	var files []*jfile
	removed := false
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), journalNewSuffix); ok && e.Type().IsRegular() {
			if _, ok := parseJournalName(name); ok {
				// A file whose pre-write a crash interrupted: it never held
				// a record (createFileLocked).
				if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
					return nil, fmt.Errorf("store: remove unfinished journal file: %w", err)
				}
				logf("store: journal %s: removed %s, a journal file whose pre-write was interrupted", dir, e.Name())
				removed = true
			}
			continue
		}
		start, ok := parseJournalName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, e.Name()), os.O_RDWR, 0)
		if err != nil {
			closeJFiles(files)
			return nil, fmt.Errorf("store: open journal file: %w", err)
		}
		fi, err := f.Stat()
		if err != nil {
			_ = f.Close()
			closeJFiles(files)
			return nil, fmt.Errorf("store: stat journal file: %w", err)
		}
		files = append(files, &jfile{start: start, size: fi.Size(), f: f})
	}
	slices.SortFunc(files, func(a, b *jfile) int { return cmpInt64(a.start, b.start) })
	if removed {
		if err := syncPath(dir); err != nil {
			closeJFiles(files)
			return nil, err
		}
	}
	if len(files) == 0 {
		return nil, errNoJournalFiles
	}
	return files, nil
}

// journalNewSuffix names a journal file being pre-written.
const journalNewSuffix = ".new"

func closeJFiles(files []*jfile) {
	for _, f := range files {
		_ = f.f.Close()
	}
}

// isNotExist reports a missing file.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
