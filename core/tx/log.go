package tx

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/internal/fsutil"
)

// The transaction journal: <data_dir>/transactions/redo.<n>, n a 20-digit
// sequence number, one append-only file at a time (docs/storage.md).
//
// A record is [u32 crc32c][u32 payload length][u8 type][payload], all
// big-endian; the crc (Castagnoli) covers the length, the type and the
// payload. Replay stops at the first record that does not verify (a torn
// tail) and the file is cut there.
//
// A file is deleted once no open transaction has a record in it and it is
// not the file being written: it then holds only finished transactions.
// Replay reads every file left, oldest first, so the files kept are the
// checkpoint.

const (
	txRecAppend    = 1 // a transactional put: key, msgId, topic, partition, flag, data
	txRecPrepare   = 2 // XA prepare: key, user
	txRecCommit    = 3 // key and, per partition, where its batch goes: topic, partition, not-before offset, ids, crc
	txRecDone      = 4 // key: every batch of the commit is stored
	txRecRollback  = 5 // key
	txRecHeuristic = 6 // key, u8 outcome: an XA transaction completed heuristically
	txRecForget    = 7 // key: a heuristic outcome forgotten

	txHeaderSize = 9
	// txFileSize is the size past which the journal moves to a new file.
	txFileSize = 64 << 20
	// txMaxRecord bounds a record's payload on replay.
	txMaxRecord = 1 << 30
	// txWriteBuf is how many record bytes the journal holds before it
	// writes them to its file without being asked to.
	txWriteBuf = 256 << 10
	// txPrealloc is how far ahead of its records a journal file is
	// zero-filled, at most.
	txPrealloc = 4 << 20

	// DirName is the transaction journal's directory under data_dir.
	DirName = "transactions"
)

// flush_tx_log_at_commit values (MetaQ's flushTxLogAtCommit).
const (
	txFlushNever  = 0 // the OS writes the journal when it will
	txFlushCommit = 1 // prepare, commit and rollback are fsynced before they are answered
	txFlushSecond = 2 // fsynced once a second
)

