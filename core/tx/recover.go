package tx

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/internal/fsutil"
	"github.com/metaq-go/metaq/sdk/message"
)

// replayedTx is a transaction rebuilt from the journal.
type replayedTx struct {
	key      string
	user     string
	msgs     []replayedMsg
	locs     []txBatchLoc // set by its commit record
	done     bool
	rolled   bool
	prepared bool
}

type replayedMsg struct {
	topic     string
	partition int32
	e         store.Entry
}

// openJournal replays the transaction journal (reference §10's startup
// recovery) and opens it for this run. It runs in Open, once the broker's
// topics are open and before any connection:
//  1. every record of the files left is read, oldest first (the files
//     kept are those an open transaction needed: the checkpoint), a torn
//     tail cut;
//  2. puts rebuild the in-flight transactions;
//  3. every committed transaction's batches are looked for in their
//     partitions, from the partition's end when the commit was recorded,
//     and a batch that is missing or whose data differs is appended again
//     with the same ids;
//  4. what is still in flight is rolled back (local transactions do not
//     survive their connection);
//  5. prepared XA transactions are rebuilt, prepared, so that RECOVER
//     lists them, and heuristic outcomes are kept.
//
// The old files are then deleted: nothing in them is needed any more.
func (m *Manager) openJournal() error {
	cfg := m.config()
	dir := cfg.Dir
	if err := store.MkdirAllDurable(dir, 0o755); err != nil {
		return fmt.Errorf("transaction journal: %w", err)
	}
	recs, seqs, err := replayTxFiles(dir, m.logf)
	if err != nil {
		return fmt.Errorf("transaction journal: replay: %w", err)
	}
	var order []*replayedTx
	byKey := map[string]*replayedTx{}
	heur := map[string]heurOut{}
	get := func(key string) *replayedTx {
		t := byKey[key]
		if t == nil || t.done || t.rolled {
			t = &replayedTx{key: key}
			byKey[key] = t
			order = append(order, t)
		}
		return t
	}
	for _, rec := range recs {
		switch rec.typ {
		case txRecAppend:
			key, rm, ok := decodeTxAppend(rec.payload) // replslave.go
			if !ok {
				return fmt.Errorf("transaction journal %s: malformed put record", txFileName(rec.file))
			}
			m.host.ObserveID(rm.e.ID)
			t := get(key)
			t.msgs = append(t.msgs, rm)
		case txRecCommit:
			key, locs, ok := decodeTxCommit(rec.payload)
			if !ok {
				return fmt.Errorf("transaction journal %s: malformed commit record", txFileName(rec.file))
			}
			t := byKey[key]
			if t == nil || t.done || t.rolled {
				t = get(key) // its puts were in files already freed
			}
			t.locs = locs
		case txRecHeuristic, txRecForget:
			r := &txReader{p: rec.payload}
			key := r.str()
			var h heurOut
			if rec.typ == txRecHeuristic {
				if b := r.take(1); b != nil {
					h = heurOut(b[0])
				}
			}
			if r.bad || len(r.p) != 0 || (rec.typ == txRecHeuristic && (h < heurCommitted || h > heurHazard)) {
				return fmt.Errorf("transaction journal %s: malformed record of type %d", txFileName(rec.file), rec.typ)
			}
			if rec.typ == txRecForget {
				delete(heur, key)
			} else {
				heur[key] = h
			}
		case txRecDone, txRecRollback, txRecPrepare:
			r := &txReader{p: rec.payload}
			key := r.str()
			var user string
			if rec.typ == txRecPrepare {
				user = r.str()
			}
			if r.bad || len(r.p) != 0 {
				return fmt.Errorf("transaction journal %s: malformed record of type %d", txFileName(rec.file), rec.typ)
			}
			t := byKey[key]
			if t == nil {
				continue // its other records were in files already freed
			}
			switch rec.typ {
			case txRecDone:
				t.done = true
			case txRecRollback:
				t.rolled = true
			case txRecPrepare:
				t.prepared, t.user = true, user
			}
		default:
			return fmt.Errorf("transaction journal %s: unknown record type %d", txFileName(rec.file), rec.typ)
		}
	}
	var touched []*store.Log
	var rolled, completed, reappended int
	var prepared []*replayedTx
	for _, t := range order {
		switch {
		case t.prepared && t.locs == nil && !t.done && !t.rolled:
			t.msgs = withoutTimerMsgs(t.msgs) // a commit not recorded (delayed.go)
			prepared = append(prepared, t)
		case t.locs != nil:
			n, logs, err := m.completeCommit(t)
			if err != nil {
				return fmt.Errorf("transaction journal: complete the commit of %s: %w", t.key, err)
			}
			if !t.done {
				completed++
			}
			reappended += n
			touched = append(touched, logs...)
		case !t.done && !t.rolled:
			rolled++
		}
	}
	for _, l := range touched {
		if err := l.Flush(); err != nil {
			return fmt.Errorf("transaction journal: %w", err)
		}
	}
	if rolled+completed+reappended+len(prepared)+len(heur) > 0 {
		m.logf("transaction journal: %d committed transactions completed, %d batches appended again, %d in-flight transactions rolled back, %d prepared XA transactions and %d heuristic outcomes kept",
			completed, reappended, rolled, len(prepared), len(heur))
	}
	var last int64
	if len(seqs) > 0 {
		last = seqs[len(seqs)-1]
	}
	j, err := openTxLog(dir, cfg.FlushMode, last, m.logf)
	if err != nil {
		return fmt.Errorf("transaction journal: %w", err)
	}
	if cfg.FileSize > 0 {
		j.fileSize = cfg.FileSize
	}
	m.j = j
	// What outlives the restart is written again into the new file, so
	// that the old ones can all go.
	if err := m.rebuildPrepared(prepared, heur); err != nil {
		j.close()
		return fmt.Errorf("transaction journal: %w", err)
	}
	for _, seq := range seqs {
		j.removeLocked(seq)
	}
	if err := fsutil.SyncDir(dir); err != nil {
		j.close()
		return fmt.Errorf("transaction journal: %w", err)
	}
	return nil
}

