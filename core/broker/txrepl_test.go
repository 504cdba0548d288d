package broker

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// logRecord is one record of a partition, with its offset.
type logRecord struct {
	off  int64
	id   int64
	data string
}

// partRecords reads every readable record of b's partition p of topic.
func partRecords(t *testing.T, b *Broker, topic string, p int) []logRecord {
	t.Helper()
	l := b.topics.Get(topic).Parts[p]
	var out []logRecord
	var buf []byte
	for off := l.MinOffset(); off < l.MaxOffset(); {
		v, err := l.Read(off, 1<<20)
		require.NoError(t, err)
		buf, err = v.ReadAll(buf[:0])
		v.Release()
		require.NoError(t, err)
		it := message.NewIterator(buf, off, 0)
		for at := off; it.Next(); at = it.NextOffset() {
			r := it.Record()
			out = append(out, logRecord{off: at, id: r.ID, data: string(r.Data)})
		}
		require.NoError(t, it.Err())
		require.Positive(t, it.Consumed())
		off = it.NextOffset()
	}
	return out
}

// requireSameRecords requires equal copies of topic on a master and its
// slave: the same records (ids, data) at the same offsets.
func requireSameRecords(t *testing.T, m, s *Broker, topic string) {
	t.Helper()
	for p := range m.topics.Get(topic).Parts {
		require.Equal(t, partRecords(t, m, topic, p), partRecords(t, s, topic, p), "partition %d", p)
	}
}

// txOpen is the number of open transactions b holds, and its prepared
// XA keys.
func txOpen(b *Broker) (int, []string) {
	st := b.txm.Status()
	var keys []string
	for _, t := range st.Open {
		if t.XA && t.State == "prepared" {
			keys = append(keys, t.Key)
		}
	}
	return len(st.Open), keys
}

// txRecord is one transaction journal record (core/tx/log.go): crc32c,
// payload length, type, payload.
func txRecord(typ byte, payload ...[]byte) []byte {
	p := bytes.Join(payload, nil)
	rec := binary.BigEndian.AppendUint32(make([]byte, 4), uint32(len(p)))
	rec = append(append(rec, typ), p...)
	binary.BigEndian.PutUint32(rec, crc32.Checksum(rec[4:], crc32.MakeTable(crc32.Castagnoli)))
	return rec
}

// txStr, txU32 and txU64 are a record's fields.
func txStr(s string) []byte { return append(binary.BigEndian.AppendUint16(nil, uint16(len(s))), s...) }
func txU32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func txU64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func txDo(t *testing.T, c *rawClient, key string, typ protocol.TxType) protocol.Request {
	t.Helper()
	return c.roundTrip(t, protocol.AppendTransaction(nil, key, "s", typ, 0, "", 77))
}

func txrPut(t *testing.T, c *rawClient, key string, p int32, body string) {
	t.Helper()
	r := c.roundTrip(t, append(protocol.AppendTxPutHeader(nil, "t", p, len(body), 0, protocol.NoChecksum, key, 78), body...))
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
}

// TestTxReplicationInProcess: a sync master and its slave in this process
// (for the race detector). Local commits, interleaved with pipelined puts
// to the same partitions, land on the slave at the master's offsets; a
// prepared XA branch is held prepared by the slave before PREPARE is
// answered, and its commit or rollback ends it there; a branch prepared
// while no slave was in sync is shipped when one joins; with the slave
// gone, commit, prepare and rollback are refused and the transactions stay
// as they were. In group commit and in threshold mode.
func TestTxReplicationInProcess(t *testing.T) {
	t.Parallel()
	for _, threshold := range []int{0, 3} {
		t.Run(fmt.Sprintf("unflush_threshold=%d", threshold), func(t *testing.T) { testTxReplication(t, threshold) })
	}
}

