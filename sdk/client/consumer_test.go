package client

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
	"github.com/metaq-go/metaq/sdk/selector"
)

// padded is the body "<i>" followed by pad zero bytes.
func padded(i, pad int) []byte { return append([]byte(strconv.Itoa(i)), make([]byte, pad)...) }

// sendBodies sends bodies, in order, to partition 0 of topic "t" at addr,
// each acknowledged before the next is sent (so each is its own write, and
// segments roll between records), and returns their offsets.
func sendBodies(t *testing.T, addr string, bodies ...[]byte) []int64 {
	t.Helper()
	p, err := newBrokerProducer(addr, quiet, withSelector(selector.Fixed(0)))
	require.NoError(t, err)
	defer p.Close(context.Background())
	var offs []int64
	for _, b := range bodies {
		r, err := p.Send(ctxT(t, 20*time.Second), &message.Message{Topic: "t", Body: b})
		require.NoError(t, err)
		offs = append(offs, r.Offset)
	}
	return offs
}

// fill sends n messages "0".."n-1" (plus pad zero bytes) to t-0 and
// returns their offsets.
func fill(t *testing.T, addr string, n, pad int) []int64 {
	t.Helper()
	var bs [][]byte
	for i := range n {
		bs = append(bs, padded(i, pad))
	}
	return sendBodies(t, addr, bs...)
}

