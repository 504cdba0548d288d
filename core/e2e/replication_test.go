package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/queuecheck"
	"github.com/metaq-go/metaq/internal/zkpath"
	mqclient "github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// TestAsyncSlave: a slave started empty copies every partition of its
// master with the master's offsets and msgIds (records and segment bytes
// compared), registers MetaQ's slave nodes, refuses puts, keeps up with
// puts made while it runs, resumes from its own end after kill -9, and a
// second slave started from a partial copy catches up too.
func TestAsyncSlave(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterSpec{Config: replConfig})
	master := startRepl(t, c, 1, -1, "")
	putMany(t, master.Addr, 3000, "before")
	waitReadable(t, master.Addr, 3000)

	slave := startRepl(t, c, 1, 1, "")
	waitCaughtUp(t, master, slave, 20*time.Second)
	n := compareCopies(t, master, slave)
	require.Equal(t, 3000, n)

	t.Run("registration", func(t *testing.T) {
		uri := "meta://" + slave.Addr
		data, st, err := c.zk.Get(zkpath.Slave(c.Root, 1, 1))
		require.NoError(t, err)
		require.Equal(t, uri, string(data))
		require.NotZero(t, st.EphemeralOwner)
		data, _, err = c.zk.Get(zkpath.Broker(c.Root, 1))
		require.NoError(t, err)
		require.Equal(t, "meta://"+master.Addr, string(data), "ids/<id> keeps the master's URI")
		name := zkpath.BrokerName{ID: 1, Slave: 1}
		for topic, parts := range replTopics {
			js := fmt.Sprintf(`{"numParts":%d,"broker":"1-s1"}`, parts)
			for kind, want := range map[zkpath.Kind]string{zkpath.Topics: strconv.Itoa(parts), zkpath.TopicsPub: js, zkpath.TopicsSub: js} {
				data, st, err := c.zk.Get(kind.Node(c.Root, topic, name))
				require.NoError(t, err, "%s %s", kind, topic)
				require.Equal(t, want, string(data))
				require.NotZero(t, st.EphemeralOwner)
			}
		}
		s := slave.stats(t)
		require.Equal(t, "true", s["slave"])
		require.Equal(t, "1", s["slave_id"])
		require.Equal(t, master.Addr, s["slave_master"])
		require.Equal(t, "false", master.stats(t)["slave"])
	})

	t.Run("refuses puts", func(t *testing.T) {
		cl := dial(t, slave.Addr)
		defer cl.close()
		r, err := cl.put("repl", 0, []byte("x"))
		require.NoError(t, err)
		require.Equal(t, protocol.StatusForbidden, r.Code)
		cause, _ := protocol.ParseCause(string(r.Body))
		require.Equal(t, protocol.CauseReadOnly, cause, "%s", r.Body)
	})

	t.Run("copies while running", func(t *testing.T) {
		putMany(t, master.Addr, 2000, "during")
		waitReadable(t, master.Addr, 5000)
		waitCaughtUp(t, master, slave, 20*time.Second)
		require.Equal(t, 5000, compareCopies(t, master, slave))
	})

	t.Run("resumes after kill -9", func(t *testing.T) {
		slave.kill9(t)
		putMany(t, master.Addr, 1000, "while-down")
		waitReadable(t, master.Addr, 6000)
		slave.restart(t)
		waitCaughtUp(t, master, slave, 20*time.Second)
		require.Equal(t, 6000, compareCopies(t, master, slave))
		require.False(t, slave.logContains("is empty; starting at"), "a restarted slave resumes from its own end")
	})

	t.Run("partial copy", func(t *testing.T) {
		// Slave 2 starts from slave 1's data cut short: each partition's
		// last segment loses its second half (cut mid-record, which
		// recovery trims), and the last segment of repl-0 goes entirely.
		slave.stop(t)
		dir := filepath.Join(c.dir, "b1-s2")
		require.NoError(t, os.CopyFS(dir, os.DirFS(slave.DataDir)))
		for topic, parts := range replTopics {
			for p := range parts {
				pdir := filepath.Join(dir, fmt.Sprintf("%s-%d", topic, p))
				ents, err := os.ReadDir(pdir)
				require.NoError(t, err)
				var segs []string
				for _, e := range ents {
					if filepath.Ext(e.Name()) == ".meta" {
						segs = append(segs, e.Name())
					}
				}
				require.NotEmpty(t, segs)
				last := filepath.Join(pdir, segs[len(segs)-1])
				if topic == "repl" && p == 0 && len(segs) > 1 {
					require.NoError(t, os.Remove(last))
					continue
				}
				fi, err := os.Stat(last)
				require.NoError(t, err)
				require.NoError(t, os.Truncate(last, fi.Size()/2+7))
			}
		}
		require.NoError(t, os.RemoveAll(filepath.Join(dir, "journal")))
		slave.restart(t)
		slave2 := startRepl(t, c, 1, 2, dir)
		putMany(t, master.Addr, 500, "partial")
		waitReadable(t, master.Addr, 6500)
		waitCaughtUp(t, master, slave2, 20*time.Second)
		waitCaughtUp(t, master, slave, 20*time.Second)
		require.Equal(t, 6500, compareCopies(t, master, slave2))
		require.Equal(t, 6500, compareCopies(t, master, slave))
	})
}

