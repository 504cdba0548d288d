package store

import (
	"errors"
	"fmt"
	"github.com/metaq-go/metaq/internal/fsutil"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
)

// DefaultMaxSegmentSize is the default segment roll threshold in bytes (1 GiB).
const DefaultMaxSegmentSize int64 = 1 << 30

const (
	// maxWriteChunk bounds the bytes the group-commit writer hands to one
	// write() and covers with one fsync (a single larger append still goes
	// whole).
	maxWriteChunk = 4 << 20
	// defaultPendingCap is the pending-buffer size in bytes at which
	// group-commit appenders start waiting for the writer.
	defaultPendingCap = 64 << 20
	// maxRetainedBuffer is the largest append buffer, in bytes, kept for
	// reuse; a bigger one (after a burst) is dropped so idle logs stay small.
	maxRetainedBuffer = 8 << 20
)

// IDSource hands out message ids. Next returns the first of n consecutive
// ids. The log calls it under its append lock, so ids rise with offsets.
type IDSource interface{ Next(n int) int64 }

// Options configures a Log. The zero value is usable except for IDs.
type Options struct {
	// MaxSegmentSize is the size in bytes at which the active segment
	// rolls; default DefaultMaxSegmentSize. A segment may overshoot it by
	// up to one append (threshold mode) or one write batch (group commit).
	MaxSegmentSize int64
	// UnflushThreshold selects the flush mode. 0 (or negative) is group
	// commit: appends complete after an fsync that covers them. N > 0 is
	// threshold mode: appends complete after write(), and the log fsyncs
	// when more than N messages are unflushed.
	UnflushThreshold int
	// UnflushInterval, in threshold mode, also fsyncs when an append comes
	// this long after the last flush, and runs a ticker that flushes
	// unflushed data this often. 0 disables both.
	UnflushInterval time.Duration
	// MaxMessageSize is the largest data length in bytes that Append
	// accepts and recovery recognises; default message.DefaultMaxMessageSize.
	// Lowering it below the size of records already in the last segment
	// makes recovery cut them.
	MaxMessageSize int
	// IDs assigns message ids. Required.
	IDs IDSource
	// Logf, if set, receives recovery, retention and failure reports.
	Logf func(format string, args ...any)
	// Recovery says what Open does with damaged records followed by valid
	// ones in the last segment; the zero value is RecoverQuarantine.
	Recovery RecoveryMode
	// Repairer, if set, is asked for a good copy of damaged bytes before
	// they are quarantined (last segment) or refused to readers (sealed
	// segments).
	Repairer Repairer
	// Journal, in group-commit mode, commits the log's appends through a
	// broker-wide journal (see OpenJournal): the log then has no writer
	// goroutine of its own, its segments are fsynced at the journal's
	// checkpoints, and one journal fdatasync covers the appends of every
	// log of the journal. dir must be directly inside the journal's data
	// directory. Nil keeps the log's own writer and an fdatasync of the
	// segment per batch. Ignored in threshold mode.
	Journal *Journal
	// Observer, if set, is told how long each segment fsync took
	// (metrics). Its methods must be cheap and must not block.
	Observer Observer

	// hooks replaces file operations in tests (fault injection).
	hooks *hooks
}

// Observer receives timings and batch sizes from a Log or a Journal, for
// metrics. Its methods are called on the write path: they must be cheap
// (an atomic add or two) and must not block.
type Observer interface {
	// ObserveFsync is called after every fsync or fdatasync of a segment
	// (Options.Observer) or journal file (JournalOptions.Observer).
	ObserveFsync(d time.Duration)
	// ObserveCommitRound is called once per journal group-commit round
	// with the number of appends it committed (JournalOptions.Observer).
	ObserveCommitRound(appends int)
}

// CheckpointObserver is implemented by a journal's Observer
// (JournalOptions.Observer) that wants the fsyncs and the syncfs its
// checkpoints do apart: each is then observed with
// ObserveCheckpointFsync, not by the segment's Observer. Without it they
// count as segment fsyncs. Same rules as Observer: cheap, never blocks.
type CheckpointObserver interface {
	ObserveCheckpointFsync(d time.Duration)
}

// observeSync wraps sync so that o sees how long each call took.
func observeSync(sync func(*os.File) error, o Observer) func(*os.File) error {
	if o == nil {
		return sync
	}
	return func(f *os.File) error {
		start := time.Now()
		err := sync(f)
		o.ObserveFsync(time.Since(start))
		return err
	}
}

