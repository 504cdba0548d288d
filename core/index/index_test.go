package index

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
)

type doneWaiter chan error

func (w doneWaiter) AppendDone(_ uint64, _, _ int64, err error) { w <- err }

func openLog(t testing.TB, dir string, maxSeg int64) *store.Log {
	t.Helper()
	l, err := store.Open(dir, store.Options{MaxSegmentSize: maxSeg, UnflushThreshold: 1000,
		IDs: store.NewIDWorker(3, time.Now)})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// put appends messages with keys keys[i] ("" none) and returns their
// offsets and ids (read back).
func put(t testing.TB, l *store.Log, keys ...string) {
	t.Helper()
	var ents []store.Entry
	for i, k := range keys {
		m := message.Message{Body: []byte(fmt.Sprintf("body %d of %s", i, k))}
		if k != "" {
			m.Key = []byte(k)
		}
		d := m.AppendData(nil)
		ents = append(ents, store.Entry{Flag: m.Flag(), CRC: message.Checksum(d), Data: d})
	}
	w := make(doneWaiter, 1)
	if err := l.Append(ents, w, 0); err != nil {
		t.Fatal(err)
	}
	if err := <-w; err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
}

func keysOf(t testing.TB, res Result) []string {
	t.Helper()
	var out []string
	for _, r := range res.Records {
		k, _ := RecordKey(r.Flag, r.Data)
		out = append(out, fmt.Sprintf("%d:%s", r.Offset, k))
	}
	return out
}

// openPart opens a log of maxSeg-byte segments in a new directory, closed
// when the test ends, and its index with opts.
func openPart(t testing.TB, maxSeg int64, opts Options) (string, *store.Log, *Part) {
	t.Helper()
	dir := t.TempDir()
	l := openLog(t, dir, maxSeg)
	t.Cleanup(func() { l.Close() })
	return dir, l, openIndex(t, dir, l, opts)
}

// openIndex opens the index in dir of l.
func openIndex(t testing.TB, dir string, l *store.Log, opts Options) *Part {
	t.Helper()
	p, err := Open(dir, l, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// advance indexes all of p's log.
func advance(t testing.TB, p *Part) {
	t.Helper()
	if _, err := p.Advance(1 << 30); err != nil {
		t.Fatal(err)
	}
}

func lookupKey(t testing.TB, p *Part, key string, limit int) Result {
	t.Helper()
	res, err := p.Lookup(Query{Key: []byte(key), Limit: limit, Deadline: time.Now().Add(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Records {
		if k, _ := RecordKey(r.Flag, r.Data); string(k) != key {
			t.Fatalf("lookup %q returned a record with key %q at %d", key, k, r.Offset)
		}
	}
	return res
}

func TestIndexLookupSealedAndOpen(t *testing.T) {
	dir, l, p := openPart(t, 4096, Options{MaxEntries: 16}) // small segments: several seals
	for i := 0; i < 60; i++ {
		put(t, l, fmt.Sprintf("k%d", i%7), "")
	}
	// Before any indexing: all found by the tail scan.
	if res := lookupKey(t, p, "k3", 100); len(res.Records) == 0 || res.Scanned == 0 {
		t.Fatalf("unindexed lookup: %+v", res)
	}
	advance(t, p)
	st := p.Stats()
	if st.Chunks < 3 || st.Lag != 0 {
		t.Fatalf("stats after indexing: %+v", st)
	}
	// 60 puts of k0..k6: k3 at i = 3, 10, ..., 59 → 9 records.
	res := lookupKey(t, p, "k3", 100)
	if len(res.Records) != 9 || res.Scanned != 0 || res.More {
		t.Fatalf("k3: %d records, scanned %d, more %v: %v", len(res.Records), res.Scanned, res.More, keysOf(t, res))
	}
	res = lookupKey(t, p, "k3", 2)
	if len(res.Records) != 2 || !res.More || res.Records[1].Offset <= res.Records[0].Offset {
		t.Fatalf("k3 limit 2: %v more %v", keysOf(t, res), res.More)
	}
	if res := lookupKey(t, p, "absent", 10); len(res.Records) != 0 {
		t.Fatalf("absent key found: %v", keysOf(t, res))
	}
	// By id: every record's id finds exactly it.
	all := lookupKey(t, p, "k5", 100)
	for _, r := range all.Records {
		got, err := p.Lookup(Query{ID: r.ID, ByID: true, Limit: 5})
		if err != nil || len(got.Records) != 1 || got.Records[0].Offset != r.Offset {
			t.Fatalf("id %d: %+v %v", r.ID, got, err)
		}
	}
	// A restart reloads the chunks (Close seals the open one).
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p2 := openIndex(t, dir, l, Options{MaxEntries: 16})
	if p2.Indexed() != l.MaxOffset() {
		t.Fatalf("reopened index at %d, log at %d", p2.Indexed(), l.MaxOffset())
	}
	if res := lookupKey(t, p2, "k3", 100); len(res.Records) != 9 || res.Scanned != 0 {
		t.Fatalf("after reopen: %v scanned %d", keysOf(t, res), res.Scanned)
	}
}

// collidingKeys returns two distinct keys with the same KeyHash (found
// by a search over "c0", "c1", ...).
func collidingKeys(t *testing.T) (string, string) {
	a, b := "c268724", "c698200"
	if KeyHash([]byte(a)) != KeyHash([]byte(b)) {
		t.Fatal("KeyHash changed: find a new colliding pair")
	}
	return a, b
}

func TestIndexCollisions(t *testing.T) {
	a, b := collidingKeys(t)
	_, l, p := openPart(t, 1<<20, Options{MaxEntries: 8})
	put(t, l, a, b, a, b, b)
	advance(t, p)
	put(t, l, a, b) // in the open chunk
	advance(t, p)
	ra, rb := lookupKey(t, p, a, 100), lookupKey(t, p, b, 100)
	if len(ra.Records) != 3 || len(rb.Records) != 4 {
		t.Fatalf("colliding keys %q %q: %v / %v", a, b, keysOf(t, ra), keysOf(t, rb))
	}
	if ra.Candidates < 7 {
		t.Fatalf("candidates %d: the collision was not exercised", ra.Candidates)
	}
}

func TestIndexRetentionDeletesChunks(t *testing.T) {
	dir, l, p := openPart(t, 512, Options{})
	for i := 0; i < 40; i++ {
		put(t, l, fmt.Sprintf("r%d", i))
	}
	advance(t, p)
	before := chunkFiles(t, dir)
	if len(before) < 3 {
		t.Fatalf("chunk files: %v", before)
	}
	n, err := l.DeleteOlderThan(-time.Hour, time.Now())
	if err != nil || n == 0 {
		t.Fatalf("retention: %d %v", n, err)
	}
	advance(t, p)
	after := chunkFiles(t, dir)
	for _, f := range after {
		from, _ := parseChunkName(f)
		h, err := readHeader(filepath.Join(dir, f))
		if err != nil || h.to <= l.MinOffset() || from < l.MinOffset() {
			t.Fatalf("chunk %s left for a deleted segment (min offset %d)", f, l.MinOffset())
		}
	}
	if len(after) >= len(before) {
		t.Fatalf("chunks before %v after %v", before, after)
	}
	if res := lookupKey(t, p, "r0", 10); len(res.Records) != 0 {
		t.Fatalf("a retained-away record found: %v", keysOf(t, res))
	}
	if res := lookupKey(t, p, "r39", 10); len(res.Records) != 1 {
		t.Fatalf("r39: %v", keysOf(t, res))
	}
}

func chunkFiles(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ChunkSuffix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestIndexDamagedChunks damages sealed chunk files every way (bit flips
// everywhere, truncation, removal, garbage): each lookup returns the
// right records or misses, never a wrong one, and Advance rebuilds.
func TestIndexDamagedChunks(t *testing.T) {
	dir, l, p := openPart(t, 1<<20, Options{MaxEntries: 64})
	for i := 0; i < 100; i++ {
		put(t, l, fmt.Sprintf("d%d", i%10))
	}
	advance(t, p)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	files := chunkFiles(t, dir)
	if len(files) < 3 {
		t.Fatalf("chunks: %v", files)
	}
	orig := map[string][]byte{}
	for _, f := range files {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		orig[f] = b
	}
	restore := func() {
		for f, b := range orig {
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(what string, rebuild bool) {
		t.Helper()
		p := openIndex(t, dir, l, Options{MaxEntries: 64})
		if rebuild {
			advance(t, p)
		}
		for k := 0; k < 10; k++ {
			res := lookupKey(t, p, fmt.Sprintf("d%d", k), 100)
			if rebuild && len(res.Records) != 10 {
				t.Fatalf("%s, rebuilt: d%d has %d records: %v", what, k, len(res.Records), res.Notes)
			}
			if len(res.Records) > 10 {
				t.Fatalf("%s: d%d has %d records", what, k, len(res.Records))
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	f := files[1]
	n := len(orig[f])
	for _, pos := range []int{0, 5, 9, 20, 33, 49, 50, 53, 60, headerSize, headerSize + 3, n / 2, n - 5, n - 1} {
		for _, rebuild := range []bool{false, true} {
			restore()
			b := bytes.Clone(orig[f])
			b[pos] ^= 0x10
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("bit flip at %d", pos), rebuild)
		}
	}
	for _, cut := range []int{0, 10, headerSize, n / 2, n - 1} {
		restore()
		if err := os.WriteFile(filepath.Join(dir, f), orig[f][:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("truncated to %d", cut), true)
	}
	restore()
	os.Remove(filepath.Join(dir, files[0]))
	check("first chunk removed", true)
	restore()
	os.WriteFile(filepath.Join(dir, chunkName(7)), []byte("garbage"), 0o644)
	check("garbage chunk", true)
}

// TestIndexTruncatedLog: a log cut back (a replica's truncation) drops
// the chunks past the cut and indexes the new records.
func TestIndexTruncatedLog(t *testing.T) {
	_, l, p := openPart(t, 1<<20, Options{MaxEntries: 8})
	for i := 0; i < 20; i++ {
		put(t, l, fmt.Sprintf("t%d", i))
	}
	advance(t, p)
	r := lookupKey(t, p, "t10", 1)
	if len(r.Records) != 1 {
		t.Fatal("t10 missing")
	}
	if _, err := l.Truncate(r.Records[0].Offset); err != nil {
		t.Fatal(err)
	}
	put(t, l, "new1", "new2")
	advance(t, p)
	if res := lookupKey(t, p, "t15", 10); len(res.Records) != 0 {
		t.Fatalf("a truncated record found: %v", keysOf(t, res))
	}
	for _, k := range []string{"new1", "new2", "t9", "t0"} {
		if res := lookupKey(t, p, k, 10); len(res.Records) != 1 {
			t.Fatalf("%s: %v %v", k, keysOf(t, res), res.Notes)
		}
	}
}

func TestIndexerFollows(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, 1<<20)
	defer l.Close()
	x := NewIndexer(t.Logf)
	x.Interval = 5 * time.Millisecond
	x.Start()
	defer x.Close()
	p, err := x.Add(l, Options{})
	if err != nil {
		t.Fatal(err)
	}
	put(t, l, "a", "b", "c")
	deadline := time.Now().Add(10 * time.Second)
	for p.Indexed() != l.MaxOffset() {
		if time.Now().After(deadline) {
			t.Fatalf("indexer at %d, log at %d", p.Indexed(), l.MaxOffset())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if res := lookupKey(t, p, "b", 10); len(res.Records) != 1 || res.Scanned != 0 {
		t.Fatalf("b: %v scanned %d", keysOf(t, res), res.Scanned)
	}
	x.Remove(l)
	if len(chunkFiles(t, dir)) != 1 {
		t.Fatalf("Remove did not seal the open chunk: %v", chunkFiles(t, dir))
	}
}

func TestChunkFormatRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 7, 100, 5000} {
		ents := make([]entry, n)
		for i := range ents {
			ents[i] = entry{hash: uint32(i*2654435761) ^ uint32(i%3)<<31, rel: uint32(i * 10)}
		}
		b := encodeChunk(chunkHeader{from: 100, to: 100 + int64(n)*10 + 1, seg: 50, minID: 1, maxID: 9}, slicesClone(ents))
		h, err := parseChunk(b)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		for _, e := range ents {
			c, err := candidates(bytes.NewReader(b).ReadAt, h, e.hash)
			if err != nil || !containsOff(c, 100+int64(e.rel)) {
				t.Fatalf("n=%d hash %x: %v %v", n, e.hash, c, err)
			}
		}
	}
}

func slicesClone(e []entry) []entry { return append([]entry(nil), e...) }

func containsOff(c []int64, off int64) bool {
	for _, o := range c {
		if o == off {
			return true
		}
	}
	return false
}

// TestIndexerBoundsOpenChunks: the open chunks of an Indexer's partitions
// hold at most MaxOpenEntries entries after a pass (the largest sealed),
// and lookups find everything across the sealed pieces.
func TestIndexerBoundsOpenChunks(t *testing.T) {
	x := NewIndexer(t.Logf)
	x.MaxOpenEntries = 30
	defer x.Close()
	var parts []*Part
	var logs []*store.Log
	for i := 0; i < 3; i++ {
		dir := t.TempDir()
		l := openLog(t, dir, 1<<20)
		defer l.Close()
		p, err := x.Add(l, Options{})
		if err != nil {
			t.Fatal(err)
		}
		parts, logs = append(parts, p), append(logs, l)
	}
	for round := 0; round < 3; round++ {
		for i, l := range logs {
			for k := 0; k < 4+4*i; k++ {
				put(t, l, fmt.Sprintf("b%d", k%3))
			}
		}
		x.Pass()
		total := 0
		for _, p := range parts {
			total += p.OpenEntries()
		}
		if total > x.MaxOpenEntries {
			t.Fatalf("round %d: %d open entries, bound %d", round, total, x.MaxOpenEntries)
		}
	}
	for i, p := range parts {
		if p.Stats().Chunks == 0 && i == 2 {
			t.Fatal("the largest partition's open chunk was never sealed")
		}
		want := 0
		for k := 0; k < 4+4*i; k++ {
			if k%3 == 1 {
				want++
			}
		}
		if res := lookupKey(t, p, "b1", 100); len(res.Records) != 3*want || res.Scanned != 0 {
			t.Fatalf("partition %d: b1 %d records (want %d), scanned %d", i, len(res.Records), 3*want, res.Scanned)
		}
	}
}

// TestIndexConcurrentLookups: lookups while puts, indexing, seals and
// retention run never return a record of another key, and find every
// record put before they started.
func TestIndexConcurrentLookups(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, 4096)
	defer l.Close()
	x := NewIndexer(t.Logf)
	x.Interval = time.Millisecond
	x.MaxOpenEntries = 40
	x.Start()
	defer x.Close()
	p, err := x.Add(l, Options{MaxEntries: 32})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			put(t, l, fmt.Sprintf("c%d", i%5), "")
		}
	}()
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		k := fmt.Sprintf("c%d", time.Now().Nanosecond()%5)
		before := lookupKey(t, p, k, 1000) // lookupKey checks every key
		after := lookupKey(t, p, k, 1000)
		if len(after.Records) < len(before.Records) {
			t.Fatalf("%s: %d records, then %d", k, len(before.Records), len(after.Records))
		}
	}
	close(stop)
	<-done
}

// TestIndexStopsAndRetries: a chunk that cannot be written stops indexing
// (lookups scan past the indexed mark meanwhile, and find everything);
// after stopRetry it tries again and catches up.
func TestIndexStopsAndRetries(t *testing.T) {
	old := stopRetry
	stopRetry = 50 * time.Millisecond
	defer func() { stopRetry = old }()
	dir, l, p := openPart(t, 1<<20, Options{MaxEntries: 4})
	// The first chunk's temporary file is a directory: its write fails.
	block := filepath.Join(dir, chunkName(0)+tmpSuffix)
	if err := os.Mkdir(block, 0o755); err != nil {
		t.Fatal(err)
	}
	put(t, l, "s0", "s1", "s2", "s3", "s4")
	advance(t, p)
	if p.Indexed() >= l.MaxOffset() {
		t.Fatal("indexing did not stop at the failed seal")
	}
	if res := lookupKey(t, p, "s4", 10); len(res.Records) != 1 || res.Scanned == 0 || len(res.Notes) == 0 {
		t.Fatalf("while stopped: %v scanned %d notes %v", keysOf(t, res), res.Scanned, res.Notes)
	}
	os.RemoveAll(block) // the failed seal may have removed it already
	time.Sleep(2 * stopRetry)
	advance(t, p)
	if p.Indexed() != l.MaxOffset() {
		t.Fatalf("after the retry: indexed %d of %d", p.Indexed(), l.MaxOffset())
	}
	if res := lookupKey(t, p, "s4", 10); len(res.Records) != 1 || res.Scanned != 0 {
		t.Fatalf("after the retry: %v scanned %d", keysOf(t, res), res.Scanned)
	}
}
