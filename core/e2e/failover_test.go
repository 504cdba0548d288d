package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/queuecheck"
	"github.com/metaq-go/metaq/internal/zkpath"
	mqclient "github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Automatic failover (docs/replication.md, Failover): real metaq-server
// processes in sync mode with failover = true, a 2 s ZooKeeper session.

const foSession = 2 * time.Second

func failoverConfig() string { return syncConfig("failover = true\n") }

// foAck is one acknowledged put, with the acknowledging broker and the
// epoch it reported when the producer connected to it.
type foAck struct {
	at    time.Time
	addr  string
	epoch int64
	part  int32
	off   int64
	body  string
}

// foLoad is 4 producers that find the master of broker id 1 in ZooKeeper
// (ids/1/master, read again after every failure, as a watch would), put
// one message at a time, and record every send in h.
type foLoad struct {
	h *queuecheck.History
	c *testCluster
	loadStop
	acks []foAck
}

func (l *foLoad) master() string {
	data, _, err := l.c.zkConn().Get(zkpath.Master(l.c.Root, 1))
	if err != nil {
		return ""
	}
	addr, _, ok := cluster.ParseURI(string(data))
	if !ok {
		return ""
	}
	return addr
}

// dialMaster dials the epoch's holder now (l.master) with a 1 s timeout.
// With none, or none to dial, it pauses 20 ms and returns a nil client.
func (l *foLoad) dialMaster() (*client, string) {
	addr := l.master()
	if addr == "" {
		time.Sleep(20 * time.Millisecond)
		return nil, addr
	}
	cl, err := l.c.dialAddr(addr)
	if err != nil {
		time.Sleep(20 * time.Millisecond)
		return nil, addr
	}
	cl.timeout = time.Second
	return cl, addr
}

func startFoLoad(t testing.TB, c *testCluster, h *queuecheck.History, tag string) *foLoad {
	l := &foLoad{h: h, c: c, loadStop: loadStop{stop: make(chan struct{})}}
	for w := range 4 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			producer := fmt.Sprintf("%s-w%d", tag, w)
			var cl *client
			var addr string
			var epoch int64
			defer func() {
				if cl != nil {
					cl.close()
				}
			}()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				if cl == nil {
					if cl, addr = l.dialMaster(); cl == nil {
						continue
					}
					r, err := cl.stats("")
					if err != nil || !strings.HasPrefix(string(r.Body), "STATS\r\n") {
						cl.close()
						cl = nil
						continue
					}
					epoch = -1
					for _, line := range strings.Split(string(r.Body), "\r\n") {
						if v, ok := strings.CutPrefix(line, "epoch "); ok {
							epoch, _ = strconv.ParseInt(v, 10, 64)
						}
					}
				}
				p := int32((w + i) % 4)
				body := fmt.Sprintf("%s-%d-%s", producer, i, strings.Repeat("f", 50+i%100))
				part := fmt.Sprintf("repl-%d", p)
				r, err := cl.put("repl", p, []byte(body))
				if err != nil {
					l.h.Send(producer, part, body, queuecheck.Unknown, 0)
					cl.close()
					cl = nil
					continue
				}
				if r.Code != protocol.StatusOK {
					l.h.Send(producer, part, body, queuecheck.Failed, 0)
					cl.close() // the broker may not be the master any more
					cl = nil
					time.Sleep(10 * time.Millisecond)
					continue
				}
				_, _, off, _, err := protocol.ParsePutResult(r.Body)
				if err != nil {
					l.h.Send(producer, part, body, queuecheck.Unknown, 0)
					continue
				}
				l.h.Send(producer, part, body, queuecheck.Acked, off)
				l.mu.Lock()
				l.acks = append(l.acks, foAck{time.Now(), addr, epoch, p, off, body})
				l.mu.Unlock()
			}
		}()
	}
	t.Cleanup(l.halt)
	return l
}

// firstAckBy waits (at most timeout) for an ack by addr after since.
func (l *foLoad) firstAckBy(t testing.TB, addr string, since time.Time, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		for _, a := range l.acks {
			if a.addr == addr && a.at.After(since) {
				l.mu.Unlock()
				return a.at
			}
		}
		l.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no put acknowledged by %s within %v", addr, timeout)
	return time.Time{}
}

