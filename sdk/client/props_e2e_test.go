package client

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
	"github.com/metaq-go/metaq/sdk/selector"
)

// rawConn speaks the text protocol as a MetaQ 1.4 client does.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(20*time.Second)))
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

// do sends line (and body) and returns the reply's first token, code (or
// the value's length) and body.
func (r *rawConn) do(line string, body []byte) (kind string, code int, reply []byte) {
	_, err := r.c.Write(append([]byte(line+"\r\n"), body...))
	require.NoError(r.t, err)
	l, err := r.br.ReadString('\n')
	require.NoError(r.t, err)
	f := strings.Fields(l)
	require.GreaterOrEqual(r.t, len(f), 3, l)
	n, err := strconv.Atoi(f[len(f)-2])
	if f[0] == "value" {
		n, err = strconv.Atoi(f[1])
	}
	require.NoError(r.t, err, l)
	reply = make([]byte, n)
	_, err = io.ReadFull(r.br, reply)
	require.NoError(r.t, err)
	if f[0] == "value" {
		return f[0], 200, reply
	}
	code, err = strconv.Atoi(f[1])
	require.NoError(r.t, err)
	return f[0], code, reply
}

func (r *rawConn) put(partition int, flag int32, data []byte) (code int, reply string) {
	_, code, b := r.do(fmt.Sprintf("put %s %d %d %d %d 7", topic, partition, len(data), flag, message.Checksum(data)), data)
	return code, string(b)
}

// rawPutResult parses "<msgId> <partition> <offset>".
func rawPutResult(t *testing.T, reply string) (id, off int64) {
	f := strings.Fields(reply)
	require.Len(t, f, 3, reply)
	id, err := strconv.ParseInt(f[0], 10, 64)
	require.NoError(t, err)
	off, err = strconv.ParseInt(f[2], 10, 64)
	require.NoError(t, err)
	return id, off
}

func propsMsg(i int) *message.Message {
	m := &message.Message{Topic: topic, Body: fmt.Appendf(nil, "p-%d", i),
		Key:       fmt.Appendf(nil, "key-%d", i),
		Timestamp: time.UnixMilli(1_765_000_000_000 + int64(i)),
		Tags:      []string{"TagA", "T" + strconv.Itoa(i)},
		Headers: message.Headers{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
			{Key: "n", Value: strconv.AppendInt(nil, int64(i), 10)}, {Key: "nil", Value: nil}}}
	if i%2 == 1 {
		m.Attribute, m.HasAttribute = "attr-"+strconv.Itoa(i), true
	}
	return m
}

func requireSameProps(t *testing.T, want, got *message.Message) {
	t.Helper()
	require.Equal(t, string(want.Body), string(got.Body))
	require.Equal(t, want.HasAttribute, got.HasAttribute)
	require.Equal(t, want.Attribute, got.Attribute)
	require.Equal(t, want.Key, got.Key)
	require.Equal(t, want.Tags, got.Tags)
	require.Equal(t, want.Headers, got.Headers)
	require.True(t, want.Timestamp.Equal(got.Timestamp), "timestamp %v, want %v", got.Timestamp, want.Timestamp)
	n, ok, err := got.Headers.Int64("n")
	if _, has := want.Headers.Get("n"); has {
		require.NoError(t, err)
		require.True(t, ok)
		wn, _, _ := want.Headers.Int64("n")
		require.Equal(t, wn, n)
	}
}

