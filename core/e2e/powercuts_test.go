//go:build linux

package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/faultfs"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// cutModes are the faultfs cut modes the power-cut tests take in turn,
// the torn one (a random subset of the unsynced pages kept, as a disk
// with a volatile write cache may: issue 25) first.
var cutModes = []faultfs.Mode{faultfs.KeepRandom, faultfs.DropAll, faultfs.KeepPrefix, faultfs.TearLast, faultfs.PrefixTorn}

// powerCutModes returns the modes TestPowerCuts64 and
// TestPowerCutsThreshold take in turn: cutModes, or only those
// $METAQ_POWER_CUT_MODES names (comma-separated, as Mode.String spells
// them: make soak's torn runs set "torn").
func powerCutModes(t *testing.T) []faultfs.Mode {
	s := os.Getenv("METAQ_POWER_CUT_MODES")
	if s == "" {
		return cutModes
	}
	var out []faultfs.Mode
	for _, name := range strings.Split(s, ",") {
		i := slices.IndexFunc(cutModes, func(m faultfs.Mode) bool { return m.String() == strings.TrimSpace(name) })
		require.GreaterOrEqual(t, i, 0, "METAQ_POWER_CUT_MODES: no mode %q", name)
		out = append(out, cutModes[i])
	}
	return out
}

// powerCutCuts is how many power cuts TestPowerCuts64 makes: the issue's
// 20 in make test, 4 with -short, $METAQ_POWER_CUTS when set (make soak).
func powerCutCuts(t *testing.T) int {
	if s := os.Getenv("METAQ_POWER_CUTS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "METAQ_POWER_CUTS")
		require.Positive(t, n, "METAQ_POWER_CUTS")
		return n
	}
	if testing.Short() {
		return 4
	}
	return 20
}

// TestPowerCuts64 is the power-cut test: the real metaq-server on
// a faultfs mount, 4 producers pipelining puts and mputs over 64
// partitions of a group-commit topic while a consumer commits offsets
// (file store), then a power cut (the modes of cutModes in turn, the
// torn one included), a restart of the binary on the disk as the cut left
// it, and checks, 20 times over (4 with -short):
//
//   - every acknowledged message is there exactly once, at its
//     acknowledged offset, with its id and crc (readLog);
//   - no record that was in the log after an earlier restart moved or
//     went away (requireStable);
//   - fetch returns, for every partition, at least the last offset whose
//     commit was acknowledged, and nothing that was never sent.
//
// The first round starts on an empty data directory, so the directory
// tree itself is created under load (store.MkdirAllDurable).
func TestPowerCuts64(t *testing.T) {
	t.Parallel()
	const (
		topic     = "powercuts"
		parts     = 64
		producers = 4
		group     = "powercuts-group"
	)
	cuts := powerCutCuts(t)
	modes := powerCutModes(t)
	m, config, _, under := powerLossDisk(t, topic, parts, "")
	seed := m.Seed()
	rng := rand.New(rand.NewPCG(seed, 2))
	com := newCommitTracker(topic, parts)

	var acks []ack
	var prev logView
	seqs := make([]int, producers)
	start := time.Now()
	reordered := 0
	for round := 0; round < cuts; round++ {
		srv := startServer(t, config, filepath.Join(m.Dir(), "data"))
		delay := time.Duration(150+rng.IntN(450)) * time.Millisecond
		cdone := make(chan struct{})
		go func() { defer close(cdone); com.run(srv.Addr, group, rand.New(rand.NewPCG(seed, uint64(round)+100))) }()
		mode := modes[round%len(modes)]
		var rep *faultfs.CutReport
		var cutErr error
		var beforeKill func()
		if mode == faultfs.KeepRandom {
			// On FUSE a write waits for an fsync of its file in progress,
			// so a killed server rarely leaves its journal more than one
			// write past its last fdatasync: a torn cut would have little
			// to tear. So the power fails at the next fsync of a file two
			// or more writes past its last one (the server sees it hang,
			// never fail, and acknowledges nothing more), and the cut is
			// made then, the server killed.
			beforeKill = func() {
				trapped := m.StallAtSync()
				select {
				case <-trapped:
				case <-time.After(2 * time.Second):
				}
				_ = srv.Cmd.Process.Kill() // it exits once the cut fails its stalled requests
				rep, cutErr = m.Cut(mode)
			}
		}
		got, sent := loadRoundThen(t, srv, topic, parts, producers, round, seqs, seed, delay, beforeKill)
		select {
		case <-cdone:
		case <-time.After(30 * time.Second):
			t.Fatal("the committer did not stop within 30s of the kill")
		}
		require.Empty(t, com.bad, "commit replies")
		acks = append(acks, got...)

		if rep == nil && cutErr == nil {
			rep, cutErr = m.Cut(mode)
		}
		require.NoError(t, cutErr)
		reordered += reorderedFiles(rep)

		srv = startServer(t, config, filepath.Join(under, "data"))
		v := readLog(t, srv.Addr, topic, parts, acks)
		if len(v.missing) > 0 {
			a := v.missing[0]
			t.Fatalf("cut %d (%s): %d acknowledged messages lost, the first %+v (id %d) at partition %d offset %d",
				round, mode, len(v.missing), a.Key, a.ID, a.Partition, a.Offset)
		}
		requireStable(t, prev, v)
		prev = v
		com.check(t, srv.Addr, group)
		t.Logf("cut %d (%s) after %v: %d sent, %d acknowledged, %d commits acknowledged; the cut kept %d and dropped %d writes (%d torn; %d files kept a page after a lost one); %d records in the log, %d acknowledged so far",
			round, mode, delay, sent, len(got), com.roundAcked, rep.KeptWrites, rep.DroppedWrites, rep.TornWrites, reorderedFiles(rep), v.total, len(acks))
		srv.Kill()
		require.NoError(t, m.Remount())
	}
	require.NotEmpty(t, acks, "no put was ever acknowledged")
	require.NotZero(t, com.totalAcked, "no commit was ever acknowledged")
	t.Logf("%d cuts in %v, %d acknowledged messages, none lost, no refused start; %d files kept an unsynced page after a lost one",
		cuts, time.Since(start).Round(time.Millisecond), len(acks), reordered)
}

