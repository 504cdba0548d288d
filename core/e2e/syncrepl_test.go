package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/queuecheck"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// syncConfig is replConfig with the master in sync mode (the slave,
// started from the same file, ignores replication).
func syncConfig(extra string) string {
	return strings.Replace(replConfig, "delete_check_interval = 1\n", "delete_check_interval = 1\nreplication = \"sync\"\nsync_timeout = 1000\n"+extra, 1)
}

// putAck is an acknowledged put.
type putAck struct {
	topic  string
	part   int32
	id     int64
	offset int64
	body   string
}

// putAcked puts n messages to topic "repl" (64 in flight) and returns the
// acknowledged ones and the failure replies; h, if not nil, records every
// send (producer tag).
func putAcked(t testing.TB, h *queuecheck.History, addr string, n int, tag string) (acks []putAck, fails []reply) {
	t.Helper()
	cl := dial(t, addr)
	defer cl.close()
	type sent struct {
		part int32
		body string
	}
	inflight := map[int32]sent{}
	for i := 0; i < n || len(inflight) > 0; {
		if i < n && len(inflight) < 64 {
			p := int32(i % 4)
			body := fmt.Sprintf("%s-%d-%s", tag, i, strings.Repeat("s", i%100))
			op := cl.nextOpaque()
			require.NoError(t, cl.write(putFrame("repl", p, []byte(body), op)))
			inflight[op] = sent{p, body}
			i++
			continue
		}
		r, err := cl.read()
		require.NoError(t, err)
		s, ok := inflight[r.Opaque]
		require.True(t, ok, "reply to an unknown opaque: %v", r)
		delete(inflight, r.Opaque)
		part := fmt.Sprintf("repl-%d", s.part)
		if r.Code != protocol.StatusOK {
			fails = append(fails, r)
			if h != nil {
				h.Send(tag, part, s.body, queuecheck.Failed, 0)
			}
			continue
		}
		id, _, off, _, err := protocol.ParsePutResult(r.Body)
		require.NoError(t, err)
		acks = append(acks, putAck{"repl", s.part, id, off, s.body})
		if h != nil {
			h.Send(tag, part, s.body, queuecheck.Acked, off)
		}
	}
	return acks, fails
}

// replRecords reads the 4 partitions of topic repl on n: partition ->
// offset -> record.
func replRecords(t testing.TB, n *replNode) map[int32]map[int64]record {
	t.Helper()
	cl := dial(t, n.Addr)
	defer cl.close()
	at := map[int32]map[int64]record{}
	for p := range int32(4) {
		recs, _, err := readPartition(cl, "repl", p, 1<<20)
		require.NoError(t, err)
		at[p] = map[int64]record{}
		for _, r := range recs {
			at[p][r.Offset] = r
		}
	}
	return at
}

// checkAcksOn checks that every ack is on the node at its offset, with
// its msgId and body, reading right away.
func checkAcksOn(t testing.TB, n *replNode, acks []putAck) {
	t.Helper()
	at := replRecords(t, n)
	missing := 0
	for _, a := range acks {
		r, ok := at[a.part][a.offset]
		if !ok || r.ID != a.id || string(r.Data) != a.body {
			if missing < 5 {
				t.Errorf("%s: repl-%d offset %d (id %d, %q) acknowledged, not there (found %v, id %d)", n, a.part, a.offset, a.id, a.body, ok, r.ID)
			}
			missing++
		}
	}
	require.Zero(t, missing, "%s: %d of %d acknowledged messages missing", n, missing, len(acks))
}

