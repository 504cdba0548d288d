package broker

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/stretchr/testify/require"
)

// writeTxJournal writes a journal file into dataDir as a broker killed in
// the middle of a commit leaves it: committed's puts and its commit record
// (no done, no batch in the partition), and inflight's puts. It returns
// the committed messages and the offsets where each record ends.
func writeTxJournal(t testing.TB, dataDir string) ([]store.Entry, []int64) {
	t.Helper()
	dir := filepath.Join(dataDir, TxDirName)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	j, err := openTxLog(dir, txFlushCommit, 0, t.Logf)
	require.NoError(t, err)
	top := &topic{name: "t"}
	var committed []store.Entry
	var ends []int64
	rec := func(tr *tx, typ byte, p []byte) {
		pos, err := j.write(tr, typ, p)
		require.NoError(t, err)
		ends = append(ends, pos)
	}
	a, b := &tx{key: "TX:s:1"}, &tx{key: "TX:s:2"}
	for i := 0; i < 3; i++ {
		e := store.Entry{ID: int64(1000 + 10*i), Data: []byte("committed " + strconv.Itoa(i))}
		e.CRC = message.Checksum(e.Data)
		committed = append(committed, e)
		rec(a, txRecAppend, encodeTxAppend(a.key, &txMsg{t: top, p: 0, e: e}))
		rec(b, txRecAppend, encodeTxAppend(b.key, &txMsg{t: top, p: 1, e: store.Entry{ID: int64(2000 + i), Data: []byte("in flight")}}))
	}
	rec(a, txRecCommit, encodeTxCommit(a.key, []txBatchLoc{{topic: "t", partition: 0, firstID: 1000, n: 3, crc: batchCRC(committed)}}))
	require.NoError(t, j.close())
	return committed, ends
}

func txRecoveryBroker(t *testing.T, dataDir string) *Broker {
	return startBrokerWith(t, func(c *conf.Config) {
		c.DataDir = dataDir
		c.UnflushThreshold = 1 // no store journal: fast restarts
	})
}

func partitionRecords(t *testing.T, b *Broker, p int) []message.Record {
	t.Helper()
	c := &txClient{wireConn: dialWire(t, b.Addr())}
	return c.records(p)
}

// TestTxRecovery: on start the broker completes a commit whose record is in
// the journal but whose batch is not in its partition (appended once, with
// its ids, in order), rolls back what was in flight, and frees the old
// journal files; a start that finds the batch in place (the journal put
// back, as a crash before the files were freed leaves it) appends nothing,
// and neither does one without the journal.
func TestTxRecovery(t *testing.T) {
	dataDir := t.TempDir()
	committed, _ := writeTxJournal(t, dataDir)
	old := filepath.Join(dataDir, TxDirName, txFileName(1))
	journal, err := os.ReadFile(old)
	require.NoError(t, err)
	for start := 0; start < 3; start++ {
		if start == 1 {
			require.NoError(t, os.WriteFile(old, journal, 0o644))
		}
		b := txRecoveryBroker(t, dataDir)
		recs := partitionRecords(t, b, 0)
		require.Len(t, recs, 3, "start %d", start)
		for i, r := range recs {
			require.Equal(t, committed[i].ID, r.ID)
			require.Equal(t, committed[i].Data, r.Data)
		}
		require.Empty(t, partitionRecords(t, b, 1), "in-flight puts are rolled back")
		files, err := txFiles(filepath.Join(dataDir, TxDirName))
		require.NoError(t, err)
		require.Len(t, files, 1, "only the new file is left")
		require.Greater(t, b.ids.Next(1), int64(2002), "ids replayed are not issued again")
		require.NoError(t, b.Close())
	}
}

// TestTxJournalCut: the journal cut at every byte of its last record (the
// commit): the commit is applied only when its record is whole; a cut one
// leaves the transaction in flight, rolled back.
func TestTxJournalCut(t *testing.T) {
	src := t.TempDir()
	_, ends := writeTxJournal(t, src)
	path := filepath.Join(src, TxDirName, txFileName(1))
	full, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, int64(len(full)), ends[len(ends)-1])
	for cut := ends[len(ends)-2]; cut <= ends[len(ends)-1]; cut++ {
		dataDir := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(dataDir, TxDirName), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dataDir, TxDirName, txFileName(1)), full[:cut], 0o644))
		b := txRecoveryBroker(t, dataDir)
		want := 0
		if cut == int64(len(full)) {
			want = 3
		}
		require.Len(t, partitionRecords(t, b, 0), want, "cut at %d of %d", cut, len(full))
		require.NoError(t, b.Close())
	}
}

// TestTxRecoveryPrepared: a prepared XA transaction survives restarts,
// listed by RECOVER with its messages invisible, its user kept, and is
// committed after the second one; one rolled back after a restart leaves
// nothing.
func TestTxRecoveryPrepared(t *testing.T) {
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
	files, err := txFiles(filepath.Join(dataDir, TxDirName))
	require.NoError(t, err)
	require.Len(t, files, 1)
}