// consumeAll consumes topic through ZooKeeper with a Client of its own
// (a group of its own, so every partition, from the earliest offset) until want
// distinct bodies have arrived, and returns them.
func consumeAll(t *testing.T, c *testCluster, topic string, want int, opts ...mqclient.Opt) map[string]bool {
	t.Helper()
	base := []mqclient.Opt{mqclient.ZooKeeper(c.ZK, c.Root), mqclient.Logger(slog.New(slog.DiscardHandler)),
		mqclient.ZooKeeperSessionTimeout(clusterSessionTimeout), mqclient.ConsumeTopics(topic),
		mqclient.ConsumerGroup(fmt.Sprintf("g%d", time.Now().UnixNano())),
		mqclient.ConsumeFrom(mqclient.Earliest), mqclient.FetchMaxWait(50 * time.Millisecond), mqclient.DialTimeout(time.Second)}
	cl, err := mqclient.New(append(base, opts...)...)
	require.NoError(t, err)
	var mu sync.Mutex
	got := map[string]bool{}
	enough := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- cl.Consume(context.Background(), func(_ context.Context, m *message.Message) error {
			mu.Lock()
			defer mu.Unlock()
			got[string(m.Body)] = true
			if len(got) == want {
				close(enough)
			}
			return nil
		})
	}()
	select {
	case <-enough:
	case err := <-done:
		t.Fatalf("consume ended: %v", err)
	case <-time.After(20 * time.Second):
		mu.Lock()
		n := len(got)
		mu.Unlock()
		t.Fatalf("consumed %d of %d messages of %s within 20 s", n, want, topic)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, cl.Close(ctx))
	<-done
	mu.Lock()
	defer mu.Unlock()
	return maps.Clone(got)
}

func statInt(t testing.TB, n *replNode, key string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(n.stats(t)[key], 10, 64)
	require.NoError(t, err, "stats %s", key)
	return v
}

