//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/faultfs"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// TestTxFlushModes checks what each flush_tx_log_at_commit value promises
// (docs/storage.md, "What an answer means"), with the real binary on the
// power-loss harness:
//
//   - every value: a kill -9 right after the answers keeps an acknowledged
//     local commit, an acknowledged prepare (RECOVER lists it) and an
//     acknowledged rollback (the journal records are written before the
//     answer);
//   - every value: an acknowledged local commit survives a power cut (its
//     batches are stored durably before the answer: fsynced by group
//     commit or, here, flushed in threshold mode);
//   - 1: an acknowledged prepare survives a power cut;
//   - 2: a prepare survives a power cut once the next once-a-second fsync
//     has passed;
//   - 0: a prepare not followed by an fsync (none comes with 0) is lost by
//     a power cut: the branch is gone after the restart.
func TestTxFlushModes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode        int
		groupCommit bool
	}{{0, false}, {1, false}, {2, false}, {1, true}} {
		mode := tc.mode
		name := fmt.Sprintf("flush_tx_log_at_commit=%d", mode)
		if tc.groupCommit {
			name += "/group-commit"
		}
		t.Run(name, func(t *testing.T) {
			m, config, _, under := powerLossDisk(t, "tx", 2, "")
			raw, err := os.ReadFile(config)
			require.NoError(t, err)
			// Threshold mode (unflush_threshold = 1, no store journal):
			// the transaction journal alone is under test, and a commit's
			// batches are flushed before its answer all the same. The
			// group-commit case adds the store journal, and the pause
			// before the power cut: a kill -9 in the middle of pre-writing
			// a spare journal file once left a short file that the next
			// run took for a whole one, and the cut then broke the chain
			// of journal files (the broker refused to start).
			cfg := string(raw)
			if !tc.groupCommit {
				cfg = strings.Replace(cfg, "unflush_threshold = 0", "unflush_threshold = 1", 1)
			}
			cfg = strings.Replace(cfg, "[[topic]]", fmt.Sprintf("flush_tx_log_at_commit = %d\n\n[[topic]]", mode), 1)
			require.NoError(t, os.WriteFile(config, []byte(cfg), 0o644))
			var all []*testTx
			run := func(c *client, key string, n int, end protocol.TxType) *testTx {
				tx := &testTx{key: key, outcome: txMustNot, msgs: map[int32][]string{}, ids: map[string]int64{}}
				all = append(all, tx)
				ok(t)(txCall(c, key, protocol.TxBegin))
				for i := 0; i < n; i++ {
					p := int32(i % 2)
					body := fmt.Sprintf("r=00 %s i=%03d", key, i)
					tx.put(t, c, p, body)
				}
				switch end {
				case protocol.TxCommitOnePhase:
					ok(t)(txCall(c, key, end))
					tx.outcome = txMustAppear
				case protocol.TxPrepare:
					require.Equal(t, "0", string(ok(t)(txCall(c, key, end)).Body))
				case protocol.TxRollback:
					require.Equal(t, "0", string(ok(t)(txCall(c, key, protocol.TxPrepare)).Body))
					ok(t)(txCall(c, key, end))
				}
				return tx
			}
			recovered := func(c *client) []string {
				body := string(ok(t)(txCall(c, protocol.NullTxKey, protocol.TxRecover)).Body)
				if body == "" {
					return nil
				}
				keys := strings.Split(body, "\r\n")
				sort.Strings(keys)
				return keys
			}

			// kill -9 right after the answers.
			srv := startServer(t, config, filepath.Join(m.Dir(), "data"))
			c := dial(t, srv.Addr)
			run(c, "TX:flush:1", 5, protocol.TxCommitOnePhase)
			x1 := run(c, "XID:7:01:01:flush", 3, protocol.TxPrepare)
			run(c, "XID:7:02:01:flush", 3, protocol.TxRollback)
			srv.Kill()
			c.close()
			srv = startServer(t, config, filepath.Join(m.Dir(), "data"))
			c = dial(t, srv.Addr)
			checkTxs(t, c, all)
			require.Equal(t, []string{x1.key}, recovered(c), "the acknowledged prepare survives kill -9; the rollback too")

			// A power cut: nothing that was not fsynced is kept.
			run(c, "TX:flush:2", 5, protocol.TxCommitOnePhase)
			x3 := run(c, "XID:7:03:01:flush", 3, protocol.TxPrepare)
			if mode == 2 || tc.groupCommit {
				time.Sleep(1500 * time.Millisecond) // the once-a-second fsync; checkpoints
			}
			run(c, "TX:flush:3", 5, protocol.TxCommitOnePhase)
			srv.Kill()
			c.close()
			rep, err := m.Cut(faultfs.DropAll)
			require.NoError(t, err)
			t.Logf("cut dropped %d bytes of %d files", rep.DroppedBytes, len(rep.Files))
			srv = startServer(t, config, filepath.Join(under, "data"))
			c = dial(t, srv.Addr)
			checkTxs(t, c, all) // the acknowledged local commits are there, once
			want := []string{x1.key, x3.key}
			if mode == 0 {
				want = []string{x1.key} // x1 was written again, fsynced, by the restart
			}
			require.Equal(t, want, recovered(c))
			srv.Kill()
			c.close()
			require.NoError(t, m.Remount())
		})
	}
}
