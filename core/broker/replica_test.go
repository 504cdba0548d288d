package broker

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/faultnet"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// replBroker starts an in-process broker id of a replicated pair (slave
// < 0: the master) with data in dir, listening on addr ("" picks one).
func replBroker(t testing.TB, zkAddr, root, dir, addr string, slave int, mod func(*conf.Config)) *Broker {
	return replBrokerOpts(t, zkAddr, root, dir, addr, slave, mod, Options{Logf: t.Logf}, knobs{})
}

// replConf sets what every replication test broker shares: broker id 3,
// slave id slave, ZooKeeper at zkAddr under root, short timeouts.
func replConf(zkAddr, root string, slave int) func(*conf.Config) {
	return func(cfg *conf.Config) {
		cfg.BrokerID = 3
		cfg.SlaveID = slave
		cfg.ZooKeeper.Connect = zkAddr
		cfg.ZooKeeper.Root = root
		cfg.ZooKeeper.SessionTimeout = 4000
		cfg.ZooKeeper.ConnectionTimeout = 5000
		cfg.SyncTimeout = 1000
	}
}

// stableAddr is an address for a broker that a test stops and starts
// again on it: a port of testsvc.StablePorts, which no bind to port 0 or
// connect of the tests alongside takes while the broker is down (one from
// a listen on :0 may be handed out again meanwhile, and the restart then
// fails: address already in use).
func stableAddr(tb testing.TB) string {
	tb.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(testsvc.StablePorts(tb, 1)[0]))
}

