package e2e

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/brokertest"
)

// jrecord is a journal record as this test reads it from the files
// (docs/storage.md, "Record format"): 24-byte header [crc32c][payload
// length][journal position][epoch][type][u24 durable mark], and for data
// records the payload [u16 n][partition name][u64 segment start][u64
// partition offset][bytes].
type jrecord struct {
	file     string // journal file path
	at       int64  // byte position of the record in the file
	pos      int64  // journal position
	mark     int64  // the durable mark it carries (-1: none)
	size     int64  // header and payload
	typ      byte
	part     string // data records: the partition directory's name
	segStart int64  // data records
	off, end int64  // data records: the partition offsets of the bytes
	data     []byte // data records: the bytes
}

// journalRecords walks the valid journal of dataDir from its first file
// to the first record that does not verify.
func journalRecords(t *testing.T, dataDir string) []jrecord {
	t.Helper()
	jdir := filepath.Join(dataDir, "journal")
	names, err := filepath.Glob(filepath.Join(jdir, "[0-9]*"))
	require.NoError(t, err)
	slices.Sort(names)
	require.NotEmpty(t, names)
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	var out []jrecord
	var epoch uint32
	for i, name := range names {
		start, err := strconv.ParseInt(filepath.Base(name), 10, 64)
		require.NoError(t, err)
		b, err := os.ReadFile(name)
		require.NoError(t, err)
		next, bad := false, false
		at := int64(0)
		for at+24 <= int64(len(b)) {
			h := b[at:]
			n := int64(binary.BigEndian.Uint32(h[4:]))
			if int64(binary.BigEndian.Uint64(h[8:])) != start+at || binary.BigEndian.Uint32(h[16:]) < epoch ||
				at+24+n > int64(len(b)) || crc32.Checksum(h[4:24+n], castagnoli) != binary.BigEndian.Uint32(h) {
				bad = true
				break
			}
			epoch = binary.BigEndian.Uint32(h[16:])
			r := jrecord{file: name, at: at, pos: start + at, mark: -1, size: 24 + n, typ: h[20]}
			// 0: no mark; 2^24-1: a mark too far back for the field,
			// no position (core/store markCapped).
			if v := int64(h[21])<<16 | int64(h[22])<<8 | int64(h[23]); v > 0 && v < 1<<24-1 {
				r.mark = max(r.pos-16*(v-1), 0)
			}
			if r.typ == 1 {
				p := h[24 : 24+n]
				k := int(binary.BigEndian.Uint16(p))
				r.part = string(p[2 : 2+k])
				r.segStart = int64(binary.BigEndian.Uint64(p[2+k:]))
				r.off = int64(binary.BigEndian.Uint64(p[10+k:]))
				r.end = r.off + n - int64(2+k+16)
				r.data = p[18+k:]
			}
			out = append(out, r)
			if r.typ == 3 { // skip: the rest of the file is unused
				next = true
				break
			}
			at += r.size
			next = at == int64(len(b))
		}
		// Less than a record header left: the journal went on in the
		// next file without a skip record (core/store nextFile).
		if !bad && int64(len(b))-at < 24 {
			next = true
		}
		if !next || i+1 == len(names) {
			break
		}
	}
	return out
}

// flipAt xors mask into byte at of the file at path (flipBit without
// reading the whole file).
func flipAt(t *testing.T, path string, at int64, mask byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	var b [1]byte
	_, err = f.ReadAt(b[:], at)
	require.NoError(t, err)
	b[0] ^= mask
	_, err = f.WriteAt(b[:], at)
	require.NoError(t, err)
}