// txLog is the open transaction journal.
type txLog struct {
	dir      string
	mode     int
	fileSize int64
	logf     func(string, ...any)

	mu sync.Mutex
	f  *os.File
	// buf holds the records not yet written to f: a put's record waits
	// for the next prepare, commit, rollback or second (or txWriteBuf
	// bytes), so that a transaction's records go to the file in one
	// write.
	buf    []byte
	seq    int64 // the active file's number
	size   int64 // the active file's size, buf included
	fwrote int64 // bytes of the active file written (where buf goes)
	// falloc is how far the active file is zero-filled: records are
	// written over zeros, so that an fdatasync has only data to flush,
	// not the file's new size (half the cost on ext4).
	falloc  int64
	pos     int64 // bytes recorded since open, over all files, buf included
	written int64 // pos up to which the records are written to the file
	refs    map[int64]int
	err     error // a failed write or sync: the journal refuses everything after

	smu    sync.Mutex   // one fsync at a time
	synced atomic.Int64 // pos covered by the last fsync (written under smu)

	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

var txCastagnoli = crc32.MakeTable(crc32.Castagnoli)

func txFileName(seq int64) string { return fmt.Sprintf("redo.%020d", seq) }

// txFiles lists the journal's files, oldest first.
func txFiles(dir string) ([]int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var seqs []int64
	for _, e := range ents {
		s, ok := strings.CutPrefix(e.Name(), "redo.")
		if !ok || len(s) != 20 {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			continue
		}
		seqs = append(seqs, n)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	return seqs, nil
}

// txRecord is one replayed record.
type txRecord struct {
	file    int64
	typ     byte
	payload []byte
}

// replayTxFiles reads every record of the journal in dir, oldest first,
// cutting a file at its first bad record.
func replayTxFiles(dir string, logf func(string, ...any)) ([]txRecord, []int64, error) {
	seqs, err := txFiles(dir)
	if err != nil {
		return nil, nil, err
	}
	var recs []txRecord
	for _, seq := range seqs {
		path := filepath.Join(dir, txFileName(seq))
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return nil, nil, err
		}
		br := bufio.NewReaderSize(f, 1<<20)
		var good int64
		var hdr [txHeaderSize]byte
		for {
			if _, err := io.ReadFull(br, hdr[:]); err != nil {
				break
			}
			n := binary.BigEndian.Uint32(hdr[4:])
			if n > txMaxRecord || hdr[8] == 0 { // type 0: the zero-filled tail
				break
			}
			p := make([]byte, n)
			if _, err := io.ReadFull(br, p); err != nil {
				break
			}
			c := crc32.Update(crc32.Checksum(hdr[4:], txCastagnoli), txCastagnoli, p)
			if c != binary.BigEndian.Uint32(hdr[:]) {
				break
			}
			recs = append(recs, txRecord{file: seq, typ: hdr[8], payload: p})
			good += int64(txHeaderSize) + int64(n)
		}
		if st, err := f.Stat(); err == nil && st.Size() > good {
			if zero, err := zeroFrom(f, good); err != nil || !zero {
				logf("transaction journal %s: cut at %d of %d bytes (a torn or damaged tail)", path, good, st.Size())
			}
			if err := f.Truncate(good); err != nil {
				f.Close()
				return nil, nil, fmt.Errorf("cut %s: %w", path, err)
			}
			if err := f.Sync(); err != nil {
				f.Close()
				return nil, nil, err
			}
		}
		f.Close()
	}
	return recs, seqs, nil
}

// zeroFrom reports whether f holds only zeros from off on (the
// zero-filled space of a file the broker did not close).
func zeroFrom(f *os.File, off int64) (bool, error) {
	buf := make([]byte, 64<<10)
	for {
		n, err := f.ReadAt(buf, off)
		for _, c := range buf[:n] {
			if c != 0 {
				return false, nil
			}
		}
		off += int64(n)
		if err == io.EOF {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// openTxLog opens the journal for appending in a new file after the
// existing ones (which replay has read).
func openTxLog(dir string, mode int, last int64, logf func(string, ...any)) (*txLog, error) {
	j := &txLog{dir: dir, mode: mode, fileSize: txFileSize, logf: logf, seq: last, refs: map[int64]int{}, done: make(chan struct{})}
	if err := j.rotateLocked(); err != nil {
		return nil, err
	}
	j.wg.Add(1)
	go j.syncLoop()
	return j, nil
}

// syncLoop writes the held records once a second, and with
// flush_tx_log_at_commit = 2 fsyncs them.
func (j *txLog) syncLoop() {
	defer j.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-j.done:
			return
		case <-t.C:
			j.mu.Lock()
			pos := j.pos
			err := j.writeOutLocked()
			j.mu.Unlock()
			if err == nil && j.mode == txFlushSecond {
				err = j.syncTo(pos)
			}
			if err != nil {
				j.logf("transaction journal: %v", err)
			}
		}
	}
}

// rotateLocked starts a new file; the caller holds mu (or is opening).
func (j *txLog) rotateLocked() error {
	if j.f != nil {
		if err := j.writeOutLocked(); err != nil {
			return err
		}
		if err := j.f.Truncate(j.fwrote); err != nil { // its zero-filled tail
			return err
		}
		if err := j.f.Sync(); err != nil {
			return err
		}
		j.f.Close()
		old := j.seq
		j.f = nil
		if j.refs[old] == 0 {
			j.removeLocked(old)
		}
	}
	j.seq++
	f, err := os.OpenFile(filepath.Join(j.dir, txFileName(j.seq)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if err := fsutil.SyncDir(j.dir); err != nil {
		f.Close()
		return err
	}
	j.f, j.size, j.fwrote, j.falloc = f, 0, 0, 0
	return nil
}

// removeLocked deletes an unreferenced, inactive file.
func (j *txLog) removeLocked(seq int64) {
	delete(j.refs, seq)
	if err := os.Remove(filepath.Join(j.dir, txFileName(seq))); err != nil && !errors.Is(err, os.ErrNotExist) {
		j.logf("transaction journal: %v", err)
	}
}

// write records one record for t (nil: none to reference) and returns the
// journal position after it, for force. Callers hold txSet.mu, so that a
// transaction's records are in the order of its operations. The record
// is held in memory until force, syncTo, the next second or txWriteBuf
// bytes write it out.
func (j *txLog) write(t *tx, typ byte, payload []byte) (int64, error) {
	return j.write2(t, typ, payload, nil)
}

// write2 is write of the payload head followed by tail.
func (j *txLog) write2(t *tx, typ byte, head, tail []byte) (int64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return 0, j.err
	}
	n := len(head) + len(tail)
	if j.size > 0 && j.size+int64(txHeaderSize+n) > j.fileSize {
		if err := j.rotateLocked(); err != nil {
			j.err = fmt.Errorf("transaction journal: new file: %w", err)
			return 0, j.err
		}
	}
	at := len(j.buf)
	rec := append(j.buf, 0, 0, 0, 0)
	rec = binary.BigEndian.AppendUint32(rec, uint32(n))
	rec = append(rec, typ)
	rec = append(rec, head...)
	rec = append(rec, tail...)
	binary.BigEndian.PutUint32(rec[at:], crc32.Checksum(rec[at+4:], txCastagnoli))
	j.buf = rec
	j.size += int64(txHeaderSize + n)
	j.pos += int64(txHeaderSize + n)
	pos := j.pos
	if t != nil {
		if t.files == nil {
			t.files = map[int64]bool{}
		}
		if !t.files[j.seq] {
			t.files[j.seq] = true
			j.refs[j.seq]++
		}
	}
	if len(j.buf) >= txWriteBuf {
		if err := j.writeOutLocked(); err != nil {
			return 0, err
		}
	}
	return pos, nil
}

// writeOutLocked writes the held records to the file; the caller holds mu.
func (j *txLog) writeOutLocked() error {
	if j.err != nil {
		return j.err
	}
	if len(j.buf) == 0 {
		return nil
	}
	if need := j.fwrote + int64(len(j.buf)); need > j.falloc {
		to := max(need, min(j.falloc+txPrealloc, j.fileSize))
		if err := fsutil.ZeroFill(j.f, j.falloc, to); err != nil {
			j.err = fmt.Errorf("transaction journal: zero-fill: %w", err)
			return j.err
		}
		j.falloc = to
	}
	if _, err := j.f.WriteAt(j.buf, j.fwrote); err != nil {
		j.err = fmt.Errorf("transaction journal: write: %w", err)
		return j.err
	}
	j.fwrote += int64(len(j.buf))
	j.written = j.pos
	if cap(j.buf) > 4*txWriteBuf {
		j.buf = nil
	} else {
		j.buf = j.buf[:0]
	}
	return nil
}

// writeOut writes the records up to pos to the file (not fsynced): from
// then on they survive the process being killed.
func (j *txLog) writeOut(pos int64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.written >= pos && j.err == nil {
		return nil
	}
	return j.writeOutLocked()
}

// force writes the records up to pos to the file and, if
// flush_tx_log_at_commit is 1, makes them durable: prepare, commit and
// rollback call it before they are answered (or acted on), so that with
// every mode a kill -9 of the broker after the answer keeps them.
func (j *txLog) force(pos int64) error {
	if j.mode != txFlushCommit {
		return j.writeOut(pos)
	}
	return j.syncTo(pos)
}

// syncTo returns once the journal is fsynced at least up to pos; one fsync
// covers every record written before it started (group commit).
func (j *txLog) syncTo(pos int64) error {
	j.smu.Lock()
	defer j.smu.Unlock()
	if j.synced.Load() >= pos {
		return nil
	}
	j.mu.Lock()
	err := j.writeOutLocked()
	f, end := j.f, j.pos
	j.mu.Unlock()
	if err != nil {
		return err
	}
	if err := fsutil.Fdatasync(f); err != nil {
		j.mu.Lock()
		if j.f != f && j.err == nil {
			// The file was rotated meanwhile: rotation fsynced it whole
			// before closing it, and end was within it.
			j.mu.Unlock()
			j.synced.Store(end)
			return nil
		}
		if j.err == nil {
			j.err = fmt.Errorf("transaction journal: fsync: %w", err)
		}
		err = j.err
		j.mu.Unlock()
		return err
	}
	j.synced.Store(end)
	return nil
}

// release drops t's references; files no longer needed are deleted once
// the active file (which holds t's final record) is fsynced, so that a
// replay never sees the end of a transaction whose beginning is gone.
func (j *txLog) release(t *tx) {
	if len(t.files) == 0 {
		return
	}
	j.mu.Lock()
	var free []int64
	for seq := range t.files {
		j.refs[seq]--
		if j.refs[seq] <= 0 && seq != j.seq {
			free = append(free, seq)
		}
	}
	t.files = nil
	pos := j.pos
	j.mu.Unlock()
	if len(free) == 0 {
		return
	}
	if err := j.syncTo(pos); err != nil {
		return
	}
	j.mu.Lock()
	for _, seq := range free {
		if j.refs[seq] <= 0 && seq != j.seq {
			j.removeLocked(seq)
		}
	}
	j.mu.Unlock()
}

// releaseSyncs reports whether release(t) would now fsync the journal
// (it would free a file).
func (j *txLog) releaseSyncs(t *tx) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for seq := range t.files {
		if j.refs[seq] <= 1 && seq != j.seq {
			return true
		}
	}
	return false
}

// close fsyncs and closes the journal.
func (j *txLog) close() error {
	j.closeOnce.Do(func() { close(j.done) })
	j.wg.Wait()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.writeOutLocked()
	if err == nil {
		err = j.f.Truncate(j.fwrote)
	}
	if serr := j.f.Sync(); err == nil {
		err = serr
	}
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	j.f = nil
	if j.err == nil {
		j.err = errors.New("transaction journal closed")
	}
	return err
}

// Payload encoding helpers.

func appendStr(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(s)))
	return append(dst, s...)
}

