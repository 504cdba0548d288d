package tx

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
)

// writeTxJournal writes a journal file into dataDir as a broker killed in
// the middle of a commit leaves it: committed's puts and its commit record
// (no done, no batch in the partition), and inflight's puts. It returns
// the committed messages and the offsets where each record ends.
func writeTxJournal(t testing.TB, dataDir string) ([]store.Entry, []int64) {
	t.Helper()
	dir := filepath.Join(dataDir, DirName)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	j, err := openTxLog(dir, txFlushCommit, 0, t.Logf)
	require.NoError(t, err)
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
		rec(a, txRecAppend, encodeTxAppend(a.key, &txMsg{t: testTopic("t"), p: 0, e: e}))
		rec(b, txRecAppend, encodeTxAppend(b.key, &txMsg{t: testTopic("t"), p: 1, e: store.Entry{ID: int64(2000 + i), Data: []byte("in flight")}}))
	}
	rec(a, txRecCommit, encodeTxCommit(a.key, []txBatchLoc{{topic: "t", partition: 0, firstID: 1000, n: 3, crc: batchCRC(committed)}}))
	require.NoError(t, j.close())
	return committed, ends
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
	old := filepath.Join(dataDir, DirName, txFileName(1))
	journal, err := os.ReadFile(old)
	require.NoError(t, err)
	for start := 0; start < 3; start++ {
		if start == 1 {
			require.NoError(t, os.WriteFile(old, journal, 0o644))
		}
		_, h, closeAll := openTestManager(t, dataDir)
		recs := h.records(t, 0)
		require.Len(t, recs, 3, "start %d", start)
		for i, r := range recs {
			require.Equal(t, committed[i].ID, r.ID)
			require.Equal(t, committed[i].Data, r.Data)
		}
		require.Empty(t, h.records(t, 1), "in-flight puts are rolled back")
		files, err := txFiles(filepath.Join(dataDir, DirName))
		require.NoError(t, err)
		require.Len(t, files, 1, "only the new file is left")
		if start < 2 { // the third start's journal holds nothing (the broker's ids are clock-based)
			require.Greater(t, h.NextID(), int64(2002), "ids replayed are not issued again")
		}
		closeAll()
	}
}

// TestTxJournalCut: the journal cut at every byte of its last record (the
// commit): the commit is applied only when its record is whole; a cut one
// leaves the transaction in flight, rolled back.
func TestTxJournalCut(t *testing.T) {
	src := t.TempDir()
	_, ends := writeTxJournal(t, src)
	path := filepath.Join(src, DirName, txFileName(1))
	full, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, int64(len(full)), ends[len(ends)-1])
	for cut := ends[len(ends)-2]; cut <= ends[len(ends)-1]; cut++ {
		dataDir := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(dataDir, DirName), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dataDir, DirName, txFileName(1)), full[:cut], 0o644))
		_, h, closeAll := openTestManager(t, dataDir)
		want := 0
		if cut == int64(len(full)) {
			want = 3
		}
		require.Len(t, h.records(t, 0), want, "cut at %d of %d", cut, len(full))
		closeAll()
	}
}

// TestTxRecoveryTornBatch: a commit whose batch a torn write left in part
// at the end of its partition (its first record) is completed with the
// other records only: each message once, contiguous, in order.
func TestTxRecoveryTornBatch(t *testing.T) {
	dataDir := t.TempDir()
	h := openTestHost(t, dataDir)
	_, _, err := h.parts[0].AppendSync([]store.Entry{{ID: 1000, CRC: message.Checksum([]byte("committed 0")), Data: []byte("committed 0")}})
	require.NoError(t, err)
	h.close()
	committed, _ := writeTxJournal(t, dataDir)
	_, h, closeAll := openTestManager(t, dataDir)
	defer closeAll()
	recs := h.records(t, 0)
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
		pos, err = j.write(tr, txRecAppend, encodeTxAppend(tr.key, &txMsg{t: testTopic("t"), e: e}))
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

// FuzzTxJournal: a transaction journal file of any bytes never takes the
// broker down: Open replays it (cutting what does not verify, completing,
// rolling back or keeping what does) or refuses with an error, and a
// Manager that opened closes cleanly. Seeds: a journal cut in the middle
// of a commit (writeTxJournal), the same with a zero-filled tail as a
// killed broker leaves it, a torn copy, and nonsense.
func FuzzTxJournal(f *testing.F) {
	src := f.TempDir()
	writeTxJournal(f, src)
	full, err := os.ReadFile(filepath.Join(src, DirName, txFileName(1)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(full)
	f.Add(append(append([]byte(nil), full...), make([]byte, 4096)...))
	f.Add(full[:len(full)/2])
	torn := append([]byte(nil), full...)
	torn[len(torn)/3] ^= 0x5a
	f.Add(torn)
	f.Add([]byte{})
	f.Add([]byte("not a journal at all"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dataDir := t.TempDir()
		dir := filepath.Join(dataDir, DirName)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, txFileName(1)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		h := openTestHost(t, dataDir)
		defer h.close()
		m, err := Open(testConfig(dataDir), h, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			return // refused with an error: fine
		}
		if err := m.Close(); err != nil {
			t.Fatalf("close after replay: %v", err)
		}
	})
}
