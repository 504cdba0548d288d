package broker

import (
	"encoding/binary"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/filterset"
	"github.com/metaq-go/metaq/filters/expr"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// cfMessages are the messages the consumer filter tests put to t-0, in
// order; the server.toml filter of group "gs" drops attribute "drop".
var cfMessages = []message.Message{
	0: {Body: []byte("m0"), Tags: []string{"TagA"}, Headers: message.Headers{{Key: "region", Value: []byte("eu")}}},
	1: {Body: []byte("m1"), Tags: []string{"TagB"}},
	2: {Body: []byte("m2"), Tags: []string{"TagA"}, Attribute: "drop", HasAttribute: true},
	3: {Body: []byte("m3")},
	4: {Body: []byte("m4"), Tags: []string{"TagC"}, Key: []byte("k1"), Headers: message.Headers{{Key: "region", Value: []byte("us")}}},
}

// cfBroker starts a broker with topic t (2 partitions; group gs has an
// expr filter in server.toml) holding cfMessages in t-0, and returns it
// with each message's offset and the end of t-0.
func cfBroker(t *testing.T) (*Broker, []int64, int64) {
	t.Helper()
	b := startBroker(t, 0, func(c *conf.Config) {
		c.Topics = []conf.Topic{{Name: "t", Filters: []conf.TopicFilter{
			{Group: "gs", Filter: "expr", Config: map[string]string{"expr": `attribute != "drop"`}}}}}
	})
	c := dialRaw(t, b.Addr())
	offs := make([]int64, len(cfMessages))
	for i := range cfMessages {
		m := &cfMessages[i]
		data := m.AppendData(nil)
		r := c.roundTrip(t, protocol.AppendPut(nil, "t", 0, m.Flag(), int64(message.Checksum(data)), int32(i), data))
		require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
		_, _, off, _, err := protocol.ParsePutResult(r.Body)
		require.NoError(t, err)
		offs[i] = off
	}
	last := &cfMessages[len(cfMessages)-1]
	return b, offs, offs[len(offs)-1] + int64(message.HeaderSize+last.DataLen())
}

// cfGet gets t-0 from offset 0 as group and returns the bodies of the
// records of the reply ("" for a 301), the reply's next offset (fvalue or
// 301) and whether it was filtered.
func cfGet(t *testing.T, c *rawClient, group string) (bodies string, next int64, filtered bool) {
	t.Helper()
	r := c.roundTrip(t, protocol.AppendGet(nil, "t", group, 0, 0, 64<<10, 3))
	switch {
	case r.Op == protocol.OpValue:
		it := message.NewIterator(r.Body, 0, 0)
		var got []string
		for it.Next() {
			m, err := it.Record().Message("t", 0)
			require.NoError(t, err)
			got = append(got, string(m.Body))
		}
		return strings.Join(got, ","), it.NextOffset(), false
	case r.Op == protocol.OpFValue:
		var got []string
		for pos := 0; pos < len(r.Body); {
			rec, n, err := message.ParseRecord(r.Body[pos+8:], 0)
			rec.Offset = int64(binary.BigEndian.Uint64(r.Body[pos:]))
			require.NoError(t, err)
			m, err := rec.Message("t", 0)
			require.NoError(t, err)
			got = append(got, string(m.Body))
			pos += 8 + n
		}
		return strings.Join(got, ","), r.Offset, true
	case r.Code == protocol.StatusMoved:
		n, ok := protocol.ParseInt64(r.Body)
		require.True(t, ok)
		return "", n, true
	}
	t.Fatalf("get: %d %s", r.Code, r.Body)
	return "", 0, false
}

// cfSet sends a filter request and returns the reply.
func cfSet(t *testing.T, c *rawClient, topic, group, src string) protocol.Request {
	t.Helper()
	return c.roundTrip(t, protocol.AppendFilter(nil, topic, group, src, 11))
}

func requireOK(t *testing.T, r protocol.Request) {
	t.Helper()
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
}

// TestConsumerFilterPerConnection: a filter applies to the gets of the
// connection that registered it, for its topic and group only; two groups
// on one connection have their own; with a server.toml filter for the
// group, a record must pass both; replacing and clearing take effect at
// the next get; a get that keeps nothing moves the consumer past the
// records it skipped.
func TestConsumerFilterPerConnection(t *testing.T) {
	t.Parallel()
	b, _, end := cfBroker(t)
	a, other := dialRaw(t, b.Addr()), dialRaw(t, b.Addr())

	requireOK(t, cfSet(t, a, "t", "g1", "TagA || TagB"))
	requireOK(t, cfSet(t, a, "t", "g2", `key == "k1" || header("region") == "eu"`))
	requireOK(t, cfSet(t, a, "t", "gs", "TagA"))

	got, next, filtered := cfGet(t, a, "g1")
	require.True(t, filtered)
	require.Equal(t, "m0,m1,m2", got)
	require.Equal(t, end, next, "the next get starts past the records scanned")
	got, _, _ = cfGet(t, a, "g2")
	require.Equal(t, "m0,m4", got)
	got, _, _ = cfGet(t, a, "gs")
	require.Equal(t, "m0", got, "the server.toml filter drops m2, the consumer's m1, m3 and m4")
	got, _, filtered = cfGet(t, a, "g3")
	require.False(t, filtered, "another group of the connection is not filtered")
	require.Equal(t, "m0,m1,m2,m3,m4", got)

	got, _, filtered = cfGet(t, other, "g1")
	require.False(t, filtered, "another connection's gets are not filtered")
	require.Equal(t, "m0,m1,m2,m3,m4", got)
	got, _, _ = cfGet(t, other, "gs")
	require.Equal(t, "m0,m1,m3,m4", got, "the server.toml filter alone")

	requireOK(t, cfSet(t, a, "t", "g1", `tag == "TagC"`)) // replace
	got, _, _ = cfGet(t, a, "g1")
	require.Equal(t, "m4", got)
	requireOK(t, cfSet(t, a, "t", "g1", `has_tag("nope")`))
	got, next, filtered = cfGet(t, a, "g1")
	require.True(t, filtered)
	require.Equal(t, "", got, "nothing kept: 301")
	require.Equal(t, end, next)
	requireOK(t, cfSet(t, a, "t", "g1", "")) // clear
	got, _, filtered = cfGet(t, a, "g1")
	require.False(t, filtered)
	require.Equal(t, "m0,m1,m2,m3,m4", got)
	requireOK(t, cfSet(t, a, "t", "g1", "")) // clearing twice is no error
	requireOK(t, cfSet(t, a, "t", "g1", " * "))
	got, _, _ = cfGet(t, a, "g1")
	require.Equal(t, "m0,m1,m2,m3,m4", got)
}

// TestConsumerFilterErrors: a bad expression is a 400 naming the column
// (from the first non-blank byte) and leaves the previous filter in
// place; an unknown topic, a bad group, a topic that takes no gets and
// the per-connection limit are refused; the connection carries on.
func TestConsumerFilterErrors(t *testing.T) {
	t.Parallel()
	b, _, _ := cfBroker(t)
	c := dialRaw(t, b.Addr())
	requireOK(t, cfSet(t, c, "t", "g", "TagB"))
	for _, tc := range []struct{ topic, group, src, want string }{
		{"t", "g", "TagA ||", "filter: expr: col 8: expected a field"},
		{"t", "g", "   tag < \"a\"", "filter: expr: col 5: tag compares with ==, !=, in or not in"},
		{"t", "g", "TagA TagB", `filter: expr: col 1: unknown field "TagA"`},
		{"t", "g", strings.Repeat("x", expr.MaxLen+1), "longer than 4096 bytes"},
		{"nope", "g", "TagA", "unknown topic nope"},
		{"t", "g/x", "TagA", "filter: group"},
	} {
		r := cfSet(t, c, tc.topic, tc.group, tc.src)
		require.NotEqual(t, protocol.StatusOK, r.Code, tc.src)
		require.Contains(t, string(r.Body), tc.want, tc.src)
		require.LessOrEqual(t, len(r.Body), 300, "the error is bounded")
	}
	got, _, _ := cfGet(t, c, "g")
	require.Equal(t, "m1", got, "a refused filter leaves the previous one")

	// The per-connection limit: the 64th filter registers, the 65th not;
	// replacing and clearing are always allowed.
	for i := 1; i < filterset.MaxConnFilters; i++ {
		requireOK(t, cfSet(t, c, "t", "g"+strconv.Itoa(i), "TagA"))
	}
	r := cfSet(t, c, "t", "over", "TagA")
	require.Equal(t, protocol.StatusBadRequest, r.Code)
	require.Contains(t, string(r.Body), "the limit")
	requireOK(t, cfSet(t, c, "t", "g1", "TagC"))
	requireOK(t, cfSet(t, c, "t", "g1", ""))
	requireOK(t, cfSet(t, c, "t", "over", "TagA"))
	r = c.roundTrip(t, protocol.AppendVersion(nil, 5))
	require.Equal(t, protocol.StatusOK, r.Code)
}

// TestConsumerFilterHostile: malformed filter frames get 400s; one that
// loses framing closes only its connection; the broker serves on.
func TestConsumerFilterHostile(t *testing.T) {
	t.Parallel()
	b, _, _ := cfBroker(t)
	c := dialRaw(t, b.Addr())
	for _, frame := range []string{
		"filter t g 3 x\r\nabc",             // bad opaque: 400, body read past
		"filter t  3 4\r\nabc",              // empty group
		"filter t g 6 5\r\n\x00\xff\"\\\n(", // bytes no expression has
		"filter t g 5 6\r\n!!!!(",           // unbalanced
		"filter t g 8 7\r\nheader(\"",       // unterminated string
	} {
		r := c.roundTrip(t, []byte(frame))
		require.Equal(t, protocol.StatusBadRequest, r.Code, "%q: %s", frame, r.Body)
	}
	r := c.roundTrip(t, protocol.AppendVersion(nil, 9))
	require.Equal(t, protocol.StatusOK, r.Code, "the connection carries on")

	lost := dialRaw(t, b.Addr())
	_, err := lost.bw.WriteString("filter t g -5 1\r\n")
	require.NoError(t, err)
	require.NoError(t, lost.bw.Flush())
	var req protocol.Request
	require.NoError(t, lost.dec.Decode(&req))
	require.Equal(t, protocol.StatusBadRequest, req.Code)
	require.Error(t, lost.dec.Decode(&req), "framing lost: the connection is closed")

	got, _, _ := cfGet(t, dialRaw(t, b.Addr()), "g")
	require.Equal(t, "m0,m1,m2,m3,m4", got, "the broker serves on")
}