// checkEpochs checks that no two brokers acknowledged for broker id 1 at
// once: grouped by the epoch their broker reported, the acks' time spans
// do not overlap, and each epoch's acks come from one broker.
func checkEpochs(t testing.TB, acks []foAck) {
	t.Helper()
	type span struct {
		first, last time.Time
		addr        string
		n           int
	}
	spans := map[int64]*span{}
	for _, a := range acks {
		require.Positive(t, a.epoch, "ack by %s without an epoch", a.addr)
		s := spans[a.epoch]
		if s == nil {
			s = &span{first: a.at, last: a.at, addr: a.addr}
			spans[a.epoch] = s
		}
		require.Equal(t, s.addr, a.addr, "epoch %d acknowledged by two brokers", a.epoch)
		if a.at.Before(s.first) {
			s.first = a.at
		}
		if a.at.After(s.last) {
			s.last = a.at
		}
		s.n++
	}
	var es []int64
	for e := range spans {
		es = append(es, e)
	}
	sort.Slice(es, func(i, j int) bool { return es[i] < es[j] })
	for i := 1; i < len(es); i++ {
		a, b := spans[es[i-1]], spans[es[i]]
		require.True(t, a.last.Before(b.first), "epoch %d (%s) acknowledged until %v, after epoch %d (%s) began at %v",
			es[i-1], a.addr, a.last.Format("15:04:05.000"), es[i], b.addr, b.first.Format("15:04:05.000"))
	}
	var parts []string
	for _, e := range es {
		parts = append(parts, fmt.Sprintf("epoch %d: %d acks by %s", e, spans[e].n, spans[e].addr))
	}
	t.Logf("acks by epoch: %s", strings.Join(parts, "; "))
}

// checkOn reads every partition of topic repl on n into h and checks the
// history: every acknowledged message exactly once at its offset.
func checkOn(t testing.TB, h *queuecheck.History, n *replNode) {
	t.Helper()
	checkTopicOn(t, h, n, "repl", 4)
}

// checkTopicOn reads partitions 0..parts-1 of topic on n into h (as
// topic-<p>) and checks the history.
func checkTopicOn(t testing.TB, h *queuecheck.History, n *replNode, topic string, parts int32) {
	t.Helper()
	cl := n.dial(t)
	defer cl.close()
	for p := range parts {
		recs, end, err := readPartition(cl, topic, p, 1<<20)
		require.NoError(t, err)
		part := fmt.Sprintf("%s-%d", topic, p)
		for _, r := range recs {
			h.Read(part, r.Offset, string(r.Data))
		}
		h.ReadEnd(part, end)
	}
	rep := h.Check()
	t.Logf("queue check of %s, topic %s: %s", n, topic, rep)
	require.True(t, rep.OK(), "%s, topic %s: %s", n, topic, rep)
}

// foRounds is TestSyncFailoverKill9's number of rounds: 3 (each holder
// killed at least once, the first one twice), or METAQ_FAILOVER_ROUNDS
// (make soak runs 30).
func foRounds() int {
	if v, err := strconv.Atoi(os.Getenv("METAQ_FAILOVER_ROUNDS")); err == nil && v > 0 {
		return v
	}
	return 3
}

// TestSyncFailoverKill9: a sync master with failover = true and its
// in-sync slave; rounds of kill -9 of whoever holds the epoch under load
// from 4 producers. Each round the in-sync slave promotes itself, the
// producers succeed again within session timeout + 2 s, every
// acknowledged message is on the new holder exactly once at its
// acknowledged offset, and the acks' epochs never overlap. The killed
// broker comes back on its own data directory, cuts any tail the new
// holder never had, rejoins as a slave, gets named in sync, and its copy
// equals the holder's.
func TestSyncFailoverKill9(t *testing.T) {
	t.Parallel()
	failoverRounds(t, foRounds(), func(round int, took time.Duration) {
		require.Less(t, took, foSession+2*time.Second, "round %d: producers did not succeed again within session timeout + 2 s", round)
	})
}

