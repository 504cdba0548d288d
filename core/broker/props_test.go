package broker

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

func propsTestMsg(i int) *message.Message {
	m := &message.Message{Topic: "t", Body: []byte("body-" + strconv.Itoa(i)),
		Key:       []byte("key-" + strconv.Itoa(i)),
		Timestamp: time.UnixMilli(1_765_000_000_000 + int64(i)),
		Tags:      []string{"TagA"},
		Headers:   message.Headers{{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}, {Key: "i", Value: []byte(strconv.Itoa(i))}, {Key: "null", Value: nil}}}
	if i%3 == 0 {
		m.Attribute, m.HasAttribute = "a"+strconv.Itoa(i), true
	}
	return m
}

// readPartition returns partition p of topic t on the broker at addr, from 0 to
// end, with raw gets.
func readPartition(t *testing.T, addr, topic string, p int32, end int64) []byte {
	t.Helper()
	c := dialRaw(t, addr)
	var got []byte
	for int64(len(got)) < end {
		r := c.roundTrip(t, protocol.AppendGet(nil, topic, "g", p, int64(len(got)), int32(end-int64(len(got))), 5))
		require.Equal(t, protocol.OpValue, r.Op, "%d %s", r.Code, r.Body)
		got = append(got, r.Body...)
	}
	return got
}

// TestSyncPairProperties: keys, headers, tags and timestamps put to a sync
// master (put, batched mput, a committed transaction) are on its slave
// byte for byte, and a consumer of the slave gets them back; a put with a
// block that breaks a limit is refused on the master (400 bad properties)
// and nothing reaches either; a sync frame with a malformed block is
// refused by the slave.
func TestSyncPairProperties(t *testing.T) {
	t.Parallel()
	master, slave := syncPair(t, "props")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	quiet := client.Logger(slog.New(slog.DiscardHandler))
	p, err := client.New(client.Brokers(master.Addr()), quiet, client.Batching(16, 1<<20, time.Millisecond))
	require.NoError(t, err)
	defer p.Close(ctx)

	var want []*message.Message
	for i := range 6 { // put (batched into mputs)
		want = append(want, propsTestMsg(i))
	}
	_, err = p.ProduceSync(ctx, want...)
	require.NoError(t, err)
	plain := &message.Message{Topic: "t", Body: []byte("plain")}
	_, err = p.ProduceSync(ctx, plain)
	require.NoError(t, err)
	tx, err := p.BeginTransaction(ctx)
	require.NoError(t, err)
	txm := []*message.Message{propsTestMsg(10), propsTestMsg(11)}
	txm[0].Partition, txm[1].Partition = 0, 1
	_, err = tx.Produce(ctx, txm...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	want = append(want, txm...)

	// A limit broken: refused on the master, nothing stored anywhere.
	ends := func(b *Broker) [2]int64 {
		return [2]int64{b.topics.Get("t").Parts[0].MaxOffset(), b.topics.Get("t").Parts[1].MaxOffset()}
	}
	before := ends(master)
	mc := dialRaw(t, master.Addr())
	big := &message.Message{Body: []byte("x"), Tags: make([]string, message.MaxTags+1)}
	for i := range big.Tags {
		big.Tags[i] = "t" + strconv.Itoa(i)
	}
	data := big.AppendData(nil)
	r := mc.roundTrip(t, protocol.AppendPut(nil, "t", 0, big.Flag(), int64(message.Checksum(data)), 6, data))
	require.Equal(t, protocol.StatusBadRequest, r.Code)
	require.Equal(t, "bad properties: message: properties over limit: tag count of 33 over the limit of 32", string(r.Body))
	require.Equal(t, before, ends(master))

	// The slave refuses a sync whose block is malformed.
	sc := dialRaw(t, slave.Addr())
	bad := []byte{0, 0, 0, 2, 1, 0x40, 'x'}
	r = sc.roundTrip(t, protocol.AppendSync(nil, "t", 0, message.FlagHasProperties, 1<<40, int64(message.Checksum(bad)), 7, bad))
	require.NotEqual(t, protocol.StatusOK, r.Code, "%s", r.Body)
	require.Contains(t, string(r.Body), "sync: bad properties: message: bad properties: fields 0x40")

	requireSameEnds(t, master, slave, "t")
	require.Equal(t, before, ends(slave))
	for part := range int32(2) {
		end := before[part]
		require.Equal(t, readPartition(t, master.Addr(), "t", part, end), readPartition(t, slave.Addr(), "t", part, end), "partition %d", part)
	}

	// A consumer of the slave reads them back.
	c, err := client.New(client.Brokers(slave.Addr()), quiet, client.ConsumeTopics("t"), client.FetchMaxWait(50*time.Millisecond))
	require.NoError(t, err)
	defer c.Close(ctx)
	got := map[string]*message.Message{}
	for m, err := range c.Messages(ctx) {
		require.NoError(t, err)
		got[string(m.Body)] = m
		if len(got) == len(want)+1 {
			break
		}
	}
	plainGot := got["plain"] // no key, timestamp, tags or headers: only the idempotent producer's field
	require.True(t, plainGot.Key == nil && plainGot.Timestamp.IsZero() && len(plainGot.Tags) == 0 && len(plainGot.Headers) == 0, "%+v", plainGot)
	require.NotZero(t, plainGot.ProducerID)
	for _, w := range want {
		g := got[string(w.Body)]
		require.NotNil(t, g, "%s", w.Body)
		require.Equal(t, w.Key, g.Key)
		require.Equal(t, w.Tags, g.Tags)
		require.Equal(t, w.Headers, g.Headers)
		require.Equal(t, w.HasAttribute, g.HasAttribute)
		require.Equal(t, w.Attribute, g.Attribute)
		require.True(t, w.Timestamp.Equal(g.Timestamp))
	}
	// Both find each message by key and by msgId (the slave indexes
	// what it copies): a put's and a transaction's.
	for _, w := range []*message.Message{want[2], txm[1]} {
		for _, b := range []*Broker{master, slave} {
			res, err := httpBackend{b}.FindMessages([]string{"t"}, httpapi.FindQuery{Key: w.Key, Limit: 5})
			require.NoError(t, err)
			require.Len(t, res.Found, 1, "key %s", w.Key)
			require.Equal(t, int(w.Partition), res.Found[0].Partition)
			id := res.Found[0].Record.ID
			res, err = httpBackend{b}.FindMessages([]string{"t"}, httpapi.FindQuery{ID: id, ByID: true, Limit: 5})
			require.NoError(t, err)
			require.Len(t, res.Found, 1, "msgId %d", id)
			require.Equal(t, w.Key, func() []byte { m, _ := res.Found[0].Record.Message("t", 0); return m.Key }())
		}
	}
}
