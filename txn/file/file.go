// Package file is the builtin coordinator: a decision log in one local
// file, in process.
//
// The log is a sequence of records, each [uint32 length][uint32 CRC-32C of
// the payload][payload], big-endian; a payload is a type byte (commit or
// forget) and a JSON body. Commit appends a commit record and fsyncs the
// file before it returns (its first write also fsyncs the directory), so
// a logged decision survives a crash and a power cut. Forget appends
// without fsync: a forget lost in a crash only makes recovery look at a
// finished transaction again. Concurrent commits share one fsync (group
// commit).
//
// On open the log is read whole. A torn last record (cut short, zero-filled,
// or failing its CRC with nothing valid after it) is what a crash during an
// append leaves: it is cut off and the cut made durable. A bad record
// followed by more data is corruption, and open fails rather than lose the
// decisions after it. When forgotten records make up most of a log over
// 1 MiB it is rewritten (temp file, fsync, rename, fsync directory).
//
// The file is locked (flock) while open: one process at a time. Config:
// "path", the log file (its directory is created if missing).
package file

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/metaq-go/metaq/internal/fsutil"
	"github.com/metaq-go/metaq/txn"
)

// Name is the builtin's name (OpenOptions.Name).
const Name = "file"

// Limits of the log.
const (
	// MaxRecordSize is the largest record payload, in bytes.
	MaxRecordSize = 1 << 20
	// compactMin is the log size, in bytes, below which it is never
	// rewritten.
	compactMin = 1 << 20
	// headerSize is the length and CRC before each payload, in bytes.
	headerSize = 8
)

