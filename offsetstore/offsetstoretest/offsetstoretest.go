// Package offsetstoretest is the conformance suite every offset store
// passes: the builtins, the remote adapter and the plugins (zk, mysql, the
// example). Call Run from a test with a factory that returns a ready store
// (Init already done); call RunDurable too when the store's state survives
// a close and reopen.
package offsetstoretest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/offsetstore"
)

// CallTimeout bounds each call the suite makes.
const CallTimeout = 10 * time.Second

// Run runs the conformance suite. newStore returns a ready (initialised)
// store for one subtest; the suite closes it. Stores may share their
// backing state: every subtest uses its own group names.
func Run(t *testing.T, newStore func(t *testing.T) offsetstore.Store) {
	t.Helper()
	prefix := "ostest-" + token()
	open := func(t *testing.T) (offsetstore.Store, string) {
		t.Helper()
		s := newStore(t)
		require.NotNil(t, s)
		t.Cleanup(func() { s.Close() })
		return s, prefix + "-" + token()
	}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s offsetstore.Store, g string)
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
		{"CloseThenFail", testCloseThenFail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, g := open(t)
			tc.fn(t, s, g)
		})
	}
}

// RunDurable checks that commits survive Close and a reopen. open returns
// a ready store over the same backing state every time it is called within
// one subtest (for example the same file or database).
func RunDurable(t *testing.T, open func(t *testing.T) offsetstore.Store) {
	t.Helper()
	g := "ostest-durable-" + token()
	t.Run("Reopen", func(t *testing.T) {
		s := open(t)
		want := entries(g, "dur", 100, 7)
		require.NoError(t, commit(s, want))
		require.NoError(t, s.Close())

		s = open(t)
		expectFound(t, s, want)
		over := entries(g, "dur", 100, 9)
		require.NoError(t, commit(s, over))
		require.NoError(t, s.Close())

		s = open(t)
		defer s.Close()
		expectFound(t, s, over)
		expectMissing(t, s, keysOf(entries(g+"-other", "dur", 3, 0)))
	})
}

func token() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), CallTimeout)
}

func commit(s offsetstore.Store, es []offsetstore.Entry) error {
	c, cancel := ctx()
	defer cancel()
	return s.Commit(c, es)
}

func load(t *testing.T, s offsetstore.Store, keys []offsetstore.Key) []offsetstore.Result {
	t.Helper()
	c, cancel := ctx()
	defer cancel()
	res, err := s.Load(c, keys)
	require.NoError(t, err)
	require.Len(t, res, len(keys), "Load must return one result per key")
	for i := range res {
		require.Equal(t, keys[i], res[i].Key, "result %d is not for its key", i)
	}
	return res
}

// entries returns n entries of group g (topic t, broker 1, partitions
// 0..n-1) with offsets and msgIds derived from seed.
func entries(g, topic string, n int, seed int64) []offsetstore.Entry {
	out := make([]offsetstore.Entry, n)
	for i := range out {
		out[i] = offsetstore.Entry{
			Key:    offsetstore.Key{Group: g, Topic: topic, BrokerID: 1, Partition: int32(i)},
			Offset: seed*1_000_000 + int64(i)*20,
			MsgID:  seed<<32 | int64(i),
		}
	}
	return out
}

func keysOf(es []offsetstore.Entry) []offsetstore.Key {
	out := make([]offsetstore.Key, len(es))
	for i, e := range es {
		out[i] = e.Key
	}
	return out
}

func expectFound(t *testing.T, s offsetstore.Store, want []offsetstore.Entry) {
	t.Helper()
	res := load(t, s, keysOf(want))
	for i, r := range res {
		require.True(t, r.Found, "key %+v not found", want[i].Key)
		require.Equal(t, want[i], r.Entry, "key %+v", want[i].Key)
	}
}

func expectMissing(t *testing.T, s offsetstore.Store, keys []offsetstore.Key) {
	t.Helper()
	for _, r := range load(t, s, keys) {
		require.False(t, r.Found, "key %+v was never committed but is found", r.Key)
	}
}

func testLoadUnknown(t *testing.T, s offsetstore.Store, g string) {
	expectMissing(t, s, keysOf(entries(g, "t", 5, 0)))
}

func testEmptyBatches(t *testing.T, s offsetstore.Store, g string) {
	require.NoError(t, commit(s, nil))
	require.Empty(t, load(t, s, nil))
	require.Empty(t, load(t, s, []offsetstore.Key{}))
}

func testCommitLoad(t *testing.T, s offsetstore.Store, g string) {
	want := entries(g, "t", 3, 1)
	require.NoError(t, commit(s, want))
	expectFound(t, s, want)
	// Order is the keys' order, with unknown keys in between.
	unknown := offsetstore.Key{Group: g, Topic: "t", BrokerID: 1, Partition: 99}
	keys := []offsetstore.Key{want[2].Key, unknown, want[0].Key}
	res := load(t, s, keys)
	require.True(t, res[0].Found)
	require.Equal(t, want[2], res[0].Entry)
	require.False(t, res[1].Found)
	require.True(t, res[2].Found)
	require.Equal(t, want[0], res[2].Entry)
}

