package client

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// fill appends n messages "0".."n-1" (plus pad bytes) to l and returns their offsets.
func fill(l *memLog, n int, pad int) []int64 {
	var offs []int64
	for i := range n {
		body := append([]byte(strconv.Itoa(i)), make([]byte, pad)...)
		_, off := l.append(&message.Message{Body: body})
		offs = append(offs, off)
	}
	return offs
}

func memConsumer(t *testing.T, b *memBroker, opts ...consOption) *brokerConsumer {
	t.Helper()
	f := startFake(t, b.handle)
	c, err := newBrokerConsumer(f.addr(), b.topic, append([]consOption{quiet, withMaxFetchDelay(50 * time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// collect reads n messages or fails.
func collect(t *testing.T, c *brokerConsumer, n int) []*message.Message {
	t.Helper()
	var out []*message.Message
	for m, err := range c.Messages(ctxT(t, 10*time.Second)) {
		require.NoError(t, err)
		out = append(out, m)
		if len(out) == n {
			break
		}
	}
	require.Len(t, out, n)
	return out
}

func TestConsumerMoved(t *testing.T) {
	b := newMemBroker("t", 1)
	b.parts[0].base = 1000 // older data was deleted
	offs := fill(b.parts[0], 5, 0)
	c := memConsumer(t, b)
	got := collect(t, c, 5)
	for i, m := range got {
		require.Equal(t, offs[i], m.Offset)
		require.Equal(t, strconv.Itoa(i), string(m.Body))
	}
	require.Equal(t, b.parts[0].max(), c.Position(0))
}

// TestConsumerNoDataBackoff: with nothing to read, gets slow down to one
// per max delay instead of spinning.
func TestConsumerNoDataBackoff(t *testing.T) {
	b := newMemBroker("t", 1)
	c := memConsumer(t, b, withMaxFetchDelay(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	err := c.Consume(ctx, func(context.Context, *message.Message) error { return nil })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// Delays 10, 20, ... 100 ms sum to 550 ms over the first 10 gets.
	n := b.getCount()
	require.GreaterOrEqual(t, n, 5)
	require.LessOrEqual(t, n, 14)
}

// TestConsumerPartialRecords: replies that end mid-record advance only by
// whole records, and a record larger than the get makes it grow.
func TestConsumerPartialRecords(t *testing.T) {
	b := newMemBroker("t", 1)
	fill(b.parts[0], 10, 25)                                     // 20+26 bytes each
	b.parts[0].append(&message.Message{Body: make([]byte, 500)}) // needs 520 bytes
	fill(b.parts[0], 3, 0)
	c := memConsumer(t, b, withMaxFetchSize(64), withMaxFetchSizeLimit(1024))
	got := collect(t, c, 14)
	for i := range 10 {
		require.Equal(t, strconv.Itoa(i), string(got[i].Body[:1]))
	}
	require.Len(t, got[10].Body, 500)
	require.Equal(t, "2", string(got[13].Body))
	require.Equal(t, b.parts[0].max(), c.Position(0))
}

// corrupt flips a data byte of the record at off.
func corrupt(l *memLog, off int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.data[off-l.base+message.HeaderSize] ^= 0xFF
}

func TestConsumerCorruptRecord(t *testing.T) {
	b := newMemBroker("t", 1)
	offs := fill(b.parts[0], 5, 0)
	corrupt(b.parts[0], offs[2])
	c := memConsumer(t, b)
	var got []string
	err := c.Consume(ctxT(t, 10*time.Second), func(_ context.Context, m *message.Message) error {
		got = append(got, string(m.Body))
		return nil
	})
	var ce *CorruptRecordError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, CorruptRecordError{Topic: "t", Partition: 0, Offset: offs[2], Err: ce.Err}, *ce)
	require.ErrorIs(t, err, message.ErrCorruptRecord)
	require.Equal(t, []string{"0", "1"}, got)
	require.Equal(t, offs[2], c.Position(0))
}

// TestConsumerCorruptDataReply: a broker that refuses a get because the
// data is damaged on its disk (500 "corrupt data: ...") makes the consumer
// stop with a *CorruptRecordError at that offset, not retry forever.
func TestConsumerCorruptDataReply(t *testing.T) {
	b := newMemBroker("t", 1)
	offs := fill(b.parts[0], 5, 0)
	l := b.parts[0]
	b.hook = func(w *fakeWriter, r *protocol.Request) bool {
		if r.Op != protocol.OpGet {
			return false
		}
		if r.Offset >= offs[2] {
			w.result(protocol.StatusInternalError, protocol.CorruptDataPrefix+"store: partition t-0: offset "+
				strconv.FormatInt(r.Offset, 10)+" is in damaged data", r.Opaque)
			return true
		}
		l.mu.Lock()
		data := bytes.Clone(l.data[r.Offset-l.base : offs[2]-l.base]) // the broker clips at the damage
		l.mu.Unlock()
		w.value(data[:min(len(data), int(r.MaxSize))], r.Opaque)
		return true
	}
	c := memConsumer(t, b)
	var got []string
	err := c.Consume(ctxT(t, 10*time.Second), func(_ context.Context, m *message.Message) error {
		got = append(got, string(m.Body))
		return nil
	})
	var ce *CorruptRecordError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, offs[2], ce.Offset)
	require.ErrorIs(t, err, message.ErrCorruptRecord)
	require.Contains(t, err.Error(), "damaged data")
	require.Equal(t, []string{"0", "1"}, got)
	require.Equal(t, offs[2], c.Position(0))
}

// TestConsumerResyncForward: when `offset` answers past the bad record, the
// consumer continues there.
func TestConsumerResyncForward(t *testing.T) {
	b := newMemBroker("t", 1)
	offs := fill(b.parts[0], 5, 0)
	corrupt(b.parts[0], offs[2])
	b.hook = func(w *fakeWriter, r *protocol.Request) bool {
		if r.Op == protocol.OpOffset && r.Offset == offs[2] {
			w.result(200, strconv.FormatInt(offs[3], 10), r.Opaque)
			return true
		}
		return false
	}
	c := memConsumer(t, b)
	got := collect(t, c, 4)
	require.Equal(t, []string{"0", "1", "3", "4"}, bodies(got))
}

// TestConsumerMisalignedStart: AtOffset in the middle of a record resyncs
// back to the segment start the broker reports.
func TestConsumerMisalignedStart(t *testing.T) {
	b := newMemBroker("t", 1)
	fill(b.parts[0], 3, 40)
	b.hook = func(w *fakeWriter, r *protocol.Request) bool {
		if r.Op == protocol.OpOffset {
			w.result(200, "0", r.Opaque) // one segment starting at 0
			return true
		}
		return false
	}
	c := memConsumer(t, b, withStartFrom(AtOffset(5)), withMaxFetchSizeLimit(4096))
	got := collect(t, c, 3)
	require.Equal(t, int64(0), got[0].Offset)
}

func bodies(ms []*message.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Body))
	}
	return out
}

func TestConsumerAlreadyRunningAndClose(t *testing.T) {
	b := newMemBroker("t", 2)
	c := memConsumer(t, b)
	ctx := ctxT(t, 10*time.Second)
	done := make(chan error, 1)
	go func() { done <- c.Consume(ctx, func(context.Context, *message.Message) error { return nil }) }()
	require.Eventually(t, func() bool { return len(c.Assigned()) == 2 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool {
		return c.Consume(ctx, func(context.Context, *message.Message) error { return nil }) == ErrAlreadyConsuming
	}, 5*time.Second, time.Millisecond)
	require.NoError(t, c.Close(ctx))
	require.NoError(t, c.Close(ctx))
	require.ErrorIs(t, <-done, ErrClosed)
	require.ErrorIs(t, c.Consume(ctx, nil), ErrClosed)
}

func TestParseStats(t *testing.T) {
	ts, err := parseStatsTopics("STATS\r\nb partitions 2 message_count 5 message_bytes 100 accept_publish true accept_subscribe false\r\na *Empty*\r\nEND\r\n")
	require.NoError(t, err)
	require.Equal(t, []topicInfo{
		{Name: "a", AcceptPublish: true, AcceptSubscribe: true},
		{Name: "b", Partitions: 2, MessageCount: 5, MessageBytes: 100, AcceptPublish: true},
	}, ts)
	offs, err := parseStatsOffsets("STATS\r\nb part 1 min_offset 0 max_offset 9\r\nb part 0 min_offset 3 max_offset 4\r\nEND\r\n")
	require.NoError(t, err)
	require.Equal(t, []partitionOffsets{{0, 3, 4}, {1, 0, 9}}, offs["b"])
	_, err = parseStatsOffsets("STATS\r\nb part x\r\nEND\r\n")
	require.Error(t, err)
}
