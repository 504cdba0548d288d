package broker

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// smallSlavePair starts a sync master and a slave whose max_message_size
// (1000) is smaller than the master's, on a new ZooKeeper root
// /repl-<name>-<now>, and waits until they are in sync.
func smallSlavePair(t *testing.T, name string) (master, slave *Broker) {
	t.Helper()
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/repl-%s-%d", name, time.Now().UnixNano())
	master = replBroker(t, zkAddr, root, t.TempDir(), "", -1, func(c *conf.Config) { c.Replication = conf.ReplicationSync })
	slave = replBroker(t, zkAddr, root, t.TempDir(), "", 1, func(c *conf.Config) { c.MaxMessageSize = 1000 })
	waitInSync(t, master, "2/2")
	return master, slave
}

// TestSyncSlaveFailsSync: when the slave fails a sync (here a message over
// its smaller max_message_size; a full disk is another cause), the master
// holds a message the slave lacks. The puts whose syncs follow must not be
// stored on the slave at lower offsets than on the master: the master
// drops the link, the slave refuses the syncs still coming on it, and the
// partition stays out of sync (its puts refused) while the slave cannot
// copy what it lacks. The slave's copy stays a prefix of the master's, and
// the other partition joins again.
func TestSyncSlaveFailsSync(t *testing.T) {
	t.Parallel()
	master, slave := smallSlavePair(t, "syncfail")

	mc := dialRaw(t, master.Addr())
	put := func(p int32, body []byte, opaque int32) []byte {
		return protocol.AppendPut(nil, "t", p, 0, int64(message.Checksum(body)), opaque, body)
	}
	r := mc.call(t, put(0, []byte("before"), 1))
	require.Equal(t, protocol.StatusOK, r.Code, "%s", r.Body)

	// Pipelined: the big one's sync fails on the slave, the small ones'
	// syncs follow it on the same link.
	frames := [][]byte{put(0, bytes.Repeat([]byte("b"), 2000), 2)}
	for i := range 8 {
		frames = append(frames, put(0, []byte(fmt.Sprintf("after-%d", i)), int32(3+i)))
	}
	for _, f := range frames {
		_, err := mc.bw.Write(f)
		require.NoError(t, err)
	}
	require.NoError(t, mc.bw.Flush())
	var fails []string
	for range frames {
		var rr protocol.Request
		require.NoError(t, mc.dec.Decode(&rr))
		if rr.Code != protocol.StatusOK {
			fails = append(fails, fmt.Sprintf("%d: %d %s", rr.Opaque, rr.Code, rr.Body))
		}
	}
	require.NotEmpty(t, fails)
	require.Contains(t, strings.Join(fails, "\n"), "exceeds max_message_size 1000", "%q", fails)

	// Partition 1 joins again on the next link; partition 0 cannot (the
	// slave's puller refuses the big message too) and its puts are refused.
	waitInSync(t, master, "1/2")
	r = mc.call(t, put(1, []byte("other"), 20))
	require.Equal(t, protocol.StatusOK, r.Code, "%s", r.Body)
	r = mc.call(t, put(0, []byte("refused"), 21))
	require.NotEqual(t, protocol.StatusOK, r.Code, "a put acknowledged on a partition whose slave lacks a message")

	// The slave's copy of partition 0 is a prefix of the master's: what it
	// holds sits at the master's offsets.
	sEnd := slave.topics.Get("t").Parts[0].MaxOffset()
	mEnd := master.topics.Get("t").Parts[0].MaxOffset()
	require.LessOrEqual(t, sEnd, mEnd)
	require.Equal(t, readPartition(t, master.Addr(), "t", 0, sEnd), readPartition(t, slave.Addr(), "t", 0, sEnd))
	end1 := master.topics.Get("t").Parts[1].MaxOffset()
	require.Equal(t, end1, slave.topics.Get("t").Parts[1].MaxOffset())
	require.Equal(t, readPartition(t, master.Addr(), "t", 1, end1), readPartition(t, slave.Addr(), "t", 1, end1))

	// On the slave, a connection whose sync failed refuses the next ones.
	sc := dialRaw(t, slave.Addr())
	big := bytes.Repeat([]byte("x"), 2000)
	r = sc.call(t, protocol.AppendSync(nil, "t", 1, 0, 1<<50, int64(message.Checksum(big)), 1, big))
	require.Contains(t, string(r.Body), "exceeds max_message_size 1000")
	small := []byte("y")
	r = sc.call(t, protocol.AppendSync(nil, "t", 1, 0, 1<<50+1, int64(message.Checksum(small)), 2, small))
	require.NotEqual(t, protocol.StatusOK, r.Code)
	require.Contains(t, string(r.Body), "an earlier sync on this connection failed")
	require.Equal(t, end1, slave.topics.Get("t").Parts[1].MaxOffset())
}

// TestSyncSlaveFailsTxCommit: a transaction's commit the slave fails (a
// message over its smaller max_message_size) leaves the master with a
// batch the slave lacks, like a failed sync: the puts after it must not be
// stored on the slave at lower offsets than on the master. The slave's
// copy stays a prefix of the master's.
func TestSyncSlaveFailsTxCommit(t *testing.T) {
	t.Parallel()
	master, slave := smallSlavePair(t, "txsyncfail")

	mc := dialRaw(t, master.Addr())
	put := func(p int32, body []byte, opaque int32) protocol.Request {
		return mc.call(t, protocol.AppendPut(nil, "t", p, 0, int64(message.Checksum(body)), opaque, body))
	}
	r := put(0, []byte("before"), 1)
	require.Equal(t, protocol.StatusOK, r.Code, "%s", r.Body)
	txDo(t, mc, "TX:s:1", protocol.TxBegin)
	txrPut(t, mc, "TX:s:1", 0, strings.Repeat("b", 2000))
	r = txDo(t, mc, "TX:s:1", protocol.TxCommitOnePhase)
	require.NotEqual(t, protocol.StatusOK, r.Code, "a commit the slave failed acknowledged")
	for i := range 4 {
		r = put(0, []byte(fmt.Sprintf("after-%d", i)), int32(10+i))
		require.NotEqual(t, protocol.StatusOK, r.Code, "a put acknowledged on a partition whose slave lacks a committed batch")
	}

	sEnd := slave.topics.Get("t").Parts[0].MaxOffset()
	mEnd := master.topics.Get("t").Parts[0].MaxOffset()
	require.LessOrEqual(t, sEnd, mEnd)
	require.Equal(t, readPartition(t, master.Addr(), "t", 0, sEnd), readPartition(t, slave.Addr(), "t", 0, sEnd))
}