// TestJournalBitFlips runs the real metaq-server under load from 4
// producers over 8 partitions, kills it (-9), restarts it (recovery writes
// a checkpoint), loads and kills it again, so that its journal holds
// records before the last checkpoint and a replay range after it. Then it
// flips bits in copies of that data directory's journal and restarts the
// binary on each:
//   - a data record with valid records after it, the segments intact (a
//     kill -9 leaves them): the broker starts and serves exactly the
//     acknowledged messages;
//   - the same with the record's bytes zeroed in its segment too: the
//     broker refuses to start (exit status non-zero), naming the journal
//     file, the byte position and the partition range, and changes
//     nothing; recovery = "truncate" starts, cuts that partition there and
//     keeps every other acknowledged message;
//   - seeded random flips in any record up to the last one holding an
//     acknowledged message (every acknowledged round lies under a durable
//     mark written before its acknowledgement, so such a flip is damage,
//     never a torn tail): the broker starts and serves every acknowledged
//     message, or refuses naming the journal file; a record with a bad crc
//     is never served (readLog reads everything back through the
//     iterator's crc check).
func TestJournalBitFlips(t *testing.T) {
	t.Parallel()
	const (
		topic     = "jflip"
		parts     = 8
		producers = 4
	)
	base := t.TempDir()
	orig := filepath.Join(base, "orig")
	writeCfg := func(name, extra string) string {
		p := filepath.Join(base, name)
		require.NoError(t, os.WriteFile(p, []byte(fmt.Sprintf(`broker_id = 7
host = "127.0.0.1"
port = 8123
data_dir = "unused: --data-dir"
unflush_threshold = 0
max_segment_size = 65536
max_message_size = 65536
max_transfer_size = 131072
journal_file_size = 1048576
journal_checkpoint_bytes = 1073741824
journal_checkpoint_interval = 3600000
%s
[[topic]]
name = %q
num_partitions = %d
`, extra, topic, parts)), 0o644))
		return p
	}
	cfg := writeCfg("server.toml", "")
	truncCfg := writeCfg("truncate.toml", "recovery = \"truncate\"")

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var acks []ack
	seqs := make([]int, producers)
	for round := range 2 {
		srv := startServer(t, cfg, orig)
		if round > 0 {
			require.Empty(t, readLog(t, srv.Addr, topic, parts, acks).missing)
		}
		got, sent := loadRound(t, srv, topic, parts, producers, round, seqs, seed, 400*time.Millisecond)
		t.Logf("round %d: %d sent, %d acknowledged", round, sent, len(got))
		acks = append(acks, got...)
	}
	require.NotEmpty(t, acks)
	recs := journalRecords(t, orig)
	lastCk := -1
	for i, r := range recs {
		if r.typ == 2 {
			lastCk = i
		}
	}
	require.Positive(t, lastCk, "the journal holds records before the second run's checkpoint")
	require.Greater(t, len(recs)-lastCk, 2, "the second run journaled records")
	t.Logf("journal: %d records, the last checkpoint is record %d", len(recs), lastCk)

	// A data record of the replay range whose partition has a later one,
	// neither the first nor the last record of its journal file: a chunk
	// that does not fit in a file goes on in the next one, so those can
	// hold part of a message, which repaired-from-segment cannot find
	// whole in the segment.
	victim := -1
	for i := lastCk + 1; i < len(recs)-1 && victim < 0; i++ {
		if r := recs[i]; r.typ == 1 && r.end > r.off && recs[i-1].file == r.file && recs[i+1].file == r.file &&
			slices.ContainsFunc(recs[i+1:], func(n jrecord) bool { return n.typ == 1 && n.part == r.part }) {
			victim = i
		}
	}
	require.GreaterOrEqual(t, victim, 0)
	v := recs[victim]

	bin := brokertest.ServerBinary(t)
	launch := func(t *testing.T, config, dir string) (*brokertest.Server, error) {
		p, err := brokertest.Launch(bin, nil, "--config", config, "--port", "0", "--data-dir", dir, "--host", "127.0.0.1")
		if p != nil {
			t.Cleanup(p.Kill)
		}
		return p, err
	}
	fresh := func(t *testing.T) (string, func(jrecord) string) {
		d := filepath.Join(t.TempDir(), "data")
		copyTree(t, orig, d)
		return d, func(r jrecord) string { return filepath.Join(d, "journal", filepath.Base(r.file)) }
	}
	refused := func(t *testing.T, p *brokertest.Server, err error, want ...string) string {
		require.Error(t, err, "the broker must refuse to start")
		<-p.Exited
		require.Error(t, p.Err, "exit status must be non-zero")
		logs := p.Logs.String()
		for _, s := range want {
			require.Contains(t, logs, s)
		}
		return logs
	}

	t.Run("repaired-from-segment", func(t *testing.T) {
		dir, jpath := fresh(t)
		// After the kill -9 the records since the checkpoint were only in
		// the broker's memory tails and the journal. A checkpoint that
		// crashed after writing the segments but before its record leaves
		// them in the segment files too: model that for the victim's
		// partition, then damage the journal's copy.
		for _, r := range recs[lastCk+1 : victim+1] {
			if r.typ != 1 || r.part != v.part {
				continue
			}
			seg := filepath.Join(dir, r.part, fmt.Sprintf("%020d.meta", r.segStart))
			f, err := os.OpenFile(seg, os.O_RDWR|os.O_CREATE, 0o644)
			require.NoError(t, err)
			_, err = f.WriteAt(r.data, r.off-r.segStart)
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}
		flipAt(t, jpath(v), v.at+v.size-2, 0x04)
		p, err := launch(t, cfg, dir)
		require.NoError(t, err)
		require.Empty(t, readLog(t, p.Addr, topic, parts, acks).missing, "every acknowledged message is served")
		require.Contains(t, p.Logs.String(), fmt.Sprintf("damaged record at file %s bytes %d..", jpath(v), v.at))
		require.Contains(t, p.Logs.String(), "nothing lost")
	})

	t.Run("lost-in-segment-too", func(t *testing.T) {
		dir, jpath := fresh(t)
		flipAt(t, jpath(v), v.at+v.size-2, 0x04)
		seg := filepath.Join(dir, v.part, fmt.Sprintf("%020d.meta", v.segStart))
		f, err := os.OpenFile(seg, os.O_RDWR, 0)
		require.NoError(t, err)
		_, err = f.WriteAt(make([]byte, v.end-v.off), v.off-v.segStart)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		jBefore, err := os.ReadFile(jpath(v))
		require.NoError(t, err)
		segBefore, err := os.ReadFile(seg)
		require.NoError(t, err)

		p, err := launch(t, cfg, dir)
		refused(t, p, err, jpath(v), fmt.Sprintf("bytes %d..%d", v.at, v.at+v.size),
			fmt.Sprintf("partition %q offsets %d..%d", v.part, v.off, v.end), `recovery = "truncate"`, "Not starting")
		jAfter, err := os.ReadFile(jpath(v))
		require.NoError(t, err)
		segAfter, err := os.ReadFile(seg)
		require.NoError(t, err)
		require.Equal(t, jBefore, jAfter, "a refused start leaves the journal as it was")
		require.Equal(t, segBefore, segAfter, "a refused start leaves the segment as it was")

		p, err = launch(t, truncCfg, dir)
		require.NoError(t, err)
		require.Contains(t, p.Logs.String(), fmt.Sprintf("cutting partition %q at offset %d", v.part, v.off))
		missing := readLog(t, p.Addr, topic, parts, acks).missing
		for _, a := range missing {
			require.Equal(t, v.part, topic+"-"+strconv.Itoa(int(a.Partition)), "only the cut partition loses messages: %+v", a)
			require.GreaterOrEqual(t, a.Offset, v.off, "only messages from the cut on are lost: %+v", a)
		}
		t.Logf("truncate: %d acknowledged messages of %s from offset %d dropped", len(missing), v.part, v.off)
	})

	t.Run("random", func(t *testing.T) {
		// Any record up to the last one holding an acknowledged message:
		// before a round is acknowledged, a record written after its
		// fdatasync carries a durable mark past it (a later round's or a
		// mark record's), so a flip in acknowledged data is damage, never
		// taken for a torn tail (docs/storage.md, "Mark records"). Past
		// it lie only rounds no producer saw acknowledged and the mark
		// record covering the last acknowledged one: a flip there too
		// (its only copy of that mark) could leave the acknowledged
		// rounds before it past every mark.
		ackedEnd := int64(-1)
		for _, r := range recs {
			if r.typ == 1 && slices.ContainsFunc(acks, func(a ack) bool {
				return r.part == topic+"-"+strconv.Itoa(int(a.Partition)) && a.Offset >= r.off && a.Offset < r.end
			}) {
				ackedEnd = max(ackedEnd, r.pos+r.size)
			}
		}
		flippable := slices.DeleteFunc(slices.Clone(recs), func(r jrecord) bool { return r.pos >= ackedEnd })
		require.NotEmpty(t, flippable)
		maxMark := int64(-1)
		for _, r := range recs {
			maxMark = max(maxMark, r.mark)
		}
		// (A mark is stored rounded down by less than 16 bytes.)
		require.Less(t, ackedEnd, maxMark+16, "the last acknowledged record lies under a durable mark")
		t.Logf("%d of %d records hold or precede acknowledged messages (up to %d; the last durable mark is %d)",
			len(flippable), len(recs), ackedEnd, maxMark)
		served, refusals := 0, 0
		for s := range uint64(6) {
			rng := rand.New(rand.NewPCG(seed, s))
			dir, jpath := fresh(t)
			files := map[string]bool{}
			for range 1 + rng.IntN(3) {
				r := flippable[rng.IntN(len(flippable))]
				flipAt(t, jpath(r), r.at+rng.Int64N(r.size), 1<<rng.IntN(8))
				files[jpath(r)] = true
			}
			p, err := launch(t, cfg, dir)
			if err != nil {
				<-p.Exited
				require.Error(t, p.Err, "flips %d: exit status", s)
				logs := p.Logs.String()
				named := false
				for f := range files {
					named = named || strings.Contains(logs, f)
				}
				require.True(t, named, "flips %d: the refusal names a flipped journal file:\n%s", s, p.Logs.Tail(2<<10))
				refusals++
				continue
			}
			require.Empty(t, readLog(t, p.Addr, topic, parts, acks).missing, "flips %d: every acknowledged message is served", s)
			p.Kill()
			served++
		}
		t.Logf("random journal flips: %d started and served everything, %d refused", served, refusals)
	})
}