func testTxReplication(t *testing.T, threshold int) {
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/txrepl-inproc-%d", time.Now().UnixNano())
	mode := func(c *conf.Config) {
		c.UnflushThreshold = threshold
		c.UnflushInterval = 20
	}
	master := replBroker(t, zkAddr, root, t.TempDir(), "", -1, func(c *conf.Config) {
		mode(c)
		c.Replication = conf.ReplicationSync
	})
	require.Equal(t, threshold, master.topics.Get("t").Conf().UnflushThreshold)
	mc := dialRaw(t, master.Addr())

	// No slave: a commit is refused and the transaction stays open; a
	// prepare fails but the branch stays prepared here.
	txDo(t, mc, "TX:s:1", protocol.TxBegin)
	txrPut(t, mc, "TX:s:1", 0, "early")
	r := txDo(t, mc, "TX:s:1", protocol.TxCommitOnePhase)
	require.Equal(t, protocol.StatusInternalError, r.Code)
	require.Contains(t, string(r.Body), "Slave is disconnected")
	require.Contains(t, string(r.Body), "still open")
	early := "XID:1:aa:01:q"
	txDo(t, mc, early, protocol.TxBegin)
	txrPut(t, mc, early, 1, "early-xa")
	r = txDo(t, mc, early, protocol.TxPrepare)
	require.Equal(t, protocol.StatusInternalError, r.Code)
	require.Contains(t, string(r.Body), "XAException:code=-7")
	require.Contains(t, string(r.Body), "prepared on the master alone")

	sdir := t.TempDir()
	slave := replBroker(t, zkAddr, root, sdir, stableAddr(t), 1, mode) // restarted on its address below
	waitInSync(t, master, "2/2")
	waitFor(t, 5*time.Second, func() error {
		if _, keys := txOpen(slave); len(keys) != 1 || keys[0] != early {
			return fmt.Errorf("slave holds prepared %v", keys)
		}
		return nil
	})
	r = txDo(t, mc, "TX:s:1", protocol.TxCommitOnePhase) // open still: commits now
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))

	// Commits interleaved with pipelined puts to the same partitions.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ok, fail := pipelinedPuts(t, master.Addr(), 600)
		if ok != 600 {
			t.Errorf("puts: %d of 600, %s", ok, fail)
		}
	}()
	for i := 0; i < 30; i++ {
		key := fmt.Sprintf("TX:s:%d", 100+i)
		txDo(t, mc, key, protocol.TxBegin)
		for j := 0; j < 1+i%5; j++ {
			txrPut(t, mc, key, int32(j%2), fmt.Sprintf("tx %d %d", i, j))
		}
		r := txDo(t, mc, key, protocol.TxCommitOnePhase)
		require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	}
	wg.Wait()

	// XA: prepared on both before XA_OK; commit and rollback end it on
	// both.
	for i, typ := range []protocol.TxType{protocol.TxCommitTwoPhase, protocol.TxRollback} {
		key := fmt.Sprintf("XID:1:%02x:01:q", i)
		txDo(t, mc, key, protocol.TxBegin)
		txrPut(t, mc, key, 0, "xa a "+key)
		txrPut(t, mc, key, 1, "xa b "+key)
		r := txDo(t, mc, key, protocol.TxPrepare)
		require.Equal(t, "0", string(r.Body))
		_, keys := txOpen(slave)
		require.Contains(t, keys, key, "the slave holds the branch when PREPARE is answered")
		r = txDo(t, mc, key, typ)
		require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
		_, keys = txOpen(slave)
		require.NotContains(t, keys, key, "%v ended the branch on the slave too", typ)
	}
	r = txDo(t, mc, early, protocol.TxRollback)
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	n, keys := txOpen(slave)
	require.Zero(t, n, "the slave holds %v", keys)
	require.Eventually(t, func() bool {
		return master.topics.Get("t").Parts[0].MaxOffset() == slave.topics.Get("t").Parts[0].MaxOffset()
	}, 5*time.Second, time.Millisecond)
	requireSameRecords(t, master, slave, "t")

	// A branch prepared (on both) survives the slave's restart there; with
	// the slave gone, commit and rollback are refused.
	key := "XID:1:ff:01:q"
	txDo(t, mc, key, protocol.TxBegin)
	txrPut(t, mc, key, 0, "kept")
	require.Equal(t, "0", string(txDo(t, mc, key, protocol.TxPrepare).Body))
	saddr := slave.Addr()
	require.NoError(t, slave.Close())
	waitFor(t, 10*time.Second, func() error {
		if strings.Contains(master.statsText(), "sync_partitions_in_sync 2/2") {
			return fmt.Errorf("still in sync")
		}
		return nil
	})
	for _, typ := range []protocol.TxType{protocol.TxCommitTwoPhase, protocol.TxRollback} {
		r := txDo(t, mc, key, typ)
		require.Equal(t, protocol.StatusInternalError, r.Code)
		require.Contains(t, string(r.Body), "Slave is disconnected")
	}
	slave = replBroker(t, zkAddr, root, sdir, saddr, 1, mode)
	_, keys = txOpen(slave)
	require.Equal(t, []string{key}, keys, "recovered prepared on the slave")
	waitInSync(t, master, "2/2")
	requireCommitReplicated(t, mc, master, slave, key, 0)
}