// hooks are the test seams of a Log (fault injection); nil fields keep
// the real operation.
type hooks struct {
	writeAt    func(f *os.File, b []byte, off int64) (int, error)              // segment write
	sync       func(f *os.File) error                                          // segment data sync
	openFile   func(name string, flag int, perm os.FileMode) (*os.File, error) // segment create, directory open for fsync
	truncate   func(f *os.File, size int64) error                              // cut after a failed write
	readAt     func(f *os.File, b []byte, off int64) (int, error)              // segment read by Open's recovery scans
	pendingCap int                                                             // group-commit pending cap
	scrubStart func()                                                          // called before the background count starts
	markSync   func(f *os.File) error                                          // flush mark fdatasync
}

// Entry is one message to append. CRC must be message.Checksum(Data); the
// caller has computed or verified it already.
type Entry struct {
	// ID is the message id, or 0 for the log to assign one (IDs.Next).
	// Either every entry of an Append has an id or none has: a
	// transaction's messages keep the ids their puts were answered with.
	ID   int64
	Flag int32
	CRC  uint32
	Data []byte
}

// Waiter receives the outcome of an Append. AppendDone is called exactly
// once per successful Append call, possibly from another goroutine and
// possibly before Append returns (threshold mode). It must not block and
// must not call Close (in group-commit mode it runs on the log's writer
// goroutine, or on the journal's completer or committer, which Close waits
// for). On error, firstID and firstOffset are 0.
type Waiter interface {
	AppendDone(token uint64, firstID int64, firstOffset int64, err error)
}

// Stats are cumulative counters of a Log since Open.
type Stats struct {
	Appends  int64 // Append calls accepted
	Messages int64 // records written
	Writes   int64 // write() calls on segment files
	Fsyncs   int64 // data syncs of segment files
	Bytes    int64 // bytes written to segment files
	Rolls    int64 // segments created by rolling
}

// completion is one accepted group-commit append waiting for its fsync.
// Its offset is decided when the writer writes it: records carry no
// offset, so after a failed write the next records take the failed ones'
// place and offsets never skip.
type completion struct {
	w       Waiter
	token   uint64
	firstID int64
	lastID  int64
	end     int // end of its records in the pending buffer
	n       int // number of records
}

