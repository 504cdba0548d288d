//go:build linux

package e2e

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/faultfs"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// TestTxPowerCut runs metaq-server on the power-loss harness (faultfs),
// commits local transactions and prepares an XA branch, SIGKILLs it with
// one more commit in flight and cuts the power (each round a different
// mode: nothing unsynced kept, the last write torn, a random prefix and a
// torn write). After the restart on what the disk kept: every acknowledged
// commit is there exactly once, contiguous, in order; the in-flight one is
// all or nothing; the acknowledged prepare is listed by RECOVER.
func TestTxPowerCut(t *testing.T) {
	t.Parallel()
	m, config, _, under := powerLossDisk(t, "tx", 2, "")
	rng := rand.New(rand.NewPCG(m.Seed(), 3))
	modes := []faultfs.Mode{faultfs.DropAll, faultfs.TearLast, faultfs.PrefixTorn}
	var all []*testTx
	for round, mode := range modes {
		srv := startServer(t, config, filepath.Join(m.Dir(), "data"))
		c := dial(t, srv.Addr)
		put := func(tx *testTx, i int) {
			p := int32(rng.IntN(2))
			body := fmt.Sprintf("r=%02d %s i=%03d", round, tx.key, i)
			tx.put(t, c, p, body)
		}
		newTx := func(key string) *testTx {
			tx := &testTx{key: key, outcome: txMustNot, msgs: map[int32][]string{}, ids: map[string]int64{}}
			all = append(all, tx)
			ok(t)(txCall(c, key, protocol.TxBegin))
			for i := 0; i < 1+rng.IntN(30); i++ {
				put(tx, i)
			}
			return tx
		}
		for n := 0; n < 5; n++ {
			tx := newTx(fmt.Sprintf("TX:e2e-session:%d", round*10+n))
			ok(t)(txCall(c, tx.key, protocol.TxCommitOnePhase))
			tx.outcome = txMustAppear
		}
		xa := newTx(fmt.Sprintf("XID:9:%02x:02:e2e", round))
		require.Equal(t, "0", string(ok(t)(txCall(c, xa.key, protocol.TxPrepare)).Body))
		last := newTx(fmt.Sprintf("TX:e2e-session:%d", round*10+9))
		op := c.nextOpaque()
		require.NoError(t, c.write(protocol.AppendTransaction(nil, last.key, "e2e-session", protocol.TxCommitOnePhase, 0, "", op)))
		last.outcome = txMayAppear
		srv.Kill()
		c.close()
		rep, err := m.Cut(mode)
		require.NoError(t, err)
		t.Logf("round %d (mode %v): cut dropped %d bytes of %d files, lost %d names", round, mode, rep.DroppedBytes, len(rep.Files), len(rep.Lost))

		srv = startServer(t, config, filepath.Join(under, "data"))
		c = dial(t, srv.Addr)
		checkTxs(t, c, all)
		require.Equal(t, xa.key, string(ok(t)(txCall(c, protocol.NullTxKey, protocol.TxRecover)).Body), "round %d", round)
		ok(t)(txCall(c, xa.key, protocol.TxCommitTwoPhase))
		xa.outcome = txMustAppear
		checkTxs(t, c, all)
		srv.Kill()
		c.close()
		require.NoError(t, m.Remount())
	}
}

// TestTxPowerCutMidRound cuts the power while local commits spanning both
// partitions are in the store journal's round (docs/storage.md, "Local
// commits in one journal round"): six connections each send the COMMIT of
// a transaction of ten 1 KiB messages over both partitions at once, the
// binary is SIGKILLed a moment later and the power cut tears the last
// unsynced write of each file (or keeps a random prefix of them and tears
// one), so a round's write of several sectors is often cut inside a
// transaction's group. After the restart every one of those transactions
// is there whole, contiguous and in order, or not at all, and each earlier
// acknowledged one is still there. It runs until two restarts have
// dropped a torn group (at most 16 rounds) and logs how many did.
func TestTxPowerCutMidRound(t *testing.T) {
	t.Parallel()
	m, config, _, under := powerLossDisk(t, "tx", 2, "")
	rng := rand.New(rand.NewPCG(m.Seed(), 4))
	// At least minRounds, then until two restarts have dropped a torn
	// group (the kill's timing decides), at most maxRounds.
	minRounds, maxRounds := 4, 16
	if testing.Short() {
		minRounds, maxRounds = 2, 8
	}
	rounds := 0
	pad := strings.Repeat("x", 1000)
	var all []*testTx
	dropped := 0
	for round := 0; round < maxRounds && (round < minRounds || dropped < 2); round++ {
		rounds++
		srv := startServer(t, config, filepath.Join(m.Dir(), "data"))
		var conns []*client
		var inFlight []*testTx
		for n := range 6 {
			c := dial(t, srv.Addr)
			conns = append(conns, c)
			tx := &testTx{key: fmt.Sprintf("TX:e2e-session:%d", round*10+n), outcome: txMustNot, msgs: map[int32][]string{}, ids: map[string]int64{}}
			all = append(all, tx)
			inFlight = append(inFlight, tx)
			ok(t)(txCall(c, tx.key, protocol.TxBegin))
			for i := range 10 {
				p := int32(i % 2)
				body := fmt.Sprintf("r=%02d %s i=%03d %s", round, tx.key, i, pad)
				tx.put(t, c, p, body)
			}
		}
		for i, c := range conns {
			require.NoError(t, c.write(protocol.AppendTransaction(nil, inFlight[i].key, "e2e-session", protocol.TxCommitOnePhase, 0, "", c.nextOpaque())))
			inFlight[i].outcome = txMayAppear
		}
		time.Sleep(time.Duration(rng.IntN(2500)) * time.Microsecond)
		srv.Kill()
		for _, c := range conns {
			c.close()
		}
		mode := []faultfs.Mode{faultfs.TearLast, faultfs.PrefixTorn}[round%2]
		rep, err := m.Cut(mode)
		require.NoError(t, err)
		t.Logf("round %d (mode %v): cut dropped %d bytes of %d files", round, mode, rep.DroppedBytes, len(rep.Files))

		srv = startServer(t, config, filepath.Join(under, "data"))
		if strings.Contains(srv.Logs.Tail(64<<10), "inside the atomic group") {
			dropped++
			t.Logf("round %d: the restart dropped a torn atomic group", round)
		}
		c := dial(t, srv.Addr)
		checkTxs(t, c, all)
		appeared := 0
		for _, tx := range inFlight {
			if tx.outcome == txMustAppear {
				appeared++
			}
		}
		t.Logf("round %d: %d of the %d commits in flight are there whole, the others not at all", round, appeared, len(inFlight))
		srv.Kill()
		c.close()
		require.NoError(t, m.Remount())
	}
	t.Logf("%d of %d restarts dropped a torn atomic group", dropped, rounds)
}