type txReader struct {
	p   []byte
	bad bool
}

func (r *txReader) take(n int) []byte {
	if r.bad || len(r.p) < n {
		r.bad = true
		return nil
	}
	b := r.p[:n]
	r.p = r.p[n:]
	return b
}

func (r *txReader) u16() int {
	b := r.take(2)
	if b == nil {
		return 0
	}
	return int(binary.BigEndian.Uint16(b))
}

func (r *txReader) u32() uint32 {
	b := r.take(4)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

func (r *txReader) u64() int64 {
	b := r.take(8)
	if b == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b))
}

func (r *txReader) str() string { return string(r.take(r.u16())) }

// encodeTxAppend is a put record's payload: key, msgId, topic, partition,
// flag, data.
func encodeTxAppend(key string, m *txMsg) []byte {
	return append(appendTxAppendHead(nil, key, m), m.e.Data...)
}

// appendTxAppendHead appends a put record's payload up to its data.
func appendTxAppendHead(p []byte, key string, m *txMsg) []byte {
	return appendPutHead(p, key, m.t.Name(), m.p, &m.e)
}

// appendPutHead appends the payload of a put record of e, for partition
// part of topic, up to its data.
func appendPutHead(p []byte, key, topic string, part int32, e *store.Entry) []byte {
	p = appendStr(p, key)
	p = binary.BigEndian.AppendUint64(p, uint64(e.ID))
	p = appendStr(p, topic)
	p = binary.BigEndian.AppendUint32(p, uint32(part))
	p = binary.BigEndian.AppendUint32(p, uint32(e.Flag))
	return binary.BigEndian.AppendUint32(p, uint32(len(e.Data)))
}