func testOverwrite(t *testing.T, s offsetstore.Store, g string) {
	first := entries(g, "t", 4, 1)
	require.NoError(t, commit(s, first))
	second := entries(g, "t", 2, 2) // partitions 0 and 1 only
	require.NoError(t, commit(s, second))
	expectFound(t, s, append(append([]offsetstore.Entry{}, second...), first[2:]...))
	// Going back is allowed: a store keeps what it was last told.
	require.NoError(t, commit(s, first[:1]))
	expectFound(t, s, first[:1])
}

func testLastWinsInBatch(t *testing.T, s offsetstore.Store, g string) {
	k := offsetstore.Key{Group: g, Topic: "t", BrokerID: 1, Partition: 0}
	batch := []offsetstore.Entry{{Key: k, Offset: 10, MsgID: 1}, {Key: k, Offset: 30, MsgID: 3}}
	require.NoError(t, commit(s, batch))
	expectFound(t, s, batch[1:])
}

func testManyKeys(t *testing.T, s offsetstore.Store, g string) {
	want := entries(g, "many", 1000, 5)
	require.NoError(t, commit(s, want))
	expectFound(t, s, want)
}

func testIsolation(t *testing.T, s offsetstore.Store, g string) {
	base := offsetstore.Key{Group: g + "-a", Topic: "t1", BrokerID: 1, Partition: 0}
	var want []offsetstore.Entry
	add := func(k offsetstore.Key) {
		want = append(want, offsetstore.Entry{Key: k, Offset: int64(len(want)+1) * 100, MsgID: int64(len(want)) + 7})
	}
	add(base)
	k := base
	k.Group = g + "-b" // same topic and partition, other group
	add(k)
	k = base
	k.Topic = "t2" // same group, other topic
	add(k)
	k = base
	k.BrokerID = 2 // same group/topic/partition, other broker
	add(k)
	k = base
	k.Partition = 1
	add(k)
	k = base
	k.Group, k.Topic = g+"-c.x_y", "t.1-x_y" // MetaQ-legal punctuation
	add(k)
	for i := range want { // one commit per entry, then all together
		require.NoError(t, commit(s, want[i:i+1]))
	}
	expectFound(t, s, want)
	require.NoError(t, commit(s, want))
	expectFound(t, s, want)
	expectMissing(t, s, []offsetstore.Key{{Group: g + "-a", Topic: "t3", BrokerID: 1, Partition: 0}})
}

func testConcurrent(t *testing.T, s offsetstore.Store, g string) {
	const workers, rounds = 8, 25
	shared := offsetstore.Key{Group: g, Topic: "shared", BrokerID: 1, Partition: 0}
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 1; r <= rounds; r++ {
				batch := []offsetstore.Entry{
					{Key: offsetstore.Key{Group: g, Topic: fmt.Sprintf("w%d", w), BrokerID: 1, Partition: 0}, Offset: int64(r), MsgID: int64(w)},
					{Key: shared, Offset: int64(w*1000 + r), MsgID: int64(w)},
				}
				if err := commit(s, batch); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for w := 0; w < workers; w++ {
		expectFound(t, s, []offsetstore.Entry{{Key: offsetstore.Key{Group: g, Topic: fmt.Sprintf("w%d", w), BrokerID: 1, Partition: 0}, Offset: rounds, MsgID: int64(w)}})
	}
	res := load(t, s, []offsetstore.Key{shared})
	require.True(t, res[0].Found)
	w := res[0].MsgID
	require.True(t, w >= 0 && w < workers, "shared key holds msgId %d", w)
	require.Equal(t, w*1000+rounds, res[0].Offset, "shared key must hold a whole entry some worker committed last")
}

func testLargeValues(t *testing.T, s offsetstore.Store, g string) {
	vals := []struct{ off, id int64 }{
		{0, -1},
		{1<<53 + 1, 1<<53 + 3},
		{1<<62 + 5, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64 - 1},
		{1234567890123456789, 9007199254740993},
	}
	var want []offsetstore.Entry
	for i, v := range vals {
		want = append(want, offsetstore.Entry{Key: offsetstore.Key{Group: g, Topic: "big", BrokerID: math.MaxInt32, Partition: int32(i)}, Offset: v.off, MsgID: v.id})
	}
	want = append(want, offsetstore.Entry{Key: offsetstore.Key{Group: g, Topic: "big", BrokerID: 0, Partition: math.MaxInt32}, Offset: 42, MsgID: 43})
	require.NoError(t, commit(s, want))
	expectFound(t, s, want)
}

func testCloseThenFail(t *testing.T, s offsetstore.Store, g string) {
	es := entries(g, "t", 2, 1)
	require.NoError(t, commit(s, es))
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close must be idempotent")
	require.ErrorIs(t, commit(s, es), offsetstore.ErrClosed)
	c, cancel := ctx()
	defer cancel()
	_, err := s.Load(c, keysOf(es))
	require.ErrorIs(t, err, offsetstore.ErrClosed)
}
