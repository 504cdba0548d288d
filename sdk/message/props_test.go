package message

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func propsMessage() Message {
	return Message{Topic: "t", Body: []byte("payload"), Attribute: "a=1", HasAttribute: true,
		Key:       []byte("order-42"),
		Timestamp: time.UnixMilli(1_765_000_000_123),
		Tags:      []string{"TagA", "TagB"},
		Headers:   Headers{{"traceparent", []byte("00-abc-01")}, {"n", []byte("7")}, {"null", nil}, {"empty", []byte{}}, {"n", []byte("8")}}}
}

func TestPropsRoundTrip(t *testing.T) {
	m := propsMessage()
	require.NoError(t, m.CheckProperties())
	require.Equal(t, FlagHasAttribute|FlagHasProperties, m.Flag())
	data := m.AppendData(nil)
	require.Equal(t, m.DataLen(), len(data))
	require.Equal(t, m.AppendPrefix(nil), data[:len(data)-len(m.Body)])
	rec := AppendRecord(nil, 9, m.Flag(), data)
	r, _, err := ParseRecord(rec, 0)
	require.NoError(t, err)
	got, err := r.Message("t", 1)
	require.NoError(t, err)
	require.Equal(t, "payload", string(got.Body))
	require.Equal(t, "a=1", got.Attribute)
	require.Equal(t, m.Key, got.Key)
	require.Equal(t, m.Tags, got.Tags)
	require.True(t, m.Timestamp.Equal(got.Timestamp))
	require.Equal(t, m.Headers, got.Headers)
	require.Nil(t, got.Headers[2].Value)
	require.NotNil(t, got.Headers[3].Value)

	v, ok := got.Headers.String("n")
	require.True(t, ok)
	require.Equal(t, "8", v) // the last one
	n, ok, err := got.Headers.Int64("n")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(8), n)
	_, ok, err = got.Headers.Int64("traceparent")
	require.True(t, ok)
	require.Error(t, err)
	_, ok, _ = got.Headers.Int64("missing")
	require.False(t, ok)

	// SplitData skips the block.
	attr, has, payload, err := SplitData(m.Flag(), data)
	require.NoError(t, err)
	require.True(t, has)
	require.Equal(t, "a=1", attr)
	require.Equal(t, "payload", string(payload))
}

// TestPropsAbsentIsByteIdentical: a message with no key, timestamp, tags
// or headers encodes exactly as before the properties block existed.
func TestPropsAbsentIsByteIdentical(t *testing.T) {
	m := Message{Body: []byte("hello")}
	require.Equal(t, int32(0), m.Flag())
	require.Equal(t, []byte("hello"), m.AppendData(nil))
	m = Message{Body: []byte("hello"), Attribute: "x", HasAttribute: true}
	require.Equal(t, FlagHasAttribute, m.Flag())
	require.Equal(t, append([]byte{0, 0, 0, 1, 'x'}, "hello"...), m.AppendData(nil))
	require.Equal(t, 10, m.DataLen())
	m.Tags, m.Headers = []string{}, Headers{} // empty, not nil: still nothing to send
	require.Equal(t, FlagHasAttribute, m.Flag())
}

func TestPropsEmptyKey(t *testing.T) {
	m := Message{Body: []byte("b"), Key: []byte{}}
	require.Equal(t, FlagHasProperties, m.Flag())
	data := m.AppendData(nil)
	require.Equal(t, []byte{0, 0, 0, 3, PropsVersion, propKey, 0, 'b'}, data)
	got, err := (&Record{Flag: m.Flag(), Data: data}).Message("t", 0)
	require.NoError(t, err)
	require.NotNil(t, got.Key)
	require.Empty(t, got.Key)
	require.Nil(t, got.Headers)
}

