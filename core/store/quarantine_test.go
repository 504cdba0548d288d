package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
)

// logBuf collects a log's reports.
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (lb *logBuf) logf(f string, a ...any) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	fmt.Fprintf(&lb.b, f+"\n", a...)
}

func (lb *logBuf) String() string {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.b.String()
}

// buildLastSegment writes n records (one sealed segment of 100 bytes
// first) and returns the dir, the last segment's path and start, and the
// records' absolute offsets.
func buildLastSegment(t *testing.T, n int) (dir, seg string, start int64, offs []int64) {
	dir = filepath.Join(t.TempDir(), "topic-3")
	l := openLog(t, dir, Options{MaxSegmentSize: 100})
	mustAppend(t, l, bytes.Repeat([]byte("s"), 80))
	for i := range n {
		if i == 1 { // reopen with room for the rest in one segment
			require.NoError(t, l.Close())
			l = openLog(t, dir, Options{MaxSegmentSize: 1 << 20})
		}
		_, off := mustAppend(t, l, fmt.Appendf(nil, "acknowledged-%03d", i))
		offs = append(offs, off)
	}
	require.NoError(t, l.Close())
	require.Equal(t, filepath.Join(dir, segmentName(100)), lastSegment(t, dir))
	return dir, lastSegment(t, dir), 100, offs
}

// flip xors mask into byte pos of the file at path.
func flip(t *testing.T, path string, pos int64, mask byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	b[pos] ^= mask
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// TestBitFlipInRecord2 reproduces the report: one flipped bit in record 2
// of the last segment. Truncate mode (the old behaviour) cuts every record
// after it; quarantine mode, the default, refuses to start, names the
// partition, file and offset, leaves the segment as it was and copies the
// damaged record aside.
func TestBitFlipInRecord2(t *testing.T) {
	t.Parallel()
	const n = 131
	dir, seg, start, offs := buildLastSegment(t, n)
	orig, err := os.ReadFile(seg)
	require.NoError(t, err)
	rec2 := offs[1] - start
	for _, tc := range []struct {
		name string
		at   int64 // byte of record 2 to flip
	}{{"data", rec2 + message.HeaderSize + 3}, {"crc", rec2 + 5}, {"length", rec2 + 3}, {"length-high", rec2}} {
		t.Run(tc.name, func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "topic-3")
			require.NoError(t, os.Mkdir(d, 0o755))
			for _, e := range []string{segmentName(0), filepath.Base(seg)} {
				b, err := os.ReadFile(filepath.Join(dir, e))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(d, e), b, 0o644))
			}
			flip(t, filepath.Join(d, filepath.Base(seg)), tc.at, 0x04)
			damaged, err := os.ReadFile(filepath.Join(d, filepath.Base(seg)))
			require.NoError(t, err)

			var lb logBuf
			_, err = Open(d, Options{IDs: &seqIDs{}, MaxSegmentSize: 100, Logf: lb.logf})
			var ce *CorruptError
			require.ErrorAs(t, err, &ce)
			require.ErrorIs(t, err, ErrCorrupt)
			require.Equal(t, "topic-3", ce.Partition)
			require.Len(t, ce.Ranges, 1)
			r := ce.Ranges[0]
			require.Equal(t, filepath.Join(d, filepath.Base(seg)), r.File)
			require.Equal(t, rec2, r.Pos)
			require.Equal(t, offs[2]-start, r.End, "the damaged range ends where record 3 starts")
			require.Equal(t, offs[1], r.Offset)
			for _, s := range []string{"topic-3", filepath.Base(seg), fmt.Sprintf("byte %d", rec2), fmt.Sprintf("offset %d", offs[1]), `recovery = "truncate"`} {
				require.Contains(t, err.Error(), s)
			}
			require.Contains(t, lb.String(), "damaged records followed by valid ones")
			// Nothing was deleted, and the quarantine copy holds the damaged bytes.
			got, err := os.ReadFile(filepath.Join(d, filepath.Base(seg)))
			require.NoError(t, err)
			require.Equal(t, damaged, got)
			q, err := os.ReadFile(r.Quarantine)
			require.NoError(t, err)
			require.Equal(t, filepath.Join(d, QuarantineDir, fmt.Sprintf("%s.%d.bad", filepath.Base(seg), offs[1])), r.Quarantine)
			require.Equal(t, damaged[r.Pos:r.End], q)
			require.NotEqual(t, orig[r.Pos:r.End], q)

			// A second attempt refuses again (and the error still names the copy).
			_, err = Open(d, Options{IDs: &seqIDs{}, MaxSegmentSize: 100})
			require.ErrorAs(t, err, &ce)
			require.Equal(t, r.Quarantine, ce.Ranges[0].Quarantine)

			// Truncate mode: today's behaviour, 129 acknowledged records gone.
			l := openLog(t, d, Options{MaxSegmentSize: 100, Recovery: RecoverTruncate})
			require.Equal(t, offs[1], l.MaxOffset())
			require.Len(t, readAllRecords(t, l, 4096), 2)
		})
	}
}

