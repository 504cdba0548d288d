package e2e

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// putEvery pipelines perPart puts of about size bytes to each of parts
// (in turns: one put to every partition, then the next round), up to
// window in flight on one connection, and returns the acks. Keys are
// (round, prod, seq) as for runProducer.
func putEvery(addr, topic string, parts []int32, perPart, size, round, prod int, seq *int, window int) ([]ack, error) {
	c, err := dialClient(addr)
	if err != nil {
		return nil, err
	}
	defer c.close()
	rng := rand.New(rand.NewPCG(uint64(round), uint64(prod)))
	type req struct {
		part int32
		key  msgKey
		crc  uint32
		size int
	}
	var mu sync.Mutex
	pending := map[int32]req{}
	slots := make(chan struct{}, window)
	var acks []ack
	var rerr error
	total := perPart * len(parts)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for i := 0; i < total; i++ {
			r, err := c.read()
			if err != nil {
				rerr = err
				return
			}
			mu.Lock()
			q, ok := pending[r.Opaque]
			delete(pending, r.Opaque)
			mu.Unlock()
			<-slots
			if !ok || r.Op != protocol.OpResult || r.Code != protocol.StatusOK {
				rerr = fmt.Errorf("put to partition %d: %v", q.part, r)
				return
			}
			id, p, off, n, err := protocol.ParsePutResult(r.Body)
			if err != nil || p != q.part || n != 1 {
				rerr = fmt.Errorf("put to partition %d: bad ack %q (%v)", q.part, r.Body, err)
				return
			}
			acks = append(acks, ack{Key: q.key, ID: id, Partition: p, Offset: off, CRC: q.crc, At: time.Now()})
		}
	}()
	op := int32(0)
	for i := 0; i < perPart && rerr == nil; i++ {
		for _, p := range parts {
			select {
			case slots <- struct{}{}:
			case <-readerDone:
				return acks, rerr
			}
			*seq++
			k := msgKey{round, prod, *seq}
			body := makeBody(rng, k, size-rng.IntN(size/4))
			op++
			mu.Lock()
			pending[op] = req{part: p, key: k, crc: crc32.ChecksumIEEE(body), size: len(body)}
			mu.Unlock()
			if err := c.write(putFrame(topic, p, body, op)); err != nil {
				<-readerDone
				return acks, err
			}
		}
	}
	<-readerDone
	return acks, rerr
}

// putEveryConns runs putEvery on conns connections, partition p going to
// connection p % conns, and returns all acks.
func putEveryConns(t *testing.T, addr, topic string, parts, conns, perPart, size, round int, seqs []int) []ack {
	t.Helper()
	var wg sync.WaitGroup
	res := make([][]ack, conns)
	errs := make([]error, conns)
	for c := 0; c < conns; c++ {
		var mine []int32
		for p := c; p < parts; p += conns {
			mine = append(mine, int32(p))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[c], errs[c] = putEvery(addr, topic, mine, perPart, size, round, c, &seqs[c], 64)
		}()
	}
	wg.Wait()
	var all []ack
	for c := range res {
		require.NoError(t, errs[c], "connection %d", c)
		all = append(all, res[c]...)
	}
	return all
}