// consumerAt returns a consumer of topic "t" at addr whose gets back off
// at most 50 ms, closed when t ends.
func consumerAt(t *testing.T, addr string, opts ...consOption) *brokerConsumer {
	t.Helper()
	c, err := newBrokerConsumer(addr, "t", append([]consOption{quiet, withMaxFetchDelay(50 * time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// collect reads n messages or fails.
func collect(t *testing.T, c *brokerConsumer, n int) []*message.Message {
	t.Helper()
	var out []*message.Message
	for m, err := range c.Messages(ctxT(t, 20*time.Second)) {
		require.NoError(t, err)
		out = append(out, m)
		if len(out) == n {
			break
		}
	}
	require.Len(t, out, n)
	return out
}

// smallSegments is a broker option: segments roll at 4096 bytes, the
// smallest max_segment_size, and retention runs every second, deleting
// sealed segments last modified more than an hour ago (aged by ageSegment).
func smallSegments() brokertest.Option {
	return brokertest.Edit(func(c *conf.Config) {
		c.MaxSegmentSize = 4096
		c.DeletePolicy = "delete,1h"
		c.DeleteCheckInterval = 1
	})
}

type segmentFile struct {
	path  string
	start int64
}

// segments lists the segment files of partition p of topic "t" of b, in
// offset order.
func segments(t *testing.T, b *brokertest.Broker, p int) []segmentFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(b.Config.DataDir, fmt.Sprintf("t-%d", p), "*.meta"))
	require.NoError(t, err)
	var out []segmentFile
	for _, path := range paths {
		start, err := strconv.ParseInt(strings.TrimSuffix(filepath.Base(path), ".meta"), 10, 64)
		require.NoError(t, err)
		out = append(out, segmentFile{path, start})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out
}

// damage flips every bit of the first data byte of the record at off in
// t-0 of b, in the segment file on disk: the record's checksum no longer
// matches.
func damage(t *testing.T, b *brokertest.Broker, off int64) {
	t.Helper()
	segs := segments(t, b, 0)
	i := sort.Search(len(segs), func(i int) bool { return segs[i].start > off }) - 1
	require.GreaterOrEqual(t, i, 0)
	f, err := os.OpenFile(segs[i].path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	pos := off - segs[i].start + message.HeaderSize
	// A group-commit broker keeps what it wrote since its last checkpoint
	// in memory (docs/storage.md, "Segment tails"): wait until the
	// checkpoint (at most a second) has written the record to the file.
	require.Eventually(t, func() bool {
		fi, err := f.Stat()
		return err == nil && fi.Size() > pos
	}, 10*time.Second, 5*time.Millisecond, "the record at %d reaches its segment file", off)
	var one [1]byte
	_, err = f.ReadAt(one[:], pos)
	require.NoError(t, err)
	one[0] ^= 0xFF
	_, err = f.WriteAt(one[:], pos)
	require.NoError(t, err)
}

// ageSegment makes a segment file two hours old, so that the next
// retention run of a smallSegments broker deletes it (if it is sealed and
// every segment before it is deleted too).
func ageSegment(t *testing.T, s segmentFile) {
	t.Helper()
	// A sealed segment's last bytes may still be in the broker's memory
	// (docs/storage.md, "Segment tails"): wait until the checkpoint has
	// written them, or its write would make the file new again.
	dir := filepath.Dir(s.path)
	paths, err := filepath.Glob(filepath.Join(dir, "*.meta"))
	require.NoError(t, err)
	sort.Strings(paths)
	if i := sort.SearchStrings(paths, s.path); i+1 < len(paths) {
		next, err := strconv.ParseInt(strings.TrimSuffix(filepath.Base(paths[i+1]), ".meta"), 10, 64)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			fi, err := os.Stat(s.path)
			return err == nil && fi.Size() == next-s.start
		}, 10*time.Second, 5*time.Millisecond, "segment %s is written out", s.path)
	}
	old := time.Now().Add(-2 * time.Hour)
	require.NoError(t, os.Chtimes(s.path, old, old))
}

// minOffset is the oldest offset the broker at addr keeps of t-0.
func minOffset(t *testing.T, addr string) int64 {
	t.Helper()
	body, err := brokerStats(ctxT(t, 10*time.Second), addr, "offsets")
	require.NoError(t, err)
	offs, err := parseStatsOffsets(body)
	require.NoError(t, err)
	require.NotEmpty(t, offs["t"])
	return offs["t"][0].Min
}

// statInt is the value of key in the broker's `stats` reply.
func statInt(t *testing.T, addr, key string) int64 {
	t.Helper()
	body, err := brokerStats(ctxT(t, 10*time.Second), addr, "")
	require.NoError(t, err)
	for _, l := range strings.Split(body, "\r\n") {
		if v, ok := strings.CutPrefix(l, key+" "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err, "%s", l)
			return n
		}
	}
	t.Fatalf("no %s in stats:\n%s", key, body)
	return 0
}

// TestConsumerMoved: the broker's retention has deleted the oldest segment,
// so the get from 0 (Earliest) is answered 301 with the oldest offset left;
// the consumer moves there and reads on.
func TestConsumerMoved(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), smallSegments())
	fill(t, b.Addr(), 5, 1000) // 5 × 1020 bytes: past 4096, the next put starts a segment
	offs := fill(t, b.Addr(), 5, 0)
	segs := segments(t, b, 0)
	require.Len(t, segs, 2)
	require.Equal(t, offs[0], segs[1].start)
	ageSegment(t, segs[0])
	require.Eventually(t, func() bool { return minOffset(t, b.Addr()) == offs[0] }, 20*time.Second, 10*time.Millisecond,
		"retention deletes the first segment")
	c := consumerAt(t, b.Addr())
	got := collect(t, c, 5)
	for i, m := range got {
		require.Equal(t, offs[i], m.Offset)
		require.Equal(t, strconv.Itoa(i), string(m.Body))
	}
	require.Equal(t, offs[4]+message.HeaderSize+1, c.Position(0))
}