// TestTxHeuristics: an admin completes prepared XA branches heuristically;
// the coordinator's later commit or rollback gets XA_HEURCOM (7) or
// XA_HEURRB (6), RECOVER still lists them, this survives restarts, and
// FORGET removes them. Without admin rights the command is refused.
func TestTxHeuristics(t *testing.T) {
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
	dataDir := t.TempDir()
	cfg := conf.Default()
	cfg.Port = 0
	cfg.DataDir = dataDir
	cfg.NumPartitions = 2
	cfg.Topics = []conf.Topic{{Name: "t"}}
	b, err := New(cfg, Options{Logf: func(string, ...any) {}, txFileSize: 4096})
	require.NoError(t, err)
	require.NoError(t, b.Start())
	t.Cleanup(func() { b.Close() })
	dir := filepath.Join(dataDir, TxDirName)
	c := &txClient{wireConn: dialWire(t, b.Addr())}
	c.begin("TX:h:1")
	c.put("TX:h:1", 0, "held")
	files, err := txFiles(dir)
	require.NoError(t, err)
	first := files[0]
	for i := 0; i < 200; i++ {
		key := "TX:s:" + strconv.Itoa(i)
		c.begin(key)
		c.put(key, i%2, strings.Repeat("x", 100))
		c.commit(key)
	}
	files, err = txFiles(dir)
	require.NoError(t, err)
	require.Equal(t, first, files[0], "the open transaction's file is kept")
	require.LessOrEqual(t, len(files), 3, "files of finished transactions are deleted: %v", files)
	c.commit("TX:h:1")
	c.begin("TX:n:1") // a record in the current file, so the files before it can go
	c.put("TX:n:1", 0, strings.Repeat("y", 5000))
	c.commit("TX:n:1")
	files, err = txFiles(dir)
	require.NoError(t, err)
	require.NotContains(t, files, first, "freed once its transaction ended")
	require.LessOrEqual(t, len(files), 2)
	require.Len(t, c.records(0), 102)
}

// TestTxRecoveryTornBatch: a commit whose batch a torn write left in part
// at the end of its partition (its first record) is completed with the
// other records only: each message once, contiguous, in order.
func TestTxRecoveryTornBatch(t *testing.T) {
	dataDir := t.TempDir()
	b := txRecoveryBroker(t, dataDir)
	_, _, err := b.topics["t"].parts[0].AppendSync([]store.Entry{{ID: 1000, CRC: message.Checksum([]byte("committed 0")), Data: []byte("committed 0")}})
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.NoError(t, os.RemoveAll(filepath.Join(dataDir, TxDirName))) // no open transaction in it
	committed, _ := writeTxJournal(t, dataDir)
	b = txRecoveryBroker(t, dataDir)
	recs := partitionRecords(t, b, 0)
	require.Len(t, recs, 3)
	for i, r := range recs {
		require.Equal(t, committed[i].ID, r.ID)
		require.Equal(t, committed[i].Data, r.Data)
	}
}

// TestTxJournalZeroTail: a journal file as a killed broker leaves it (its
// records written, over the zero-filled space after them, not cut) is
// replayed whole and quietly; a torn record before the zeros is cut and
// reported.
func TestTxJournalZeroTail(t *testing.T) {
	dir := t.TempDir()
	j, err := openTxLog(dir, txFlushCommit, 0, t.Logf)
	require.NoError(t, err)
	tr := &tx{key: "TX:s:1"}
	var pos int64
	for i := 0; i < 5; i++ {
		e := store.Entry{ID: int64(i + 1), Data: []byte("zero tail " + strconv.Itoa(i))}
		pos, err = j.write(tr, txRecAppend, encodeTxAppend(tr.key, &txMsg{t: &topic{name: "t"}, e: e}))
		require.NoError(t, err)
	}
	require.NoError(t, j.force(pos))
	path := filepath.Join(dir, txFileName(1))
	live, err := os.ReadFile(path) // the file while the broker runs: a kill -9 leaves this
	require.NoError(t, err)
	require.Greater(t, int64(len(live)), pos, "zero-filled ahead of its records")
	require.NoError(t, j.close())

	for _, torn := range []bool{false, true} {
		d := t.TempDir()
		data := append([]byte(nil), live...)
		if torn {
			data[pos-1] ^= 0xff // the last record's last byte
		}
		require.NoError(t, os.WriteFile(filepath.Join(d, txFileName(1)), data, 0o644))
		var logs []string
		recs, _, err := replayTxFiles(d, func(f string, a ...any) { logs = append(logs, f) })
		require.NoError(t, err)
		if torn {
			require.Len(t, recs, 4)
			require.Len(t, logs, 1, "a torn record is reported")
		} else {
			require.Len(t, recs, 5)
			require.Empty(t, logs, "the zero-filled space is not a torn tail")
		}
		st, err := os.Stat(filepath.Join(d, txFileName(1)))
		require.NoError(t, err)
		require.Less(t, st.Size(), int64(len(live)), "cut after its last good record")
	}
}