// BenchmarkFailover: the time from kill -9 of the holder to the first
// acknowledgement by the promoted slave, under load from 4 producers, per
// round (failover_ms), next to the session timeout (session_ms). Run it
// with -benchtime Nx for N rounds.
func BenchmarkFailover(b *testing.B) {
	var total time.Duration
	failoverRounds(b, b.N, func(_ int, took time.Duration) { total += took })
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "failover_ms")
	b.ReportMetric(float64(foSession.Milliseconds()), "session_ms")
	b.ReportMetric(0, "ns/op")
}

// failoverRounds runs rounds rounds of kill -9 of the holder and calls
// took with each round's time from the kill to the first ack by the
// promoted slave.
func failoverRounds(t testing.TB, rounds int, took func(round int, d time.Duration)) {
	c := startCluster(t, clusterSpec{Config: failoverConfig(), SessionTimeout: foSession})
	holder := startRepl(t, c, 1, -1, "")
	slave := startRepl(t, c, 1, 1, "")
	waitStat(t, holder, "failover_insync", "s1", 20*time.Second)
	killRounds(t, c, holder, slave, queuecheck.New(), rounds, false, took)
}

// killRounds runs rounds rounds of kill -9 of the holder (slave in sync)
// under load recorded in h, as failoverRounds describes; after the last
// round the killed broker rejoins only if rejoinLast.
func killRounds(t testing.TB, c *testCluster, holder, slave *replNode, h *queuecheck.History, rounds int, rejoinLast bool, took func(round int, d time.Duration)) {
	t.Helper()
	var all []foAck
	for round := 1; round <= rounds; round++ {
		load := startFoLoad(t, c, h, fmt.Sprintf("r%d", round))
		// A random moment under load: 300 ms to 1.3 s in.
		time.Sleep(300*time.Millisecond + rand.N(time.Second))
		epoch := statInt(t, holder, "epoch")
		holder.kill9(t)
		killed := time.Now()
		first := load.firstAckBy(t, slave.Addr, killed, foSession+10*time.Second)
		t.Logf("round %d: kill -9 of %s (epoch %d); first ack by the promoted %s after %v (session timeout %v)",
			round, holder, epoch, slave, first.Sub(killed), foSession)
		took(round, first.Sub(killed))
		require.Equal(t, epoch+1, statInt(t, slave, "epoch"))
		time.Sleep(500 * time.Millisecond)
		load.halt()
		all = append(all, load.acks...)
		checkOn(t, h, slave)
		checkEpochs(t, all)
		if round == rounds && !rejoinLast {
			break
		}
		// The killed broker comes back on its own data directory, with its
		// own arguments: a slave holds the epoch, so it cuts any tail the
		// new holder never had, rejoins as a slave (the master as slave
		// failover_slave_id, 0) and gets named in sync; its copy ends equal
		// to the holder's. The next round kills the new holder.
		holder.restart(t)
		back := holder.Slave
		if back < 0 {
			back = 0
		}
		waitStat(t, slave, "failover_insync", "s"+strconv.Itoa(back), 30*time.Second)
		checkRejoined(t, h, slave, holder)
		if round == 1 {
			checkSyncFenced(t, holder, epoch+1)
		}
		holder, slave = slave, holder
	}
}

// checkRejoined checks a former holder rejoined as slave of holder:
// it says so, it caught up, and its copy of every partition is the
// holder's record for record (offsets, ids, bytes), every acknowledged
// message on it exactly once; it logs what the rejoin cut.
func checkRejoined(t testing.TB, h *queuecheck.History, holder, back *replNode) {
	t.Helper()
	st := back.stats(t)
	require.Equal(t, "slave", st["failover_role"], "%s after its rejoin", back)
	require.Equal(t, "true", st["slave"])
	require.True(t, back.logContains("copies from broker 1"), "%s did not log its rejoin", back)
	require.NoFileExists(t, filepath.Join(back.DataDir, "failover-held"))
	waitCaughtUp(t, holder, back, 20*time.Second)
	n := compareCopies(t, holder, back)
	checkOn(t, h, back)
	var cuts []string
	if p := back.current(); p != nil {
		for _, line := range strings.Split(p.Logs.String(), "\n") {
			if strings.Contains(line, "never acknowledged") {
				cuts = append(cuts, line[max(0, strings.Index(line, "partition ")):])
			}
		}
	}
	t.Logf("%s rejoined %s: %d records equal; cuts: %d %v", back, holder, n, len(cuts), cuts)
}

