package store

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzJournalPayloads feeds arbitrary bytes to the journal's record
// parsers (the header, data, checkpoint, group and register payloads, as
// replay reads them after a crash or a bit flip): they never panic, and
// whatever parses encodes back to what parses the same.
func FuzzJournalPayloads(f *testing.F) {
	f.Add(appendDataPayload(nil, "t-0", 0, 20, []byte("record bytes")))
	f.Add(appendDataPayload(nil, "orders-17", 4096, 8192, nil))
	f.Add(appendCheckpointPayload(nil, checkpoint{from: 64 << 20, ends: map[string]int64{"t-0": 100, "t-1": 0}}))
	f.Add(appendCheckpointPayload(nil, checkpoint{from: 0, ends: map[string]int64{}}))
	// With the last-id table (restart.go), and a truncated one.
	f.Add(appendCheckpointPayload(nil, checkpoint{from: 1 << 20, ends: map[string]int64{"t-0": 100, "orders-3": 4096},
		lastIDs: map[string]int64{"t-0": 7, "orders-3": 1 << 40}}))
	f.Add(appendCheckpointPayload(nil, checkpoint{from: 0, ends: map[string]int64{}, lastIDs: map[string]int64{}}))
	withIDs := appendCheckpointPayload(nil, checkpoint{from: 8, ends: map[string]int64{"t-1": 0}, lastIDs: map[string]int64{"t-1": 0}})
	f.Add(withIDs[:len(withIDs)-3])
	f.Add(appendCheckpointPayload(nil, checkpoint{from: 16, ends: map[string]int64{"t-0": 5}, lastIDs: map[string]int64{"t-0": 1},
		closed: map[string]closedEnd{"t-1": {end: 300, lastID: 9}, "orders-0": {}}}))
	f.Add(appendGroupPayload(nil, groupRecord{end: 4096, records: 3})) // atomic.go
	f.Add(appendGroupPayload(nil, groupRecord{end: 0, records: 0}))
	f.Add(appendRegisterPayload(nil, registerRecord{name: "t-0", end: 4096, lastID: 77}))
	f.Add(appendRegisterPayload(nil, registerRecord{name: "orders-17", end: 0, lastID: 0}))
	reg := appendRegisterPayload(nil, registerRecord{name: "t-1", end: 1 << 40, lastID: 1 << 50})
	f.Add(reg[:len(reg)-1])
	f.Add(append(bytes.Clone(reg), 0))
	f.Add(appendCheckpointPayload(nil, checkpoint{from: 32, ends: map[string]int64{"t-0": 9}, lastIDs: map[string]int64{"t-0": 2},
		closed: map[string]closedEnd{}, registers: true}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add(make([]byte, jHeaderSize))
	// Headers with durable marks (bytes 21..24): at the record, far
	// behind it, the largest field, and one past the journal's start.
	for _, hm := range [][2]int64{{4096, 4096}, {1 << 30, 1 << 20}, {64, 0}, {1 << 40, -1}, {100, 48}} {
		rec := make([]byte, jHeaderSize+3)
		sealJRecord(rec, hm[0], 2, hm[1], recSkip)
		f.Add(rec)
	}
	big := make([]byte, jHeaderSize)
	sealJRecord(big, 10, 1, -1, recData)
	big[21], big[22], big[23] = 0xff, 0xff, 0xff
	f.Add(big)
	f.Fuzz(func(t *testing.T, p []byte) {
		if d, err := parseDataPayload(p); err == nil {
			again, err := parseDataPayload(appendDataPayload(nil, d.name, d.segStart, d.offset, d.bytes))
			if err != nil || again.name != d.name || again.segStart != d.segStart || again.offset != d.offset || !bytes.Equal(again.bytes, d.bytes) {
				t.Fatalf("data payload does not round-trip: %+v -> %+v, %v", d, again, err)
			}
		}
		if c, err := parseCheckpointPayload(p); err == nil {
			again, err := parseCheckpointPayload(appendCheckpointPayload(nil, c))
			if err != nil || again.from != c.from || len(again.ends) != len(c.ends) ||
				(again.lastIDs == nil) != (c.lastIDs == nil) || len(again.lastIDs) != len(c.lastIDs) || again.registers != c.registers {
				t.Fatalf("checkpoint does not round-trip: %+v -> %+v, %v", c, again, err)
			}
			for k, v := range c.ends {
				if again.ends[k] != v {
					t.Fatalf("checkpoint end of %q: %d -> %d", k, v, again.ends[k])
				}
			}
			if len(again.closed) != len(c.closed) {
				t.Fatalf("checkpoint closed table does not round-trip: %+v -> %+v", c.closed, again.closed)
			}
			for k, v := range c.closed {
				if again.closed[k] != v {
					t.Fatalf("checkpoint closed end of %q: %+v -> %+v", k, v, again.closed[k])
				}
			}
			for k, v := range c.lastIDs {
				if again.lastIDs[k] != v {
					t.Fatalf("checkpoint last id of %q: %d -> %d", k, v, again.lastIDs[k])
				}
			}
		}
		if r, err := parseRegisterPayload(p); err == nil {
			if !registerShaped(p) {
				t.Fatalf("register payload %x parses but does not have the shape", p)
			}
			again, err := parseRegisterPayload(appendRegisterPayload(nil, r))
			if err != nil || again != r {
				t.Fatalf("register record does not round-trip: %+v -> %+v, %v", r, again, err)
			}
		}
		if d, err := parseDataPayload(p); err == nil && len(d.bytes) > 0 && registerShaped(p) {
			t.Fatalf("a data payload holding bytes has a register payload's shape: %x", p)
		}
		if g, err := parseGroupPayload(p); err == nil {
			again, err := parseGroupPayload(appendGroupPayload(nil, g))
			if err != nil || again != g {
				t.Fatalf("group record does not round-trip: %+v -> %+v, %v", g, again, err)
			}
		}
		if len(p) >= jHeaderSize {
			h := parseJHeader(p)
			_ = verifyJRecord(p)
			rec := append(make([]byte, jHeaderSize), p[jHeaderSize:]...)
			sealJRecord(rec, h.pos, h.epoch, h.mark(), h.typ)
			if !verifyJRecord(rec) {
				t.Fatal("a sealed record does not verify")
			}
			if again := parseJHeader(rec); again.mark() != h.mark() || again.mark() >= 0 && again.mark() > again.pos {
				t.Fatalf("durable mark %d (field %d) at %d does not round-trip: %d", h.mark(), h.markv, h.pos, again.mark())
			}
		}
	})
}

// FuzzJournalScan scans and judges (scanJournal, checkDamage) a journal
// whose first file holds arbitrary bytes, seeded with a real journal,
// whole and with flipped bits, next to the segments it describes: it
// never panics, a refusal is a *JournalCorruptError, and every data
// record to replay lies after the replay start and outside the damage.
func FuzzJournalScan(f *testing.F) {
	opts := JournalOptions{FileSize: 64 << 10, CheckpointBytes: 1 << 40, CheckpointInterval: time.Hour,
		hooks: &journalHooks{smallFiles: true}}
	src := f.TempDir()
	j, err := OpenJournal(src, opts)
	require.NoError(f, err)
	l, err := Open(filepath.Join(src, partName(0)), Options{IDs: &seqIDs{}, MaxSegmentSize: 1 << 10, Journal: j})
	require.NoError(f, err)
	l2, err := Open(filepath.Join(src, partName(1)), Options{IDs: &seqIDs{}, MaxSegmentSize: 1 << 10, Journal: j})
	require.NoError(f, err)
	for i := range 12 {
		_, _, err := l.AppendSync([]Entry{entryf("fuzz record %d %s", i, bytes.Repeat([]byte{'x'}, i*7))})
		require.NoError(f, err)
		if i%4 == 3 { // an atomic group of both partitions (atomic.go)
			w := newAtomicWaiter(2)
			require.NoError(f, j.AppendAtomic([]AtomicPart{
				{Log: l, Entries: groupEntries(i, 0, 2), Token: 0},
				{Log: l2, Entries: groupEntries(i, 1, 1), Token: 1},
			}, w))
			for _, r := range w.wait(f) {
				require.NoError(f, r.err)
			}
		}
	}
	snap := filepath.Join(f.TempDir(), "snap")
	// The copy races with the spare journal files' pre-write (a .new file
	// renamed away while it is listed): copy again until it holds still.
	for attempt := 0; ; attempt++ {
		require.NoError(f, os.RemoveAll(snap))
		err := os.CopyFS(snap, os.DirFS(src))
		if err == nil {
			break
		}
		require.Less(f, attempt, 20, "copying the live data directory: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(f, l.Close())
	require.NoError(f, l2.Close())
	require.NoError(f, j.Close())
	journal, err := os.ReadFile(filepath.Join(snap, JournalDirName, journalName(0)))
	require.NoError(f, err)
	used := len(journal)
	for used > 0 && journal[used-1] == 0 {
		used--
	}
	seed := journal[:used]
	f.Add(seed)
	for _, at := range []int{1, 6, 13, 30, used / 2, used - 40, used - 1} {
		b := bytes.Clone(seed)
		b[at] ^= 0x10
		f.Add(b)
	}
	// Flips in the register records (each partition's, before its first
	// data record; t-1's first data is a group's part), and in the data
	// records right after them.
	regs := 0
	recs := walkJournal(f, filepath.Join(snap, JournalDirName))
	for i, r := range recs {
		if r.typ != recRegister {
			continue
		}
		regs++
		n := int64(len(r.name))
		for _, at := range []int64{1, 6, 13, 19, 20, jHeaderSize + 1, jHeaderSize + 2, jHeaderSize + 2 + n + 7, r.end - r.pos - 1} {
			b := bytes.Clone(seed)
			b[r.pos+at] ^= 0x04
			f.Add(b)
		}
		if i+1 < len(recs) {
			b := bytes.Clone(seed)
			b[r.pos+20] ^= 0x01 // both: the register and the next record
			b[recs[i+1].pos+jHeaderSize+3] ^= 0x01
			f.Add(b)
		}
	}
	require.Equal(f, 2, regs, "the seed journal holds both partitions' register records")
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > int(opts.FileSize) {
			return
		}
		jdir := t.TempDir()
		file := append(bytes.Clone(data), make([]byte, int(opts.FileSize)-len(data))...)
		require.NoError(t, os.WriteFile(filepath.Join(jdir, journalName(0)), file, 0o644))
		files, err := listJournalFiles(jdir, t.Logf)
		require.NoError(t, err)
		defer closeJFiles(files)
		sc, err := scanJournal(files)
		require.NoError(t, err)
		j := &Journal{dir: jdir, dataDir: snap, logf: func(string, ...any) {}}
		for _, mode := range []RecoveryMode{RecoverQuarantine, RecoverTruncate} {
			j.recovery = mode
			s := sc
			s.keep, s.cuts = nil, nil
			if err := j.checkDamage(&s, files); err != nil {
				var je *JournalCorruptError
				require.ErrorAs(t, err, &je)
				continue
			}
			for _, r := range s.refs {
				require.True(t, s.last == nil || r.pos >= s.last.from)
				for _, h := range s.holes {
					require.True(t, r.pos < h.pos || r.pos >= h.end, "a replayed record at %d inside damage %d..%d", r.pos, h.pos, h.end)
				}
			}
		}
		// And as recovery judges it, telling a torn tail (past every
		// durable mark) from damage: a refusal is a *JournalCorruptError;
		// a journal taken to end at a torn tail ends no later, and
		// replays nothing from there on.
		j.recovery = RecoverQuarantine
		s := sc
		s.keep, s.cuts = nil, nil
		if err := j.judgeDamage(&s, files); err != nil {
			var je *JournalCorruptError
			require.ErrorAs(t, err, &je)
			return
		}
		require.LessOrEqual(t, s.end, sc.end)
		for _, r := range s.refs {
			require.Less(t, r.pos, s.end)
		}
	})
}