// TestSlaveServesConsumers: with ReadFromReplicas a consumer reads from
// the slave while the master is up (the master serves no get); without
// it, a consumer reads from the slave once the master is gone (kill -9,
// its session expired).
func TestSlaveServesConsumers(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterSpec{Config: replConfig})
	master := startRepl(t, c, 1, -1, "")
	slave := startRepl(t, c, 1, 1, "")
	putMany(t, master.Addr, 800, "m") // 400 to repl
	waitReadable(t, master.Addr, 800)
	waitCaughtUp(t, master, slave, 20*time.Second)

	t.Run("ReadFromReplicas", func(t *testing.T) {
		// The master serves the slave's gets, so the consumer's absence
		// there shows in its group's offset fetches and commits.
		mFetch, mCommit, sGets := statInt(t, master, "cmd_fetch"), statInt(t, master, "cmd_commit"), statInt(t, slave, "cmd_get")
		got := consumeAll(t, c, "repl", 400, mqclient.ReadFromReplicas())
		require.Len(t, got, 400)
		require.Equal(t, mFetch, statInt(t, master, "cmd_fetch"), "the consumer fetched offsets from the master")
		require.Equal(t, mCommit, statInt(t, master, "cmd_commit"), "the consumer committed offsets to the master")
		require.Greater(t, statInt(t, slave, "cmd_get"), sGets)
	})

	t.Run("master gone", func(t *testing.T) {
		master.kill9(t)
		deadline := time.Now().Add(clusterSessionTimeout + 10*time.Second)
		for {
			ok, _, err := c.zk.Exists(zkpath.Master(c.Root, 1))
			require.NoError(t, err)
			if !ok {
				break
			}
			require.True(t, time.Now().Before(deadline), "master node still registered")
			time.Sleep(50 * time.Millisecond)
		}
		sGets := statInt(t, slave, "cmd_get")
		got := consumeAll(t, c, "repl", 400)
		require.Len(t, got, 400)
		require.Greater(t, statInt(t, slave, "cmd_get"), sGets)
		deadline = time.Now().Add(5 * time.Second)
		for slave.stats(t)["slave_master"] != "none" {
			require.True(t, time.Now().Before(deadline), "the slave still names a master: %v", slave.stats(t))
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// replAck is one acknowledged put of a replication load.
type replAck struct {
	at     time.Time
	part   int32
	offset int64
	body   string
}

// replLoad puts to topic "repl" on addr from workers connections, one put
// at a time each, until stopped, recording every ack.
type replLoad struct {
	h *queuecheck.History
	loadStop
	acks []replAck
	errs int
}

func startReplLoad(t *testing.T, h *queuecheck.History, addr string, workers int) *replLoad {
	l := &replLoad{h: h, loadStop: loadStop{stop: make(chan struct{})}}
	for w := range workers {
		cl, err := dialClient(addr)
		require.NoError(t, err)
		cl.timeout = 3 * time.Second
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer cl.close()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				p := int32((w + i) % 4)
				body := fmt.Sprintf("w%d-%d-%s", w, i, strings.Repeat("y", 100+i%200))
				r, err := cl.put("repl", p, []byte(body))
				producer, part := fmt.Sprintf("w%d", w), fmt.Sprintf("repl-%d", p)
				if err != nil || r.Code != protocol.StatusOK {
					l.mu.Lock()
					l.errs++
					l.mu.Unlock()
					if err != nil {
						l.h.Send(producer, part, body, queuecheck.Unknown, 0)
						return // the connection is gone (the master was killed)
					}
					l.h.Send(producer, part, body, queuecheck.Failed, 0)
					continue
				}
				_, _, off, _, err := protocol.ParsePutResult(r.Body)
				if err != nil {
					continue
				}
				l.h.Send(producer, part, body, queuecheck.Acked, off)
				l.mu.Lock()
				l.acks = append(l.acks, replAck{time.Now(), p, off, body})
				l.mu.Unlock()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	t.Cleanup(l.halt)
	return l
}

func (l *replLoad) last() (replAck, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.acks) == 0 {
		return replAck{}, 0
	}
	return l.acks[len(l.acks)-1], len(l.acks)
}

// TestAsyncMasterKill9: under steady load from 4 producers the slave
// stays within slave_max_delay of the master (measured: an acked put's
// time until the slave serves it, and the slave's own slave_lag_ms);
// after kill -9 of the master, the slave's copy is an exact prefix of
// every partition's acknowledged messages, and what is missing is bounded
// by the lag at the kill (reported).
func TestAsyncMasterKill9(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterSpec{Config: replConfig})
	master := startRepl(t, c, 1, -1, "")
	slave := startRepl(t, c, 1, 1, "")
	h := queuecheck.New()
	load := startReplLoad(t, h, master.Addr, 4)

	// Sample visibility lag: the newest ack, polled for on the slave.
	sc := dial(t, slave.Addr)
	defer sc.close()
	var lags []time.Duration
	var maxStatLag, lastLagBytes int64
	end := time.Now().Add(2 * time.Second)
	for time.Now().Before(end) {
		a, n := load.last()
		if n == 0 {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		for {
			r, err := sc.get("repl", a.part, a.offset, 1<<16)
			require.NoError(t, err)
			if r.Op == protocol.OpValue {
				lags = append(lags, time.Since(a.at))
				break
			}
			require.Less(t, time.Since(a.at), 10*time.Second, "the slave did not copy offset %d of repl-%d", a.offset, a.part)
			time.Sleep(time.Millisecond)
		}
		st := slave.stats(t)
		v, _ := strconv.ParseInt(st["slave_lag_ms"], 10, 64)
		maxStatLag = max(maxStatLag, v)
		lastLagBytes, _ = strconv.ParseInt(st["slave_lag_bytes"], 10, 64)
		time.Sleep(20 * time.Millisecond)
	}
	slices.Sort(lags)
	require.NotEmpty(t, lags)
	p := func(q float64) time.Duration { return lags[min(len(lags)-1, int(q*float64(len(lags))))] }
	_, n := load.last()
	t.Logf("steady load: %d acks in 2 s; ack-to-slave lag over %d samples: p50 %v, p99 %v, max %v; slave_lag_ms max %d, last slave_lag_bytes %d (slave_max_delay 500 ms)",
		n, len(lags), p(0.5), p(0.99), lags[len(lags)-1], maxStatLag, lastLagBytes)
	// Not a timing assertion: a liveness bound far above slave_max_delay.
	require.Less(t, lags[len(lags)-1], 5*time.Second)

	// A burst of pipelined puts (64 in flight) runs into the kill, so that
	// the slave is behind when the master dies.
	burst := startBurst(t, h, master.Addr)
	time.Sleep(300 * time.Millisecond)
	lagAtKill := slave.stats(t)["slave_lag_bytes"]
	master.kill9(t)
	killedAt := time.Now()
	load.halt()
	acks := append(append([]replAck(nil), load.acks...), burst.wait()...)

	// The slave may still be copying what it had fetched; it has nothing
	// more to fetch. Give it a moment, then read its copy.
	time.Sleep(300 * time.Millisecond)
	byPart := map[int32]map[int64][]byte{}
	ends := map[int32]int64{}
	for p := range int32(4) {
		recs, e, err := readPartition(sc, "repl", p, 1<<20)
		require.NoError(t, err)
		m := map[int64][]byte{}
		part := fmt.Sprintf("repl-%d", p)
		for _, r := range recs {
			m[r.Offset] = r.Data
			h.Read(part, r.Offset, string(r.Data))
		}
		h.ReadEnd(part, e)
		byPart[p], ends[p] = m, e
	}
	report := h.Check()
	t.Logf("queue check of the slave after the kill: %s", report)
	require.True(t, report.Safe(), "beyond a lost tail: %s", report)
	lost, lostBytes, lostAge := 0, 0, time.Duration(0)
	for _, a := range acks {
		data, ok := byPart[a.part][a.offset]
		switch {
		case ok && string(data) == a.body:
		case ok:
			t.Fatalf("repl-%d offset %d: slave has %q, master acked %q", a.part, a.offset, data, a.body)
		case a.offset < ends[a.part]:
			t.Fatalf("repl-%d offset %d (acked %q) is missing inside the slave's copy (end %d)", a.part, a.offset, a.body, ends[a.part])
		default:
			lost++
			lostBytes += len(a.body) + message.HeaderSize
			lostAge = max(lostAge, killedAt.Sub(a.at))
		}
	}
	t.Logf("kill -9 of the master under a pipelined burst: %d of %d acknowledged messages (%d bytes) not on the slave, all after its copy's end; the oldest was acked %v before the kill; slave_lag_bytes just before the kill %s",
		lost, len(acks), lostBytes, lostAge, lagAtKill)
	require.Less(t, lostAge, 5*time.Second, "the slave lost messages acked long before the kill")
	require.Equal(t, lost, len(report.LostTail))
}

// burst puts to repl with 64 puts in flight until its connection fails.
type burst struct {
	done chan []replAck
}

func startBurst(t *testing.T, h *queuecheck.History, addr string) *burst {
	cl, err := dialClient(addr)
	require.NoError(t, err)
	cl.timeout = 3 * time.Second
	b := &burst{done: make(chan []replAck, 1)}
	go func() {
		defer cl.close()
		type sent struct {
			part int32
			body string
		}
		var acks []replAck
		inflight := map[int32]sent{}
		for i := 0; ; {
			if len(inflight) < 64 {
				op := cl.nextOpaque()
				p := int32(i % 4)
				body := fmt.Sprintf("burst-%d-%s", i, strings.Repeat("z", 200))
				if cl.write(putFrame("repl", p, []byte(body), op)) != nil {
					break
				}
				inflight[op] = sent{p, body}
				i++
				continue
			}
			r, err := cl.read()
			if err != nil {
				break
			}
			s, ok := inflight[r.Opaque]
			delete(inflight, r.Opaque)
			if !ok {
				continue
			}
			part := fmt.Sprintf("repl-%d", s.part)
			if r.Code != protocol.StatusOK {
				h.Send("burst", part, s.body, queuecheck.Failed, 0)
				continue
			}
			if _, _, off, _, err := protocol.ParsePutResult(r.Body); err == nil {
				acks = append(acks, replAck{time.Now(), s.part, off, s.body})
				h.Send("burst", part, s.body, queuecheck.Acked, off)
			}
		}
		for _, s := range inflight { // no answer: the master died
			h.Send("burst", fmt.Sprintf("repl-%d", s.part), s.body, queuecheck.Unknown, 0)
		}
		b.done <- acks
	}()
	return b
}

// wait returns the burst's acks once its connection has failed.
func (b *burst) wait() []replAck {
	select {
	case a := <-b.done:
		return a
	case <-time.After(15 * time.Second):
		panic("burst did not end after the master was killed")
	}
}

// TestSlaveStartsAtMasterMin: a slave started empty after the master's
// retention deleted the head of every partition starts each at the
// master's min offset (store.Log.Rebase), so its offsets are the master's.
func TestSlaveStartsAtMasterMin(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(replConfig, "delete_check_interval = 1\n", "delete_check_interval = 1\ndelete_policy = \"delete,1s\"\nmax_segment_size = 4096\n", 1)
	cfg = strings.Replace(cfg, "max_segment_size = 65536\n", "", 1)
	c := startCluster(t, clusterSpec{Config: cfg})
	master := startRepl(t, c, 1, -1, "")
	putMany(t, master.Addr, 1200, "old")
	// Wait until retention has cut every partition's head (on a loaded
	// machine it may do so before all 1200 were ever readable).
	mc := dial(t, master.Addr)
	defer mc.close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		offs, cut := partOffsets(t, mc), 0
		for topic, n := range replTopics {
			for p := range n {
				if offs[topic+"-"+strconv.Itoa(p)][0] > 0 {
					cut++
				}
			}
		}
		if cut == 6 {
			break
		}
		require.True(t, time.Now().Before(deadline), "retention did not cut every partition: %v", offs)
		time.Sleep(100 * time.Millisecond)
	}
	// Then until it has nothing more to cut: min offsets unchanged over
	// 2.5 s, longer than the 1 s age plus the 1 s check interval, so every
	// sealed segment is gone. Otherwise, on a loaded machine, retention
	// went on cutting segments that aged past 1 s while the new slave
	// copied, and overtook it ("the master deleted records the slave never
	// copied").
	deadline = time.Now().Add(20 * time.Second)
	for prev := partOffsets(t, mc); ; {
		time.Sleep(2500 * time.Millisecond)
		cur := partOffsets(t, mc)
		if maps.Equal(prev, cur) {
			break
		}
		require.True(t, time.Now().Before(deadline), "retention still cutting after 20s: %v, then %v", prev, cur)
		prev = cur
	}
	before := partOffsets(t, mc)
	slave := startRepl(t, c, 1, 1, "")
	waitCaughtUp(t, master, slave, 20*time.Second)
	require.True(t, slave.logContains("is empty; starting at the master's min offset"))
	putMany(t, master.Addr, 60, "new")
	waitReadable(t, master.Addr, 1) // threshold topics flush within 100 ms
	time.Sleep(300 * time.Millisecond)
	waitCaughtUp(t, master, slave, 20*time.Second)
	// The master's retention may go on cutting; records present on both
	// must be identical, at the same offsets.
	sc := dial(t, slave.Addr)
	defer sc.close()
	for topic, n := range replTopics {
		for p := range int32(n) {
			mr, mend, err := readPartitionRetained(mc, topic, p)
			require.NoError(t, err)
			sr, send, err := readPartitionRetained(sc, topic, p)
			require.NoError(t, err)
			require.Equal(t, mend, send)
			require.Greater(t, sr[0].Offset, int64(0), "%s-%d starts at 0 on the slave", topic, p)
			require.GreaterOrEqual(t, sr[0].Offset, before[topic+"-"+strconv.Itoa(int(p))][0])
			at := map[int64]record{}
			for _, r := range mr {
				at[r.Offset] = r
			}
			for _, r := range sr {
				if m, ok := at[r.Offset]; ok {
					require.Equal(t, m.ID, r.ID)
					require.Equal(t, m.Data, r.Data)
				} else {
					require.Less(t, r.Offset, mr[0].Offset, "%s-%d: slave record at %d that the master does not have", topic, p, r.Offset)
				}
			}
		}
	}
}
