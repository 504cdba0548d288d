package broker

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/tx"
	"github.com/stretchr/testify/require"
)

func txRecoveryBroker(t *testing.T, dataDir string) *Broker {
	return startBrokerWith(t, func(c *conf.Config) {
		c.DataDir = dataDir
		c.UnflushThreshold = 1 // no store journal: fast restarts
	})
}

// TestTxRecoveryPrepared: a prepared XA transaction survives restarts,
// listed by RECOVER with its messages invisible, its user kept, and is
// committed after the second one; one rolled back after a restart leaves
// nothing.
func TestTxRecoveryPrepared(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	b := txRecoveryBroker(t, dataDir)
	c := &txClient{wireConn: dialWire(t, b.Addr())}
	ids := []int64{}
	for _, key := range []string{"XID:1:aa:bb:q", "XID:2:aa:bb:q"} {
		c.ok("transaction " + key + " s BEGIN q 1\r\n")
		ids = append(ids, c.put(key, 0, key+" m0"), c.put(key, 1, key+" m1"))
		require.Equal(t, "0", c.ok("transaction "+key+" s PREPARE q 2\r\n"))
	}
	require.NoError(t, b.Close())
	for start := 0; start < 2; start++ {
		b = txRecoveryBroker(t, dataDir)
		c = &txClient{wireConn: dialWire(t, b.Addr())}
		require.Equal(t, "XID:1:aa:bb:q\r\nXID:2:aa:bb:q", c.ok("transaction null s RECOVER q 3\r\n"), "start %d", start)
		require.Empty(t, c.records(0))
		require.Contains(t, c.ok("stats transactions 4\r\n"), "XID:1:aa:bb:q type xa state prepared session (recovered) messages 2 bytes 32 ")
		if start == 0 {
			require.NoError(t, b.Close())
		}
	}
	c.ok("transaction XID:1:aa:bb:q s COMMIT_TWO_PHASE q 5\r\n")
	c.ok("transaction XID:2:aa:bb:q s ROLLBACK q 6\r\n")
	require.NoError(t, b.Close())
	b = txRecoveryBroker(t, dataDir)
	c = &txClient{wireConn: dialWire(t, b.Addr())}
	require.Equal(t, "", c.ok("transaction null s RECOVER q 7\r\n"))
	for p := 0; p < 2; p++ {
		recs := c.records(p)
		require.Len(t, recs, 1)
		require.Equal(t, ids[p], recs[0].ID)
	}
	require.Len(t, txJournalFiles(t, filepath.Join(dataDir, tx.DirName)), 1)
}

