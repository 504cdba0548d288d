package store

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
)

// waitJournalIdle waits until j's committer is parked with nothing to do.
func waitJournalIdle(t testing.TB, j *Journal) {
	t.Helper()
	require.Eventually(t, func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		return j.idle && !j.leading && len(j.ready) == 0 && len(j.slots) == roundSlots && !j.due
	}, 10*time.Second, time.Millisecond)
}

// chanWaiter hands each outcome to a channel.
type chanWaiter chan doneCall

func (w chanWaiter) AppendDone(token uint64, id, off int64, err error) {
	w <- doneCall{token: token, id: id, offset: off, err: err}
}

// TestJournalAppendLead: on an idle journal AppendLead commits the round
// on the caller's goroutine (acknowledged, after the fdatasync, before it
// returns); mixed with Appends and other AppendLeads from many goroutines
// over several partitions every append is acknowledged once, offsets are
// dense and everything survives a reopen.
func TestJournalAppendLead(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	j := openJournal(t, dataDir, smallJournal())
	const parts = 8
	logs := openJLogs(t, dataDir, j, parts, Options{MaxSegmentSize: 16 << 10})

	// Idle: committed before AppendLead returns.
	idle := make([]int, parts)
	for i := range 20 {
		idle[i%parts]++
		waitJournalIdle(t, j)
		before := j.Stats()
		w := &recWaiter{}
		require.NoError(t, logs[i%parts].AppendLead([]Entry{entryf("idle-%d", i)}, w, uint64(i)))
		calls := w.calls()
		require.Len(t, calls, 1, "append %d not acknowledged when AppendLead returned", i)
		require.NoError(t, calls[0].err)
		after := j.Stats()
		require.Equal(t, before.Led+1, after.Led)
		require.Greater(t, after.Fsyncs, before.Fsyncs, "acknowledged without a journal fdatasync")
		require.Equal(t, calls[0].offset+int64(message.HeaderSize+len(fmt.Sprintf("idle-%d", i))), logs[i%parts].MaxOffset(), "not readable once acknowledged")
	}

	// Mixed: leads, plain appends and pipelined appends at once.
	const producers, per = 8, 150
	acked := newAckedPuts(parts)
	var wg sync.WaitGroup
	for w := range producers {
		wg.Go(func() {
			ch := make(chanWaiter, 4)
			for i := range per {
				p := (w + i) % parts
				data := fmt.Sprintf("w%d-i%d", w, i)
				var err error
				if w%2 == 0 {
					err = logs[p].AppendLead([]Entry{entry([]byte(data))}, ch, uint64(i))
				} else {
					err = logs[p].Append([]Entry{entry([]byte(data))}, ch, uint64(i))
				}
				if !assertNoErr(t, err) {
					return
				}
				var c doneCall
				select {
				case c = <-ch:
				case <-time.After(10 * time.Second):
					t.Errorf("producer %d: append %d never acknowledged", w, i)
					return
				}
				if !assertNoErr(t, c.err) {
					return
				}
				acked.add(p, c.offset, data)
			}
		})
	}
	wg.Wait()
	got := acked.got
	require.False(t, t.Failed())
	require.Positive(t, j.Stats().Led)

	dirs := make([]string, parts)
	for p, l := range logs {
		dirs[p] = l.Dir()
		require.NoError(t, l.Close())
	}
	require.NoError(t, j.Close())
	j2 := openJournal(t, dataDir, smallJournal())
	for p := range parts {
		l := openLog(t, filepath.Join(dataDir, partName(p)), Options{Journal: j2, MaxSegmentSize: 16 << 10})
		recs := recordsOf(t, dirs[p])
		require.Len(t, recs, len(got[p])+idle[p], "partition %d", p)
		require.Equal(t, recs[len(recs)-1].Offset+int64(recs[len(recs)-1].Size()), l.MaxOffset())
		byOff := make(map[int64]string, len(recs))
		for _, r := range recs {
			byOff[r.Offset] = string(r.Data)
		}
		for _, g := range got[p] {
			require.Equal(t, g.data, byOff[g.off], "partition %d offset %d", p, g.off)
		}
	}
}