// procStatus returns a field of /proc/<pid>/status ("VmRSS" gives e.g.
// "51234 kB"), or "" when there is no such file (not Linux).
func procStatus(pid int, field string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == field {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// brokerThreads is the broker's goroutine count from `stats` (threads).
func brokerThreads(t *testing.T, c *client) int {
	t.Helper()
	n, err := strconv.Atoi(parseStats(t, ok(t)(c.stats("")).Body)["threads"])
	require.NoError(t, err)
	return n
}

// TestThousandPartitions opens 1,000 partitions of one group-commit topic
// at once in the real metaq-server, with 4 KiB segments so that every
// partition rolls (puts go to each partition before and after its roll),
// kills the broker with SIGKILL, restarts it and checks that every record
// is readable at its acknowledged offset and that new puts continue each
// partition where it ended. It logs the broker's RSS (VmRSS) and goroutine
// count (stats threads) idle and under load: the memory figures.
func TestThousandPartitions(t *testing.T) {
	t.Parallel()
	const (
		topic = "wide"
		parts = 1000
		conns = 4
		size  = 1024
	)
	perPart := 6 // 6 x ~1 KiB: at least one roll of a 4 KiB segment
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	config := groupCommitConfig(t, dir, topic, parts, 4096, "")

	srv := startServer(t, config, dataDir)
	pid := srv.Cmd.Process.Pid
	c := dial(t, srv.Addr)
	idleRSS, idleThreads := procStatus(pid, "VmRSS"), brokerThreads(t, c)

	// Sample RSS and goroutines while the puts run.
	stop := make(chan struct{})
	var loadRSS string
	var loadThreads int
	sampled := make(chan struct{})
	sc := dial(t, srv.Addr)
	go func() {
		defer close(sampled)
		for i := 0; i < 10_000; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			r, err := sc.stats("")
			if err != nil || r.Code != protocol.StatusOK {
				return
			}
			if n, err := strconv.Atoi(statsField(r.Body, "threads")); err == nil && n > loadThreads {
				loadThreads = n
			}
			if s := procStatus(pid, "VmRSS"); kB(s) > kB(loadRSS) {
				loadRSS = s
			}
		}
	}()
	seqs := make([]int, conns)
	start := time.Now()
	acks := putEveryConns(t, srv.Addr, topic, parts, conns, perPart, size, 0, seqs)
	putTime := time.Since(start)
	close(stop)
	<-sampled
	require.Len(t, acks, parts*perPart)
	t.Logf("1,000 partitions: %d puts in %v (%.0f/s); RSS idle %s, under load (peak sampled) %s; goroutines idle %d, under load (peak) %d",
		len(acks), putTime.Round(time.Millisecond), float64(len(acks))/putTime.Seconds(), idleRSS, loadRSS, idleThreads, loadThreads)

	for p := 0; p < parts; p++ {
		segs := segmentFiles(t, filepath.Join(dataDir, fmt.Sprintf("%s-%d", topic, p)))
		require.GreaterOrEqual(t, len(segs), 2, "partition %d did not roll: %v", p, segs)
	}

	srv.Kill()
	start = time.Now()
	srv = startServer(t, config, dataDir)
	restart := time.Since(start)
	v := readLog(t, srv.Addr, topic, parts, acks)
	require.Empty(t, v.missing, "acknowledged messages lost by a kill -9")
	require.Equal(t, len(acks), v.total, "records in the log")
	t.Logf("restart after kill -9 with 1,000 partitions: ready in %v; RSS after restart %s", restart.Round(time.Millisecond), procStatus(srv.Cmd.Process.Pid, "VmRSS"))

	// Offsets continue where each partition ended (readLog checked that
	// max_offset is the end of the last record, all of them acknowledged).
	offs := partOffsets(t, dial(t, srv.Addr))
	more := putEveryConns(t, srv.Addr, topic, parts, conns, 1, size, 1, seqs)
	for _, a := range more {
		require.Equal(t, offs[topic+"-"+strconv.Itoa(int(a.Partition))][1], a.Offset, "partition %d: first put after the restart", a.Partition)
	}
	v2 := readLog(t, srv.Addr, topic, parts, append(acks, more...))
	require.Empty(t, v2.missing)
	requireStable(t, v, v2)
}

// statsField returns one field of a stats body, or "".
func statsField(body []byte, key string) string {
	for _, l := range bytes.Split(body, []byte("\r\n")) {
		if k, v, ok := bytes.Cut(l, []byte(" ")); ok && string(k) == key {
			return string(v)
		}
	}
	return ""
}

// kB parses "1234 kB" (0 for anything else).
func kB(s string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSuffix(s, " kB"), 10, 64)
	return n
}
