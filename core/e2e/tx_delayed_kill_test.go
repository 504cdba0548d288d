package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/metaq-go/metaq/internal/brokertest"
	mqclient "github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// TestTxDelayedKill9: the real metaq-server takes transactions whose
// messages are delayed (local ones, committed in one journal round, and
// XA ones, whose commit record the restart completes), half asking for a
// time, half for a delay from the commit, and is killed with -9 at random
// moments three times (make soak: 10 over a 60 s span), restarted on its data each time:
// every message of an acknowledged commit is delivered, none before its
// time (for a delay: the moment its COMMIT was sent plus the delay), and
// the duplicates (by msgId) are counted (docs/delayed.md, "In
// transactions").
func TestTxDelayedKill9(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const topic, parts = "txdelayed", 8
	config := groupCommitConfig(t, dir, topic, parts, 1<<20, "")
	dataDir := filepath.Join(dir, "data")
	dups := delayedCrashesWith(t, topic, parts, delayedCrashRounds(t), txDelayedLoad,
		func(int) *brokertest.Server { return startServer(t, config, dataDir) },
		func(_ int, srv *brokertest.Server) { srv.Kill() })
	if dups > 0 {
		t.Errorf("%d duplicate deliveries after kill -9 (want exactly once)", dups)
	}
}

// txDelayedLoad commits transactions of two delayed messages each from 4
// goroutines until stop is closed: goroutines 0 and 2 local ones, 1 and 3
// XA ones (BEGIN, puts, END, PREPARE, COMMIT_TWO_PHASE). The first message
// asks for a time 200 ms to 200 ms + span ahead, the second for a delay of
// as much from the commit. It returns the messages of the commits
// acknowledged.
func txDelayedLoad(cl *mqclient.Client, topic string, span, sendTimeout time.Duration, seed uint64, stop <-chan struct{}) []delayedSent {
	var mu sync.Mutex
	var out []delayedSent
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Whole milliseconds, as the wire carries them.
				at := time.Now().Add(200*time.Millisecond + time.Duration(rng.Int64N(int64(span)))).Truncate(time.Millisecond)
				delay := (200*time.Millisecond + time.Duration(rng.Int64N(int64(span)))).Truncate(time.Millisecond)
				msgs := []*message.Message{
					{Topic: topic, Body: fmt.Appendf(nil, "g%d-%d-at", g, i), DeliverAt: at},
					{Topic: topic, Body: fmt.Appendf(nil, "g%d-%d-delay", g, i), Delay: delay},
				}
				ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
				res, committing, err := txDelayedCommit(ctx, cl, g, seed, i, msgs)
				cancel()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				mu.Lock()
				// The broker counts the delay from its clock's millisecond
				// at the commit, at or after the one the COMMIT was sent in.
				out = append(out, delayedSent{id: res[0].ID, at: at}, delayedSent{id: res[1].ID, at: committing.Truncate(time.Millisecond).Add(delay)})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// txDelayedCommit produces msgs in one transaction and commits it: a
// local one for an even g, an XA one for an odd g. It returns the puts'
// results and when the commit was sent.
func txDelayedCommit(ctx context.Context, cl *mqclient.Client, g int, seed uint64, i int, msgs []*message.Message) ([]mqclient.SendResult, time.Time, error) {
	if g%2 == 0 {
		tx, err := cl.BeginTransaction(ctx)
		if err != nil {
			return nil, time.Time{}, err
		}
		res, err := tx.Produce(ctx, msgs...)
		if err != nil {
			tx.Rollback(ctx)
			return nil, time.Time{}, err
		}
		committing := time.Now()
		return res, committing, tx.Commit(ctx)
	}
	xb, err := cl.XABroker(ctx, msgs[0].Topic)
	if err != nil {
		return nil, time.Time{}, err
	}
	key := fmt.Sprintf("XID:1:%016x%02x%08x:01:q", seed, g, i)
	if _, err := xb.Command(ctx, protocol.TxBegin, key, 0); err != nil {
		return nil, time.Time{}, err
	}
	res, err := xb.Produce(ctx, key, msgs...)
	if err != nil {
		return nil, time.Time{}, err
	}
	if _, err := xb.Command(ctx, protocol.TxEnd, key, 0); err != nil {
		return nil, time.Time{}, err
	}
	if _, err := xb.Command(ctx, protocol.TxPrepare, key, 0); err != nil {
		return nil, time.Time{}, err
	}
	committing := time.Now()
	_, err = xb.Command(ctx, protocol.TxCommitTwoPhase, key, 0)
	return res, committing, err
}
