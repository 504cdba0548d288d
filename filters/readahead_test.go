package filters_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/broker"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// readAheadBroker runs a broker whose group "builtin" has the attribute
// filter in process and whose group "remote" has the same filter in a
// plugin process (which the broker reads ahead for).
func readAheadBroker(t *testing.T) *broker.Broker {
	return startBroker(t, []conf.TopicFilter{
		attrFilter("builtin", "red"),
		{Group: "remote", Filter: "attr-plugin", Config: map[string]string{"equals": "red"}},
	}, helperPlugin(t, "attr-plugin", "attr"))
}

func mixedAttrs(n int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 7))
	colours := []string{"red", "blue", "-", "", "red", "redder"}
	attrs := make([]string, n)
	for i := range attrs {
		attrs[i] = colours[rng.IntN(len(colours))]
		if i >= n/3 && i < n/3+40 {
			attrs[i] = "red" // a run long enough to cut replies at maxSize
		}
	}
	return attrs
}

func sameReply(t *testing.T, what string, a, b *protocol.Request) {
	t.Helper()
	if a.Op != b.Op || a.Code != b.Code || a.Offset != b.Offset || !bytes.Equal(a.Body, b.Body) {
		t.Fatalf("%s: builtin %s %d next %d (%d bytes), remote %s %d next %d (%d bytes)",
			what, a.Op, a.Code, a.Offset, len(a.Body), b.Op, b.Code, b.Offset, len(b.Body))
	}
}

// next is where a consumer reads on after reply r of a get at offset.
func next(t *testing.T, r *protocol.Request, offset int64) int64 {
	t.Helper()
	switch {
	case r.Op == protocol.OpFValue:
		return r.Offset
	case r.Op == protocol.OpResult && r.Code == protocol.StatusMoved:
		n, ok := protocol.ParseInt64(r.Body)
		require.True(t, ok)
		return n
	}
	return -1
}

// TestBrokerReadAheadSameReplies makes the same gets to a group filtered
// in process and to one filtered by a plugin (read ahead): sequential reads
// with several sizes (some cut replies at maxSize), size changes, jumps to
// record starts and into records. On a log that does not grow the replies
// are byte for byte the same, and read-ahead batches were used.
func TestBrokerReadAheadSameReplies(t *testing.T) {
	t.Parallel()
	b := readAheadBroker(t)
	msgs := produce(t, b.Addr(), mixedAttrs(400, 1)...)
	waitReadable(t, b.Addr(), msgs)
	end := msgs[len(msgs)-1].offset + int64(message.HeaderSize) + 64
	cb, cr := dial(t, b.Addr()), dial(t, b.Addr())
	get := func(what string, offset int64, size int) *protocol.Request {
		rb := cb.get(t, "builtin", offset, size)
		rb = &protocol.Request{Op: rb.Op, Code: rb.Code, Offset: rb.Offset, Body: bytes.Clone(rb.Body)}
		rr := cr.get(t, "remote", offset, size)
		sameReply(t, what, rb, rr)
		return rr
	}
	for _, size := range []int{60, 200, 700, 3000, 1 << 20} {
		offset := int64(0)
		for i := 0; offset >= 0 && offset < end; i++ {
			offset = next(t, get(fmt.Sprintf("size %d get %d at %d", size, i, offset), offset, size), offset)
		}
	}
	rng := rand.New(rand.NewPCG(2, 2))
	offset, size := int64(0), 500
	for i := range 300 {
		switch rng.IntN(6) {
		case 0:
			size = 100 + rng.IntN(2000)
		case 1:
			offset = msgs[rng.IntN(len(msgs))].offset // a jump to a record
		case 2:
			offset = msgs[rng.IntN(len(msgs))].offset + int64(rng.IntN(20)) // into a record
		}
		r := get(fmt.Sprintf("random get %d at %d size %d", i, offset, size), offset, size)
		if offset = next(t, r, offset); offset < 0 || offset >= end {
			offset = 0
		}
	}
	taken, dropped := b.FilterReadAheadStats()
	t.Logf("read-ahead batches: %d taken, %d dropped", taken, dropped)
	require.Positive(t, taken, "no read-ahead batch was used")
	calls, errs := b.FilterStats()
	require.Zero(t, errs)
	require.Positive(t, calls)
}

