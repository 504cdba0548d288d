// Package offsetstoretest is the conformance suite of the offsets.Store
// contract (sdk/offsets), which every offset store passes: the builtins,
// the remote adapter, the plugins (zk, mysql, the example) and the SDK's
// broker-backed store. Call Run from a test with a factory that returns a
// ready store (an offsetstore.Store with Init done); call RunDurable too
// when the store's state survives a close and reopen.
package offsetstoretest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
)

// CallTimeout bounds each call the suite makes.
const CallTimeout = 10 * time.Second

// Space is the partitions the suite's positions lie in, for a store that
// keeps only some: the SDK's broker-backed store keeps those of the
// topics and partitions its brokers have. The zero Space is every
// partition: the suite picks its own topics, broker ids 1, 2, 0 and
// math.MaxInt32, and partitions up to math.MaxInt32.
type Space struct {
	// Topics are the topics to use; at least 2 (3 to try MetaQ-legal
	// punctuation in the third).
	Topics []string
	// BrokerIDs are the broker ids to use; at least 1.
	BrokerIDs []int
	// MaxPartition is the highest partition number of every topic on
	// every broker; at least 9.
	MaxPartition int32
}

func (sp Space) orDefault(t *testing.T) Space {
	t.Helper()
	if sp.Topics == nil && sp.BrokerIDs == nil && sp.MaxPartition == 0 {
		return Space{Topics: []string{"t", "t2", "t.1-x_y"}, BrokerIDs: []int{1, 2, 0, math.MaxInt32}, MaxPartition: math.MaxInt32}
	}
	require.GreaterOrEqual(t, len(sp.Topics), 2, "offsetstoretest.Space needs at least 2 topics")
	require.NotEmpty(t, sp.BrokerIDs, "offsetstoretest.Space needs a broker id")
	require.GreaterOrEqual(t, sp.MaxPartition, int32(9), "offsetstoretest.Space needs partitions 0 to 9")
	return sp
}

// at returns the partition (topic ti, broker bi, partition p) of sp.
func (sp Space) at(ti, bi int, p int32) message.Position {
	return message.Position{Topic: sp.Topics[ti], Partition: message.Partition{BrokerID: sp.BrokerIDs[bi], Partition: p}}
}

// Run runs the conformance suite in the zero Space. newStore returns a
// ready store for one subtest; the suite closes it (if it has a Close
// method). Stores may share their backing state: every subtest uses its
// own group names.
func Run(t *testing.T, newStore func(t *testing.T) offsets.Store) {
	t.Helper()
	RunIn(t, Space{}, newStore)
}

// RunIn is Run in the Space sp.
func RunIn(t *testing.T, sp Space, newStore func(t *testing.T) offsets.Store) {
	t.Helper()
	sp = sp.orDefault(t)
	prefix := "ostest-" + token()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, sp Space, s offsets.Store, g string)
	}{
		{"LoadUnknown", testLoadUnknown},
		{"EmptyBatches", testEmptyBatches},
		{"CommitLoad", testCommitLoad},
		{"Overwrite", testOverwrite},
		{"LastWinsInBatch", testLastWinsInBatch},
		{"ManyKeys", testManyKeys},
		{"Isolation", testIsolation},
		{"ConcurrentCommits", testConcurrent},
		{"LargeValues", testLargeValues},
		{"Invalid", testInvalid},
		{"CloseThenFail", testCloseThenFail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			require.NotNil(t, s)
			t.Cleanup(func() { closeStore(s) })
			tc.fn(t, sp, s, prefix+"-"+token())
		})
	}
}

// RunDurable checks that commits survive Close and a reopen, in the zero
// Space. open returns a ready store over the same backing state every
// time it is called within one subtest (for example the same file or
// database).
func RunDurable(t *testing.T, open func(t *testing.T) offsets.Store) {
	t.Helper()
	RunDurableIn(t, Space{}, open)
}

// RunDurableIn is RunDurable in the Space sp.
func RunDurableIn(t *testing.T, sp Space, open func(t *testing.T) offsets.Store) {
	t.Helper()
	sp = sp.orDefault(t)
	g := "ostest-durable-" + token()
	t.Run("Reopen", func(t *testing.T) {
		s := open(t)
		want := positions(sp, 100, 7)
		require.NoError(t, commit(s, g, want))
		require.NoError(t, closeStore(s))

		s = open(t)
		expectFound(t, s, g, want)
		over := positions(sp, 100, 9)
		require.NoError(t, commit(s, g, over))
		require.NoError(t, closeStore(s))

		s = open(t)
		defer closeStore(s)
		expectFound(t, s, g, over)
		expectMissing(t, s, g+"-other", positions(sp, 3, 0))
	})
}

// closeStore closes s if it has a Close method.
func closeStore(s offsets.Store) error {
	if c, ok := s.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

func token() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), CallTimeout)
}