// reorderedFiles counts the files of a KeepRandom cut that kept an
// unsynced page after losing an earlier one (what a prefix cut never
// does).
func reorderedFiles(rep *faultfs.CutReport) int {
	n := 0
	for _, fc := range rep.Files {
		lost := false
		for _, pc := range fc.Pieces {
			if !pc.Kept { // lost, or torn
				lost = true
			} else if lost {
				n++
				break
			}
		}
	}
	return n
}

// commitTracker commits consumer offsets for a group while the broker is
// under load and remembers, per partition, the last offset sent and the
// last one acknowledged. Offsets rise by one with every commit of a
// partition, over all rounds, so "at least the last acknowledged, at most
// the last sent" pins fetch down.
type commitTracker struct {
	topic      string
	parts      int
	sent       []int64 // per partition, -1 = never
	acked      []int64
	roundAcked int
	totalAcked int
	bad        []string
}

func newCommitTracker(topic string, parts int) *commitTracker {
	c := &commitTracker{topic: topic, parts: parts, sent: make([]int64, parts), acked: make([]int64, parts)}
	for i := range c.sent {
		c.sent[i], c.acked[i] = -1, -1
	}
	return c
}

// run commits random sets of partitions, one commit in flight, until the
// connection dies (the broker is killed) or a bounded number of commits.
func (c *commitTracker) run(addr, group string, rng *rand.Rand) {
	c.roundAcked = 0
	cl, err := dialClient(addr)
	if err != nil {
		return
	}
	defer cl.close()
	for i := 0; i < 100_000; i++ {
		var entries []protocol.OffsetEntry
		for _, p := range rng.Perm(c.parts)[:1+rng.IntN(8)] {
			c.sent[p]++
			entries = append(entries, protocol.OffsetEntry{Topic: c.topic, Partition: int32(p), Offset: c.sent[p], MsgID: -1})
		}
		op := cl.nextOpaque()
		r, err := cl.call(protocol.AppendCommit(nil, group, entries, op), op)
		if err != nil {
			return // killed
		}
		if r.Op != protocol.OpResult || r.Code != protocol.StatusOK {
			c.bad = append(c.bad, r.String())
			return
		}
		for _, e := range entries {
			c.acked[e.Partition] = e.Offset
		}
		c.roundAcked++
		c.totalAcked++
		time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
	}
}

// check fetches every partition's offset: at least the last acknowledged
// commit, at most the last sent one. It then takes the fetched offsets as
// the new floor (a commit that was sent and survived is kept by later
// cuts too: it is on disk) and the base of the next commits.
func (c *commitTracker) check(t *testing.T, addr, group string) {
	t.Helper()
	cl := dial(t, addr)
	entries := make([]protocol.OffsetEntry, c.parts)
	for p := range entries {
		entries[p] = protocol.OffsetEntry{Topic: c.topic, Partition: int32(p)}
	}
	op := cl.nextOpaque()
	r := ok(t)(cl.call(protocol.AppendFetch(nil, group, entries, op), op))
	got, err := protocol.ParseOffsetLines(r.Body, true)
	require.NoError(t, err)
	require.Len(t, got, c.parts)
	for p, e := range got {
		require.Equal(t, int32(p), e.Partition, "fetch reply order")
		require.GreaterOrEqual(t, e.Offset, c.acked[p], "partition %d: fetched offset below the last acknowledged commit (%d sent)", p, c.sent[p])
		require.LessOrEqual(t, e.Offset, c.sent[p], "partition %d: fetched offset never committed", p)
		c.acked[p] = e.Offset
		c.sent[p] = max(c.sent[p], e.Offset)
	}
}