// Log is the segmented message log of one topic partition. See the package
// documentation for its modes, visibility rules and lock order.
type Log struct {
	dir string
	// listing is the directory listing recover read, until TakeListing.
	listing     atomic.Pointer[[]os.DirEntry]
	maxSeg      int64
	maxMsg      int
	threshold   int
	interval    time.Duration
	groupCommit bool
	pendingCap  int
	ids         IDSource
	logf        func(format string, args ...any)
	recovery    RecoveryMode
	repairer    Repairer
	writeAt     func(f *os.File, b []byte, off int64) (int, error)
	syncFile    func(f *os.File) error
	rawSync     func(f *os.File) error // syncFile without the Observer (Journal.ckptSync)
	openFile    func(name string, flag int, perm os.FileMode) (*os.File, error)
	truncate    func(f *os.File, size int64) error
	readAt      func(f *os.File, b []byte, off int64) (int, error) // nil: f.ReadAt
	// j is the journal of a journaled group-commit log, jname the name its
	// records give the partition.
	j     *Journal
	jname string
	// dev is the device of the log directory's file system (devOK: known),
	// for the journal's checkpoints (Journal.syncSegments).
	dev   uint64
	devOK bool
	// stagedID is the id of the last record written to the segment (not
	// necessarily synced yet), for the journal's checkpoints. The
	// committer writes it, without mu, while it stages the log's appends
	// (committing > 0); Truncate writes it with mu held while the log is
	// idle (lockIdle). So the committer may read it without mu only for a
	// log in its round; a checkpoint snapshot, which takes every log,
	// reads it with mu held (Journal.snapshot), as does closeJournaled.
	stagedID int64
	// regPending (committer-owned once registered): the log's register
	// record is not written yet; it goes right before the log's first
	// data record, with regEnd and regID, the log's end and last id when
	// that record's round was staged (Journal.addRegister).
	regPending    bool
	regEnd, regID int64

	// flushMu serialises threshold-mode fsyncs; taken before mu.
	flushMu sync.Mutex

	// mu is the append lock.
	mu      sync.Mutex
	closed  bool
	final   bool  // Close has done its final flush
	failErr error // non-nil once an fsync failed; wraps ErrFailed
	// active is the last segment. Group commit: owned by the writer
	// goroutine. Threshold mode: guarded by mu. Also published in segs.
	active *segment
	// torn means the active segment's file may hold bytes of a failed
	// write past its size, because cutting them off failed too; the cut is
	// retried before the next write or roll. Owned like active.
	torn bool
	// group commit
	pend      []byte       // framed records waiting for the writer
	pendComps []completion // their completions, in buffer order
	workCond  sync.Cond    // writer waits for pending work (on mu)
	spaceCond sync.Cond    // appenders wait for pending space (on mu)
	// journal mode
	queued     bool // in the journal's ready list
	committing int  // rounds (at most roundSlots) holding the log's appends
	// atomicPending counts the log's parts of atomic groups waiting for a
	// round (atomic.go).
	atomicPending int
	// roundSeq is the Journal.roundSeq of the last round the log was
	// staged in (committer-owned).
	roundSeq int64
	dirty    []*segment           // written since the last checkpoint snapshot, a reference each
	rounds   [roundSlots]logRound // owned by the journal's round pipeline
	// fm is the flush mark of a log that is not journaled (flushmark.go).
	fm flushMark
	// threshold mode
	wbuf      []byte
	unflushed int // messages written since the last flush
	lastFlush time.Time

	// segMu guards segs and the segments' count/deleted fields; it is a
	// leaf lock.
	segMu sync.RWMutex
	segs  []*segment // ascending start; the last one is active

	readable  atomic.Int64 // readable high-water mark
	minOffset atomic.Int64
	lastID    atomic.Int64
	msgCount  atomic.Int64
	counted   atomic.Bool // sealed segments present at Open have been counted
	toCount   []*segment  // what the background count walks (set by Open)
	scrubHook func()      // hooks.scrubStart
	isClosed  atomic.Bool
	// cut is Truncate's count of cuts and the last one's offset (Cuts),
	// swapped as one so that a reader never pairs a count with another
	// cut's offset.
	cut atomic.Pointer[cutMark]

	nAppends, nMessages, nWrites, nFsyncs, nBytes, nRolls atomic.Int64

	lock      *os.File // holds the directory lock; nil where unsupported
	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating it if needed) the log in dir and recovers it: the
