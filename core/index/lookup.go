package index

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
)

// Query is a lookup: by Key, or by ID when ByID is set.
type Query struct {
	Key  []byte
	ID   int64
	ByID bool
	// Limit is the most records returned (the newest ones); <= 0: 1.
	Limit int
	// Deadline, if set, ends the lookup (Result.TimedOut).
	Deadline time.Time
}

// Result is what a lookup found in one partition.
type Result struct {
	// Records are the matching records, ascending by offset; their Data
	// is their own copy.
	Records []message.Record
	// More is set when more records matched than Limit.
	More bool
	// TimedOut is set when the deadline ended the lookup: Records are
	// what it found until then.
	TimedOut bool
	// Candidates counts the index entries whose record was read and
	// compared; Scanned the bytes of the log read by scans (the part not
	// indexed yet, and the ranges of damaged chunk files).
	Candidates int
	Scanned    int64
	// Notes says what the lookup could not use (a damaged chunk file,
	// where indexing stopped), for the caller to show.
	Notes []string
}

// errDeadline ends a scan at the query's deadline.
var errDeadline = errors.New("index: lookup deadline")

// Lookup finds the records of q in the partition: candidates from the
// chunk files and the open chunk, each read back from the log and
// compared, then a scan of the log past the indexed mark. Nothing the
// index says is returned without the log's record agreeing.
func (p *Part) Lookup(q Query) (Result, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = 1
	}
	var hash uint32
	if q.ByID {
		hash = IDHash(q.ID)
	} else {
		hash = KeyHash(q.Key)
	}
	match := func(r *message.Record) bool {
		if q.ByID {
			return r.ID == q.ID
		}
		k, ok := RecordKey(r.Flag, r.Data)
		return ok && bytes.Equal(k, q.Key)
	}
	p.mu.Lock()
	chunks := slices.Clone(p.chunks)
	indexed, stopped := p.indexed, p.stopped
	var openCands []int64
	if p.open.started {
		for _, e := range p.open.ents {
			if e.hash == hash {
				openCands = append(openCands, p.open.from+int64(e.rel))
			}
		}
	}
	p.mu.Unlock()

	var res Result
	found := map[int64]message.Record{}
	timedOut := func() bool {
		if !q.Deadline.IsZero() && time.Now().After(q.Deadline) {
			res.TimedOut = true
		}
		return res.TimedOut
	}
	keep := func(r *message.Record) {
		if _, dup := found[r.Offset]; !dup {
			c := *r
			c.Data = bytes.Clone(r.Data)
			found[r.Offset] = c
		}
	}
	// The part not indexed yet: the newest records.
	if stopped != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("indexing stopped (%v): the log from offset %d was scanned", stopped, indexed))
	}
	if err := p.scan(indexed, p.log.MaxOffset(), &res, q.Deadline, match, keep); err != nil && !errors.Is(err, errDeadline) {
		res.Notes = append(res.Notes, fmt.Sprintf("scan from offset %d: %v", indexed, err))
	}
	var cands []int64
	cands = append(cands, openCands...)
	var bad []*chunk
	for i := len(chunks) - 1; i >= 0 && !timedOut(); i-- {
		c := chunks[i]
		if q.ByID && c.hdr.n > 0 && (q.ID < c.hdr.minID || q.ID > c.hdr.maxID) {
			continue
		}
		if !p.validate(c) {
			bad = append(bad, c)
			continue
		}
		cs, err := chunkCandidates(c, hash)
		if err != nil {
			bad = append(bad, c)
			continue
		}
		cands = append(cands, cs...)
	}
	// Newest first, so that Limit keeps the newest.
	slices.Sort(cands)
	for i := len(cands) - 1; i >= 0 && len(found) <= limit && !timedOut(); i-- {
		off := cands[i]
		if _, dup := found[off]; dup {
			continue
		}
		res.Candidates++
		r, err := p.readRecord(off)
		if err != nil || !match(&r) {
			continue // a stale or colliding entry: the log decides
		}
		keep(&r)
	}
	for _, c := range bad {
		if timedOut() || len(found) > limit {
			break
		}
		if c.hdr.to <= p.log.MinOffset() {
			continue // its segment is gone (retention): nothing to scan
		}
		res.Notes = append(res.Notes, fmt.Sprintf("index file %s is damaged: its range %d..%d of the log was scanned", filepath.Base(c.path), c.hdr.from, c.hdr.to))
		if err := p.scan(c.hdr.from, c.hdr.to, &res, q.Deadline, match, keep); err != nil && !errors.Is(err, errDeadline) {
			res.Notes = append(res.Notes, fmt.Sprintf("scan of %d..%d: %v", c.hdr.from, c.hdr.to, err))
		}
	}
	offs := make([]int64, 0, len(found))
	for off := range found {
		offs = append(offs, off)
	}
	slices.Sort(offs)
	if len(offs) > limit {
		res.More = true
		offs = offs[len(offs)-limit:]
	}
	for _, off := range offs {
		res.Records = append(res.Records, found[off])
	}
	return res, nil
}