// TestTxHeuristics: an admin completes prepared XA branches heuristically;
// the coordinator's later commit or rollback gets XA_HEURCOM (7) or
// XA_HEURRB (6), RECOVER still lists them, this survives restarts, and
// FORGET removes them. Without admin rights the command is refused.
func TestTxHeuristics(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	b := txRecoveryBroker(t, dataDir)
	c := &txClient{wireConn: dialWire(t, b.Addr())}
	for _, key := range []string{"XID:1:aa:bb:q", "XID:2:aa:bb:q"} {
		c.ok("transaction " + key + " s BEGIN q 1\r\n")
		c.put(key, 0, key)
		require.Equal(t, "0", c.ok("transaction "+key+" s PREPARE q 2\r\n"))
	}
	c.ok("transaction XID:1:aa:bb:q s HEURISTIC_COMMIT 3\r\n")
	c.ok("transaction XID:2:aa:bb:q s HEURISTIC_ROLLBACK 4\r\n")
	recs := c.records(0)
	require.Len(t, recs, 1)
	require.Equal(t, "XID:1:aa:bb:q", string(recs[0].Data))
	for start := 0; start < 2; start++ {
		if start == 1 {
			require.NoError(t, b.Close())
			b = txRecoveryBroker(t, dataDir)
			c = &txClient{wireConn: dialWire(t, b.Addr())}
		}
		require.Regexp(t, `XAException:code=7,msg=transaction XID:1:aa:bb:q was heuristically committed$`, c.call("transaction XID:1:aa:bb:q s COMMIT_TWO_PHASE q 5\r\n"))
		require.Regexp(t, `XAException:code=7,`, c.call("transaction XID:1:aa:bb:q s ROLLBACK q 6\r\n"))
		require.Regexp(t, `XAException:code=6,msg=transaction XID:2:aa:bb:q was heuristically rolled back$`, c.call("transaction XID:2:aa:bb:q s COMMIT_TWO_PHASE q 7\r\n"))
		require.Regexp(t, `XAException:code=-8,`, c.call("transaction XID:2:aa:bb:q s BEGIN q 8\r\n"))
		require.Equal(t, "XID:1:aa:bb:q\r\nXID:2:aa:bb:q", c.ok("transaction null s RECOVER q 9\r\n"), "start %d", start)
		body := c.ok("stats transactions 10\r\n")
		require.Contains(t, body, "heuristic 2\r\nXID:1:aa:bb:q type xa state heuristic_committed\r\nXID:2:aa:bb:q type xa state heuristic_rolled_back\r\n")
	}
	c.ok("transaction XID:1:aa:bb:q s FORGET q 11\r\n")
	require.Regexp(t, `XAException:code=-4,`, c.call("transaction XID:1:aa:bb:q s FORGET q 12\r\n"))
	require.NoError(t, b.Close())
	b = txRecoveryBroker(t, dataDir)
	c = &txClient{wireConn: dialWire(t, b.Addr())}
	require.Equal(t, "XID:2:aa:bb:q", c.ok("transaction null s RECOVER q 13\r\n"), "FORGET survives the restart")
	require.Len(t, c.records(0), 1)
	require.Regexp(t, `^result 500 \d+ 14\r\ntransaction TX:s:1 is local`, c.call("transaction TX:s:1 s HEURISTIC_COMMIT 14\r\n"))
}

// TestTxJournalSpace: with small journal files, files are deleted once no
// open transaction has a record in them: an open transaction keeps its
// first file while many others commit, and it goes once it ends.
func TestTxJournalSpace(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	cfg := testConfig()
	cfg.Port = 0
	cfg.DataDir = dataDir
	cfg.NumPartitions = 2
	cfg.Topics = []conf.Topic{{Name: "t"}}
	b, err := newBroker(cfg, Options{Logf: func(string, ...any) {}}, knobs{txFileSize: 4096})
	require.NoError(t, err)
	require.NoError(t, b.Start())
	t.Cleanup(func() { b.Close() })
	dir := filepath.Join(dataDir, tx.DirName)
	c := &txClient{wireConn: dialWire(t, b.Addr())}
	c.begin("TX:h:1")
	c.put("TX:h:1", 0, "held")
	first := txJournalFiles(t, dir)[0]
	for i := 0; i < 200; i++ {
		key := "TX:s:" + strconv.Itoa(i)
		c.begin(key)
		c.put(key, i%2, strings.Repeat("x", 100))
		c.commit(key)
	}
	files := txJournalFiles(t, dir)
	require.Equal(t, first, files[0], "the open transaction's file is kept")
	require.LessOrEqual(t, len(files), 3, "files of finished transactions are deleted: %v", files)
	c.commit("TX:h:1")
	c.begin("TX:n:1") // a record in the current file, so the files before it can go
	c.put("TX:n:1", 0, strings.Repeat("y", 5000))
	c.commit("TX:n:1")
	files = txJournalFiles(t, dir)
	require.NotContains(t, files, first, "freed once its transaction ended")
	require.LessOrEqual(t, len(files), 2)
	require.Len(t, c.records(0), 102)
}

// txJournalFiles lists the transaction journal's files in dir.
func txJournalFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "redo.") {
			names = append(names, e.Name())
		}
	}
	return names
}
