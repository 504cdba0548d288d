package file_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/txn"
	"github.com/metaq-go/metaq/txn/file"
	"github.com/metaq-go/metaq/txn/txntest"
)

func opener(t *testing.T) func() txn.Coordinator {
	path := filepath.Join(t.TempDir(), "decisions.log")
	return func() txn.Coordinator {
		c, err := file.Open(path)
		require.NoError(t, err)
		return c
	}
}

func TestConformance(t *testing.T) { txntest.Run(t, opener) }

func logDecision(t *testing.T, c txn.Coordinator, owner string, n int) txn.Decision {
	t.Helper()
	resp, err := c.Begin(context.Background(), &txn.BeginRequest{Owner: owner})
	require.NoError(t, err)
	d := txn.Decision{XID: resp.XID, Owner: owner}
	for i := range n {
		d.Branches = append(d.Branches, txn.Branch{Resource: "r" + strconv.Itoa(i), Bqual: []byte(strconv.Itoa(i + 1))})
	}
	require.NoError(t, c.Commit(context.Background(), &txn.CommitRequest{Decision: d}))
	return d
}

func recovered(t *testing.T, c txn.Coordinator) []txn.Decision {
	t.Helper()
	resp, err := c.Recover(context.Background(), &txn.RecoverRequest{})
	require.NoError(t, err)
	return resp.Decisions
}

// TestTornTail cuts the log at every byte of its last record (what a crash
// during the append leaves, with or without zero fill): open keeps every
// earlier decision and the last one exactly when it is whole.
func TestTornTail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "d.log")
	c, err := file.Open(path)
	require.NoError(t, err)
	first := logDecision(t, c, "own", 2)
	st, err := os.Stat(path)
	require.NoError(t, err)
	before := st.Size()
	logDecision(t, c, "own", 3)
	require.NoError(t, c.Close())
	full, err := os.ReadFile(path)
	require.NoError(t, err)

	for cut := before; cut <= int64(len(full)); cut++ {
		for _, zeros := range []int{0, 16} {
			p := filepath.Join(dir, "cut.log")
			data := append(append([]byte(nil), full[:cut]...), make([]byte, zeros)...)
			require.NoError(t, os.WriteFile(p, data, 0o644))
			c, err := file.Open(p)
			require.NoError(t, err, "cut at %d (+%d zeros)", cut, zeros)
			got := recovered(t, c)
			want := 1
			if cut == int64(len(full)) {
				want = 2
			}
			require.Len(t, got, want, "cut at %d (+%d zeros)", cut, zeros)
			require.True(t, got[0].XID.Equal(first.XID))
			// The cut is made: a new decision appends cleanly after it.
			logDecision(t, c, "own", 1)
			require.NoError(t, c.Close())
			c, err = file.Open(p)
			require.NoError(t, err)
			require.Len(t, recovered(t, c), want+1)
			require.NoError(t, c.Close())
		}
	}
}

// TestCorruptMiddle: a damaged record with valid records after it is not a
// torn tail; open refuses rather than drop the decisions after it.
func TestCorruptMiddle(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "d.log")
	c, err := file.Open(path)
	require.NoError(t, err)
	logDecision(t, c, "own", 1)
	logDecision(t, c, "own", 1)
	require.NoError(t, c.Close())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	data[12] ^= 0xff // inside the first record's payload
	require.NoError(t, os.WriteFile(path, data, 0o644))
	_, err = file.Open(path)
	require.ErrorIs(t, err, file.ErrCorrupt)
}

func TestLocked(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "d.log")
	c, err := file.Open(path)
	require.NoError(t, err)
	_, err = file.Open(path)
	require.ErrorIs(t, err, txn.ErrBadConfig, "a second opener is refused while the log is open")
	require.NoError(t, c.Close())
	c, err = file.Open(path)
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

func TestBadConfig(t *testing.T) {
	t.Parallel()
	for _, conf := range []map[string]string{nil, {"path": ""}, {"path": "x", "other": "1"}} {
		err := file.New().Init(context.Background(), &txn.InitRequest{Config: conf})
		require.ErrorIs(t, err, txn.ErrBadConfig, "%v", conf)
	}
	c := file.New()
	_, err := c.Begin(context.Background(), &txn.BeginRequest{Owner: "o"})
	require.ErrorIs(t, err, txn.ErrNotInitialized)
}

// TestCompaction: a log that is mostly forgotten decisions is rewritten,
// and the live ones survive the rewrite and a reopen.
func TestCompaction(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "d.log")
	c, err := file.Open(path)
	require.NoError(t, err)
	keep := logDecision(t, c, "own", 1)
	var maxSize int64
	for range 3000 {
		d := logDecision(t, c, "own", 8)
		require.NoError(t, c.Forget(context.Background(), &txn.ForgetRequest{XIDs: []txn.XID{d.XID}}))
		st, err := os.Stat(path)
		require.NoError(t, err)
		maxSize = max(maxSize, st.Size())
	}
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Less(t, st.Size(), maxSize, "the log was rewritten")
	require.LessOrEqual(t, maxSize, int64(2<<20), "the log stays bounded")
	got := recovered(t, c)
	require.Len(t, got, 1)
	require.True(t, got[0].XID.Equal(keep.XID))
	require.NoError(t, c.Close())
	c, err = file.Open(path)
	require.NoError(t, err)
	got = recovered(t, c)
	require.Len(t, got, 1)
	require.True(t, got[0].XID.Equal(keep.XID))
	require.NoError(t, c.Close())
}