func replBrokerOpts(t testing.TB, zkAddr, root, dir, addr string, slave int, mod func(*conf.Config), opts Options, k knobs) *Broker {
	t.Helper()
	mods := []func(*conf.Config){replConf(zkAddr, root, slave)}
	if mod != nil {
		mods = append(mods, mod)
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	return fixture{dir: dir, mods: mods, opts: opts, knobs: k, listen: addr}.start(t)
}

// pipelinedPuts puts n messages over partitions 0 and 1 of t, 32 in
// flight, and returns how many were acknowledged and one failure body.
func pipelinedPuts(t *testing.T, addr string, n int) (ok int, fail string) {
	t.Helper()
	c := dialRaw(t, addr)
	inflight := 0
	var req protocol.Request
	for i := 0; i < n || inflight > 0; {
		if i < n && inflight < 32 {
			data := []byte(fmt.Sprintf("m%d", i))
			c.bw.Write(protocol.AppendPut(nil, "t", int32(i%2), 0, int64(message.Checksum(data)), int32(i+1), data))
			i++
			inflight++
			if inflight < 32 && i < n {
				continue
			}
		}
		require.NoError(t, c.bw.Flush())
		require.NoError(t, c.dec.Decode(&req))
		inflight--
		if req.Code == protocol.StatusOK {
			ok++
		} else {
			fail = string(req.Body)
		}
	}
	return ok, fail
}

// TestReplicationInProcess runs a sync master and its slave in this
// process (for the race detector): puts are refused with no slave, shipped
// once it is in sync, refused again after it closes, and shipped again
// after it returns; the slave's copy has every acknowledged put.
func TestReplicationInProcess(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/repl-inproc-%d", time.Now().UnixNano())
	master := replBroker(t, zkAddr, root, t.TempDir(), "", -1, func(c *conf.Config) { c.Replication = conf.ReplicationSync })
	ok, fail := pipelinedPuts(t, master.Addr(), 10)
	require.Zero(t, ok)
	require.Equal(t, "Slave is disconnected ", fail)

	sdir := t.TempDir()
	slave := replBroker(t, zkAddr, root, sdir, stableAddr(t), 1, nil) // restarted on its address below
	mc := dialRaw(t, master.Addr())
	waitFor(t, 15*time.Second, func() error {
		if v := mc.stats(t, "")["sync_partitions_in_sync"]; v != "2/2" {
			return fmt.Errorf("sync_partitions_in_sync %s", v)
		}
		return nil
	})
	ok, fail = pipelinedPuts(t, master.Addr(), 400)
	require.Equal(t, 400, ok, fail)
	sc := dialRaw(t, slave.Addr())
	r := sc.roundTrip(t, protocol.AppendPut(nil, "t", 0, 0, -1, 6, []byte("x")))
	require.Equal(t, protocol.StatusForbidden, r.Code)
	requireSameEnds(t, master, slave, "t")
	saddr := slave.Addr()
	require.NoError(t, slave.Close())
	waitFor(t, 10*time.Second, func() error {
		if _, fail := pipelinedPuts(t, master.Addr(), 2); fail == "" {
			return fmt.Errorf("puts still acknowledged")
		}
		return nil
	})

	slave = replBroker(t, zkAddr, root, sdir, saddr, 1, nil)
	waitFor(t, 15*time.Second, func() error {
		if v := mc.stats(t, "")["sync_partitions_in_sync"]; v != "2/2" {
			return fmt.Errorf("sync_partitions_in_sync %s", v)
		}
		return nil
	})
	ok, fail = pipelinedPuts(t, master.Addr(), 200)
	require.Equal(t, 200, ok, fail)
	requireSameEnds(t, master, slave, "t")
}

// TestSyncSlaveSkipsSynced: a sync slave's puller does not fetch again
// from the master the records that syncs stored (it used to fetch every
// one, so that each byte crossed the link twice).
func TestSyncSlaveSkipsSynced(t *testing.T) {
	// Not parallel: how much the slave refetches depends on how soon the master's appends are durable, which load delays.
	master, slave := syncPair(t, "skip")
	ok, fail := pipelinedPuts(t, master.Addr(), 400)
	require.Equal(t, 400, ok, fail)
	requireSameEnds(t, master, slave, "t")
	time.Sleep(500 * time.Millisecond) // a few pull rounds (at most slave_max_delay/4 apart)
	var stored int64
	for _, l := range master.topicList()[0].Parts {
		stored += l.MaxOffset() - l.MinOffset()
	}
	sc := dialRaw(t, slave.Addr())
	st := sc.stats(t, "")
	require.NotEqual(t, "0", st["slave_sync_messages"])
	refetched, err := strconv.ParseInt(st["slave_refetched_bytes"], 10, 64)
	require.NoError(t, err)
	// Records a sync appended but not yet made durable may be fetched
	// once (the puller starts at the slave's durable end): how many
	// depends on how long the slave's fdatasyncs take against the
	// puller's rounds, 0 to 16% of the bytes in 8 runs at load 12 on 2
	// cores, 33% once in CI. Before, every byte was fetched again (100%).
	require.Less(t, refetched, stored/2, "slave_refetched_bytes of %d stored", stored)
}

// benchReplicated measures 1 KiB group-commit puts from 4 connections
// with 64 in flight each, over benchReplParts partitions, to addr.
func benchReplicated(b *testing.B, addr string) {
	data := bytes.Repeat([]byte("x"), 1024)
	frames := make([][]byte, benchReplParts)
	for p := range frames {
		frames[p] = protocol.AppendPut(nil, "t", int32(p), 0, int64(message.Checksum(data)), 1, data)
	}
	b.SetBytes(int64(len(data)))
	if b.N >= benchWarmMin {
		// Steady state: a fresh broker zero-fills new journal files until
		// its first checkpoints free files to recycle. A long-running
		// broker does not, so neither does the timed part.
		if err := pumpPuts(b, addr, frames, benchWarmMsgs); err != nil {
			b.Fatal(err)
		}
	}
	cpu0 := processCPU()
	b.ResetTimer()
	err := pumpPuts(b, addr, frames, b.N)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	// The process's CPU (brokers and clients) per message: steadier than
	// msgs/s on a shared machine.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/msg")
}

// benchWarmMsgs is how many puts benchReplicated sends before its timed
// part: 1 KiB each, more than the journal's first file and its two spares
// (3 x 64 MiB) plus a checkpoint, after which the journal recycles its
// files. benchWarmMin is the smallest b.N that gets the warm-up (the
// probing runs of 1 and 100 do not).
const (
	benchWarmMsgs = 300_000
	benchWarmMin  = 10_000
)

// pumpPuts sends total puts of frames (round robin) to addr from 4
// connections with 64 in flight each and waits for every reply.
func pumpPuts(b *testing.B, addr string, frames [][]byte, total int) error {
	const conns, window = 4, 64
	parts := len(frames)
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for c := range conns {
		n := total / conns
		if c == 0 {
			n += total % conns
		}
		cl := dialRaw(b, addr)
		wg.Add(2)
		sem := make(chan struct{}, window)
		go func() {
			defer wg.Done()
			var req protocol.Request
			for range n {
				if err := cl.dec.Decode(&req); err != nil || req.Code != protocol.StatusOK {
					errs <- fmt.Errorf("put: %v %d %s", err, req.Code, req.Body)
					return
				}
				<-sem
			}
		}()
		go func() {
			defer wg.Done()
			for i := range n {
				sem <- struct{}{}
				cl.bw.Write(frames[(c+i)%parts])
				if len(sem) == cap(sem) || i == n-1 || cl.bw.Buffered() > 64<<10 {
					cl.bw.Flush()
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchReplParts is BenchmarkReplicatedPut's partition count (issue 11:
// 64 partitions).
const benchReplParts = 64

// BenchmarkReplicatedPut: durable (group commit) 1 KiB puts to a master
// alone, to a master with an async slave pulling, and to a sync master
// with its slave, in one run (compare the ratios, not the figures).
func BenchmarkReplicatedPut(b *testing.B) {
	zkAddr := testsvc.ZooKeeper(b)
	mod := func(sync bool) func(*conf.Config) {
		return func(c *conf.Config) {
			c.NumPartitions = benchReplParts
			if sync {
				c.Replication = conf.ReplicationSync
			}
		}
	}
	b.Run("single", func(b *testing.B) {
		root := fmt.Sprintf("/repl-bench-%d", time.Now().UnixNano())
		m := labelled("single", func() *Broker { return replBroker(b, zkAddr, root, b.TempDir(), "", -1, mod(false)) })
		benchReplicated(b, m.Addr())
	})
	b.Run("async-slave", func(b *testing.B) {
		root := fmt.Sprintf("/repl-bench-%d", time.Now().UnixNano())
		m := replBroker(b, zkAddr, root, b.TempDir(), "", -1, mod(false))
		replBroker(b, zkAddr, root, b.TempDir(), "", 1, mod(false))
		benchReplicated(b, m.Addr())
	})
	b.Run("sync", func(b *testing.B) {
		root := fmt.Sprintf("/repl-bench-%d", time.Now().UnixNano())
		m := labelled("master", func() *Broker { return replBroker(b, zkAddr, root, b.TempDir(), "", -1, mod(true)) })
		labelled("slave", func() *Broker { return replBroker(b, zkAddr, root, b.TempDir(), "", 1, mod(false)) })
		deadline := time.Now().Add(15 * time.Second)
		want := fmt.Sprintf("sync_partitions_in_sync %d/%d", benchReplParts, benchReplParts)
		for !strings.Contains(m.statsText(), want) {
			if time.Now().After(deadline) {
				b.Fatal("not in sync")
			}
			time.Sleep(20 * time.Millisecond)
		}
		benchReplicated(b, m.Addr())
	})
}

// labelled runs start with the profiler label broker=role, which the
// broker's goroutines inherit, so that a -cpuprofile of
// BenchmarkReplicatedPut splits by broker (go tool pprof -tagfocus
// broker=slave, or -tags).
func labelled(role string, start func() *Broker) *Broker {
	var m *Broker
	pprof.Do(context.Background(), pprof.Labels("broker", role), func(context.Context) { m = start() })
	return m
}

// statsText is the broker's stats summary.
func (b *Broker) statsText() string {
	var sb strings.Builder
	b.writeSummary(&sb)
	return sb.String()
}

// syncPair starts a sync master and its slave on a new ZooKeeper root
// /repl-<name>-<now> and waits until they are in sync.
func syncPair(t *testing.T, name string) (master, slave *Broker) {
	t.Helper()
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/repl-%s-%d", name, time.Now().UnixNano())
	master = replBroker(t, zkAddr, root, t.TempDir(), "", -1, func(c *conf.Config) { c.Replication = conf.ReplicationSync })
	slave = replBroker(t, zkAddr, root, t.TempDir(), "", 1, nil)
	waitInSync(t, master, "2/2")
	return master, slave
}

// waitInSync waits until the sync master has all partitions in sync.
func waitInSync(t *testing.T, m *Broker, want string) {
	t.Helper()
	waitFor(t, 15*time.Second, func() error {
		if txt := m.statsText(); !strings.Contains(txt, "sync_partitions_in_sync "+want+"\r\n") {
			return fmt.Errorf("not in sync: %s", txt)
		}
		return nil
	})
}

// proxiedSyncPair starts a slave and a sync master (sync_timeout 500 ms,
// sync_degrade as given) whose link to the slave goes through a fault
// proxy (closed at the end of the test), and waits until both partitions
// are in sync.
func proxiedSyncPair(t *testing.T, zkAddr, root string, degrade bool) (master, slave *Broker, proxy *faultnet.Proxy) {
	t.Helper()
	return proxiedSyncPairConf(t, zkAddr, root, func(c *conf.Config) {
		c.SyncDegrade = degrade
		c.SyncTimeout = 500
	})
}

// proxiedSyncPairConf is proxiedSyncPair with the master's configuration
// changed by mod (replication = "sync" set before it).
func proxiedSyncPairConf(t *testing.T, zkAddr, root string, mod func(*conf.Config)) (master, slave *Broker, proxy *faultnet.Proxy) {
	t.Helper()
	slave = replBroker(t, zkAddr, root, t.TempDir(), "", 1, nil)
	proxy, err := faultnet.Start(slave.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Close() })
	master = replBrokerOpts(t, zkAddr, root, t.TempDir(), "", -1, func(c *conf.Config) {
		c.Replication = conf.ReplicationSync
		mod(c)
	}, Options{Logf: t.Logf}, knobs{replAddr: func(a string) string {
		if a == slave.Addr() {
			return proxy.Addr()
		}
		return a
	}})
	waitInSync(t, master, "2/2")
	return master, slave, proxy
}

// TestSyncLinkFaults: a fault proxy (internal/faultnet) sits between a
// sync master and its slave. While it holds the link's bytes (a network
// that stops delivering), and after it cuts the link, nothing is
// acknowledged without sync_degrade; with it, puts are stored on the
// master alone once the link is declared lost (sync_timeout) and the
// slave pulls them before the link joins again. Either way the copies end
// equal.
func TestSyncLinkFaults(t *testing.T) {
	// Not parallel: it times the link against sync_timeout.
	zkAddr := testsvc.ZooKeeper(t)
	for _, degrade := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync_degrade=%v", degrade), func(t *testing.T) {
			root := fmt.Sprintf("/repl-faults-%d", time.Now().UnixNano())
			master, slave, proxy := proxiedSyncPair(t, zkAddr, root, degrade)
			ok, fail := pipelinedPuts(t, master.Addr(), 200)
			require.Equal(t, 200, ok, fail)

			for _, fault := range []string{"hold", "cut"} {
				if fault == "hold" {
					proxy.Hold()
				} else {
					proxy.Cut(true)
				}
				ok, fail = pipelinedPuts(t, master.Addr(), 300)
				if degrade {
					require.Positive(t, ok, "no put stored while degraded (%s)", fail)
					require.Contains(t, master.statsText(), "sync_partitions_in_sync 0/2")
				} else {
					require.Zero(t, ok, "puts acknowledged while the link is %s", fault)
					require.Contains(t, fail, "Slave is disconnected")
				}
				t.Logf("%s: %d of 300 puts acknowledged, last failure %q", fault, ok, fail)
				proxy.Release()
				proxy.Refuse(false)
				waitInSync(t, master, "2/2")
				ok, fail = pipelinedPuts(t, master.Addr(), 100)
				require.Equal(t, 100, ok, fail)
			}
			requireSameEnds(t, master, slave, "t")
			if degrade {
				require.NotContains(t, master.statsText(), "sync_degraded_puts 0\r\n")
			}
		})
	}
}

// requireSameEnds requires that every partition of topic ends at the same
// offset with the same last id on a and b (a master and its replica).
func requireSameEnds(t *testing.T, a, b *Broker, topic string) {
	t.Helper()
	for p, l := range a.topics.Get(topic).Parts {
		o := b.topics.Get(topic).Parts[p]
		require.Equal(t, l.MaxOffset(), o.MaxOffset(), "partition %d", p)
		require.Equal(t, l.LastID(), o.LastID(), "partition %d", p)
	}
}