func encodeTxPrepare(key, user string) []byte { return appendStr(appendStr(nil, key), user) }

func encodeTxHeuristic(key string, h heurOut) []byte { return append(appendStr(nil, key), byte(h)) }

// txBatchLoc is where a commit puts one partition's batch: at or after
// notBefore (the partition's end when the commit was recorded), the
// records with ids firstID.. (n of them, in order), whose data crc32c is
// crc.
type txBatchLoc struct {
	topic     string
	partition int32
	notBefore int64
	firstID   int64
	n         int
	crc       uint32
}

func encodeTxCommit(key string, locs []txBatchLoc) []byte {
	p := appendStr(nil, key)
	p = binary.BigEndian.AppendUint16(p, uint16(len(locs)))
	for _, l := range locs {
		p = appendStr(p, l.topic)
		p = binary.BigEndian.AppendUint32(p, uint32(l.partition))
		p = binary.BigEndian.AppendUint64(p, uint64(l.notBefore))
		p = binary.BigEndian.AppendUint64(p, uint64(l.firstID))
		p = binary.BigEndian.AppendUint32(p, uint32(l.n))
		p = binary.BigEndian.AppendUint32(p, l.crc)
	}
	return p
}

func decodeTxCommit(p []byte) (string, []txBatchLoc, bool) {
	r := &txReader{p: p}
	key := r.str()
	n := r.u16()
	locs := make([]txBatchLoc, 0, min(n, 1024))
	for i := 0; i < n && !r.bad; i++ {
		var l txBatchLoc
		l.topic = r.str()
		l.partition = int32(r.u32())
		l.notBefore = r.u64()
		l.firstID = r.u64()
		l.n = int(r.u32())
		l.crc = r.u32()
		locs = append(locs, l)
	}
	return key, locs, !r.bad && len(r.p) == 0
}

func crcUpdate(c uint32, data []byte) uint32 { return crc32.Update(c, txCastagnoli, data) }

// batchCRC is the crc32c of a batch's data, message by message.
func batchCRC(entries []store.Entry) uint32 {
	var c uint32
	for i := range entries {
		c = crc32.Update(c, txCastagnoli, entries[i].Data)
	}
	return c
}