func TestPropsLimits(t *testing.T) {
	for name, m := range map[string]Message{
		"key":          {Key: bytes.Repeat([]byte{'k'}, MaxKeyBytes+1)},
		"header count": {Headers: make(Headers, MaxHeaders+1)},
		"tag count":    {Tags: strings.Split(strings.Repeat("t,", MaxTags+1)[:2*(MaxTags+1)-1], ",")},
		"tag length":   {Tags: []string{strings.Repeat("t", MaxTagBytes+1)}},
		"properties":   {Headers: Headers{{"big", make([]byte, MaxPropertiesBytes)}}},
	} {
		err := m.CheckProperties()
		require.ErrorIs(t, err, ErrPropertiesLimit, name)
		require.Contains(t, err.Error(), name, name)
		// The broker's check of the bytes agrees.
		_, _, _, err = SplitData(m.Flag(), m.AppendData(nil))
		require.ErrorIs(t, err, ErrPropertiesLimit, name)
		require.Contains(t, err.Error(), name, name)
	}
	ok := Message{Key: bytes.Repeat([]byte{'k'}, MaxKeyBytes), Headers: make(Headers, MaxHeaders),
		Tags: []string{strings.Repeat("t", MaxTagBytes)}}
	require.NoError(t, ok.CheckProperties())
	_, _, _, err := SplitData(ok.Flag(), ok.AppendData(nil))
	require.NoError(t, err)
	for _, tag := range []string{"", "a b", "a\x00", "\xff"} {
		m := Message{Tags: []string{tag}}
		require.ErrorIs(t, m.CheckProperties(), ErrBadProperties, "%q", tag)
		_, _, _, err := SplitData(m.Flag(), m.AppendData(nil))
		require.ErrorIs(t, err, ErrBadProperties, "%q", tag)
	}
}

func TestPropsMalformed(t *testing.T) {
	good := propsMessage()
	good.HasAttribute = false
	data := good.AppendData(nil)
	blockLen := int(binary.BigEndian.Uint32(data))
	for name, d := range map[string][]byte{
		"no length":      {0, 0},
		"long length":    {0, 0, 0, 9, 1, 1},
		"empty block":    {0, 0, 0, 0},
		"version":        {0, 0, 0, 2, 2, propKey},
		"no fields":      {0, 0, 0, 2, 1, 0},
		"unknown field":  {0, 0, 0, 2, 1, 0x10},
		"short key":      {0, 0, 0, 4, 1, propKey, 5, 'a'},
		"short ts":       {0, 0, 0, 5, 1, propTimestamp, 1, 2, 3},
		"zero tags":      {0, 0, 0, 3, 1, propTags, 0},
		"zero headers":   {0, 0, 0, 3, 1, propHeaders, 0},
		"header key utf": {0, 0, 0, 6, 1, propHeaders, 1, 1, 0xff, 0},
		"trailing":       append(binary.BigEndian.AppendUint32(nil, uint32(blockLen+1)), append(append([]byte{}, data[4:4+blockLen]...), 0)...),
	} {
		_, _, _, err := SplitData(FlagHasProperties, d)
		require.ErrorIs(t, err, ErrBadProperties, name)
	}
}

// A flag with only bit 0 leaves a body that happens to look like a block
// alone, and a flag without bit 1 never parses one: old data reads as it did.
func TestPropsOnlyWithFlag(t *testing.T) {
	m := propsMessage()
	data := m.AppendData(nil)
	_, _, payload, err := SplitData(FlagHasAttribute, data)
	require.NoError(t, err)
	require.Greater(t, len(payload), len(m.Body)) // a reader that ignores bit 1 sees the block as payload
}

func TestTime(t *testing.T) {
	ts := time.UnixMilli(1_765_000_000_123)
	require.True(t, (&Message{Timestamp: ts, ID: 1 << 40}).Time().Equal(ts))
	id := (int64(1_765_000_000_456) - IDEpoch) << 22
	require.Equal(t, int64(1_765_000_000_456), (&Message{ID: id}).Time().UnixMilli())
	require.True(t, (&Message{}).Time().IsZero())
}