// TestSyncFailoverPausedMaster: a master stopped with SIGSTOP past the
// session timeout loses the epoch to its in-sync slave; after SIGCONT it
// acknowledges nothing (its lease has run out, its session has expired,
// the promoted slave refuses its syncs), reports itself fenced, and
// rejoins by itself as slave 0: it cuts any tail the promoted slave never
// had, gets named in sync, and its copy equals the promoted slave's, with
// every acknowledged message on both exactly once.
func TestSyncFailoverPausedMaster(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterSpec{Config: failoverConfig(), SessionTimeout: foSession})
	master := startRepl(t, c, 1, -1, "")
	slave := startRepl(t, c, 1, 1, "")
	waitStat(t, master, "failover_insync", "s1", 20*time.Second)
	h := queuecheck.New()
	load := startFoLoad(t, c, h, "p")
	time.Sleep(700 * time.Millisecond)
	master.mu.Lock()
	proc := master.proc.Cmd.Process
	master.mu.Unlock()
	require.NoError(t, proc.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	first := load.firstAckBy(t, slave.Addr, stopped, foSession+10*time.Second)
	t.Logf("SIGSTOP of %s; first ack by the promoted %s after %v", master, slave, first.Sub(stopped))
	time.Sleep(500 * time.Millisecond)
	require.NoError(t, proc.Signal(syscall.SIGCONT))
	resumed := time.Now()
	// The paused master's clients time out and go to the new master; the
	// old one must answer nothing with 200 from here on.
	deadline := time.Now().Add(10 * time.Second)
	for !master.logContains("failover: FENCED") {
		require.True(t, time.Now().Before(deadline), "%s did not report itself fenced after SIGCONT", master)
		time.Sleep(20 * time.Millisecond)
	}
	// A put straight to the old master is refused (fenced, or already a
	// read-only slave).
	cl := dial(t, master.Addr)
	r, err := cl.put("repl", 0, []byte("after-resume"))
	cl.close()
	require.NoError(t, err)
	require.NotEqual(t, protocol.StatusOK, r.Code, "old master answered %v", r)
	// By itself it rejoins the promoted slave as slave 0 (cutting any tail
	// the promoted slave never had) and gets named in sync, under load.
	waitStat(t, slave, "failover_insync", "s0", 30*time.Second)
	require.True(t, master.logContains("rejoins as slave 0"), "%s did not log its rejoin", master)
	time.Sleep(500 * time.Millisecond)
	load.halt()
	for _, a := range load.acks {
		require.False(t, a.addr == master.Addr && a.at.After(resumed), "the resumed old master acknowledged %s-%d offset %d at %v", "repl", a.part, a.off, a.at)
	}
	checkOn(t, h, slave)
	checkEpochs(t, load.acks)
	checkRejoined(t, h, slave, master)
	ok, _, err := c.zkConn().Exists(zkpath.Master(c.Root, 1))
	require.NoError(t, err)
	require.True(t, ok)
	data, _, err := c.zkConn().Get(zkpath.Master(c.Root, 1))
	require.NoError(t, err)
	require.Contains(t, string(data), slave.Addr, "ids/1/master must name the promoted slave")
}

// checkSyncFenced checks that slave n refuses sync on a connection not
// bound to the current epoch, and binding to a stale one.
func checkSyncFenced(t testing.TB, n *replNode, current int64) {
	t.Helper()
	cl := n.dial(t)
	defer cl.close()
	body := []byte("stale-sync")
	require.NoError(t, cl.write(protocol.AppendSync(nil, "repl", 0, 0, 1<<60, -1, 7, body)))
	r, err := cl.read()
	require.NoError(t, err)
	require.Equal(t, protocol.StatusInternalError, r.Code, "unbound sync: %v", r)
	require.Contains(t, string(r.Body), "sync refused")
	for _, e := range []int64{current - 1, current + 1} {
		require.NoError(t, cl.write(protocol.AppendStats(nil, "sync-epoch:"+strconv.FormatInt(e, 10), 8)))
		r, err = cl.read()
		require.NoError(t, err)
		require.Equal(t, protocol.StatusInternalError, r.Code, "binding to epoch %d (current %d): %v", e, current, r)
	}
	require.NoError(t, cl.write(protocol.AppendSync(nil, "repl", 0, 0, 1<<60, -1, 9, body)))
	r, err = cl.read()
	require.NoError(t, err)
	require.Equal(t, protocol.StatusInternalError, r.Code, "sync after a refused bind: %v", r)
}