// rebuildPrepared registers the prepared XA transactions and the heuristic
// outcomes found by replay (§10 step 5: RECOVER lists them) and writes
// their records into the new journal file, fsynced.
func (m *Manager) rebuildPrepared(prepared []*replayedTx, heur map[string]heurOut) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var pos int64
	for _, rt := range prepared {
		var err error
		if pos, err = m.holdPreparedLocked(rt, "(recovered)"); err != nil {
			return err
		}
	}
	for key, h := range heur {
		e := &heurEntry{out: h, hold: &tx{key: key}}
		var err error
		if pos, err = m.j.write(e.hold, txRecHeuristic, encodeTxHeuristic(key, h)); err != nil {
			return err
		}
		m.heur[key] = e
	}
	if pos > 0 {
		return m.j.syncTo(pos)
	}
	return nil
}

// holdPreparedLocked registers rt as a prepared XA transaction and writes
// its put and prepare records to the journal; it returns the journal
// position after them. The caller holds mu.
func (m *Manager) holdPreparedLocked(rt *replayedTx, session string) (int64, error) {
	t := &tx{key: rt.key, xa: true, user: rt.user, session: session, began: time.Now(), state: txPrepared}
	for _, rm := range rt.msgs {
		tp, l, err := m.openLog(rm.topic, rm.partition)
		if errors.Is(err, errNoPartition) {
			return 0, fmt.Errorf("prepared %s: topic %s has no partition %d", rt.key, rm.topic, rm.partition)
		}
		if err != nil {
			return 0, fmt.Errorf("prepared %s: topic %s: %w", rt.key, rm.topic, err)
		}
		tm := txMsg{t: tp, l: l, p: rm.partition, e: rm.e}
		if _, err = m.j.write(t, txRecAppend, encodeTxAppend(rt.key, &tm)); err != nil {
			return 0, err
		}
		t.msgs = append(t.msgs, tm)
		t.bytes += int64(len(rm.e.Data))
	}
	pos, err := m.j.write(t, txRecPrepare, encodeTxPrepare(rt.key, rt.user))
	if err != nil {
		return 0, err
	}
	m.xa[t.key] = t
	m.open[t] = struct{}{}
	m.buffered += t.bytes
	if m.host.Slave() != nil {
		m.holdLocked(t) // replslave.go
	}
	return pos, nil
}