// segment chain is checked, the last segment scanned and cut at its first
// invalid record, and the result made durable before Open returns. A
// journaled log the journal's recovery vouches for scans only what lies
// past the last checkpoint (see the package documentation, Recovery).
func Open(dir string, opts Options) (*Log, error) {
	if opts.IDs == nil {
		return nil, errors.New("store: Options.IDs is required")
	}
	l := &Log{
		dir:         dir,
		maxSeg:      opts.MaxSegmentSize,
		maxMsg:      opts.MaxMessageSize,
		threshold:   opts.UnflushThreshold,
		interval:    opts.UnflushInterval,
		groupCommit: opts.UnflushThreshold <= 0,
		pendingCap:  defaultPendingCap,
		ids:         opts.IDs,
		logf:        opts.Logf,
		recovery:    opts.Recovery,
		repairer:    opts.Repairer,
		writeAt:     (*os.File).WriteAt,
		syncFile:    fdatasync,
		openFile:    os.OpenFile,
		truncate:    (*os.File).Truncate,
		done:        make(chan struct{}),
	}
	if l.maxSeg <= 0 {
		l.maxSeg = DefaultMaxSegmentSize
	}
	if l.maxMsg <= 0 {
		l.maxMsg = message.DefaultMaxMessageSize
	}
	if l.maxMsg > 1<<31-1-message.HeaderSize {
		return nil, fmt.Errorf("store: MaxMessageSize %d too large", l.maxMsg)
	}
	if l.logf == nil {
		l.logf = func(string, ...any) {}
	}
	if h := opts.hooks; h != nil {
		if h.writeAt != nil {
			l.writeAt = h.writeAt
		}
		if h.sync != nil {
			l.syncFile = h.sync
		}
		if h.openFile != nil {
			l.openFile = h.openFile
		}
		if h.truncate != nil {
			l.truncate = h.truncate
		}
		l.readAt = h.readAt
		l.scrubHook = h.scrubStart
		if h.pendingCap > 0 {
			l.pendingCap = h.pendingCap
		}
	}
	l.fm.sync = fdatasync
	if h := opts.hooks; h != nil && h.markSync != nil {
		l.fm.sync = h.markSync
	}
	l.rawSync = l.syncFile
	l.syncFile = observeSync(l.syncFile, opts.Observer)
	l.workCond.L = &l.mu
	l.spaceCond.L = &l.mu
	if l.groupCommit && opts.Journal != nil {
		name, err := opts.Journal.partitionName(dir)
		if err != nil {
			return nil, err
		}
		l.j, l.jname = opts.Journal, name
	}

	// The partition directory (and any parent made for it) must survive a
	// power loss, or every segment in it goes with it.
	if err := MkdirAllDurable(dir, 0o755); err != nil {
		return nil, fmt.Errorf("store: create %s: %w", dir, err)
	}
	if l.j != nil {
		l.dev, l.devOK = fsutil.Device(dir)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	l.lock = lock
	toCount, err := l.recover()
	if err != nil {
		l.closeFlushMark()
		l.unlockDir()
		return nil, err
	}
	l.lastFlush = time.Now()
	l.stagedID = l.lastID.Load()

	if len(toCount) > 0 {
		l.toCount = toCount
		l.wg.Add(1)
		scrubs.add(l) // recover.go
	} else {
		l.counted.Store(true)
	}
	if l.j != nil {
		l.regPending = true
		l.j.register(l)
	} else if l.groupCommit {
		l.wg.Add(1)
		go l.writer()
	} else if l.interval > 0 {
		l.wg.Add(1)
		go l.flusher()
	}
	return l, nil
}

// Dir returns the log's directory.
func (l *Log) Dir() string { return l.dir }

// Close stops the log's goroutines, completes (group commit) or flushes
// (threshold mode) everything already appended, and releases the segment
// files; open Views stay readable until released. It returns the log's
// failure, if any. Close is idempotent.
func (l *Log) Close() error {
	l.closeOnce.Do(func() { l.closeErr = l.close() })
	return l.closeErr
}

func (l *Log) close() error {
	l.mu.Lock()
	l.closed = true
	l.isClosed.Store(true)
	l.workCond.Broadcast()
	l.spaceCond.Broadcast()
	l.mu.Unlock()

	close(l.done)
	if scrubs.remove(l) { // its background count never started
		for _, s := range l.toCount {
			s.release()
		}
		l.wg.Done()
	}
	l.wg.Wait() // the writer drains pending appends before it exits

	var err error
	if l.j != nil {
		err = l.closeJournaled()
	} else if !l.groupCommit {
		err = l.flush()
	}
	l.mu.Lock()
	l.final = true
	if err == nil {
		err = l.failErr
	}
	l.mu.Unlock()

	l.segMu.Lock()
	segs := l.segs
	l.segs = nil
	l.segMu.Unlock()
	for _, s := range segs {
		s.release()
	}
	l.closeFlushMark()
	l.unlockDir()
	return err
}

func (l *Log) unlockDir() {
	if l.lock != nil {
		_ = unlockDir(l.lock)
		l.lock = nil
	}
}

// failLocked puts the log into the failed state (first error wins) and
// returns the error to report. Only a failed fsync does this (see
// ErrFailed); other I/O errors fail just the appends they hit. Callers
// hold mu.
func (l *Log) failLocked(err error) error {
	if l.failErr == nil {
		l.failErr = fmt.Errorf("%w: %w", ErrFailed, err)
		l.logf("store: %s: log failed, refusing further appends: %v", l.dir, err)
		l.spaceCond.Broadcast()
	}
	return l.failErr
}

func (l *Log) fail(err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failLocked(err)
}

// Err returns the error that failed the log (or its journal), or nil.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failErr == nil && l.j != nil {
		return l.j.Err()
	}
	return l.failErr
}