// TestConsumerPositionIgnoresHandlerChanges: a handler, or a Messages loop
// body, that changes the message it was given (adds a trace header as
// otelmetaq's StartPublish does when it is forwarded, a tag, a longer body)
// does not move the consumer's position: it is the next record's offset,
// from the record as fetched. The committed offset is thus a record start,
// and the next consumer of the group gets every following message once.
func TestConsumerPositionIgnoresHandlerChanges(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet())
	offs := fill(t, b.Addr(), 10, 0)
	mutate := func(m *message.Message) {
		m.Headers.Add("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		m.Tags = append(m.Tags, "forwarded")
		m.Body = append([]byte("forwarded "), m.Body...)
	}

	// Consume handles 0..4, changing each, then stops.
	c1 := consumerAt(t, b.Addr(), withGroup("g"), withCommitInterval(0))
	ctx, cancel := context.WithCancel(ctxT(t, 20*time.Second))
	defer cancel()
	var handled []*message.Message
	err := c1.Consume(ctx, func(hctx context.Context, m *message.Message) error {
		if len(handled) == 5 {
			return hctx.Err() // cancelled: not handled
		}
		handled = append(handled, &message.Message{Body: m.Body, Offset: m.Offset})
		mutate(m)
		if len(handled) == 5 {
			cancel()
		}
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, handled, 5)
	for i, m := range handled {
		require.Equal(t, offs[i], m.Offset)
		require.Equal(t, strconv.Itoa(i), string(m.Body))
	}
	require.Equal(t, offs[5], c1.Position(0), "position after a changed message")
	require.NoError(t, c1.Close(ctxT(t, 20*time.Second)))

	// A Messages loop resumes at 5 and handles 5..7, changing each.
	c2 := consumerAt(t, b.Addr(), withGroup("g"), withCommitInterval(0))
	var got []string
	for m, err := range c2.Messages(ctxT(t, 20*time.Second)) {
		require.NoError(t, err)
		require.Equal(t, offs[5+len(got)], m.Offset)
		got = append(got, string(m.Body))
		mutate(m)
		if len(got) == 3 {
			break
		}
	}
	require.Equal(t, []string{"5", "6", "7"}, got)
	require.Equal(t, offs[8], c2.Position(0), "position after a changed message")
	require.NoError(t, c2.Close(ctxT(t, 20*time.Second)))

	// The next consumer of the group gets 8 and 9, and ends after 9.
	c3 := consumerAt(t, b.Addr(), withGroup("g"))
	rest := collect(t, c3, 2)
	for i, m := range rest {
		require.Equal(t, offs[8+i], m.Offset)
		require.Equal(t, strconv.Itoa(8+i), string(m.Body))
	}
	require.Equal(t, offs[9]+message.HeaderSize+1, c3.Position(0))
}

// TestConsumerNoDataBackoff: with nothing to read (the broker answers 404),
// gets slow down to one per max delay instead of spinning; the broker
// counts them.
func TestConsumerNoDataBackoff(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet())
	c := consumerAt(t, b.Addr(), withMaxFetchDelay(100*time.Millisecond))
	before := statInt(t, b.Addr(), "cmd_get")
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	err := c.Consume(ctx, func(context.Context, *message.Message) error { return nil })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// Delays 10, 20, ... 100 ms sum to 550 ms over the first 10 gets.
	n := statInt(t, b.Addr(), "cmd_get") - before
	require.GreaterOrEqual(t, n, int64(5))
	require.LessOrEqual(t, n, int64(14))
}

// TestConsumerPartialRecords: the broker's replies end mid-record (it
// serves the bytes asked for, not whole records); the consumer advances
// only by whole records, and a record larger than the get makes it grow.
func TestConsumerPartialRecords(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet())
	fill(t, b.Addr(), 10, 25) // 20+26 bytes each
	sendBodies(t, b.Addr(), make([]byte, 500))
	offs := fill(t, b.Addr(), 3, 0)
	c := consumerAt(t, b.Addr(), withMaxFetchSize(64), withMaxFetchSizeLimit(1024))
	got := collect(t, c, 14)
	for i := range 10 {
		require.Equal(t, strconv.Itoa(i), string(got[i].Body[:1]))
	}
	require.Len(t, got[10].Body, 500)
	require.Equal(t, "2", string(got[13].Body))
	require.Equal(t, offs[2]+message.HeaderSize+1, c.Position(0))
}

// TestConsumerCorruptRecord: a record damaged on the broker's disk after
// the broker wrote it (the broker trusts the segments it wrote and serves
// them as they are) fails its checksum in the client. `offset` answers the
// segment start, behind the bad record, so the consumer stops with a
// *CorruptRecordError at that record.
func TestConsumerCorruptRecord(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet())
	offs := fill(t, b.Addr(), 5, 0)
	damage(t, b, offs[2])
	c := consumerAt(t, b.Addr())
	var got []string
	err := c.Consume(ctxT(t, 20*time.Second), func(_ context.Context, m *message.Message) error {
		got = append(got, string(m.Body))
		return nil
	})
	var ce *CorruptRecordError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, CorruptRecordError{Topic: "t", Partition: 0, Offset: offs[2], Err: ce.Err}, *ce)
	require.ErrorIs(t, err, message.ErrCorruptRecord)
	require.NotContains(t, err.Error(), protocol.CorruptDataPrefix, "the broker served the record; the client found it bad")
	require.Equal(t, []string{"0", "1"}, got)
	require.Equal(t, offs[2], c.Position(0))
}