func waitStat(t testing.TB, n *replNode, key, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := n.stats(t)
		if s[key] == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: stats %s = %q, want %q, after %v", n, key, s[key], want, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSyncReplication: a sync master refuses puts while no slave is in
// sync (500 Slave is disconnected); once its slave has caught up, every
// acknowledged put is on the slave at the master's offset when the ack
// arrives; a killed slave makes puts fail again, loses nothing that was
// acknowledged, and rejoins after a restart (pulling first).
func TestSyncReplication(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterSpec{Config: syncConfig("")})
	master := startRepl(t, c, 1, -1, "")
	_, fails := putAcked(t, nil, master.Addr, 8, "alone")
	require.Len(t, fails, 8)
	require.Equal(t, "Slave is disconnected ", string(fails[0].Body))

	slave := startRepl(t, c, 1, 1, "")
	waitStat(t, master, "sync_partitions_in_sync", "6/6", 15*time.Second)
	h := queuecheck.New()
	acks, fails := putAcked(t, h, master.Addr, 2000, "sync")
	require.Empty(t, fails)
	checkAcksOn(t, slave, acks) // no wait: an ack means the slave has it
	checkAcksOn(t, master, acks)
	st := master.stats(t)
	require.Equal(t, "sync", st["replication"])
	require.Equal(t, slave.Addr, st["sync_slave"])
	t.Logf("master stats: sync_shipped %s sync_refused %s", st["sync_shipped"], st["sync_refused"])

	// Kill the slave while puts are in flight: some fail, every one that
	// was acknowledged is on the slave when it comes back.
	type result struct {
		acks  []putAck
		fails []reply
	}
	done := make(chan result, 1)
	go func() {
		a, f := putAcked(t, h, master.Addr, 3000, "kill")
		done <- result{a, f}
	}()
	time.Sleep(30 * time.Millisecond)
	slave.kill9(t)
	res := <-done
	t.Logf("slave killed under load: %d acknowledged, %d failed (first: %q)", len(res.acks), len(res.fails), firstBody(res.fails))
	require.NotEmpty(t, res.fails, "puts went on being acknowledged without the slave")
	_, fails = putAcked(t, nil, master.Addr, 4, "down")
	require.Len(t, fails, 4, "puts acknowledged while the slave is down")

	slave.restart(t)
	waitStat(t, master, "sync_partitions_in_sync", "6/6", 20*time.Second)
	checkAcksOn(t, slave, append(acks, res.acks...))
	more, fails := putAcked(t, h, master.Addr, 500, "back")
	require.Empty(t, fails)
	checkAcksOn(t, slave, more)
	waitCaughtUp(t, master, slave, 10*time.Second)
	compareCopies(t, master, slave)
	// The whole history against the slave's copy: nothing acknowledged
	// lost (not even a tail), no duplicate, no reordering, no conflict.
	readInto(t, h, slave, "repl", 4)
	r := h.Check()
	t.Logf("queue check of the slave: %s", r)
	require.True(t, r.OK(), r.String())
}

// readInto reads every partition of topic on n into h, with its end.
func readInto(t testing.TB, h *queuecheck.History, n *replNode, topic string, parts int) {
	t.Helper()
	cl := dial(t, n.Addr)
	defer cl.close()
	for p := range int32(parts) {
		recs, end, err := readPartition(cl, topic, p, 1<<20)
		require.NoError(t, err)
		part := fmt.Sprintf("%s-%d", topic, p)
		for _, r := range recs {
			h.Read(part, r.Offset, string(r.Data))
		}
		h.ReadEnd(part, end)
	}
}

func firstBody(rs []reply) string {
	if len(rs) == 0 {
		return ""
	}
	return string(rs[0].Body)
}

// TestSyncDegrade: with sync_degrade = true a sync master with no slave
// in sync stores puts alone (logged, counted); a slave that registers
// pulls them, joins, and from then on puts are shipped.
func TestSyncDegrade(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterSpec{Config: syncConfig("sync_degrade = true\n")})
	master := startRepl(t, c, 1, -1, "")
	alone, fails := putAcked(t, nil, master.Addr, 300, "alone")
	require.Empty(t, fails)
	require.Equal(t, "300", master.stats(t)["sync_degraded_puts"])
	require.Eventually(t, func() bool { return master.logContains("storing puts on the master alone") }, 5*time.Second, 20*time.Millisecond)

	slave := startRepl(t, c, 1, 1, "")
	waitStat(t, master, "sync_partitions_in_sync", "6/6", 15*time.Second)
	acks, fails := putAcked(t, nil, master.Addr, 500, "sync")
	require.Empty(t, fails)
	checkAcksOn(t, slave, append(alone, acks...))
	st := master.stats(t)
	require.Equal(t, "300", st["sync_degraded_puts"])
	require.Equal(t, "500", st["sync_shipped"])
}