// Read returns a View of the bytes [offset, offset+maxSize) of the single
// segment containing offset, clipped to the readable high-water mark. The
// range may end inside a record; alignment is not checked. Errors: an
// *OffsetOutOfRangeError (ErrBelowMin) for offset < MinOffset, ErrNoData
// for offset >= MaxOffset, ErrBadSize, ErrClosed. The caller must Release
// the View.
func (l *Log) Read(offset int64, maxSize int) (View, error) {
	if maxSize <= 0 {
		return View{}, ErrBadSize
	}
	hwm := l.readable.Load()
	l.segMu.RLock()
	segs := l.segs
	if len(segs) == 0 {
		l.segMu.RUnlock()
		return View{}, ErrClosed
	}
	if first := segs[0].start; offset < first {
		l.segMu.RUnlock()
		return View{}, &OffsetOutOfRangeError{Offset: offset, Min: first}
	}
	if offset >= hwm {
		l.segMu.RUnlock()
		return View{}, ErrNoData
	}
	seg := segs[findSegment(segs, offset)]
	end := min(seg.end(), hwm)
	if offset >= end { // cannot happen: sealed segments chain
		l.segMu.RUnlock()
		return View{}, ErrNoData
	}
	seg.acquire()
	l.segMu.RUnlock()
	want := min(end-offset, int64(maxSize))
	mem, inFile := seg.tailRead(offset-seg.start, want)
	if mem != nil {
		return View{Path: seg.path, File: seg.f, Pos: offset - seg.start, Len: len(mem), Offset: offset, Mem: mem, seg: seg}, nil
	}
	n, err := l.checkRead(seg, offset-seg.start, inFile)
	if err != nil {
		seg.release()
		return View{}, err
	}
	return View{Path: seg.path, File: seg.f, Pos: offset - seg.start, Len: int(n), Offset: offset, seg: seg}, nil
}

// findSegment returns the index of the last segment starting at or before
// offset; segs is non-empty and segs[0].start <= offset.
func findSegment(segs []*segment, offset int64) int {
	lo, hi := 0, len(segs) // invariant: segs[lo].start <= offset, segs[hi].start > offset
	for hi-lo > 1 {
		m := int(uint(lo+hi) >> 1)
		if segs[m].start <= offset {
			lo = m
		} else {
			hi = m
		}
	}
	return lo
}

// NearestOffset answers MetaQ's offset command: the start of the segment
// containing offset, MaxOffset if offset >= MaxOffset, MinOffset if offset
// is below it.
func (l *Log) NearestOffset(offset int64) int64 {
	hwm := l.readable.Load()
	if offset >= hwm {
		return hwm
	}
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	segs := l.segs
	if len(segs) == 0 {
		return hwm
	}
	if offset < segs[0].start {
		return segs[0].start
	}
	return segs[findSegment(segs, offset)].start
}

// MinOffset returns the start of the first segment.
func (l *Log) MinOffset() int64 { return l.minOffset.Load() }

// MaxOffset returns the readable high-water mark: in group-commit mode the
// end of the last fsynced batch, in threshold mode the end of the last
// flush.
func (l *Log) MaxOffset() int64 { return l.readable.Load() }

// SizeBytes returns the readable bytes held: MaxOffset - MinOffset.
func (l *Log) SizeBytes() int64 { return l.MaxOffset() - l.MinOffset() }

// LastID returns the id of the last record written (in group-commit mode:
// fsynced), or found by recovery; 0 if there is none. Ids rise with
// offsets, so it is the highest id in the log.
func (l *Log) LastID() int64 { return l.lastID.Load() }

// MessageCount returns the number of records in the log. Records of sealed
// segments present at Open are added by a background count; until it is
// done (MessageCountComplete) the figure is low.
func (l *Log) MessageCount() int64 { return l.msgCount.Load() }

// MessageCountComplete reports whether the background count of the sealed
// segments found at Open has finished.
func (l *Log) MessageCountComplete() bool { return l.counted.Load() }

// Stats returns the log's counters.
func (l *Log) Stats() Stats {
	return Stats{
		Appends:  l.nAppends.Load(),
		Messages: l.nMessages.Load(),
		Writes:   l.nWrites.Load(),
		Fsyncs:   l.nFsyncs.Load(),
		Bytes:    l.nBytes.Load(),
		Rolls:    l.nRolls.Load(),
	}
}

// SegmentCount returns the number of segment files.
func (l *Log) SegmentCount() int {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	return len(l.segs)
}

// SegmentStarts returns the starting offsets of the log's segments,
// ascending.
func (l *Log) SegmentStarts() []int64 {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	out := make([]int64, len(l.segs))
	for i, s := range l.segs {
		out[i] = s.start
	}
	return out
}

// TakeListing returns the listing of the log's directory that its open
// read (every entry then, sorted by name) and forgets it, so that a
// companion keeping files beside the segments (core/index) need not list
// the directory again at a start; nil after the first call.
func (l *Log) TakeListing() []os.DirEntry {
	if p := l.listing.Swap(nil); p != nil {
		return *p
	}
	return nil
}