// Record types.
const (
	recCommit byte = 1
	recForget byte = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt means the log holds a bad record that is not a torn tail.
var ErrCorrupt = errors.New("txn/file: decision log is corrupt")

// Coordinator is the file coordinator. Use New, then Init (or Open).
type Coordinator struct {
	mu     sync.Mutex // guards the fields below
	path   string
	f      *os.File
	size   int64 // bytes of valid records in f
	live   map[string]*entry
	seq    uint64 // order of commits, for Recover
	inited bool
	closed bool
	dirty  bool // appended since the last fsync
	synced bool // the directory entry of f is durable

	// Group commit: one goroutine fsyncs at a time; the others wait for
	// the round that covers their append.
	syncing  bool
	syncCond *sync.Cond
	appended uint64 // count of appends so far
	durable  uint64 // appends covered by a completed fsync
	syncErr  error  // a failed fsync poisons the log (reopen to go on)
}

type entry struct {
	d    txn.Decision
	seq  uint64
	size int64 // bytes of its record
}

var _ txn.Coordinator = (*Coordinator)(nil)

// New returns an uninitialised file coordinator.
func New() txn.Coordinator { return newCoordinator() }

func newCoordinator() *Coordinator {
	c := &Coordinator{live: map[string]*entry{}}
	c.syncCond = sync.NewCond(&c.mu)
	return c
}

// Open returns a file coordinator on the log at path, initialised.
func Open(path string) (*Coordinator, error) {
	c := newCoordinator()
	if err := c.Init(context.Background(), &txn.InitRequest{Config: map[string]string{"path": path}}); err != nil {
		return nil, err
	}
	return c, nil
}

// commitBody is a commit record's JSON.
type commitBody struct {
	FormatID int32        `json:"formatId"`
	Gtrid    []byte       `json:"gtrid"`
	Owner    string       `json:"owner"`
	Branches []branchBody `json:"branches"`
	LoggedAt int64        `json:"loggedAt"` // unix nanoseconds
}

type branchBody struct {
	Resource string `json:"resource"`
	Bqual    []byte `json:"bqual"`
}

// forgetBody is a forget record's JSON.
type forgetBody struct {
	XIDs []xidBody `json:"xids"`
}

type xidBody struct {
	FormatID int32  `json:"formatId"`
	Gtrid    []byte `json:"gtrid"`
}

func key(x txn.XID) string { return x.Global().String() }

// Init opens (creating if needed) the log named by config "path", locks it,
// reads it and cuts a torn tail.
func (c *Coordinator) Init(_ context.Context, req *txn.InitRequest) error {
	var conf map[string]string
	if req != nil {
		conf = req.Config
	}
	path := conf["path"]
	if path == "" {
		return fmt.Errorf("%w: file coordinator needs a \"path\"", txn.ErrBadConfig)
	}
	for k := range conf {
		if k != "path" {
			return fmt.Errorf("%w: file coordinator: unknown config key %q (known: path)", txn.ErrBadConfig, k)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return txn.ErrClosed
	}
	if c.inited {
		if path != c.path {
			return fmt.Errorf("%w: file coordinator already open at %s", txn.ErrBadConfig, c.path)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("txn/file: log dir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("txn/file: open log: %w", err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return fmt.Errorf("%w: decision log %s is in use by another process: %v", txn.ErrBadConfig, path, err)
	}
	live, size, seq, err := replay(f, path)
	if err != nil {
		closeLocked(f)
		return err
	}
	os.Remove(path + ".compact") // a rewrite a crash interrupted
	c.path, c.f, c.size, c.live, c.seq, c.inited = path, f, size, live, seq, true
	return nil
}

// replay reads the log, applies its records, and cuts a torn tail.
func replay(f *os.File, path string) (live map[string]*entry, size int64, seq uint64, err error) {
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("txn/file: read log: %w", err)
	}
	live = map[string]*entry{}
	off := 0
	for off < len(data) {
		typ, body, n, ok := parseRecord(data[off:])
		if ok {
			ok = apply(live, typ, body, int64(n), &seq) == nil
		}
		if !ok {
			if !tornTail(data[off:]) {
				return nil, 0, 0, fmt.Errorf("%w: %s: bad record at byte %d of %d", ErrCorrupt, path, off, len(data))
			}
			if err := f.Truncate(int64(off)); err != nil {
				return nil, 0, 0, fmt.Errorf("txn/file: cut torn tail: %w", err)
			}
			if err := f.Sync(); err != nil {
				return nil, 0, 0, fmt.Errorf("txn/file: cut torn tail: %w", err)
			}
			break
		}
		off += n
	}
	if _, err := f.Seek(int64(off), io.SeekStart); err != nil {
		return nil, 0, 0, err
	}
	return live, int64(off), seq, nil
}

// parseRecord parses the record at the start of b: its type, body and
// total length; ok is false for a short or damaged record.
func parseRecord(b []byte) (typ byte, body []byte, n int, ok bool) {
	if len(b) < headerSize {
		return 0, nil, 0, false
	}
	l := binary.BigEndian.Uint32(b)
	if l < 1 || l > MaxRecordSize || int(l) > len(b)-headerSize {
		return 0, nil, 0, false
	}
	p := b[headerSize : headerSize+int(l)]
	if crc32.Checksum(p, castagnoli) != binary.BigEndian.Uint32(b[4:]) {
		return 0, nil, 0, false
	}
	return p[0], p[1:], headerSize + int(l), true
}

// tornTail reports whether b, starting at a bad record, is what an
// interrupted append leaves: zeros, or one record that does not fit or
// fails its CRC with nothing but zeros after it.
func tornTail(b []byte) bool {
	if allZero(b) || len(b) < headerSize {
		return true
	}
	l := binary.BigEndian.Uint32(b)
	if l < 1 || l > MaxRecordSize {
		return false
	}
	end := int64(l) + headerSize
	return end >= int64(len(b)) || allZero(b[end:])
}

func allZero(b []byte) bool { return !slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) }

func apply(live map[string]*entry, typ byte, body []byte, size int64, seq *uint64) error {
	switch typ {
	case recCommit:
		var cb commitBody
		if err := json.Unmarshal(body, &cb); err != nil {
			return err
		}
		d := txn.Decision{XID: txn.XID{FormatID: cb.FormatID, Gtrid: cb.Gtrid}, Owner: cb.Owner,
			LoggedAt: time.Unix(0, cb.LoggedAt)}
		for _, b := range cb.Branches {
			d.Branches = append(d.Branches, txn.Branch{Resource: b.Resource, Bqual: b.Bqual})
		}
		if err := d.Validate(); err != nil {
			return err
		}
		*seq++
		live[key(d.XID)] = &entry{d: d, seq: *seq, size: size}
	case recForget:
		var fb forgetBody
		if err := json.Unmarshal(body, &fb); err != nil {
			return err
		}
		for _, x := range fb.XIDs {
			delete(live, key(txn.XID{FormatID: x.FormatID, Gtrid: x.Gtrid}))
		}
	default:
		return fmt.Errorf("unknown record type %d", typ)
	}
	return nil
}

func encodeRecord(typ byte, body any) ([]byte, error) {
	j, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	if len(j)+1 > MaxRecordSize {
		return nil, fmt.Errorf("%w: record of %d bytes exceeds %d", txn.ErrInvalid, len(j)+1, MaxRecordSize)
	}
	rec := make([]byte, headerSize, headerSize+1+len(j))
	rec = append(rec, typ)
	rec = append(rec, j...)
	binary.BigEndian.PutUint32(rec, uint32(len(rec)-headerSize))
	binary.BigEndian.PutUint32(rec[4:], crc32.Checksum(rec[headerSize:], castagnoli))
	return rec, nil
}

func (c *Coordinator) check() error {
	switch {
	case c.closed:
		return txn.ErrClosed
	case !c.inited:
		return txn.ErrNotInitialized
	case c.syncErr != nil:
		return fmt.Errorf("txn/file: log %s failed an earlier fsync (reopen it): %w", c.path, c.syncErr)
	}
	return nil
}

// Begin returns a new global XID of req.Owner; it writes nothing.
func (c *Coordinator) Begin(_ context.Context, req *txn.BeginRequest) (*txn.BeginResponse, error) {
	c.mu.Lock()
	err := c.check()
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	x, err := txn.NewGlobalXID(req.Owner)
	if err != nil {
		return nil, err
	}
	return &txn.BeginResponse{XID: x}, nil
}

// Commit appends the decision and returns once it is fsynced.
func (c *Coordinator) Commit(_ context.Context, req *txn.CommitRequest) error {
	d := req.Decision
	if err := d.Validate(); err != nil {
		return err
	}
	d.LoggedAt = time.Now()
	cb := commitBody{FormatID: d.XID.FormatID, Gtrid: d.XID.Gtrid, Owner: d.Owner, LoggedAt: d.LoggedAt.UnixNano()}
	for _, b := range d.Branches {
		cb.Branches = append(cb.Branches, branchBody{Resource: b.Resource, Bqual: b.Bqual})
	}
	rec, err := encodeRecord(recCommit, cb)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(); err != nil {
		return err
	}
	if _, dup := c.live[key(d.XID)]; dup {
		return fmt.Errorf("%w: a decision for %s is logged already", txn.ErrInvalid, d.XID)
	}
	if err := c.append(rec); err != nil {
		return err
	}
	c.seq++
	c.live[key(d.XID)] = &entry{d: cloneDecision(d), seq: c.seq, size: int64(len(rec))}
	return c.waitDurable(c.appended)
}

// append writes rec at the end of the log; the caller holds mu. A failed
// or short write is cut off again, so the log stays a clean sequence.
func (c *Coordinator) append(rec []byte) error {
	n, err := c.f.WriteAt(rec, c.size)
	if err != nil || n != len(rec) {
		if terr := c.f.Truncate(c.size); terr != nil {
			c.syncErr = fmt.Errorf("write failed (%v) and the cut failed: %w", err, terr)
		}
		return fmt.Errorf("txn/file: append to %s: %w", c.path, err)
	}
	c.size += int64(len(rec))
	c.appended++
	c.dirty = true
	return nil
}

// waitDurable returns once append number n is fsynced; the caller holds
// mu, which it releases while fsyncing (group commit).
func (c *Coordinator) waitDurable(n uint64) error {
	for c.durable < n {
		if c.syncErr != nil {
			return fmt.Errorf("txn/file: fsync %s: %w", c.path, c.syncErr)
		}
		if c.closed {
			return txn.ErrClosed
		}
		if c.syncing {
			c.syncCond.Wait()
			continue
		}
		c.syncing = true
		upto, f, dirSync := c.appended, c.f, !c.synced
		c.mu.Unlock()
		err := f.Sync()
		if err == nil && dirSync {
			err = fsutil.SyncDir(filepath.Dir(c.path))
		}
		c.mu.Lock()
		c.syncing = false
		if err != nil {
			c.syncErr = err
		} else {
			c.durable = max(c.durable, upto)
			c.synced = true
		}
		c.syncCond.Broadcast()
	}
	return nil
}

func cloneDecision(d txn.Decision) txn.Decision {
	out := txn.Decision{XID: d.XID.Global(), Owner: d.Owner, LoggedAt: d.LoggedAt}
	for _, b := range d.Branches {
		out.Branches = append(out.Branches, txn.Branch{Resource: b.Resource, Bqual: bytes.Clone(b.Bqual)})
	}
	return out
}

// Forget appends a forget record for the XIDs that have a decision (no
// fsync), and rewrites the log when it is mostly forgotten records.
func (c *Coordinator) Forget(_ context.Context, req *txn.ForgetRequest) error {
	for _, x := range req.XIDs {
		if err := x.Validate(); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(); err != nil {
		return err
	}
	var fb forgetBody
	for _, x := range req.XIDs {
		if _, ok := c.live[key(x)]; ok {
			fb.XIDs = append(fb.XIDs, xidBody{FormatID: x.FormatID, Gtrid: x.Gtrid})
		}
	}
	if len(fb.XIDs) == 0 {
		return nil
	}
	rec, err := encodeRecord(recForget, fb)
	if err != nil {
		return err
	}
	if err := c.append(rec); err != nil {
		return err
	}
	for _, x := range fb.XIDs {
		delete(c.live, key(txn.XID{FormatID: x.FormatID, Gtrid: x.Gtrid}))
	}
	return c.maybeCompact()
}

// maybeCompact rewrites the log with only the live decisions once it is
// over compactMin and live records are under a quarter of it; the caller
// holds mu. Waiting committers are not disturbed: a rewrite happens only
// when no fsync is in flight.
func (c *Coordinator) maybeCompact() error {
	var liveBytes int64
	for _, e := range c.live {
		liveBytes += e.size
	}
	if c.size < compactMin || liveBytes*4 > c.size || c.syncing {
		return nil
	}
	var buf bytes.Buffer
	for _, e := range c.sorted() {
		cb := commitBody{FormatID: e.d.XID.FormatID, Gtrid: e.d.XID.Gtrid, Owner: e.d.Owner, LoggedAt: e.d.LoggedAt.UnixNano()}
		for _, b := range e.d.Branches {
			cb.Branches = append(cb.Branches, branchBody{Resource: b.Resource, Bqual: b.Bqual})
		}
		rec, err := encodeRecord(recCommit, cb)
		if err != nil {
			return err
		}
		buf.Write(rec)
	}
	tmpPath := c.path + ".compact"
	tmp, err := os.OpenFile(tmpPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("txn/file: compact: %w", err)
	}
	fail := func(err error) error {
		closeLocked(tmp)
		os.Remove(tmpPath)
		return fmt.Errorf("txn/file: compact: %w", err)
	}
	if err := lockFile(tmp); err != nil {
		return fail(err)
	}
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmpPath, c.path); err != nil {
		return fail(err)
	}
	if err := fsutil.SyncDir(filepath.Dir(c.path)); err != nil {
		// The rename may not be durable; either file is a valid log.
		c.syncErr = err
	}
	closeLocked(c.f)
	c.f, c.size = tmp, int64(buf.Len())
	c.durable, c.dirty, c.synced = c.appended, false, true
	for _, e := range c.live {
		e.size = 0
	}
	return nil
}

func (c *Coordinator) sorted() []*entry {
	es := make([]*entry, 0, len(c.live))
	for _, e := range c.live {
		es = append(es, e)
	}
	sort.Slice(es, func(i, j int) bool { return es[i].seq < es[j].seq })
	return es
}

// Recover lists the live decisions of req.Owners (all when empty), in the
// order they were logged.
func (c *Coordinator) Recover(_ context.Context, req *txn.RecoverRequest) (*txn.RecoverResponse, error) {
	for _, o := range req.Owners {
		if err := txn.ValidateOwner(o); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(); err != nil {
		return nil, err
	}
	resp := &txn.RecoverResponse{Decisions: []txn.Decision{}}
	for _, e := range c.sorted() {
		if len(req.Owners) == 0 || slices.Contains(req.Owners, e.d.Owner) {
			resp.Decisions = append(resp.Decisions, cloneDecision(e.d))
		}
	}
	return resp, nil
}

// Close waits for an fsync in progress, syncs what Forget appended and
// closes the log. Idempotent.
func (c *Coordinator) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	for c.syncing {
		c.syncCond.Wait()
	}
	c.closed = true
	c.syncCond.Broadcast()
	if c.f == nil {
		return nil
	}
	var err error
	if c.dirty && c.syncErr == nil {
		err = c.f.Sync()
	}
	if cerr := closeLocked(c.f); err == nil {
		err = cerr
	}
	return err
}

// String names the log, for messages.
func (c *Coordinator) String() string { return "txn/file:" + strings.TrimSpace(c.path) }