// requireCommitReplicated commits the prepared branch key on master over
// mc and requires the slave to hold it no longer, partition part of t to
// end where the master's does, and both copies of t equal.
func requireCommitReplicated(t *testing.T, mc *rawClient, master, slave *Broker, key string, part int) {
	t.Helper()
	require.Equal(t, protocol.StatusOK, txDo(t, mc, key, protocol.TxCommitTwoPhase).Code)
	n, keys := txOpen(slave)
	require.Zero(t, n, "the slave holds %v", keys)
	require.Eventually(t, func() bool {
		return master.topics.Get("t").Parts[part].MaxOffset() == slave.topics.Get("t").Parts[part].MaxOffset()
	}, 5*time.Second, time.Millisecond)
	requireSameRecords(t, master, slave, "t")
}

// TestTxReplicationDegrade: with sync_degrade = true and no slave in sync,
// commits and prepares are stored on the master alone and acknowledged;
// a slave that joins then gets the prepared branch with the link's state
// and the committed batches by pulling, and the branch's later commit
// reaches it.
func TestTxReplicationDegrade(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/txrepl-degrade-%d", time.Now().UnixNano())
	master := replBroker(t, zkAddr, root, t.TempDir(), "", -1, func(c *conf.Config) {
		c.Replication = conf.ReplicationSync
		c.SyncDegrade = true
	})
	mc := dialRaw(t, master.Addr())
	txDo(t, mc, "TX:s:1", protocol.TxBegin)
	txrPut(t, mc, "TX:s:1", 0, "alone a")
	txrPut(t, mc, "TX:s:1", 1, "alone b")
	r := txDo(t, mc, "TX:s:1", protocol.TxCommitOnePhase)
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	key := "XID:1:aa:01:q"
	txDo(t, mc, key, protocol.TxBegin)
	txrPut(t, mc, key, 1, "alone xa")
	require.Equal(t, "0", string(txDo(t, mc, key, protocol.TxPrepare).Body))
	require.Contains(t, master.statsText(), "sync_degraded_puts 2\r\n")

	slave := replBroker(t, zkAddr, root, t.TempDir(), "", 1, nil)
	waitInSync(t, master, "2/2")
	_, keys := txOpen(slave)
	require.Equal(t, []string{key}, keys)
	requireCommitReplicated(t, mc, master, slave, key, 1)
}

// TestTxReplicationPulledCommit: the link to the slave is cut (a fault
// proxy on it; the slave's pulls go on) after a branch was prepared on
// both; with sync_degrade the commit is stored on the master alone, and
// the slave, copying the batch by pulling, stops holding the branch
// prepared (else a promoted slave's RECOVER would list a committed
// branch, and committing it there would store the batch twice).
func TestTxReplicationPulledCommit(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/txrepl-pulled-%d", time.Now().UnixNano())
	master, slave, proxy := proxiedSyncPair(t, zkAddr, root, true)
	mc := dialRaw(t, master.Addr())
	key := "XID:1:bb:01:q"
	txDo(t, mc, key, protocol.TxBegin)
	txrPut(t, mc, key, 0, "pulled a")
	txrPut(t, mc, key, 0, "pulled b")
	require.Equal(t, "0", string(txDo(t, mc, key, protocol.TxPrepare).Body))
	_, keys := txOpen(slave)
	require.Equal(t, []string{key}, keys)
	proxy.Refuse(true)
	proxy.Cut(true)
	waitFor(t, 10*time.Second, func() error {
		if strings.Contains(master.statsText(), "sync_partitions_in_sync 2/2") {
			return fmt.Errorf("still in sync")
		}
		return nil
	})
	r := txDo(t, mc, key, protocol.TxCommitTwoPhase)
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	waitFor(t, 10*time.Second, func() error {
		if n, keys := txOpen(slave); n != 0 {
			return fmt.Errorf("the slave holds %v", keys)
		}
		return nil
	})
	require.Eventually(t, func() bool {
		return master.topics.Get("t").Parts[0].MaxOffset() == slave.topics.Get("t").Parts[0].MaxOffset()
	}, 5*time.Second, time.Millisecond)
	requireSameRecords(t, master, slave, "t")
	proxy.Refuse(false)
	waitInSync(t, master, "2/2")
	n, keys := txOpen(slave)
	require.Zero(t, n, "the slave holds %v", keys)
}