// TestBrokerReadAheadGrowingLog reads a group filtered by a plugin at the
// end of a log that grows between gets: a get served from a batch read
// ahead before the log grew serves a prefix of what it could, never
// anything else, and the consumer still gets every matching message once,
// in order.
func TestBrokerReadAheadGrowingLog(t *testing.T) {
	t.Parallel()
	b := readAheadBroker(t)
	var all []sent
	all = append(all, produce(t, b.Addr(), mixedAttrs(50, 3)...)...)
	c := dial(t, b.Addr())
	var got []int64
	offset := int64(0)
	for round := 0; round < 60; round++ {
		if round%3 == 0 && round < 45 {
			all = append(all, produce(t, b.Addr(), mixedAttrs(7, uint64(round))...)...)
		}
		r := c.get(t, "remote", offset, 400)
		switch {
		case r.Op == protocol.OpFValue:
			for _, g := range parseFValue(t, r.Body) {
				got = append(got, g.offset)
			}
			require.Greater(t, r.Offset, offset)
			offset = r.Offset
		case r.Op == protocol.OpResult && r.Code == protocol.StatusMoved:
			n, _ := protocol.ParseInt64(r.Body)
			require.Greater(t, n, offset)
			offset = n
		case r.Op == protocol.OpResult && r.Code == protocol.StatusNotFound:
			// caught up
		default:
			t.Fatalf("reply %s %d %q", r.Op, r.Code, r.Body)
		}
	}
	var want []int64
	for _, m := range all {
		if m.attr == "red" {
			want = append(want, m.offset)
		}
	}
	require.Equal(t, want, got, "every red message exactly once, in order")
}

// TestBrokerReadAheadConsumerFilter: with a consumer's own filter on the
// connection as well (consumer filters), gets of the group filtered in
// process and of the group filtered by a plugin (read ahead) still get
// the same replies, byte for byte, with read-ahead batches used; and the
// consumer's filter does drop records the topic filter keeps.
func TestBrokerReadAheadConsumerFilter(t *testing.T) {
	t.Parallel()
	b := readAheadBroker(t)
	msgs := produce(t, b.Addr(), mixedAttrs(400, 5)...)
	waitReadable(t, b.Addr(), msgs)
	end := msgs[len(msgs)-1].offset + int64(message.HeaderSize) + 64
	cut := msgs[100].offset
	cf := fmt.Sprintf("offset < %d || offset >= %d", cut, msgs[200].offset)
	cb, cr := dial(t, b.Addr()), dial(t, b.Addr())
	for _, c := range []struct {
		c     *rawConn
		group string
	}{{cb, "builtin"}, {cr, "remote"}} {
		c.c.op++
		c.c.bw.Write(protocol.AppendFilter(nil, "t", c.group, cf, c.c.op))
		require.NoError(t, c.c.bw.Flush())
		var r protocol.Request
		require.NoError(t, c.c.dec.Decode(&r))
		require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	}
	kept := 0
	for _, size := range []int{200, 700, 3000} {
		offset := int64(0)
		for i := 0; offset >= 0 && offset < end; i++ {
			rb := cb.get(t, "builtin", offset, size)
			rb = &protocol.Request{Op: rb.Op, Code: rb.Code, Offset: rb.Offset, Body: bytes.Clone(rb.Body)}
			rr := cr.get(t, "remote", offset, size)
			sameReply(t, fmt.Sprintf("size %d get %d at %d", size, i, offset), rb, rr)
			if rr.Op == protocol.OpFValue {
				for _, g := range parseFValue(t, rr.Body) {
					require.True(t, g.offset < cut || g.offset >= msgs[200].offset, "record at %d passed the consumer's filter", g.offset)
					a, has, _, err := message.SplitData(g.rec.Flag, g.rec.Data)
					require.NoError(t, err)
					require.True(t, has && a == "red", "record at %d passed the topic filter", g.offset)
					kept++
				}
			}
			offset = next(t, rr, offset)
		}
	}
	require.Positive(t, kept)
	taken, _ := b.FilterReadAheadStats()
	require.Positive(t, taken, "no read-ahead batch was used")
}

// TestBrokerConsumerFilterFailOpen: when the group's plugin filter fails
// (a plugin slower than the call timeout) with failure_policy "open", a
// get is served as if that filter kept everything, and a consumer's own
// filter on the connection still applies.
func TestBrokerConsumerFilterFailOpen(t *testing.T) {
	t.Parallel()
	b := startBroker(t, []conf.TopicFilter{{Group: "slow", Filter: "slow-plugin", FailurePolicy: "open"}},
		helperPlugin(t, "slow-plugin", "slow"))
	msgs := produce(t, b.Addr(), "red", "blue", "red", "-")
	waitReadable(t, b.Addr(), msgs)
	c := dial(t, b.Addr())
	c.op++
	c.bw.Write(protocol.AppendFilter(nil, "t", "slow", `attribute == "red"`, c.op))
	require.NoError(t, c.bw.Flush())
	var r protocol.Request
	require.NoError(t, c.dec.Decode(&r))
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	rr := c.get(t, "slow", 0, 1<<20)
	require.Equal(t, protocol.OpFValue, rr.Op, "%d %s", rr.Code, rr.Body)
	var got []int64
	for _, g := range parseFValue(t, rr.Body) {
		got = append(got, g.offset)
	}
	require.Equal(t, []int64{msgs[0].offset, msgs[2].offset}, got)
	_, errs := b.FilterStats()
	require.Positive(t, errs, "the plugin failed")
}
