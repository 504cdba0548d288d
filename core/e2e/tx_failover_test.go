package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// txFailoverRounds is TestTxSyncFailoverKill9's number of rounds: 5, or
// METAQ_TX_FAILOVER_ROUNDS (make soak runs 20).
func txFailoverRounds() int {
	if v, err := strconv.Atoi(os.Getenv("METAQ_TX_FAILOVER_ROUNDS")); err == nil && v > 0 {
		return v
	}
	return 5
}

// TestTxSyncFailoverKill9 is TestTxKill9's crash cases on a sync master
// with failover = true and its in-sync slave (real binaries, real
// ZooKeeper, 2 s sessions): each round runs transactions on the holder of
// the epoch, stopped at random points (committed, rolled back, left open,
// a commit in flight), with plain puts among them, prepares an XA branch,
// and kills the holder with SIGKILL (half the rounds 0-2 ms after
// sending another branch's PREPARE). Then, on the promoted slave:
// acknowledged commits are there exactly once, contiguous, in put order,
// with their puts' ids; transactions never committed are not; the commit
// in flight is all or nothing; RECOVER lists the prepared branch (and
// only it), and a COMMIT_TWO_PHASE or ROLLBACK completes it there (half
// the rounds after the next slave has joined, which gets the branch
// prepared when its link starts). The
// killed broker comes back as a new empty slave, which copies everything
// (transaction batches among it) by pulling and is named in sync before
// the next round kills the new holder.
func TestTxSyncFailoverKill9(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterSpec{Config: failoverConfig() + "\n[[topic]]\nname = \"tx\"\nnum_partitions = 2\n", SessionTimeout: foSession})
	holder := startRepl(t, c, 1, -1, "")
	slave := startRepl(t, c, 1, 1, "")
	waitStat(t, holder, "failover_insync", "s1", 20*time.Second)
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("METAQ_TX_FAILOVER_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (METAQ_TX_FAILOVER_SEED)", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	var all []*testTx
	rounds := txFailoverRounds()
	for round := 0; round < rounds; round++ {
		cl, xc := dial(t, holder.Addr), dial(t, holder.Addr)
		all = append(all, txCrashRound(t, rng, cl, xc, round)...)
		epoch := statInt(t, holder, "epoch")
		// Half the rounds, another branch's PREPARE is in flight at the
		// kill, which comes 0-2 ms after it is sent: that branch may be
		// prepared on the promoted slave or not at all, never in part.
		var maybe *testTx
		if rng.IntN(2) == 0 {
			maybe = &testTx{key: fmt.Sprintf("XID:2:%02x:01:e2e", round), outcome: txMustNot, msgs: map[int32][]string{}, ids: map[string]int64{}}
			ok(t)(txCall(xc, maybe.key, protocol.TxBegin))
			for i := 0; i < 1+rng.IntN(5); i++ {
				p := int32(rng.IntN(2))
				body := fmt.Sprintf("r=%02d %s i=%03d", round, maybe.key, i)
				op := xc.nextOpaque()
				ok(t)(xc.call([]byte(string(protocol.AppendTxPutHeader(nil, "tx", p, len(body), 0, protocol.NoChecksum, maybe.key, op))+body), op))
				maybe.msgs[p] = append(maybe.msgs[p], body)
			}
			require.NoError(t, xc.write(protocol.AppendTransaction(nil, maybe.key, "e2e-session", protocol.TxPrepare, 0, "", xc.nextOpaque())))
			time.Sleep(rand.N(2 * time.Millisecond))
		}
		holder.kill9(t)
		cl.close()
		xc.close()
		waitStat(t, slave, "failover_role", "master", foSession+10*time.Second)
		require.Equal(t, epoch+1, statInt(t, slave, "epoch"))
		pc := dial(t, slave.Addr)
		if maybe != nil {
			// Listed or not, it is rolled back, and its messages never
			// appear; it goes before the round's branch, which stays last.
			r := ok(t)(txCall(pc, protocol.NullTxKey, protocol.TxRecover))
			listed := strings.Contains(string(r.Body), maybe.key)
			if listed {
				ok(t)(txCall(pc, maybe.key, protocol.TxRollback))
			}
			t.Logf("round %d: the branch whose PREPARE was in flight at the kill is prepared on the promoted slave: %v", round, listed)
			all = append(all[:len(all)-1], maybe, all[len(all)-1])
		}
		txCheckPrepared(t, pc, all)
		// Half the time the branch is decided before the new slave joins,
		// half the time after: the slave gets it, prepared, when its link
		// starts, and the decision then reaches it.
		late := round < rounds-1 && rng.IntN(2) == 0
		if !late {
			txDecide(t, rng, pc, all)
		}
		t.Logf("round %d: %s killed at epoch %d; %s promoted, transactions checked (branch decided after the next slave joined: %v)", round, holder, epoch, slave, late)
		if round == rounds-1 {
			pc.close()
			break
		}
		holder = slave
		slave = startRepl(t, c, 1, round+2, filepath.Join(c.dir, fmt.Sprintf("b1-tx%d", round)))
		waitStat(t, holder, "failover_insync", "s"+strconv.Itoa(round+2), 30*time.Second)
		if late {
			txDecide(t, rng, pc, all)
		}
		pc.close()
	}
	// The last promoted slave answers transactions as the holder.
	cl := dial(t, slave.Addr)
	defer cl.close()
	ok(t)(txCall(cl, "TX:e2e-session:999999", protocol.TxBegin))
	require.Equal(t, protocol.StatusOK, ok(t)(txCall(cl, "TX:e2e-session:999999", protocol.TxRollback)).Code)
}