// TestPropsOldAndNewClients: a MetaQ-format client (raw put and get, no
// properties) and the Go SDK (keys, headers, tags and timestamps through
// put, mput and a transaction) on one topic. The raw client's records are
// on disk byte for byte as MetaQ writes them, and so are the SDK's
// messages without properties; what the raw client's get returns is the
// segment's bytes; the SDK reads everything back with its properties.
func TestPropsOldAndNewClients(t *testing.T) {
	t.Parallel()
	b := startBroker(t, onePartition)
	ctx := ctxT(t, 30*time.Second)
	raw := dialRaw(t, b.addr)

	var recs []stored
	rawPut := func(flag int32, data []byte) {
		code, reply := raw.put(0, flag, data)
		require.Equal(t, 200, code, reply)
		id, off := rawPutResult(t, reply)
		recs = append(recs, stored{off: off, id: id, flag: flag, data: data})
	}
	rawPut(0, []byte("hello"))
	attrData := append([]byte{0, 0, 0, 3}, "a=1old"...)
	rawPut(message.FlagHasAttribute, attrData)

	// The SDK's messages without properties, idempotence off: the same
	// bytes as the raw ones (with it on, each carries the producer field).
	p := newClient(t, Brokers(b.addr), Idempotence(false))
	for _, m := range []*message.Message{{Topic: topic, Body: []byte("hello")},
		{Topic: topic, Body: []byte("old"), Attribute: "a=1", HasAttribute: true}} {
		rs, err := p.ProduceSync(ctx, m)
		require.NoError(t, err)
		r := rs[0]
		recs = append(recs, stored{off: r.Offset, id: r.ID, flag: m.Flag(), data: m.AppendData(nil), fromSDKRaw: true})
	}
	// put.
	var n int
	next := func() *message.Message { n++; return propsMsg(n) }
	for range 3 {
		m := next()
		rs, err := p.ProduceSync(ctx, m)
		require.NoError(t, err)
		r := rs[0]
		recs = append(recs, stored{off: r.Offset, id: r.ID, flag: m.Flag(), data: m.AppendData(nil), want: m})
	}
	// mput.
	bp := newProducer(t, b.addr)
	batch := []*message.Message{next(), next(), next(), {Topic: topic, Body: []byte("plain-in-batch")}}
	res, err := bp.SendBatch(ctx, batch)
	require.NoError(t, err)
	for i, m := range batch {
		want := m
		if !m.HasProperties() {
			want = nil
		}
		recs = append(recs, stored{off: res[i].Offset, id: res[i].ID, flag: m.Flag(), data: m.AppendData(nil), want: want})
	}
	// A transaction.
	tx, err := p.BeginTransaction(ctx)
	require.NoError(t, err)
	txm := []*message.Message{next(), next()}
	txr, err := tx.Produce(ctx, txm...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	// Another raw put after all of them.
	rawPut(0, []byte("bye"))

	// A limit broken, raw and through the SDK: the documented error,
	// nothing stored.
	big := &message.Message{Body: []byte("x"), Key: bytes.Repeat([]byte{'k'}, message.MaxKeyBytes+1)}
	code, reply := raw.put(0, big.Flag(), big.AppendData(nil))
	require.Equal(t, 400, code)
	cause, msg := protocol.ParseCause(reply)
	require.Equal(t, protocol.CauseBadProperties, cause, reply)
	require.Contains(t, msg, "key of 4097 over the limit of 4096")
	many := &message.Message{Body: []byte("x"), Headers: make(message.Headers, message.MaxHeaders+1)}
	line := string(protocol.AppendMPutHeader(nil, topic, 0, protocol.MPutEntryHeader+many.DataLen(), 1, 9))
	_, code, body := raw.do(strings.TrimSuffix(line, "\r\n"), appendMPutEntry(nil, many))
	require.Equal(t, 400, code, string(body))
	require.Equal(t, "bad properties: mput: message 0: message: properties over limit: header count of 257 over the limit of 256", string(body))
	malformed := []byte{0, 0, 0, 2, 9, 1, 'x'}
	code, reply = raw.put(0, message.FlagHasProperties, malformed)
	require.Equal(t, 400, code)
	require.True(t, strings.HasPrefix(reply, "bad properties: "), reply)
	_, err = p.ProduceSync(ctx, &message.Message{Topic: topic, Body: []byte("x"), Key: big.Key})
	require.ErrorIs(t, err, ErrInvalidMessage)
	require.ErrorIs(t, err, message.ErrPropertiesLimit)
	rawPut(0, []byte("end"))
	last := recs[len(recs)-1]
	prev := recs[len(recs)-2]
	require.Equal(t, prev.off+int64(message.HeaderSize+len(prev.data)), last.off, "nothing stored between the last two raw puts")

	end := last.off + int64(message.HeaderSize+len(last.data))
	// A MetaQ client's get returns those bytes; it reads a record with
	// properties as a flag with an unknown bit and a payload that starts
	// with the block.
	var got []byte
	for int64(len(got)) < end {
		kind, _, b := raw.do(fmt.Sprintf("get %s g 0 %d %d 3", topic, len(got), end-int64(len(got))), nil)
		require.Equal(t, "value", kind, string(b))
		got = append(got, b...)
	}
	require.Len(t, got, int(end))
	for it := message.NewIterator(got, 0, 0); it.Next(); {
		rec := it.Record()
		_, _, payload, err := message.SplitData(rec.Flag&message.FlagHasAttribute, rec.Data)
		require.NoError(t, err)
		if rec.Flag&message.FlagHasProperties != 0 {
			n := int(uint32(payload[0])<<24 | uint32(payload[1])<<16 | uint32(payload[2])<<8 | uint32(payload[3]))
			require.Equal(t, message.PropsVersion, int(payload[4]))
			require.True(t, strings.HasPrefix(string(payload[4+n:]), "p-"), "%q", payload[4+n:])
		}
	}

	// The SDK reads everything back, properties included, before and after
	// a restart (recovery).
	consumeAll(t, b.addr, recs, txm, txr)
	require.NoError(t, b.b.Shutdown(ctx))
	segFile, err := os.ReadFile(filepath.Join(b.cfg.DataDir, topic+"-0", "00000000000000000000.meta"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, int64(len(segFile)), end)
	require.Equal(t, got, segFile[:end], "a get returns the segment's bytes")
	for i, r := range recs {
		want := message.AppendRecord(nil, r.id, r.flag, r.data)
		require.Equal(t, want, segFile[r.off:r.off+int64(len(want))], "record %d", i)
		if r.fromSDKRaw {
			require.Equal(t, recs[i-2].flag, r.flag)
			require.Equal(t, recs[i-2].data, r.data, "an SDK message without properties is stored as MetaQ's client stores it")
		}
	}
	b2 := runBroker(t, b.cfg)
	consumeAll(t, b2.addr, recs, txm, txr)
}

func consumeAll(t *testing.T, addr string, recs []stored, txm []*message.Message, txr []SendResult) {
	c := newClient(t, Brokers(addr), ConsumeTopics(topic), FetchMaxWait(50*time.Millisecond))
	in := pull(t, c)
	byOff := map[int64]*message.Message{}
	for range len(recs) + len(txm) {
		m, err, ok := in.next()
		require.True(t, ok)
		require.NoError(t, err)
		byOff[m.Offset] = m
	}
	for i, r := range recs {
		m := byOff[r.off]
		require.NotNil(t, m, "record %d at %d", i, r.off)
		require.Equal(t, r.id, m.ID)
		if r.want == nil {
			require.False(t, m.HasProperties(), "record %d", i)
			require.Nil(t, m.Headers)
			require.Equal(t, r.id, m.ID)
			ms, _, _ := message.IDParts(m.ID)
			require.Equal(t, ms, m.Time().UnixMilli(), "a message without a timestamp: its id's time")
			continue
		}
		requireSameProps(t, r.want, m)
	}
	// The transaction's messages too (their offsets came at the commit).
	var txSeen int
	for _, m := range byOff {
		for i, w := range txm {
			if m.ID == txr[i].ID {
				requireSameProps(t, w, m)
				txSeen++
			}
		}
	}
	require.Equal(t, len(txm), txSeen)
}

type stored struct {
	off        int64
	id         int64
	flag       int32
	data       []byte
	want       *message.Message // nil: a message without properties
	fromSDKRaw bool
}

func appendMPutEntry(dst []byte, m *message.Message) []byte {
	data := m.AppendData(nil)
	dst = append(dst, byte(m.Flag()>>24), byte(m.Flag()>>16), byte(m.Flag()>>8), byte(m.Flag()))
	dst = append(dst, byte(len(data)>>24), byte(len(data)>>16), byte(len(data)>>8), byte(len(data)))
	dst = append(dst, 0xff, 0xff, 0xff, 0xff)
	return append(dst, data...)
}

// TestDefaultSelectorHashesKey: without a Selector option a keyed message
// goes to the partition its key hashes to; unkeyed ones go round robin.
func TestDefaultSelectorHashesKey(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	p := newProducer(t, b.addr)
	ctx := ctxT(t, 20*time.Second)
	for i := range 20 {
		key := []byte("k" + strconv.Itoa(i))
		r, err := p.Send(ctx, &message.Message{Topic: topic, Body: []byte("x"), Key: key})
		require.NoError(t, err)
		require.Equal(t, int32(selector.KeyIndex(key, 4)), r.Partition, "key %s", key)
	}
	seen := map[int32]int{}
	for range 8 {
		r, err := p.Send(ctx, &message.Message{Topic: topic, Body: []byte("x")})
		require.NoError(t, err)
		seen[r.Partition]++
	}
	require.Equal(t, map[int32]int{0: 2, 1: 2, 2: 2, 3: 2}, seen)
}