// chunkCandidates returns the offsets c's entries give for hash.
func chunkCandidates(c *chunk, hash uint32) ([]int64, error) {
	f, err := os.Open(c.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return candidates(f.ReadAt, c.hdr, hash)
}

// readRecord reads the record at off from the log, checksum checked.
func (p *Part) readRecord(off int64) (message.Record, error) {
	var buf []byte
	want := 4096
	for {
		v, err := p.log.Read(off, want)
		if err != nil {
			return message.Record{}, err
		}
		buf, err = v.ReadAll(buf[:0])
		v.Release()
		if err != nil {
			return message.Record{}, err
		}
		r, _, err := message.ParseRecord(buf, p.maxMsg)
		if errors.Is(err, message.ErrShortRecord) && len(buf) == want && len(buf) >= message.HeaderSize {
			n := message.HeaderSize + int(int32(uint32(buf[0])<<24|uint32(buf[1])<<16|uint32(buf[2])<<8|uint32(buf[3])))
			if n > want && n <= p.maxMsg+message.HeaderSize {
				want = n
				continue
			}
		}
		if err != nil {
			return message.Record{}, err
		}
		r.Offset = off
		return r, nil
	}
}

// scan reads the log's records in [from, to) and keeps those that match.
func (p *Part) scan(from, to int64, res *Result, deadline time.Time, match func(*message.Record) bool, keep func(*message.Record)) error {
	if from >= to {
		return nil
	}
	rb := readBufs.Get().(*readBuf)
	buf := rb.b
	defer func() {
		if cap(buf) <= readSize {
			rb.b = buf[:0]
		}
		clear(rb.recs[:cap(rb.recs)])
		readBufs.Put(rb)
	}()
	cur := from
	for cur < to {
		if !deadline.IsZero() && time.Now().After(deadline) {
			res.TimedOut = true
			return errDeadline
		}
		recs, next, err := p.readRecords(cur, to, &buf, rb.recs, true)
		rb.recs = recs
		if err != nil {
			if errors.Is(err, store.ErrNoData) {
				return nil
			}
			return err
		}
		res.Scanned += next - cur
		for i := range recs {
			if match(&recs[i]) {
				keep(&recs[i])
			}
		}
		cur = next
	}
	return nil
}

// Scan looks q up in log l without an index (index_keys off): a scan of
// the whole log, bounded by q's deadline.
func Scan(l *store.Log, q Query, maxMsg int) (Result, error) {
	if maxMsg <= 0 {
		maxMsg = message.DefaultMaxMessageSize
	}
	p := &Part{dir: l.Dir(), log: l, maxMsg: maxMsg, logf: func(string, ...any) {}, indexed: l.MinOffset()}
	return p.Lookup(q)
}