// benchTxCommits runs b.N local transactions (begin, 4 puts of 1 KiB to
// one partition, commit, pipelined) over 8 connections.
func benchTxCommits(b *testing.B, addr string) {
	const conns = 8
	data := bytes.Repeat([]byte("x"), 1024)
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for c := range conns {
		n := b.N / conns
		if c == 0 {
			n += b.N % conns
		}
		cl := dialRaw(b, addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var req protocol.Request
			for i := range n {
				key := fmt.Sprintf("TX:b%d:%d", c, i)
				cl.bw.Write(protocol.AppendTransaction(nil, key, "b", protocol.TxBegin, 0, "", 1))
				for range 4 {
					cl.bw.Write(append(protocol.AppendTxPutHeader(nil, "t", int32(c%2), len(data), 0, protocol.NoChecksum, key, 2), data...))
				}
				cl.bw.Write(protocol.AppendTransaction(nil, key, "b", protocol.TxCommitOnePhase, 0, "", 3))
				cl.bw.Flush()
				for range 6 {
					if err := cl.dec.Decode(&req); err != nil || req.Code != protocol.StatusOK {
						errs <- fmt.Errorf("tx: %v %d %s", err, req.Code, req.Body)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

// BenchmarkReplicatedTxCommit: local transactions (4 × 1 KiB, one
// partition) committed on a broker alone and on a sync master with its
// slave, in one run (compare the ratio, not the figures).
func BenchmarkReplicatedTxCommit(b *testing.B) {
	zkAddr := testsvc.ZooKeeper(b)
	b.Run("single", func(b *testing.B) {
		root := fmt.Sprintf("/txrepl-bench-%d", time.Now().UnixNano())
		m := replBroker(b, zkAddr, root, b.TempDir(), "", -1, nil)
		benchTxCommits(b, m.Addr())
	})
	b.Run("sync", func(b *testing.B) {
		root := fmt.Sprintf("/txrepl-bench-%d", time.Now().UnixNano())
		m := replBroker(b, zkAddr, root, b.TempDir(), "", -1, func(c *conf.Config) { c.Replication = conf.ReplicationSync })
		replBroker(b, zkAddr, root, b.TempDir(), "", 1, nil)
		deadline := time.Now().Add(15 * time.Second)
		for !strings.Contains(m.statsText(), "sync_partitions_in_sync 2/2") {
			if time.Now().After(deadline) {
				b.Fatal("not in sync")
			}
			time.Sleep(20 * time.Millisecond)
		}
		benchTxCommits(b, m.Addr())
	})
}

// TestTxReplicationLinkHeld: the link's bytes are held (a fault proxy)
// while a commit is shipped: after sync_timeout the commit is answered
// with the slave's failure, it stands on the master (committing it again
// finds no transaction), and the slave gets its batch, once, by pulling.
// A prepare shipped into the held link fails the same way and the branch
// stays prepared on the master.
func TestTxReplicationLinkHeld(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/txrepl-held-%d", time.Now().UnixNano())
	master, slave, proxy := proxiedSyncPair(t, zkAddr, root, false)
	mc := dialRaw(t, master.Addr())
	txDo(t, mc, "TX:s:1", protocol.TxBegin)
	txrPut(t, mc, "TX:s:1", 0, "held a")
	txrPut(t, mc, "TX:s:1", 1, "held b")
	key := "XID:1:cc:01:q"
	xc := dialRaw(t, master.Addr())
	txDo(t, xc, key, protocol.TxBegin)
	txrPut(t, xc, key, 1, "held xa")
	proxy.Hold()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := txDo(t, xc, key, protocol.TxPrepare)
		if r.Code != protocol.StatusInternalError || !strings.Contains(string(r.Body), "prepared on the master alone") {
			t.Errorf("prepare into a held link: %d %s", r.Code, r.Body)
		}
	}()
	r := txDo(t, mc, "TX:s:1", protocol.TxCommitOnePhase)
	wg.Wait()
	require.Equal(t, protocol.StatusInternalError, r.Code)
	require.Contains(t, string(r.Body), "is stored on the master but the slave did not confirm it")
	r = txDo(t, mc, "TX:s:1", protocol.TxCommitOnePhase)
	require.Contains(t, string(r.Body), "is not begun", "the commit stood")
	_, keys := txOpen(master)
	require.Equal(t, []string{key}, keys, "the branch stays prepared on the master")
	proxy.Release()
	waitInSync(t, master, "2/2")
	_, keys = txOpen(slave)
	require.Equal(t, []string{key}, keys, "the link's state ships the branch")
	require.Equal(t, protocol.StatusOK, txDo(t, xc, key, protocol.TxRollback).Code)
	for p := range 2 {
		require.Eventually(t, func() bool {
			return master.topics.Get("t").Parts[p].MaxOffset() == slave.topics.Get("t").Parts[p].MaxOffset()
		}, 5*time.Second, time.Millisecond)
	}
	requireSameRecords(t, master, slave, "t")
	recs := partRecords(t, slave, "t", 0)
	require.Len(t, recs, 1)
	require.Equal(t, "held a", recs[0].data)
	n, _ := txOpen(slave)
	require.Zero(t, n)
}

// TestTxSyncBadInput: a slave answers malformed txsync frames with 400 and
// keeps the connection; a commit whose put records do not match its batch
// stores nothing; a broker that is not a slave refuses txsync.
func TestTxSyncBadInput(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/txrepl-bad-%d", time.Now().UnixNano())
	slave := replBroker(t, zkAddr, root, t.TempDir(), "", 1, nil)
	sc := dialRaw(t, slave.Addr())
	frame := func(kind string, body []byte) []byte {
		return append(protocol.AppendTxSyncHeader(nil, kind, len(body), 5), body...)
	}
	r := sc.roundTrip(t, frame(protocol.TxSyncCommit, []byte("abc")))
	require.Equal(t, protocol.StatusBadRequest, r.Code, string(r.Body))
	r = sc.roundTrip(t, []byte("txsync bogus 2 5\r\nxy"))
	require.Equal(t, protocol.StatusBadRequest, r.Code, string(r.Body))
	// A put record and a commit record whose crc does not match it.
	put := txRecord(1, txStr("TX:s:1"), txU64(99), txStr("t"), txU32(0), txU32(0), txU32(1), []byte("x"))
	commit := txRecord(3, txStr("TX:s:1"), []byte{0, 1}, txStr("t"), txU32(0), txU64(0), txU64(99), txU32(1), txU32(12345))
	r = sc.roundTrip(t, frame(protocol.TxSyncCommit, append(put, commit...)))
	require.Equal(t, protocol.StatusBadRequest, r.Code, string(r.Body))
	require.Contains(t, string(r.Body), "do not match")
	require.Zero(t, slave.topics.Get("t").Parts[0].MaxOffset())
	r = sc.roundTrip(t, frame(protocol.TxSyncPrepare, txRecord(2, txStr("XID:1:aa:01:q"), txStr(""))))
	require.Equal(t, protocol.StatusBadRequest, r.Code, string(r.Body))
	require.Contains(t, string(r.Body), "without its put records")
	r = sc.roundTrip(t, protocol.AppendStats(nil, "", 6))
	require.Equal(t, protocol.StatusOK, r.Code)
	n, _ := txOpen(slave)
	require.Zero(t, n)

	master := replBroker(t, zkAddr, root+"-m", t.TempDir(), "", -1, nil)
	mc := dialRaw(t, master.Addr())
	r = mc.roundTrip(t, frame(protocol.TxSyncState, nil))
	require.Equal(t, protocol.StatusInternalError, r.Code)
	require.Contains(t, string(r.Body), "not a slave")
}