func TestValidatePropertiesNoAlloc(t *testing.T) {
	m := propsMessage()
	data := m.AppendData(nil)
	allocs := testing.AllocsPerRun(100, func() {
		if _, _, _, _, err := SplitDataProps(m.Flag(), data); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}

func FuzzPropsRoundTrip(f *testing.F) {
	f.Add([]byte("k"), true, int64(1_765_000_000_123), "TagA", "h", []byte("v"), uint8(2), []byte("body"))
	f.Add([]byte{}, true, int64(0), "", "", []byte(nil), uint8(0), []byte(nil))
	f.Add([]byte(nil), false, int64(-1), "x", "", []byte{}, uint8(1), []byte("b"))
	f.Add([]byte(nil), false, int64(0x7123456789abcdef), "", "", []byte(nil), uint8(0x10), []byte("b"))
	f.Add([]byte("k"), true, int64(1), "T", "h", []byte("v"), uint8(0x13), []byte(nil))
	f.Fuzz(func(t *testing.T, key []byte, hasKey bool, ms int64, tag, hk string, hv []byte, nh uint8, body []byte) {
		m := Message{Body: body}
		if hasKey {
			m.Key = key
			if m.Key == nil {
				m.Key = []byte{}
			}
		}
		if ms != 0 {
			m.Timestamp = time.UnixMilli(ms)
		}
		if tag != "" {
			m.Tags = []string{tag, tag}
		}
		for i := 0; i < int(nh%8); i++ {
			v := hv
			if i%3 == 2 {
				v = nil
			} else if v == nil {
				v = []byte{}
			}
			m.Headers = append(m.Headers, Header{Key: hk, Value: v})
		}
		if nh&0x10 != 0 { // the idempotent producer's field (bit 4)
			m.ProducerID = ms & math.MaxInt64
			if m.ProducerID == 0 {
				m.ProducerID = 1
			}
			m.ProducerSeq = int64(nh>>5) * int64(len(body)+1)
		}
		data := m.AppendData(nil)
		if len(data) != m.DataLen() {
			t.Fatalf("DataLen %d, AppendData %d", m.DataLen(), len(data))
		}
		checkErr := m.CheckProperties()
		got, err := (&Record{Flag: m.Flag(), Data: data}).Message("t", 0)
		if (checkErr == nil) != (err == nil) {
			t.Fatalf("CheckProperties %v, decode %v", checkErr, err)
		}
		if err != nil {
			if !errors.Is(err, ErrBadProperties) && !errors.Is(err, ErrPropertiesLimit) {
				t.Fatalf("decode: %v", err)
			}
			return
		}
		if !bytes.Equal(got.Body, body) || (got.Key == nil) != (m.Key == nil) || !bytes.Equal(got.Key, m.Key) {
			t.Fatalf("body/key: %q %q", got.Body, got.Key)
		}
		if got.ProducerID != m.ProducerID || got.ProducerSeq != m.ProducerSeq {
			t.Fatalf("producer %d/%d, want %d/%d", got.ProducerID, got.ProducerSeq, m.ProducerID, m.ProducerSeq)
		}
		if !got.Timestamp.Equal(m.Timestamp) || len(got.Tags) != len(m.Tags) || len(got.Headers) != len(m.Headers) {
			t.Fatalf("got %+v want %+v", got, m)
		}
		for i, h := range m.Headers {
			g := got.Headers[i]
			if g.Key != h.Key || !bytes.Equal(g.Value, h.Value) || (g.Value == nil) != (h.Value == nil) {
				t.Fatalf("header %d: %+v want %+v", i, g, h)
			}
		}
		// Re-encoding the decoded message gives the same bytes.
		if again := got.AppendData(nil); !bytes.Equal(again, data) {
			t.Fatalf("re-encoded %x, want %x", again, data)
		}
	})
}

// FuzzPropsHostile: any bytes after flag bit 1 are refused with
// ErrBadProperties or ErrPropertiesLimit, or accepted, decoded and
// re-encoded to exactly the same bytes (the format has one encoding per
// message), never a panic.
func FuzzPropsHostile(f *testing.F) {
	m := propsMessage()
	m.HasAttribute = false
	f.Add(m.AppendData(nil))
	f.Add([]byte{0, 0, 0, 3, 1, propKey, 0})
	f.Add([]byte{0, 0, 0, 10, 1, propTimestamp, 0, 0, 0, 0, 0, 0, 0, 1, 'x'})
	f.Add([]byte{0, 0, 0, 6, 1, propHeaders, 1, 1, 'k', 0})
	f.Add([]byte{0, 0, 0, 5, 1, propTags, 1, 0x80, 0x80})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 4, 1, propProducer, 7, 0})
	f.Add([]byte{0, 0, 0, 4, 1, propProducer, 0, 0})
	f.Add([]byte{0, 0, 0, 13, 1, propProducer, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _, props, payload, err := SplitDataProps(FlagHasProperties, data)
		pid, pseq, hasP, only, perr := SplitDataProducerOnly(FlagHasProperties, data) // the broker's walk agrees
		if (err == nil) != (perr == nil) {
			t.Fatalf("SplitDataProps %v, SplitDataProducer %v", err, perr)
		}
		if err != nil {
			if !errors.Is(err, ErrBadProperties) && !errors.Is(err, ErrPropertiesLimit) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		var got Message
		if err := DecodeProperties(props, &got); err != nil {
			t.Fatalf("validated block fails to decode: %v", err)
		}
		if hasP != (got.ProducerID != 0) || pid != got.ProducerID || pseq != got.ProducerSeq {
			t.Fatalf("SplitDataProducer %d/%d/%t, decoded %d/%d", pid, pseq, hasP, got.ProducerID, got.ProducerSeq)
		}
		if only && (!hasP || got.Key != nil || !got.Timestamp.IsZero() || got.Tags != nil || got.Headers != nil) {
			t.Fatalf("SplitDataProducerOnly says the producer's field alone, decoded %+v", got)
		}
		if err := got.CheckProperties(); err != nil {
			t.Fatalf("validated block breaks a limit: %v", err)
		}
		got.Body = payload
		if again := got.AppendData(nil); !bytes.Equal(again, data) {
			t.Fatalf("re-encoded %x, want %x", again, data)
		}
	})
}

// BenchmarkSplitData: the broker's check of a put body, without and with
// a 16-byte key and 3 headers.
func BenchmarkSplitData(b *testing.B) {
	for _, props := range []bool{false, true} {
		m := Message{Body: make([]byte, 1024)}
		if props {
			m.Key = []byte("order-0123456789")
			m.Headers = Headers{{"traceparent", []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
				{"content-type", []byte("application/json")}, {"retry", []byte("0")}}
		}
		data := m.AppendData(nil)
		b.Run(map[bool]string{false: "plain", true: "props"}[props], func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, _, _, err := SplitData(m.Flag(), data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestPropsProducer: the idempotent producer's field (bit 4) round-trips
// alone and after the other fields, SplitDataProducer finds it in the
// broker's one walk, and a zero id or an over-long value is refused.
func TestPropsProducer(t *testing.T) {
	for _, m := range []Message{
		{Body: []byte("x"), ProducerID: 1, ProducerSeq: 0},
		{Body: []byte("x"), ProducerID: math.MaxInt64, ProducerSeq: math.MaxInt64, Key: []byte("k"),
			Tags: []string{"a"}, Headers: Headers{{"h", nil}}, HasAttribute: true, Attribute: "at"},
	} {
		data := m.AppendData(nil)
		require.Equal(t, m.DataLen(), len(data))
		require.NoError(t, m.CheckProperties())
		id, seq, ok, only, err := SplitDataProducerOnly(m.Flag(), data)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, m.Key == nil, only, "the producer's field alone")
		require.Equal(t, m.ProducerID, id)
		require.Equal(t, m.ProducerSeq, seq)
		got, err := (&Record{Flag: m.Flag(), Data: data}).Message("t", 0)
		require.NoError(t, err)
		require.Equal(t, m.ProducerID, got.ProducerID)
		require.Equal(t, m.ProducerSeq, got.ProducerSeq)
	}
	// AppendPrefix writes the producer's field alone directly: the same
	// bytes as the general encoder.
	for _, v := range []int64{0, 1, 127, 128, 1 << 20, 1<<62 | 12345, math.MaxInt64} {
		m := Message{ProducerID: max(v, 1), ProducerSeq: v}
		require.True(t, m.producerOnly())
		require.Equal(t, m.appendProps(nil, m.propsLen()), m.AppendPrefix(nil), "id %d seq %d", m.ProducerID, v)
		require.Equal(t, m.DataLen(), len(m.AppendData(nil)))
		require.Equal(t, 4+m.propsLen(), m.DataLen())
	}
	for _, m := range []Message{{ProducerID: 1, Key: []byte{}}, {ProducerID: 1, Tags: []string{"a"}},
		{ProducerID: 1, Headers: Headers{{"h", nil}}}, {ProducerID: 1, Delay: time.Second},
		{ProducerID: 1, Timestamp: time.UnixMilli(1)}, {}} {
		require.False(t, m.producerOnly(), "%+v", m)
	}
	plain := Message{Body: []byte("x"), Key: []byte("k")}
	_, _, ok, only, err := SplitDataProducerOnly(plain.Flag(), plain.AppendData(nil))
	require.NoError(t, err)
	require.False(t, ok)
	require.False(t, only)
	_, _, ok, err = SplitDataProducer(0, []byte("no block"))
	require.NoError(t, err)
	require.False(t, ok)
	require.ErrorIs(t, (&Message{ProducerID: -1}).CheckProperties(), ErrBadProperties)
	for _, block := range [][]byte{{1, propProducer, 0, 0}, {1, propProducer, 1}, {1, propProducer, 0x80, 0, 0}} {
		_, _, _, err := ProducerOf(block)
		require.ErrorIs(t, err, ErrBadProperties, "%x", block)
	}
}