// TestTornTailAfterDamage: damage followed by valid records and then a
// torn tail refuses to start; a torn tail alone (garbage, zeros, a partial
// record) is cut silently, as before.
func TestTornTailAfterDamage(t *testing.T) {
	t.Parallel()
	dir, seg, start, offs := buildLastSegment(t, 5)
	orig, err := os.ReadFile(seg)
	require.NoError(t, err)
	partial := message.AppendRecord(nil, 99, 0, []byte("a record that never finished"))
	for _, tc := range []struct {
		name   string
		tail   []byte
		refuse bool
	}{
		{"partial", partial[:30], false},
		{"zeros", make([]byte, 300), false},
		{"garbage", bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 50), false},
		{"zero-length-lookalike", append(partial[:30:30], make([]byte, 8)...), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := copyDir(t, dir)
			b := append(bytes.Clone(orig), tc.tail...)
			require.NoError(t, os.WriteFile(filepath.Join(d, filepath.Base(seg)), b, 0o644))
			l := openLog(t, d, Options{MaxSegmentSize: 100})
			require.Equal(t, start+int64(len(orig)), l.MaxOffset())
			require.NoDirExists(t, filepath.Join(d, QuarantineDir))
		})
	}
	// Damage in record 4, valid record 5, then a torn tail.
	d := copyDir(t, dir)
	b := append(bytes.Clone(orig), partial[:30]...)
	b[offs[3]-start+message.HeaderSize] ^= 1
	require.NoError(t, os.WriteFile(filepath.Join(d, filepath.Base(seg)), b, 0o644))
	_, err = Open(d, Options{IDs: &seqIDs{}, MaxSegmentSize: 100})
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	require.Len(t, ce.Ranges, 1)
	require.Equal(t, offs[3], ce.Ranges[0].Offset)
	got, err := os.ReadFile(filepath.Join(d, filepath.Base(seg)))
	require.NoError(t, err)
	require.Equal(t, b, got, "nothing cut, not even the torn tail")
}

// fakeRepairer serves bytes of a pristine copy of the partition.
type fakeRepairer struct {
	mu    sync.Mutex
	data  map[string][]byte // partition -> bytes from offset base
	base  int64
	bad   bool // hand out damaged bytes
	calls []string
}

func (f *fakeRepairer) Bytes(partition string, from, to int64) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("%s %d %d", partition, from, to))
	d, ok := f.data[partition]
	if !ok || from < f.base || to > f.base+int64(len(d)) {
		return nil, false
	}
	b := bytes.Clone(d[from-f.base : to-f.base])
	if f.bad {
		b[len(b)-1] ^= 1
	}
	return b, true
}