func commit(s offsets.Store, g string, ps []message.Position) error {
	c, cancel := ctx()
	defer cancel()
	return s.Commit(c, g, ps)
}

func load(t *testing.T, s offsets.Store, g string, ps []message.Position) []message.Position {
	t.Helper()
	c, cancel := ctx()
	defer cancel()
	res, err := s.Load(c, g, ps)
	require.NoError(t, err)
	require.Len(t, res, len(ps), "Load must return one position per requested one")
	for i := range res {
		require.Equal(t, ps[i].Topic, res[i].Topic, "result %d is not for its partition", i)
		require.Equal(t, ps[i].Partition, res[i].Partition, "result %d is not for its partition", i)
	}
	return res
}

// positions returns up to n positions of sp (topic by topic, broker by
// broker, partitions from 0), with offsets and msgIds derived from seed.
func positions(sp Space, n int, seed int64) []message.Position {
	var out []message.Position
	for ti := range sp.Topics {
		for bi := range sp.BrokerIDs {
			for p := int32(0); p <= sp.MaxPartition && len(out) < n; p++ {
				pos := sp.at(ti, bi, p)
				pos.Offset, pos.MsgID = seed*1_000_000+int64(len(out))*20, seed<<32|int64(len(out))
				out = append(out, pos)
			}
		}
	}
	return out
}

func expectFound(t *testing.T, s offsets.Store, g string, want []message.Position) {
	t.Helper()
	res := load(t, s, g, want)
	for i, r := range res {
		require.Equal(t, want[i], r, "group %s, %s", g, want[i])
	}
}

func expectMissing(t *testing.T, s offsets.Store, g string, ps []message.Position) {
	t.Helper()
	for _, r := range load(t, s, g, ps) {
		require.Equal(t, offsets.NotStored(r), r, "%s of group %s was never committed but is found", r, g)
	}
}

func testLoadUnknown(t *testing.T, sp Space, s offsets.Store, g string) {
	expectMissing(t, s, g, positions(sp, 5, 0))
}

func testEmptyBatches(t *testing.T, _ Space, s offsets.Store, g string) {
	require.NoError(t, commit(s, g, nil))
	require.Empty(t, load(t, s, g, nil))
	require.Empty(t, load(t, s, g, []message.Position{}))
}

func testCommitLoad(t *testing.T, sp Space, s offsets.Store, g string) {
	want := positions(sp, 3, 1)
	require.NoError(t, commit(s, g, want))
	expectFound(t, s, g, want)
	// Order is the request's, with unknown partitions in between; the
	// requested Offset and MsgID are ignored.
	unknown := sp.at(0, 0, sp.MaxPartition)
	unknown.Offset, unknown.MsgID = 5, 5
	asked := []message.Position{want[2], unknown, want[0]}
	asked[0].Offset = 1
	res := load(t, s, g, asked)
	require.Equal(t, want[2], res[0])
	require.Equal(t, offsets.NotStored(unknown), res[1])
	require.Equal(t, want[0], res[2])
}

func testOverwrite(t *testing.T, sp Space, s offsets.Store, g string) {
	first := positions(sp, 4, 1)
	require.NoError(t, commit(s, g, first))
	second := positions(sp, 2, 2) // the first two partitions only
	require.NoError(t, commit(s, g, second))
	expectFound(t, s, g, append(append([]message.Position{}, second...), first[2:]...))
	// Going back is allowed: a store keeps what it was last told.
	require.NoError(t, commit(s, g, first[:1]))
	expectFound(t, s, g, first[:1])
}

func testLastWinsInBatch(t *testing.T, sp Space, s offsets.Store, g string) {
	a, b := sp.at(0, 0, 0), sp.at(0, 0, 0)
	a.Offset, a.MsgID = 10, 1
	b.Offset, b.MsgID = 30, 3
	require.NoError(t, commit(s, g, []message.Position{a, b}))
	expectFound(t, s, g, []message.Position{b})
}

func testManyKeys(t *testing.T, sp Space, s offsets.Store, g string) {
	want := positions(sp, 1000, 5)
	require.NoError(t, commit(s, g, want))
	expectFound(t, s, g, want)
}

