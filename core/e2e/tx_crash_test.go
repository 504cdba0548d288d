package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// txOutcome is what a test transaction may show after a crash.
type txOutcome int

const (
	txMustAppear txOutcome = iota // its commit was acknowledged
	txMayAppear                   // commit sent, no reply: all or nothing
	txMustNot                     // never committed (or rolled back)
)

// testTx is one transaction of TestTxKill9: its messages by partition, in
// put order.
type testTx struct {
	key     string
	outcome txOutcome
	msgs    map[int32][]string
	ids     map[string]int64
}

// put sends body as a put to partition p of topic tx in the transaction
// on c, records it in tx (with the id the broker gave it), and returns the
// partition and offset the broker replied with.
func (tx *testTx) put(t testing.TB, c *client, p int32, body string) (int32, int64) {
	t.Helper()
	op := c.nextOpaque()
	r := ok(t)(c.call([]byte(string(protocol.AppendTxPutHeader(nil, "tx", p, len(body), 0, protocol.NoChecksum, tx.key, op))+body), op))
	id, part, off, _, err := protocol.ParsePutResult(r.Body)
	require.NoError(t, err)
	tx.msgs[p] = append(tx.msgs[p], body)
	tx.ids[body] = id
	return part, off
}

// txCall sends one transaction command and returns the reply.
func txCall(c *client, key string, typ protocol.TxType) (reply, error) {
	op := c.nextOpaque()
	return c.call(protocol.AppendTransaction(nil, key, "e2e-session", typ, 0, "", op), op)
}

// TestTxKill9 runs metaq-server and SIGKILLs it at random points between
// begin, puts and commit, over 50 rounds (8 with -short) on one data directory:
// messages of an acknowledged commit appear exactly once, contiguous and in
// put order with the ids their puts were answered; those of a transaction
// never committed never appear; a commit in flight at the kill is all or
// nothing; an XA branch prepared before the kill is listed by RECOVER
// after the restart, invisible until it is committed (or rolled back) from
// a new connection; after every restart no other transaction is open.
func TestTxKill9(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "server.toml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(brokerConfig(dir, "", "[[topic]]\nname = \"tx\"\nnum_partitions = 2\n")), 0o644))
	rng := rand.New(rand.NewPCG(10, 10))
	var all []*testTx
	rounds := 50
	if testing.Short() {
		rounds = 8
	}
	for round := 0; round < rounds; round++ {
		s := startServer(t, cfgPath, dir)
		c := dial(t, s.Addr)
		if round > 0 {
			txAfterCrash(t, rng, c, all)
		}
		xc := dial(t, s.Addr)
		all = append(all, txCrashRound(t, rng, c, xc, round)...)
		s.Kill()
		c.close()
		xc.close()
	}
	s := startServer(t, cfgPath, dir)
	c := dial(t, s.Addr)
	checkTxs(t, c, all)
	xa := all[len(all)-1]
	ok(t)(txCall(c, xa.key, protocol.TxCommitTwoPhase))
	xa.outcome = txMustAppear
	checkTxs(t, c, all)
}

// txAfterCrash checks, on the broker that holds the data after a crash
// (restarted, or a promoted slave), every transaction's outcome and that
// the XA branch prepared before the crash is listed by RECOVER, its
// messages invisible, and the only transaction open; then it decides the
// branch, at random, and checks again.
func txAfterCrash(t *testing.T, rng *rand.Rand, c *client, all []*testTx) {
	t.Helper()
	txCheckPrepared(t, c, all)
	txDecide(t, rng, c, all)
}

// txCheckPrepared is txAfterCrash before the decision.
func txCheckPrepared(t *testing.T, c *client, all []*testTx) {
	t.Helper()
	checkTxs(t, c, all)
	xa := all[len(all)-1]
	r := ok(t)(txCall(c, protocol.NullTxKey, protocol.TxRecover))
	require.Equal(t, xa.key, string(r.Body), "RECOVER after the crash")
	st := parseStats(t, ok(t)(c.stats("transactions")).Body)
	require.Regexp(t, `^1 buffered_bytes \d+$`, st["open"], "only the prepared branch survives a crash")
}

// txDecide commits or rolls back (at random) the prepared branch, last of
// all, and checks the outcomes again.
func txDecide(t *testing.T, rng *rand.Rand, c *client, all []*testTx) {
	t.Helper()
	xa := all[len(all)-1]
	if rng.IntN(2) == 0 {
		ok(t)(txCall(c, xa.key, protocol.TxCommitTwoPhase))
		xa.outcome = txMustAppear
	} else {
		ok(t)(txCall(c, xa.key, protocol.TxRollback))
	}
	checkTxs(t, c, all)
	r := ok(t)(txCall(c, protocol.NullTxKey, protocol.TxRecover))
	require.Empty(t, r.Body)
}