// TestConsumerCorruptDataReply: a broker restarted on data damaged at rest
// (a record of a sealed segment) serves the records before the damage and
// refuses a get at it (500 "corrupt data: ..."); the consumer stops with a
// *CorruptRecordError at that offset, not retry forever.
func TestConsumerCorruptDataReply(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), smallSegments())
	offs := fill(t, b.Addr(), 5, 1400) // 1420-byte records: 0..2 in the first segment
	segs := segments(t, b, 0)
	require.Len(t, segs, 2)
	require.Equal(t, offs[3], segs[1].start)
	require.NoError(t, b.Close())
	damage(t, b, offs[2])
	b = brokertest.Start(t, smallJournal(), brokertest.Config(b.Config), brokertest.Quiet())

	c := consumerAt(t, b.Addr())
	var got []string
	err := c.Consume(ctxT(t, 20*time.Second), func(_ context.Context, m *message.Message) error {
		got = append(got, string(trimZeros(m.Body)))
		return nil
	})
	var ce *CorruptRecordError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, offs[2], ce.Offset)
	require.ErrorIs(t, err, message.ErrCorruptRecord)
	require.Contains(t, err.Error(), protocol.CorruptDataPrefix)
	require.Contains(t, err.Error(), "damaged data")
	require.Equal(t, []string{"0", "1"}, got)
	require.Equal(t, offs[2], c.Position(0))
}

// TestConsumerResyncForward: when `offset` answers past the bad record, the
// consumer continues there. The real broker does when retention deleted
// the bad record's segment meanwhile: the record is damaged on the disk
// of the running broker (which serves it as it is), the network holds the
// consumer's `offset` request back until retention has deleted that
// segment, and the answer is then the oldest offset left.
func TestConsumerResyncForward(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), smallSegments())
	offs := fill(t, b.Addr(), 5, 1400) // 1420-byte records: 0..2 in the first segment
	segs := segments(t, b, 0)
	require.Len(t, segs, 2)
	require.Equal(t, offs[3], segs[1].start)
	damage(t, b, offs[2])
	fn := startFaultyNet(t, b.Addr())
	fn.holdIf(func(r *protocol.Request) bool { return r.Op == protocol.OpOffset })
	c := consumerAt(t, fn.addr())

	type read struct {
		msgs []*message.Message
		err  error
	}
	done := make(chan read, 1)
	go func() {
		var r read
		for m, err := range c.Messages(ctxT(t, 30*time.Second)) {
			if err != nil {
				r.err = err
				break
			}
			if r.msgs = append(r.msgs, m); len(r.msgs) == 4 {
				break
			}
		}
		done <- r
	}()
	require.Eventually(t, func() bool { return fn.held() == 1 }, 20*time.Second, time.Millisecond,
		"the consumer asks `offset` at the bad record")
	ageSegment(t, segs[0])
	require.Eventually(t, func() bool { return minOffset(t, b.Addr()) == offs[3] }, 20*time.Second, 10*time.Millisecond,
		"retention deletes the first segment")
	fn.release()
	r := <-done
	require.NoError(t, r.err)
	require.Len(t, r.msgs, 4)
	var got []string
	for _, m := range r.msgs {
		got = append(got, string(trimZeros(m.Body)))
	}
	require.Equal(t, []string{"0", "1", "3", "4"}, got)
	require.Equal(t, offs[3], r.msgs[2].Offset)
}

// TestConsumerMisalignedStart: AtOffset in the middle of a record (the
// broker serves from there, mid-record) resyncs back to the segment start
// the broker's `offset` reports.
func TestConsumerMisalignedStart(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet())
	offs := fill(t, b.Addr(), 3, 40)
	c := consumerAt(t, b.Addr(), withStartFrom(AtOffset(5)), withMaxFetchSizeLimit(4096))
	got := collect(t, c, 3)
	for i, m := range got {
		require.Equal(t, offs[i], m.Offset)
		require.Equal(t, strconv.Itoa(i), string(trimZeros(m.Body)))
	}
	require.Equal(t, int64(0), got[0].Offset)
}

func TestConsumerAlreadyRunningAndClose(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.Partitions(2))
	c := consumerAt(t, b.Addr())
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
	t.Parallel()
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