func testIsolation(t *testing.T, sp Space, s offsets.Store, g string) {
	type gp struct {
		g string
		p message.Position
	}
	var want []gp
	add := func(group string, p message.Position) {
		p.Offset, p.MsgID = int64(len(want)+1)*100, int64(len(want))+7
		want = append(want, gp{group, p})
	}
	base := sp.at(0, 0, 0)
	add(g+"-a", base)           // the base
	add(g+"-b", base)           // same partition, other group
	add(g+"-a", sp.at(1, 0, 0)) // same group, other topic
	if len(sp.BrokerIDs) > 1 {
		add(g+"-a", sp.at(0, 1, 0)) // same topic and partition, other broker
	}
	add(g+"-a", sp.at(0, 0, 1)) // other partition
	ti := min(2, len(sp.Topics)-1)
	add(g+"-c.x_y", sp.at(ti, 0, 0)) // MetaQ-legal punctuation
	for _, w := range want {         // one commit per position
		require.NoError(t, commit(s, w.g, []message.Position{w.p}))
	}
	check := func() {
		for _, w := range want {
			expectFound(t, s, w.g, []message.Position{w.p})
		}
	}
	check()
	byGroup := map[string][]message.Position{}
	for _, w := range want {
		byGroup[w.g] = append(byGroup[w.g], w.p)
	}
	for g, ps := range byGroup { // then each group's all together
		require.NoError(t, commit(s, g, ps))
	}
	check()
	expectFound(t, s, g+"-a", byGroup[g+"-a"])
	expectMissing(t, s, g+"-a", []message.Position{sp.at(1, 0, 1)})
	expectMissing(t, s, g+"-d", []message.Position{base})
}

func testConcurrent(t *testing.T, sp Space, s offsets.Store, g string) {
	const workers, rounds = 8, 25
	shared := sp.at(0, 0, 0)
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Go(func() {
			own := sp.at(0, 0, int32(w+1))
			for r := 1; r <= rounds; r++ {
				own.Offset, own.MsgID = int64(r), int64(w)
				sh := shared
				sh.Offset, sh.MsgID = int64(w*1000+r), int64(w)
				if err := commit(s, g, []message.Position{own, sh}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for w := range workers {
		own := sp.at(0, 0, int32(w+1))
		own.Offset, own.MsgID = rounds, int64(w)
		expectFound(t, s, g, []message.Position{own})
	}
	res := load(t, s, g, []message.Position{shared})
	w := res[0].MsgID
	require.True(t, w >= 0 && w < workers, "shared partition holds msgId %d", w)
	require.Equal(t, w*1000+rounds, res[0].Offset, "shared partition must hold a whole position some worker committed last")
}

func testLargeValues(t *testing.T, sp Space, s offsets.Store, g string) {
	vals := []struct{ off, id int64 }{
		{0, -1},
		{1<<53 + 1, 1<<53 + 3},
		{1<<62 + 5, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64 - 1},
		{1234567890123456789, 9007199254740993},
	}
	var want []message.Position
	last := len(sp.BrokerIDs) - 1 // math.MaxInt32 in the zero Space
	for i, v := range vals {
		p := sp.at(0, last, int32(i))
		p.Offset, p.MsgID = v.off, v.id
		want = append(want, p)
	}
	p := sp.at(0, 0, sp.MaxPartition)
	p.Offset, p.MsgID = 42, 43
	want = append(want, p)
	require.NoError(t, commit(s, g, want))
	expectFound(t, s, g, want)
}

func testInvalid(t *testing.T, sp Space, s offsets.Store, g string) {
	good := sp.at(0, 0, 0)
	good.Offset = 1
	bad := func(f func(p *message.Position)) []message.Position {
		p := good
		f(&p)
		return []message.Position{good, p}
	}
	for name, ps := range map[string][]message.Position{
		"empty topic":        bad(func(p *message.Position) { p.Topic = "" }),
		"negative partition": bad(func(p *message.Position) { p.Partition.Partition = -1 }),
		"negative broker":    bad(func(p *message.Position) { p.Partition.BrokerID = -1 }),
		"negative offset":    bad(func(p *message.Position) { p.Offset = -2 }),
	} {
		require.ErrorIs(t, commit(s, g, ps), offsets.ErrInvalid, name)
		if name != "negative offset" {
			c, cancel := ctx()
			_, err := s.Load(c, g, ps)
			cancel()
			require.ErrorIs(t, err, offsets.ErrInvalid, name)
		}
	}
	for _, group := range []string{"", "a b", "a\nb", "a/b"} {
		require.ErrorIs(t, commit(s, group, []message.Position{good}), offsets.ErrInvalid, "group %q", group)
	}
	expectMissing(t, s, g, []message.Position{good}) // nothing of a bad batch is stored
}

func testCloseThenFail(t *testing.T, sp Space, s offsets.Store, g string) {
	c, ok := s.(interface{ Close() error })
	if !ok {
		t.Skip("the store has no Close")
	}
	ps := positions(sp, 2, 1)
	require.NoError(t, commit(s, g, ps))
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "Close must be idempotent")
	require.ErrorIs(t, commit(s, g, ps), offsets.ErrClosed)
	cx, cancel := ctx()
	defer cancel()
	_, err := s.Load(cx, g, ps)
	require.ErrorIs(t, err, offsets.ErrClosed)
}