// completeCommit makes sure every batch of a committed transaction is in
// its partition: found intact at or after where the commit said, or
// appended again with the same ids. It returns how many were appended and
// the logs it looked at.
func (m *Manager) completeCommit(t *replayedTx) (int, []*store.Log, error) {
	appended := 0
	var logs []*store.Log
	// The commit turned these ids' puts into timer log records (delayed.go):
	// the records stand for them.
	timerIDs := replayedTimerIDs(t.msgs)
	for _, loc := range t.locs {
		_, l, err := m.openLog(loc.topic, loc.partition)
		if errors.Is(err, errNoPartition) {
			return appended, logs, fmt.Errorf("topic %s has no partition %d", loc.topic, loc.partition)
		}
		if err != nil {
			return appended, logs, fmt.Errorf("topic %s: %w", loc.topic, err)
		}
		logs = append(logs, l)
		var entries []store.Entry
		for _, rm := range t.msgs {
			if rm.topic == loc.topic && rm.partition == loc.partition && (rm.topic == conf.TimerTopic || !timerIDs[rm.e.ID]) {
				entries = append(entries, rm.e)
			}
		}
		if len(entries) != loc.n || len(entries) == 0 || entries[0].ID != loc.firstID || batchCRC(entries) != loc.crc {
			entries = nil // its puts are not in the journal (any more)
		}
		present, err := m.findBatch(l, loc, entries)
		if err != nil {
			return appended, logs, err
		}
		if present == loc.n {
			continue
		}
		if loc.notBefore < l.MinOffset() {
			// Retention deleted the segment the batch was written to, so
			// it was in place (a crash's torn tail is in the active
			// segment and never moves MinOffset): the journal replays a
			// transaction finished long ago. Appending it again would
			// store its messages twice (and schedule its delayed ones
			// again).
			if !t.done {
				m.logf("transaction journal: %s: its batch for %s-%d lay in segments retention has deleted since; not appended again",
					t.key, loc.topic, loc.partition)
			}
			continue
		}
		if entries == nil {
			// Only possible if files were lost by other means: say so
			// loudly rather than append something else.
			m.errorf("transaction journal: %s: the batch for %s-%d is missing from the partition and its messages are not in the journal; %d messages lost",
				t.key, loc.topic, loc.partition, loc.n)
			continue
		}
		if present > 0 {
			// A torn write kept the batch's first records at the end of
			// the partition: append the rest after them.
			m.logf("transaction journal: %s: %d of the %d messages of its batch for %s-%d are in place; appending the others",
				t.key, present, loc.n, loc.topic, loc.partition)
		}
		if _, _, err := l.AppendSync(entries[present:]); err != nil {
			return appended, logs, err
		}
		appended++
	}
	return appended, logs, nil
}

// findBatch looks for the batch loc describes in l at or after
// loc.notBefore and returns how much of it is there: loc.n if a record
// with its first id is followed by its other records, whose data has its
// crc; k (0 < k < loc.n) if the first k records of entries (ids and data)
// end the partition, as a torn write leaves them; 0 otherwise. entries may
// be nil (the puts are not in the journal): then only a whole batch is
// found.
func (m *Manager) findBatch(l *store.Log, loc txBatchLoc, entries []store.Entry) (int, error) {
	off := max(loc.notBefore, l.MinOffset())
	chunk := max(1<<20, m.config().MaxMessageSize+1024)
	var buf []byte
	matching, same := false, false
	var got int
	var crc uint32
	for off < l.MaxOffset() {
		v, err := l.Read(off, chunk)
		if err != nil {
			if errors.Is(err, store.ErrNoData) {
				break
			}
			var below *store.OffsetOutOfRangeError
			if errors.As(err, &below) {
				off = below.Min
				continue
			}
			return 0, err
		}
		buf, err = v.ReadAll(buf[:0])
		v.Release()
		if err != nil {
			return 0, err
		}
		it := message.NewIterator(buf, off, 0)
		for it.Next() {
			r := it.Record()
			if !matching || r.ID == loc.firstID && got > 0 {
				if r.ID != loc.firstID {
					matching = false
					continue
				}
				matching, same, got, crc = true, entries != nil, 0, 0
			}
			same = same && got < len(entries) && r.ID == entries[got].ID && bytes.Equal(r.Data, entries[got].Data)
			crc = crcUpdate(crc, r.Data)
			got++
			if got == loc.n {
				if crc == loc.crc {
					return loc.n, nil
				}
				matching = false
			} else if entries != nil && !same {
				matching = false
			}
		}
		if it.Consumed() == 0 {
			break // a damaged or partial record: nothing more to look at
		}
		off = it.NextOffset()
	}
	if matching && same && got < loc.n {
		return got, nil
	}
	return 0, nil
}
