package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// arenaPayload is the deterministic payload of message i of producer w.
func arenaPayload(w, i, size int) []byte {
	b := bytes.Repeat([]byte{byte('a' + (w*7+i)%26)}, size)
	copy(b, fmt.Sprintf("w%d-i%d-", w, i))
	return b
}

// TestJournalArenas: journaled logs keep pending records in arenas the
// segment tails then hold without copying (Log.reserveJournaled,
// appendTail). Asynchronous appends of mixed sizes (a few bytes to larger
// than an arena) from several producers, with many in flight and
// checkpoints flushing tails meanwhile, move pending bytes to new arenas
// while earlier rounds are in flight: every acknowledged record reads back
// intact at its offset, from the tails while the logs run and from the
// segment files after a reopen.
func TestJournalArenas(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	jopts := JournalOptions{CheckpointBytes: 1 << 20, CheckpointInterval: 20 * time.Millisecond}
	j, err := OpenJournal(dataDir, testFileSize(jopts))
	require.NoError(t, err)
	const parts, producers, per = 3, 4, 150
	open := func(j *Journal) []*Log {
		logs := make([]*Log, parts)
		for p := range parts {
			l, err := Open(filepath.Join(dataDir, partName(p)), Options{IDs: &seqIDs{}, Logf: t.Logf, Journal: j, MaxSegmentSize: 3 << 20, MaxMessageSize: 600 << 10})
			require.NoError(t, err)
			logs[p] = l
		}
		return logs
	}
	logs := open(j)
	sizes := []int{7, 100, 1000, 5000, 40 << 10, 70 << 10, 300 << 10}
	type want struct {
		p    int
		data []byte
	}
	wants := make(map[uint64]want)
	ws := make([]*recWaiter, producers)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range producers {
		ws[w] = &recWaiter{}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range per {
				size := sizes[rng.IntN(len(sizes))]
				p := rng.IntN(parts)
				data := arenaPayload(w, i, size)
				tok := uint64(w)<<32 | uint64(i)
				mu.Lock()
				wants[tok] = want{p, data}
				mu.Unlock()
				if !assertNoErr(t, logs[p].Append([]Entry{entry(data)}, ws[w], tok)) {
					return
				}
				if i%16 == 15 { // let rounds complete now and then
					for len(ws[w].calls()) < i-8 {
						time.Sleep(time.Millisecond)
					}
				}
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for w := range producers {
		for len(ws[w].calls()) < per {
			require.True(t, time.Now().Before(deadline), "producer %d: %d of %d completions", w, len(ws[w].calls()), per)
			time.Sleep(5 * time.Millisecond)
		}
	}
	byOff := make([]map[int64][]byte, parts)
	for p := range parts {
		byOff[p] = map[int64][]byte{}
	}
	for w := range producers {
		for _, c := range ws[w].calls() {
			require.NoError(t, c.err)
			wt := wants[c.token]
			byOff[wt.p][c.offset] = wt.data
		}
	}
	check := func(logs []*Log, when string) {
		for p, l := range logs {
			recs := readAllRecords(t, l, 1<<20)
			require.Len(t, recs, len(byOff[p]), "%s: partition %d", when, p)
			for _, r := range recs {
				require.True(t, bytes.Equal(byOff[p][r.Offset], r.Data), "%s: partition %d offset %d: wrong data (%d bytes)", when, p, r.Offset, len(r.Data))
			}
		}
	}
	check(logs, "running")
	for _, l := range logs {
		require.NoError(t, l.Close())
	}
	require.NoError(t, j.Close())
	j, err = OpenJournal(dataDir, testFileSize(jopts))
	require.NoError(t, err)
	logs = open(j)
	check(logs, "reopened")
	for _, l := range logs {
		require.NoError(t, l.Close())
	}
	require.NoError(t, j.Close())
}