// txCrashRound runs one round of TestTxKill9's transactions on c (topic
// tx, partitions 0 and 1) and returns them: 4 transactions, each stopped
// at a random point (committed, rolled back or left open; the last one
// committed without waiting for the reply, or left open), plain puts among
// their messages, then an XA branch on xc prepared just before the crash
// the caller brings, last in the list.
func txCrashRound(t *testing.T, rng *rand.Rand, c, xc *client, round int) []*testTx {
	t.Helper()
	var all []*testTx
	for n := 0; n < 4; n++ {
		tx := &testTx{key: fmt.Sprintf("TX:e2e-session:%d", round*10+n), msgs: map[int32][]string{}, ids: map[string]int64{}}
		all = append(all, tx)
		tx.outcome = txMustNot
		ok(t)(txCall(c, tx.key, protocol.TxBegin))
		puts := 1 + rng.IntN(20)
		for i := 0; i < puts; i++ {
			p := int32(rng.IntN(2))
			body := fmt.Sprintf("r=%02d %s i=%03d", round, tx.key, i)
			part, off := tx.put(t, c, p, body)
			require.Equal(t, p, part)
			require.Equal(t, int64(-1), off)
			if i%7 == 3 {
				mustPut(t, c, "tx", p, []byte(fmt.Sprintf("plain r=%02d %s i=%03d", round, tx.key, i)))
			}
		}
		last := n == 3
		switch point := rng.IntN(4); {
		case !last && point < 2:
			ok(t)(txCall(c, tx.key, protocol.TxCommitOnePhase))
			tx.outcome = txMustAppear
		case !last && point == 2:
			ok(t)(txCall(c, tx.key, protocol.TxRollback))
		case !last:
			// left open: rolled back by the crash
		case point < 2:
			// Commit sent, the crash comes before the reply can be read.
			op := c.nextOpaque()
			require.NoError(t, c.write(protocol.AppendTransaction(nil, tx.key, "e2e-session", protocol.TxCommitOnePhase, 0, "", op)))
			tx.outcome = txMayAppear
		default:
			// the crash comes with the transaction open
		}
	}
	// An XA branch on another connection, prepared just before the
	// crash: it must survive it.
	xa := &testTx{key: fmt.Sprintf("XID:1:%02x:01:e2e", round), outcome: txMustNot, msgs: map[int32][]string{}, ids: map[string]int64{}}
	all = append(all, xa)
	ok(t)(txCall(xc, xa.key, protocol.TxBegin))
	for i := 0; i < 1+rng.IntN(10); i++ {
		p := int32(rng.IntN(2))
		body := fmt.Sprintf("r=%02d %s i=%03d", round, xa.key, i)
		xa.put(t, xc, p, body)
	}
	r := ok(t)(txCall(xc, xa.key, protocol.TxPrepare))
	require.Equal(t, "0", string(r.Body))
	return all
}

// checkTxs reads both partitions and checks every transaction's outcome.
func checkTxs(t *testing.T, c *client, all []*testTx) {
	t.Helper()
	var parts [2][]record
	var at [2]map[string][]int // body -> record indexes
	for p := range parts {
		recs, _, err := readPartition(c, "tx", int32(p), 1<<20)
		require.NoError(t, err)
		parts[p] = recs
		at[p] = map[string][]int{}
		for i, r := range recs {
			at[p][string(r.Data)] = append(at[p][string(r.Data)], i)
			require.True(t, strings.HasPrefix(string(r.Data), "r=") || strings.HasPrefix(string(r.Data), "plain "), "stray record %q", r.Data)
		}
	}
	for _, tx := range all {
		seen := 0
		for p := range parts {
			for _, m := range tx.msgs[int32(p)] {
				seen += len(at[p][m])
			}
		}
		if tx.outcome == txMustNot || (tx.outcome == txMayAppear && seen == 0) {
			require.Zero(t, seen, "%s (never committed) shows %d messages", tx.key, seen)
			continue
		}
		for p := range parts {
			msgs := tx.msgs[int32(p)]
			if len(msgs) == 0 {
				continue
			}
			first := at[p][msgs[0]]
			require.Len(t, first, 1, "%s: its first message of tx-%d appears %d times", tx.key, p, len(first))
			for i, m := range msgs {
				idx := at[p][m]
				require.Len(t, idx, 1, "%s: %q appears %d times", tx.key, m, len(idx))
				require.Equal(t, first[0]+i, idx[0], "%s: tx-%d batch not contiguous in put order", tx.key, p)
				require.Equal(t, tx.ids[m], parts[p][idx[0]].ID, "%s: %q has another id than its put's", tx.key, m)
			}
		}
		tx.outcome = txMustAppear // from now on it must stay
	}
}
