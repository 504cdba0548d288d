package e2e

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// msgKey names one message a producer sent: round, producer and a sequence
// number that rises in send order within the producer.
type msgKey struct {
	Round, Prod, Seq int
}

// ---------------------------------------------------------------------------
// Self-describing bodies
// ---------------------------------------------------------------------------

// A body is "e2e r=RR p=PP s=SSSSSSS n=NNNNN|<n padding letters>|<crc32 hex>",
// where the crc covers everything before the last '|'. A body can therefore
// be checked and attributed on its own. bodyRE is the format; parseBody
// checks it by hand (TestParseBodyFormat holds the two together): the
// regexp under -race cost most of readLog's CPU, and readLog parses every
// record of the log after every restart.
var bodyRE = regexp.MustCompile(`^e2e r=(\d{2}) p=(\d{2}) s=(\d{7}) n=(\d{5})\|([a-z]*)\|([0-9a-f]{8})$`)

func makeBody(rng *rand.Rand, k msgKey, padLen int) []byte {
	b := fmt.Appendf(nil, "e2e r=%02d p=%02d s=%07d n=%05d|", k.Round, k.Prod, k.Seq, padLen)
	// Random letters, 13 from each 64-bit draw (26^13 < 2^64): one draw
	// per letter was a good part of the producers' CPU under -race.
	for i := 0; i < padLen; {
		r := rng.Uint64()
		for j := 0; j < 13 && i < padLen; j, i = j+1, i+1 {
			b = append(b, byte('a'+r%26))
			r /= 26
		}
	}
	sum := crc32.ChecksumIEEE(b)
	return fmt.Appendf(b, "|%08x", sum)
}

// bodyHeaderLen is the length of a body's "e2e r=RR p=PP s=SSSSSSS
// n=NNNNN|"; bodyTrailerLen of its "|<crc32 hex>".
const (
	bodyHeaderLen  = len("e2e r=00 p=00 s=0000000 n=00000|")
	bodyTrailerLen = len("|00000000")
)