// TestPowerCutsThreshold runs a threshold-mode topic (ack after write())
// through power cuts and checks the README's bound: per partition, the
// acknowledged messages a cut loses are at most 2 x unflush_threshold (the
// N unflushed when an fsync starts, plus up to N more acknowledged while
// it runs; core/store flush), all
// from the tail of the partition (nothing before a kept one is lost), and
// all acknowledged within about unflush_interval of the cut (checked with
// generous slack, the figure is logged). Lost messages are dropped from
// the expected set after each round; everything kept must be at its
// acknowledged offset.
func TestPowerCutsThreshold(t *testing.T) {
	t.Parallel()
	const (
		topic     = "threshold"
		parts     = 16
		producers = 4
		threshold = 40
		interval  = 300 * time.Millisecond
		slack     = 3 * time.Second // for a loaded machine under -race
	)
	cuts := 6
	if testing.Short() {
		cuts = 2
	}
	modes := powerCutModes(t)
	m, config, _, under := powerLossDisk(t, topic, parts,
		fmt.Sprintf("unflush_threshold = %d\nunflush_interval = %d\n", threshold, interval.Milliseconds()))
	seed := m.Seed()
	rng := rand.New(rand.NewPCG(seed, 3))

	var acks []ack
	var prev logView
	seqs := make([]int, producers)
	lostTotal, worst := 0, 0
	var oldest time.Duration
	for round := 0; round < cuts; round++ {
		srv := startServer(t, config, filepath.Join(m.Dir(), "data"))
		delay := time.Duration(300+rng.IntN(700)) * time.Millisecond
		got, sent := loadRound(t, srv, topic, parts, producers, round, seqs, seed, delay)
		killedAt := time.Now()
		acks = append(acks, got...)
		mode := modes[round%len(modes)]
		rep, err := m.Cut(mode)
		require.NoError(t, err)

		srv = startServer(t, config, filepath.Join(under, "data"))
		v := readLog(t, srv.Addr, topic, parts, acks)
		requireStable(t, prev, v)
		prev = v

		// Only this round's acks can be lost: earlier ones were on the
		// underlying disk when this round started.
		lostBy := make([][]ack, parts)
		roundWorst := 0
		for _, a := range v.missing {
			require.Equal(t, round, a.Key.Round, "message %+v of an earlier round lost", a.Key)
			lostBy[a.Partition] = append(lostBy[a.Partition], a)
		}
		for p, lost := range lostBy {
			if len(lost) == 0 {
				continue
			}
			require.LessOrEqual(t, len(lost), 2*threshold, "partition %d: %d acknowledged messages lost, unflush_threshold is %d", p, len(lost), threshold)
			sort.Slice(lost, func(i, j int) bool { return lost[i].Offset < lost[j].Offset })
			for _, a := range acks {
				if a.Partition == int32(p) && a.Offset > lost[0].Offset {
					_, kept := v.at[a.Key]
					require.False(t, kept, "partition %d: acknowledged message at %d kept after a lost one at %d", p, a.Offset, lost[0].Offset)
				}
			}
			for _, a := range lost {
				age := killedAt.Sub(a.At)
				oldest = max(oldest, age)
				require.Less(t, age, interval+slack, "partition %d: message acknowledged %v before the kill lost (unflush_interval %v)", p, age, interval)
			}
			roundWorst = max(roundWorst, len(lost))
			worst = max(worst, len(lost))
			lostTotal += len(lost)
		}
		acks = dropAcks(acks, v.missing)
		t.Logf("cut %d (%s) after %v: %d sent, %d acknowledged, %d of them lost (worst partition %d); %d files kept an unsynced page after a lost one; %d records in the log",
			round, mode, delay, sent, len(got), len(v.missing), roundWorst, reorderedFiles(rep), v.total)
		srv.Kill()
		require.NoError(t, m.Remount())
	}
	t.Logf("threshold mode over %d cuts: %d acknowledged messages lost in all, at most %d in one partition (bound %d), the oldest acknowledged %v before its cut (interval %v)",
		cuts, lostTotal, worst, 2*threshold, oldest.Round(time.Millisecond), interval)
}

// dropAcks returns acks without the ones in lost (by id).
func dropAcks(acks, lost []ack) []ack {
	if len(lost) == 0 {
		return acks
	}
	gone := make(map[int64]bool, len(lost))
	for _, a := range lost {
		gone[a.ID] = true
	}
	out := acks[:0]
	for _, a := range acks {
		if !gone[a.ID] {
			out = append(out, a)
		}
	}
	return out
}
