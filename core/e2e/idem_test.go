package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/queuecheck"
	mqclient "github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

// idemMessages is how many messages the idempotent producer's fault tests
// send: METAQ_IDEM_MESSAGES (make soak: 10000), else 2000.
func idemMessages(t *testing.T) int {
	if s := os.Getenv("METAQ_IDEM_MESSAGES"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		return n
	}
	return 2000
}

// idemRun sends n messages "v<i>" of topic through p without waiting
// (Produce), calling fault once a tenth of them are acknowledged, and
// waits for every outcome: each must succeed (the produce timeout covers
// idemProducer is the client of the idempotent fault tests, on the broker
// srv (closed when the test ends), and srv's port, which the restarted
// broker takes again.
func idemProducer(t *testing.T, srv *brokertest.Server) (*mqclient.Client, string) {
	t.Helper()
	p, err := mqclient.New(mqclient.Brokers(srv.Addr), mqclient.ProduceTimeout(2*time.Minute),
		mqclient.Logger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	t.Cleanup(func() { p.Close(context.Background()) })
	return p, srv.Addr[strings.LastIndexByte(srv.Addr, ':')+1:]
}

// the fault). It returns the history of the sends.
func idemRun(t *testing.T, p *mqclient.Client, topic string, n int, fault func()) *queuecheck.History {
	h := queuecheck.New()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var acked atomic.Int64
	for i := range n {
		if i == n/2 { // half sent before the fault, half after it
			for acked.Load() < int64(n/10) && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			fault()
		}
		v := fmt.Sprintf("v%06d", i)
		wg.Add(1)
		p.Produce(ctx, &message.Message{Topic: topic, Body: []byte(v)}, func(r mqclient.SendResult, err error) {
			defer wg.Done()
			part := strconv.Itoa(int(r.Partition))
			switch {
			case err != nil:
				t.Errorf("send %s: %v", v, err)
				h.Send(v, part, v, queuecheck.Unknown, 0)
			case r.OffsetUnknown:
				h.Send(v, part, v, queuecheck.Unknown, 0)
			default:
				h.Send(v, part, v, queuecheck.Acked, r.Offset)
			}
			acked.Add(1)
		})
	}
	wg.Wait()
	return h
}

// idemCheck reads every partition of topic on the broker at addr and
// requires each of the n values exactly once, each acknowledged one at its
// acknowledged offset (queuecheck: no loss, no duplicate, no wrong offset).
func idemCheck(t *testing.T, h *queuecheck.History, addr, topic string, parts, n int) {
	cl := dial(t, addr)
	defer cl.close()
	seen := map[string]int{}
	for p := range int32(parts) {
		recs, end, err := readPartition(cl, topic, p, 1<<20)
		require.NoError(t, err)
		for _, r := range recs {
			m, err := (&message.Record{Offset: r.Offset, ID: r.ID, Flag: r.Flag, Data: r.Data}).Message(topic, p)
			require.NoError(t, err)
			h.Read(strconv.Itoa(int(p)), r.Offset, string(m.Body))
			seen[string(m.Body)]++
		}
		h.ReadEnd(strconv.Itoa(int(p)), end)
	}
	rep := h.Check()
	require.True(t, rep.OK(), rep.String())
	for i := range n {
		v := fmt.Sprintf("v%06d", i)
		require.Equal(t, 1, seen[v], "value %s stored %d times", v, seen[v])
	}
	require.Len(t, seen, n, "values no send produced")
	t.Logf("%s", rep)
}

// TestIdempotentKill9: the real metaq-server is killed with -9 while a
// Client produces to 16 partitions with up to 1024 messages in flight, and
// restarted on the same port and data: the producer retries what it had in
// flight on the same partitions, the restarted broker rebuilds its
// producers' state from the log, and every message is stored exactly once.
func TestIdempotentKill9(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const topic, parts = "idem", 16
	config := groupCommitConfig(t, dir, topic, parts, 1<<20, "")
	dataDir := filepath.Join(dir, "data")
	srv := startServer(t, config, dataDir)
	p, port := idemProducer(t, srv)
	n := idemMessages(t)
	var restarted *brokertest.Server
	h := idemRun(t, p, topic, n, func() {
		srv.Kill()
		// No HTTP listener: its port, derived from the data port, may
		// have been taken meanwhile (bind: address already in use in a
		// make test run).
		restarted = brokertest.StartServer(t, "--config", config, "--port", port, "--http-port", "0", "--data-dir", dataDir, "--host", "127.0.0.1")
	})
	require.NotNil(t, restarted)
	require.Equal(t, srv.Addr, restarted.Addr)
	idemCheck(t, h, restarted.Addr, topic, parts, n)
}

// TestIdempotentFailover: a sync master (failover = true) is killed with
// -9 while a Client produces through ZooKeeper; the slave is promoted, the
// producer's retries of what it had in flight go to it, and its producers'
// state, rebuilt from the replicated log, stores each message exactly once.
func TestIdempotentFailover(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterSpec{Config: failoverConfig(), SessionTimeout: foSession})
	master := startRepl(t, c, 1, -1, "")
	slave := startRepl(t, c, 1, 1, "")
	waitStat(t, master, "failover_insync", "s1", 20*time.Second)
	p := c.newProducer(t, mqclient.ProduceTimeout(foSession+time.Minute))
	n := idemMessages(t)
	killed := time.Now()
	h := idemRun(t, p, "repl", n, func() {
		master.kill9(t)
		killed = time.Now()
	})
	t.Logf("%d messages; all acknowledged %v after the kill (session timeout %v)", n, time.Since(killed).Round(time.Millisecond), foSession)
	idemCheck(t, h, slave.Addr, "repl", replTopics["repl"], n)
}