func TestRepairLastSegment(t *testing.T) {
	t.Parallel()
	dir, seg, start, offs := buildLastSegment(t, 10)
	orig, err := os.ReadFile(seg)
	require.NoError(t, err)
	damage := func(t *testing.T) string {
		d := filepath.Join(t.TempDir(), "topic-3")
		require.NoError(t, os.Mkdir(d, 0o755))
		for _, e := range []string{segmentName(0), filepath.Base(seg)} {
			b, err := os.ReadFile(filepath.Join(dir, e))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(d, e), b, 0o644))
		}
		p := filepath.Join(d, filepath.Base(seg))
		flip(t, p, offs[1]-start+message.HeaderSize, 0x10) // record 2
		flip(t, p, offs[6]-start+2, 0x40)                  // record 7's length
		return d
	}

	t.Run("repaired", func(t *testing.T) {
		d := damage(t)
		rep := &fakeRepairer{data: map[string][]byte{"topic-3": orig}, base: start}
		var lb logBuf
		l := openLog(t, d, Options{MaxSegmentSize: 100, Repairer: rep, Logf: lb.logf})
		require.Equal(t, start+int64(len(orig)), l.MaxOffset())
		got, err := os.ReadFile(filepath.Join(d, filepath.Base(seg)))
		require.NoError(t, err)
		require.Equal(t, orig, got, "repaired in place")
		require.Len(t, readAllRecords(t, l, 4096), 11)
		require.Equal(t, []string{
			fmt.Sprintf("topic-3 %d %d", offs[1], offs[2]),
			fmt.Sprintf("topic-3 %d %d", offs[6], offs[7]),
		}, rep.calls)
		require.Equal(t, 2, strings.Count(lb.String(), "repaired "))
		// The damaged bytes were still copied aside first.
		q, err := os.ReadFile(filepath.Join(d, QuarantineDir, fmt.Sprintf("%s.%d.bad", filepath.Base(seg), offs[1])))
		require.NoError(t, err)
		require.NotEqual(t, orig[offs[1]-start:offs[2]-start], q)
	})

	t.Run("bad-copy", func(t *testing.T) {
		d := damage(t)
		rep := &fakeRepairer{data: map[string][]byte{"topic-3": orig}, base: start, bad: true}
		var lb logBuf
		_, err := Open(d, Options{IDs: &seqIDs{}, MaxSegmentSize: 100, Repairer: rep, Logf: lb.logf})
		var ce *CorruptError
		require.ErrorAs(t, err, &ce)
		require.Len(t, ce.Ranges, 2)
		require.Contains(t, lb.String(), "repair copy of offsets")
	})

	t.Run("partly-covered", func(t *testing.T) {
		// The repairer holds only the second damaged range (a journal
		// whose prefix was freed): that one is repaired, the first refused.
		d := damage(t)
		from := offs[5] - start
		rep := &fakeRepairer{data: map[string][]byte{"topic-3": orig[from:]}, base: offs[5]}
		_, err := Open(d, Options{IDs: &seqIDs{}, MaxSegmentSize: 100, Repairer: rep})
		var ce *CorruptError
		require.ErrorAs(t, err, &ce)
		require.Len(t, ce.Ranges, 1)
		require.Equal(t, offs[1], ce.Ranges[0].Offset)
		got, err := os.ReadFile(filepath.Join(d, filepath.Base(seg)))
		require.NoError(t, err)
		require.Equal(t, orig[from:], got[from:], "the covered range was repaired")
	})
}

// buildSealed writes 4 segments of 5 records and returns the dir and the
// records' offsets.
func buildSealed(t *testing.T) (string, []int64) {
	dir := filepath.Join(t.TempDir(), "t-0")
	l := openLog(t, dir, Options{MaxSegmentSize: 200})
	var offs []int64
	for i := range 20 {
		_, off := mustAppend(t, l, fmt.Appendf(nil, "record-%02d-%s", i, bytes.Repeat([]byte{'x'}, 10))) // 40 bytes
		offs = append(offs, off)
	}
	require.Equal(t, 4, l.SegmentCount())
	require.NoError(t, l.Close())
	return dir, offs
}

func TestSealedSegmentDamageIsNotServed(t *testing.T) {
	t.Parallel()
	dir, _ := buildSealed(t)
	seg1 := filepath.Join(dir, segmentName(200))
	orig, err := os.ReadFile(seg1)
	require.NoError(t, err)
	flip(t, seg1, 40+message.HeaderSize+2, 0x01) // record 7 (offset 240)
	var lb logBuf
	l := openLog(t, dir, Options{MaxSegmentSize: 200, Logf: lb.logf})
	require.Eventually(t, l.MessageCountComplete, 10*time.Second, time.Millisecond)
	require.Equal(t, int64(19), l.MessageCount())
	require.Contains(t, lb.String(), "sealed segment "+segmentName(200)+" has an invalid record at byte 40")

	// A read from the segment start stops before the damage.
	v, err := l.Read(200, 4096)
	require.NoError(t, err)
	require.Equal(t, 40, v.Len)
	v.Release()
	// A read of the damaged record is refused, naming the next valid offset.
	_, err = l.Read(240, 4096)
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	require.True(t, ce.Read)
	require.True(t, ce.Ranges[0].Next)
	require.Contains(t, err.Error(), "the next valid record is at offset 280")
	// The records after it are served.
	v, err = l.Read(280, 4096)
	require.NoError(t, err)
	require.Equal(t, 120, v.Len)
	v.Release()
	q, err := os.ReadFile(filepath.Join(dir, QuarantineDir, segmentName(200)+".240.bad"))
	require.NoError(t, err)
	require.Len(t, q, 40)
	require.NotEqual(t, orig[40:80], q)
	require.NoError(t, l.Close())

	// With a Repairer that holds the range, the scrub repairs it.
	rep := &fakeRepairer{data: map[string][]byte{"t-0": orig}, base: 200}
	l = openLog(t, dir, Options{MaxSegmentSize: 200, Repairer: rep})
	require.Eventually(t, l.MessageCountComplete, 10*time.Second, time.Millisecond)
	require.Equal(t, int64(20), l.MessageCount())
	require.Len(t, readAllRecords(t, l, 4096), 20)
	got, err := os.ReadFile(seg1)
	require.NoError(t, err)
	require.Equal(t, orig, got)
}

