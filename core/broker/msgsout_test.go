package broker

import (
	"encoding/json"
	"fmt"
	"github.com/metaq-go/metaq/core/httpapi"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// consumeLikeMetaQ gets partition p of topic t from offset on as a MetaQ
// client does, with random maxSizes, until it has n whole records (or the
// end): it keeps the whole records of each reply, starts the next get
// after the last one (re-fetching a partial last record), and doubles
// maxSize when a reply holds no whole record. It returns the records'
// ends (the offset after each) and the number of whole records the
// replies held (the last one may hold more than were kept).
func consumeLikeMetaQ(t *testing.T, rng *rand.Rand, c *authClient, topic string, p int32, offset int64, n int) (ends []int64, received int) {
	t.Helper()
	size := int32(0)
	for len(ends) < n {
		if size == 0 {
			size = int32(64 + rng.IntN(3000))
		}
		code, body := c.call(func(d []byte, op int32) []byte { return protocol.AppendGet(d, topic, "g", p, offset, size, op) })
		if code == protocol.StatusNotFound {
			break
		}
		require.Equal(t, protocol.StatusOK, code, body)
		it := message.NewIterator([]byte(body), offset, 0)
		got := 0
		for it.Next() {
			received++
			if len(ends) == n {
				continue
			}
			r := it.Record()
			ends = append(ends, r.Offset+int64(message.HeaderSize+len(r.Data)))
			got++
		}
		require.NoError(t, it.Err())
		if got == 0 {
			size *= 2
			continue
		}
		offset, size = ends[len(ends)-1], 0
	}
	return ends, received
}

// TestMessagesOutAndLag: messages of random sizes over several partitions
// (several segments each), consumed in part by a MetaQ-like consumer with
// random get sizes, a re-read, and a group commit: /metrics and the JSON
// API show exactly the whole messages sent and the group's lag in
// messages, and again after a restart once the old segments are indexed.
func TestMessagesOutAndLag(t *testing.T) {
	t.Parallel()
	const parts = 3
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	dir := t.TempDir()
	cfgOf := func(c *conf.Config) {
		c.DataDir = dir
		c.NumPartitions = parts
		c.MaxSegmentSize = 64 << 10
	}
	b := startBrokerWith(t, cfgOf)
	c := dialAuth(t, b.Addr(), nil)
	produced := make([]int, parts)
	for i := range 600 {
		p := int32(rng.IntN(parts))
		data := make([]byte, rng.IntN(1500))
		if rng.IntN(40) == 0 {
			data = make([]byte, 5000+rng.IntN(20000))
		}
		for k := range data {
			data[k] = byte('a' + (i+k)%26)
		}
		code, body := c.call(func(d []byte, op int32) []byte {
			return protocol.AppendPut(d, "t", p, 0, int64(message.Checksum(data)), op, data)
		})
		require.Equal(t, 200, code, body)
		produced[p]++
	}

	// Consume: partition p up to some record, then re-read a few (sent
	// twice: counted twice), then commit after k[p] records.
	var sent int
	committed := make([]int64, parts)
	lag := 0
	for p := range int32(parts) {
		k := rng.IntN(produced[p] + 1)
		ends, n := consumeLikeMetaQ(t, rng, c, "t", p, 0, k)
		require.Len(t, ends, k)
		sent += n
		if k > 2 {
			_, n := consumeLikeMetaQ(t, rng, c, "t", p, ends[k/2-1], 2)
			sent += n
		}
		if k > 0 {
			committed[p] = ends[k-1]
		}
		lag += produced[p] - k
	}
	commitAll := func(c *authClient) {
		var es []protocol.OffsetEntry
		for p, off := range committed {
			es = append(es, protocol.OffsetEntry{Topic: "t", Partition: int32(p), Offset: off, MsgID: -1})
		}
		code, body := c.call(func(d []byte, op int32) []byte { return protocol.AppendCommit(d, "g", es, op) })
		require.Equal(t, 200, code, body)
	}
	commitAll(c)

	check := func(b *Broker, c *authClient, sent int) {
		t.Helper()
		h := newHTTPClient(t, b.HTTPAddr(), nil)
		code, scrape := h.get("/metrics")
		require.Equal(t, 200, code, "%s", scrape)
		require.Equal(t, float64(sent), metricValue(t, scrape, `metaq_topic_messages_out_total{topic="t"}`))
		require.Equal(t, float64(lag), metricValue(t, scrape, `metaq_consumer_group_lag_messages{group="g",topic="t"}`))
		require.Equal(t, 0.0, metricValue(t, scrape, `metaq_partitions_indexing`))

		code, body := h.get("/api/v1/groups/g")
		require.Equal(t, 200, code, "%s", body)
		var g struct {
			Topics []httpapi.GroupTopic `json:"topics"`
		}
		require.NoError(t, json.Unmarshal(body, &g))
		require.Len(t, g.Topics, 1)
		require.Equal(t, int64(lag), g.Topics[0].LagMessages, "%s", body)
		require.False(t, g.Topics[0].LagMessagesEstimated)
		for p, gp := range g.Topics[0].Partitions {
			require.NotNil(t, gp.LagMessages, "%s", body)
			want := int64(produced[p]) - int64(countBefore(t, b, p, committed[p]))
			require.Equal(t, want, *gp.LagMessages, "partition %d: %s", p, body)
		}

		// stats count: (metaq group describe's LAG_MSGS).
		for p := range parts {
			code, body := c.stats(fmt.Sprintf("count:t:%d:%d", p, committed[p]))
			require.Equal(t, 200, code, body)
			want := int64(produced[p]) - int64(countBefore(t, b, p, committed[p]))
			require.Contains(t, body, fmt.Sprintf(" messages %d exact true\r\n", want))
		}
		code, _ = c.stats("count:t:99:0")
		require.Equal(t, protocol.StatusBadRequest, code)

		code, body = h.get("/api/v1/topics/t")
		require.Equal(t, 200, code, "%s", body)
		var tj httpapi.TopicInfo
		require.NoError(t, json.Unmarshal(body, &tj))
		var out int64
		for _, pj := range tj.PartitionList {
			out += pj.MessagesOut
		}
		require.Equal(t, int64(sent), out, "%s", body)
	}
	check(b, c, sent)
	for p, l := range b.topics.Get("t").Parts {
		require.Greater(t, l.SegmentCount(), 1, "partition %d rolled", p)
	}

	// Restart: once the old segments are indexed, the same figures (the
	// counters of messages out start again; the group commits again).
	b.Close()
	b = startBrokerWith(t, cfgOf)
	for _, l := range b.topics.Get("t").Parts {
		require.Eventually(t, l.MessageCountComplete, 20*time.Second, time.Millisecond)
	}
	c = dialAuth(t, b.Addr(), nil)
	commitAll(c)
	ends, n := consumeLikeMetaQ(t, rng, c, "t", 0, 0, produced[0])
	require.Len(t, ends, produced[0])
	check(b, c, n)
}

// countBefore is how many records of partition p end at or before off,
// counted by reading them (not with the index).
func countBefore(t *testing.T, b *Broker, p int, off int64) int {
	t.Helper()
	l := b.topics.Get("t").Parts[p]
	n := 0
	for at := l.MinOffset(); at < off; {
		v, err := l.Read(at, 1<<20)
		require.NoError(t, err)
		buf, err := v.ReadAll(nil)
		v.Release()
		require.NoError(t, err)
		it := message.NewIterator(buf, at, 0)
		for it.Next() && it.Record().Offset < off {
			n++
		}
		require.NoError(t, it.Err())
		require.Greater(t, it.NextOffset(), at, "no whole record at %d", at)
		at = it.NextOffset()
	}
	return n
}