// TestSyncFailoverSDKProducer: the SDK's cluster producer (sdk/client
// through ZooKeeper, its watches on topics-pub and ids/<id>/master) moves
// to the promoted slave by itself after kill -9 of the master; every
// message it was told was stored is on the promoted slave at its offset.
// Every other message carries a key, create time, tags and headers (issue
// 26): those acknowledged before and after the kill are read from the
// promoted slave with them intact, decoded as a consumer does.
func TestSyncFailoverSDKProducer(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterSpec{Config: failoverConfig(), SessionTimeout: foSession})
	master := startRepl(t, c, 1, -1, "")
	slave := startRepl(t, c, 1, 1, "")
	waitStat(t, master, "failover_insync", "s1", 20*time.Second)
	p := c.newProducer(t, mqclient.ProduceTimeout(2*time.Second))
	type stored struct {
		part int32
		off  int64
		body string
		at   time.Time
		m    *message.Message
	}
	var acks []stored
	send := func(i int) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		body := fmt.Sprintf("sdk-%d", i)
		m := &message.Message{Topic: "repl", Body: []byte(body)}
		if i%2 == 0 {
			m.Key = []byte(fmt.Sprintf("key-%d", i%7))
			m.Timestamp = time.UnixMilli(1_765_000_000_000 + int64(i))
			m.Tags = []string{"TagA", fmt.Sprintf("T%d", i%3)}
			m.Headers = message.Headers{{Key: "i", Value: []byte(strconv.Itoa(i))}, {Key: "bin", Value: []byte{0, 0xff, byte(i)}}, {Key: "null"}}
		}
		rs, err := p.ProduceSync(ctx, m)
		if err != nil {
			return false
		}
		acks = append(acks, stored{rs[0].Partition, rs[0].Offset, body, time.Now(), m})
		return true
	}
	i := 0
	for ; len(acks) < 50; i++ {
		send(i)
		require.Less(t, i, 5000, "the producer never got going")
	}
	master.kill9(t)
	killed := time.Now()
	before := len(acks)
	for len(acks) < before+50 {
		send(i)
		i++
		require.Less(t, time.Since(killed), foSession+20*time.Second, "the producer did not move to the promoted slave")
	}
	t.Logf("SDK producer: first message stored after the kill at +%v (session timeout %v)", acks[before].at.Sub(killed), foSession)
	at := replRecords(t, slave)
	withProps, propsBefore := 0, 0
	for i, a := range acks {
		r := at[a.part][a.off]
		rec := message.Record{Offset: r.Offset, ID: r.ID, Flag: r.Flag, Data: r.Data}
		got, err := rec.Message("repl", a.part)
		require.NoError(t, err, "repl-%d offset %d", a.part, a.off)
		require.Equal(t, a.body, string(got.Body), "repl-%d offset %d: stored %q, the promoted slave has %q", a.part, a.off, a.body, got.Body)
		require.Equal(t, a.m.Key, got.Key, "repl-%d offset %d: key", a.part, a.off)
		require.Equal(t, a.m.Timestamp.UnixMilli(), got.Timestamp.UnixMilli(), "repl-%d offset %d: timestamp", a.part, a.off)
		require.Equal(t, a.m.Tags, got.Tags, "repl-%d offset %d: tags", a.part, a.off)
		require.Equal(t, a.m.Headers, got.Headers, "repl-%d offset %d: headers", a.part, a.off)
		if a.m.HasProperties() {
			withProps++
			if i < before {
				propsBefore++
			}
		}
	}
	t.Logf("%d of %d acknowledged messages carried properties, %d of them acknowledged before the kill", withProps, len(acks), propsBefore)
	require.Positive(t, propsBefore)
}