// TestUnverifiedSealedRead checks Read before the scrub has reached a
// segment: it verifies what it returns.
func TestUnverifiedSealedRead(t *testing.T) {
	t.Parallel()
	dir, _ := buildSealed(t)
	flip(t, filepath.Join(dir, segmentName(200)), 80+message.HeaderSize, 0x01) // record at 280
	l := openLog(t, dir, Options{MaxSegmentSize: 200})
	require.Eventually(t, l.MessageCountComplete, 10*time.Second, time.Millisecond)
	l.segMu.RLock()
	seg := l.segs[1]
	l.segMu.RUnlock()
	seg.integ.unverified.Store(true) // as before the scrub

	v, err := l.Read(200, 4096)
	require.NoError(t, err)
	require.Equal(t, 80, v.Len, "clipped at the first invalid record")
	v.Release()
	_, err = l.Read(280, 4096)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), "not verified yet")
	_, err = l.Read(205, 4096) // not a record start
	require.ErrorIs(t, err, ErrCorrupt)
	v, err = l.Read(320, 4096)
	require.NoError(t, err)
	require.Equal(t, 80, v.Len)
	v.Release()
}

// TestRandomBitFlips flips seeded random bits in random segments and
// checks, after each reopen, that no read returns a record whose checksum
// does not match (reading on from every refusal's next valid offset), and
// that every refusal at Open is a *CorruptError with quarantine copies.
func TestRandomBitFlips(t *testing.T) {
	t.Parallel()
	src, offs := buildSealed(t)
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 8))
		dir := filepath.Join(t.TempDir(), "t-0")
		require.NoError(t, os.Mkdir(dir, 0o755))
		var files []string
		ents, err := os.ReadDir(src)
		require.NoError(t, err)
		for _, e := range ents {
			if !e.Type().IsRegular() {
				continue
			}
			b, err := os.ReadFile(filepath.Join(src, e.Name()))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644))
			files = append(files, filepath.Join(dir, e.Name()))
		}
		for range 1 + rng.IntN(3) {
			f := files[rng.IntN(len(files))]
			flip(t, f, rng.Int64N(fileSize(t, f)), 1<<rng.IntN(8))
		}
		l, err := Open(dir, Options{IDs: &seqIDs{}, MaxSegmentSize: 200, Logf: func(string, ...any) {}})
		if err != nil {
			var ce *CorruptError
			require.ErrorAs(t, err, &ce, "seed %d", seed)
			for _, r := range ce.Ranges {
				q, err := os.ReadFile(r.Quarantine)
				require.NoError(t, err, "seed %d", seed)
				require.Equal(t, r.End-r.Pos, int64(len(q)), "seed %d", seed)
			}
			continue
		}
		// Read while the scrub may still run, then again after it.
		for pass := range 2 {
			if pass == 1 {
				require.Eventually(t, l.MessageCountComplete, 10*time.Second, time.Millisecond)
			}
			checkServedRecords(t, l, offs, seed)
		}
		require.NoError(t, l.Close())
	}
}

// checkServedRecords reads l from every known record offset and requires
// that whatever is served parses as valid records.
func checkServedRecords(t *testing.T, l *Log, offs []int64, seed uint64) {
	t.Helper()
	for _, off := range offs {
		if off >= l.MaxOffset() {
			break
		}
		v, err := l.Read(off, 4096)
		if err != nil {
			require.ErrorIs(t, err, ErrCorrupt, "seed %d offset %d", seed, off)
			continue
		}
		b, err := v.ReadAll(nil)
		v.Release()
		require.NoError(t, err)
		it := message.NewIterator(b, off, 0)
		for it.Next() {
		}
		if it.Err() != nil && !errors.Is(it.Err(), message.ErrShortRecord) {
			// Only an undetectable id/flag flip may pass, never a bad crc.
			require.NoError(t, it.Err(), "seed %d: a corrupt record was served at %d", seed, it.NextOffset())
		}
	}
}