// bodyDigits parses b[at:at+n], which must be n decimal digits.
func bodyDigits(b []byte, at, n int) (int, bool) {
	v := 0
	for _, c := range b[at : at+n] {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// matchBody is bodyRE.FindSubmatch by hand: the key's numbers, the
// padding and the crc's hex digits, or ok false.
func matchBody(b []byte) (r, p, s, n int, pad, sum []byte, ok bool) {
	if len(b) < bodyHeaderLen+bodyTrailerLen {
		return
	}
	for i, c := range []byte("e2e r=00 p=00 s=0000000 n=00000|") {
		if c != '0' && b[i] != c {
			return
		}
	}
	var okR, okP, okS, okN bool
	r, okR = bodyDigits(b, 6, 2)
	p, okP = bodyDigits(b, 11, 2)
	s, okS = bodyDigits(b, 16, 7)
	n, okN = bodyDigits(b, 26, 5)
	if !okR || !okP || !okS || !okN {
		return
	}
	// The padding is [a-z]*, which holds no '|': the '|' before the crc is
	// the one bodyTrailerLen from the end.
	pad, sum = b[bodyHeaderLen:len(b)-bodyTrailerLen], b[len(b)-bodyTrailerLen:]
	for _, c := range pad {
		if c < 'a' || c > 'z' {
			return
		}
	}
	if sum[0] != '|' {
		return
	}
	sum = sum[1:]
	for _, c := range sum {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return
		}
	}
	return r, p, s, n, pad, sum, true
}

// parseBody checks a body's own checksum and returns its key.
func parseBody(b []byte) (msgKey, error) {
	r, p, s, n, pad, sum, ok := matchBody(b)
	if !ok {
		return msgKey{}, fmt.Errorf("body %.80q is not an e2e body", b)
	}
	if n != len(pad) {
		return msgKey{}, fmt.Errorf("body %.80q: padding is %d bytes, header says %d", b, len(pad), n)
	}
	want, _ := strconv.ParseUint(string(sum), 16, 32)
	if got := crc32.ChecksumIEEE(b[:len(b)-9]); uint64(got) != want {
		return msgKey{}, fmt.Errorf("body %.80q: content checksum %08x, body says %08x", b, got, want)
	}
	return msgKey{r, p, s}, nil
}

// ---------------------------------------------------------------------------
// Producers
// ---------------------------------------------------------------------------

// ack is an acknowledged message: what the broker promised.
type ack struct {
	Key       msgKey
	ID        int64
	Partition int32
	Offset    int64
	CRC       uint32    // crc32 of the whole body
	At        time.Time // when the ack was read
}

// sent is a request waiting for its reply.
type sent struct {
	part   int32
	keys   []msgKey
	sizes  []int
	crcs   []uint32
	isMPut bool
}

type producerResult struct {
	acks    []ack
	sent    int      // messages written to the socket
	badAcks []string // replies that were not a well-formed 200
}

// runProducer pipelines puts (and some mputs) to addr until stop is closed
// or the connection dies, and returns what was acknowledged.
func runProducer(addr, topic string, parts int, round, prod int, seq *int, seed uint64, stop <-chan struct{}) producerResult {
	var res producerResult
	c, err := dialClient(addr)
	if err != nil {
		return res
	}
	defer c.close()
	rng := rand.New(rand.NewPCG(seed, uint64(round)<<8|uint64(prod)))

	var mu sync.Mutex
	pending := map[int32]sent{}
	window := make(chan struct{}, 48)
	readerDone := make(chan struct{})

	go func() {
		defer close(readerDone)
		for {
			r, err := c.read()
			if err != nil {
				return
			}
			mu.Lock()
			s, ok := pending[r.Opaque]
			delete(pending, r.Opaque)
			mu.Unlock()
			if !ok {
				res.badAcks = append(res.badAcks, fmt.Sprintf("reply for unknown opaque: %v", r))
				continue
			}
			<-window
			if r.Op != protocol.OpResult || r.Code != protocol.StatusOK {
				res.badAcks = append(res.badAcks, fmt.Sprintf("put failed: %v", r))
				continue
			}
			id, p, off, n, err := protocol.ParsePutResult(r.Body)
			switch {
			case err != nil:
				res.badAcks = append(res.badAcks, err.Error())
				continue
			case p != s.part:
				res.badAcks = append(res.badAcks, fmt.Sprintf("ack for partition %d, sent to %d", p, s.part))
				continue
			case n != len(s.keys) || (!s.isMPut && bytes.Count(r.Body, []byte(" ")) != 2):
				res.badAcks = append(res.badAcks, fmt.Sprintf("ack %q for %d messages", r.Body, len(s.keys)))
				continue
			}
			at := time.Now()
			for i, k := range s.keys {
				res.acks = append(res.acks, ack{Key: k, ID: id + int64(i), Partition: p, Offset: off, CRC: s.crcs[i], At: at})
				off += int64(message.HeaderSize + s.sizes[i])
			}
		}
	}()

	var buf []byte
	for op := int32(1); ; op++ {
		select {
		case <-stop:
			// The broker is dead: let the reader drain what arrived.
			<-readerDone
			return res
		case <-readerDone:
			return res
		case window <- struct{}{}:
		}
		s := sent{part: int32(rng.IntN(parts))}
		buf = buf[:0]
		n := 1
		if rng.IntN(8) == 0 {
			n = 2 + rng.IntN(6)
			s.isMPut = true
		}
		var entries []byte
		for i := 0; i < n; i++ {
			*seq++
			k := msgKey{round, prod, *seq}
			body := makeBody(rng, k, 20+rng.IntN(1400))
			s.keys = append(s.keys, k)
			s.sizes = append(s.sizes, len(body))
			s.crcs = append(s.crcs, crc32.ChecksumIEEE(body))
			if s.isMPut {
				entries = protocol.AppendMPutEntry(entries, 0, int32(message.Checksum(body)), body)
			} else {
				buf = putFrame(topic, s.part, body, op)
			}
		}
		if s.isMPut {
			buf = protocol.AppendMPutHeader(buf, topic, s.part, len(entries), n, op)
			buf = append(buf, entries...)
		}
		mu.Lock()
		pending[op] = s
		mu.Unlock()
		if err := c.write(buf); err != nil {
			c.close()
			<-readerDone
			return res
		}
		res.sent += n
	}
}

// ---------------------------------------------------------------------------
// Verification
// ---------------------------------------------------------------------------

// verifyLog reads every partition and checks it against the acks of all
// rounds so far: every acknowledged message must be there. It returns the
// number of records found.
func verifyLog(t *testing.T, addr, topic string, parts int, acks []ack) int {
	t.Helper()
	v := readLog(t, addr, topic, parts, acks)
	if len(v.missing) > 0 {
		a := v.missing[0]
		t.Fatalf("%d acknowledged messages missing, the first %+v (id %d) at partition %d offset %d",
			len(v.missing), a.Key, a.ID, a.Partition, a.Offset)
	}
	return v.total
}

// place is where a record is in the log.
type place struct {
	Partition int32
	Offset    int64
}

// where names a place in failure messages.
func where(p place) string { return fmt.Sprintf("partition %d offset %d", p.Partition, p.Offset) }

// keyed is a record of the log and the key its body holds.
type keyed struct {
	record
	key msgKey
}

// logView is what readLog found.
type logView struct {
	total   int
	at      map[msgKey]place // every record in the log
	missing []ack            // acknowledged messages not in the log
}

// readLog reads every partition and checks it: every record is one a
// producer sent, intact, stored once, with a unique id, in producer order;
// stats agree with what is readable; every acknowledged message that is
// there is at its acknowledged offset with its id and crc, and no record
// sits at the offset of an acknowledged one that is not there. The
// acknowledged messages that are not there are returned, not failed.
func readLog(t *testing.T, addr, topic string, parts int, acks []ack) logView {
	t.Helper()
	c := dial(t, addr)
	offs := partOffsets(t, c)

	byPart := make([]map[int64]keyed, parts)
	seen := map[msgKey]place{}
	ids := map[int64]place{}
	total := 0
	for p := 0; p < parts; p++ {
		recs, end, err := readPartition(c, topic, int32(p), 100_000)
		require.NoError(t, err, "reading partition %d", p)
		o := offs[topic+"-"+strconv.Itoa(p)]
		require.Equal(t, int64(0), o[0], "partition %d min_offset", p)
		require.Equal(t, o[1], end, "partition %d: stats max_offset vs end of the last readable record", p)
		byPart[p] = make(map[int64]keyed, len(recs))
		lastSeq := map[[2]int]int{} // (round, prod) -> last seq in this partition
		var lastID int64
		// The checks of every record call require only when they fail
		// (the same message): require's reflection and t.Helper per record
		// were a large part of readLog's CPU under -race.
		for _, r := range recs {
			k, err := parseBody(r.Data)
			if err != nil {
				require.NoError(t, err, "partition %d offset %d: record body is not what any producer sent", p, r.Offset)
			}
			if prev, dup := seen[k]; dup {
				t.Fatalf("message %+v stored twice: at %+v and at partition %d offset %d", k, prev, p, r.Offset)
			}
			here := place{int32(p), r.Offset}
			seen[k] = here
			if other, dup := ids[r.ID]; dup {
				t.Fatalf("message id %d used twice: %s and %s", r.ID, where(other), where(here))
			}
			ids[r.ID] = here
			if r.ID <= lastID {
				require.Greater(t, r.ID, lastID, "%s: ids must rise with offsets", where(here))
			}
			lastID = r.ID
			pk := [2]int{k.Round, k.Prod}
			if k.Seq <= lastSeq[pk] {
				require.Greater(t, k.Seq, lastSeq[pk], "%s: producer %d of round %d out of order", where(here), k.Prod, k.Round)
			}
			lastSeq[pk] = k.Seq
			byPart[p][r.Offset] = keyed{r, k}
		}
		total += len(recs)
	}

	var missing []ack
	ackIDs := make(map[int64]bool, len(acks))
	for _, a := range acks {
		if ackIDs[a.ID] {
			require.False(t, ackIDs[a.ID], "message id %d acknowledged twice", a.ID)
		}
		ackIDs[a.ID] = true
		r, ok := byPart[a.Partition][a.Offset]
		if !ok {
			if _, elsewhere := seen[a.Key]; elsewhere {
				require.False(t, elsewhere, "acknowledged message %+v is at %+v, not at its acknowledged partition %d offset %d",
					a.Key, seen[a.Key], a.Partition, a.Offset)
			}
			missing = append(missing, a)
			continue
		}
		if a.Key != r.key {
			require.Equal(t, a.Key, r.key, "partition %d offset %d holds another message than acknowledged", a.Partition, a.Offset)
		}
		if a.ID != r.ID {
			require.Equal(t, a.ID, r.ID, "message %+v: id in the log differs from the ack", a.Key)
		}
		if sum := crc32.ChecksumIEEE(r.Data); a.CRC != sum {
			require.Equal(t, a.CRC, sum, "message %+v: body differs from what was sent", a.Key)
		}
	}

	// message_count counts sealed segments in the background after a
	// restart: it must converge to the number of records.
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := ok(t)(c.stats(""))
		if parseStats(t, r.Body)["total_messages"] == strconv.Itoa(total) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats total_messages %s, log holds %d records", parseStats(t, r.Body)["total_messages"], total)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return logView{total: total, at: seen, missing: missing}
}

// requireStable checks that every record of an earlier view of the log is
// still where it was: offsets never move, whether or not the record was
// acknowledged.
func requireStable(t *testing.T, prev, cur logView) {
	t.Helper()
	for k, p := range prev.at {
		q, ok := cur.at[k]
		if !ok {
			t.Fatalf("message %+v, in the log at %+v after the previous restart, is gone", k, p)
		}
		if p != q {
			require.Equal(t, p, q, "message %+v moved", k)
		}
	}
}

// ---------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------

// TestCrashGroupCommit SIGKILLs a metaq-server process at random moments
// while 4 producers pipeline puts and mputs, restarts it on the same data
// directory, and checks that every acknowledged message is there exactly
// once, where its ack said, intact, in producer order, with unique ids.
func TestCrashGroupCommit(t *testing.T) {
	t.Parallel()
	rounds := 5
	if testing.Short() {
		rounds = 2
	}
	crashGroupCommit(t, 3, rounds)
}

// TestCrashGroupCommit64 is TestCrashGroupCommit over 64 partitions: kill
// -9 at random moments under load, several rounds; every acknowledged
// message is there, and no record (acknowledged or not) that was in the
// log after one restart ever moves or goes away after a later one.
func TestCrashGroupCommit64(t *testing.T) {
	t.Parallel()
	rounds := 6
	if testing.Short() {
		rounds = 2
	}
	crashGroupCommit(t, 64, rounds)
}

func crashGroupCommit(t *testing.T, parts, rounds int) {
	const (
		topic     = "crash"
		producers = 4
	)
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	config := groupCommitConfig(t, dir, topic, parts, 65536, "")

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	var acks []ack
	var prev logView
	seqs := make([]int, producers)
	for round := 0; round <= rounds; round++ {
		srv := startServer(t, config, dataDir)
		if round > 0 {
			v := readLog(t, srv.Addr, topic, parts, acks)
			require.Empty(t, v.missing, "acknowledged messages lost by a kill -9")
			requireStable(t, prev, v)
			prev = v
			t.Logf("after crash %d: %d records in the log, %d acknowledged so far", round, v.total, len(acks))
		}
		if round == rounds {
			// Last start: a clean shutdown must work and keep everything.
			srv.Stop(t)
			srv = startServer(t, config, dataDir)
			v := readLog(t, srv.Addr, topic, parts, acks)
			require.Empty(t, v.missing, "acknowledged messages lost by a clean shutdown")
			requireStable(t, prev, v)
			break
		}

		delay := time.Duration(50+rng.IntN(351)) * time.Millisecond
		got, sentN := loadRound(t, srv, topic, parts, producers, round, seqs, seed, delay)
		ackN := len(got)
		acks = append(acks, got...)
		t.Logf("round %d: killed after %v; %d messages sent, %d acknowledged", round, delay, sentN, ackN)
	}
	require.NotEmpty(t, acks, "no put was ever acknowledged")
}

// loadRound runs producers against srv for about d, SIGKILLs the server,
// and returns what was acknowledged and how many messages were sent.
func loadRound(t *testing.T, srv *brokertest.Server, topic string, parts, producers, round int, seqs []int, seed uint64, d time.Duration) (acks []ack, sent int) {
	t.Helper()
	return loadRoundThen(t, srv, topic, parts, producers, round, seqs, seed, d, nil)
}

// loadRoundThen is loadRound running beforeKill (if not nil) after d,
// before it kills the server: TestPowerCuts64's torn rounds cut the power
// there, while the server runs (faultfs.FS.StallAtSync).
func loadRoundThen(t *testing.T, srv *brokertest.Server, topic string, parts, producers, round int, seqs []int, seed uint64, d time.Duration, beforeKill func()) (acks []ack, sent int) {
	t.Helper()
	stop := make(chan struct{})
	results := make([]producerResult, producers)
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[p] = runProducer(srv.Addr, topic, parts, round, p, &seqs[p], seed, stop)
		}()
	}
	time.Sleep(d)
	if beforeKill != nil {
		beforeKill()
	}
	srv.Kill()
	close(stop)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("producers did not stop within 30s of the kill")
	}
	for p, r := range results {
		require.Empty(t, r.badAcks, "producer %d got bad replies", p)
		sent += r.sent
		acks = append(acks, r.acks...)
	}
	return acks, sent
}
