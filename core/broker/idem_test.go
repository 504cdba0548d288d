package broker

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// idemData is the put body of producer pid's message seq.
func idemData(pid, seq int64) []byte {
	m := message.Message{Body: []byte("v" + strconv.FormatInt(seq, 10)), ProducerID: pid, ProducerSeq: seq}
	return m.AppendData(nil)
}

func idemPut(t *testing.T, c *rawClient, p int32, pid, seq int64) protocol.Request {
	t.Helper()
	return c.roundTrip(t, protocol.AppendPut(nil, "t", p, message.FlagHasProperties, -1, 1, idemData(pid, seq)))
}

func idemMPut(t *testing.T, c *rawClient, p int32, pid int64, seqs ...int64) protocol.Request {
	t.Helper()
	var body []byte
	for _, s := range seqs {
		body = protocol.AppendMPutEntry(body, message.FlagHasProperties, -1, idemData(pid, s))
	}
	return c.roundTrip(t, append(protocol.AppendMPutHeader(nil, "t", p, len(body), len(seqs), 2), body...))
}

func requireCause(t *testing.T, r protocol.Request, cause string) {
	t.Helper()
	got, _ := protocol.ParseCause(string(r.Body))
	require.Equal(t, cause, got, "%d %s", r.Code, r.Body)
}

// TestIdempotentPut: a retried put or mput of an idempotent producer is
// answered with the original result and stored once; a gap is refused
// with its cause; an mput mixing producers is refused; after a restart
// the table is rebuilt from the log, so a retry of the last put is still
// answered with its offset and the next sequence is expected.
func TestIdempotentPut(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := fixture{dir: dir}.start(t)
	c := dialRaw(t, b.Addr())
	const pid = 0x1234_5678_9abc

	first := idemPut(t, c, 0, pid, 0)
	require.Equal(t, protocol.StatusOK, first.Code, string(first.Body))
	again := idemPut(t, c, 0, pid, 0)
	require.Equal(t, string(first.Body), string(again.Body))

	m1 := idemMPut(t, c, 0, pid, 1, 2, 3)
	require.Equal(t, protocol.StatusOK, m1.Code, string(m1.Body))
	require.Equal(t, string(m1.Body), string(idemMPut(t, c, 0, pid, 1, 2, 3).Body))

	requireCause(t, idemPut(t, c, 0, pid, 5), protocol.CauseOutOfOrderSequence)
	requireCause(t, idemPut(t, c, 0, pid, 2), protocol.CauseDuplicateSequence) // inside the mput
	mixed := idemMPut(t, c, 0, pid, 4, 6)
	require.Equal(t, protocol.StatusBadRequest, mixed.Code, string(mixed.Body))
	// Another producer and another partition have their own sequences.
	requireCause(t, idemPut(t, c, 0, pid+1, 9), protocol.CauseUnknownProducer) // a producer starts at 0
	require.Equal(t, protocol.StatusOK, idemPut(t, c, 0, pid+1, 0).Code)
	require.Equal(t, protocol.StatusOK, idemPut(t, c, 1, pid, 0).Code)
	last := idemPut(t, c, 0, pid, 4)
	require.Equal(t, protocol.StatusOK, last.Code, string(last.Body))

	st := c.stats(t, "")
	require.Equal(t, "5", st["idempotent_duplicates"]) // 1 + 3 + 1 (the retry from inside the mput)
	require.Equal(t, "1", st["idempotent_out_of_order"])
	require.Equal(t, "1", st["idempotent_unknown_producer"])
	end := b.topics.Get("t").Parts[0].MaxOffset()
	require.NoError(t, b.Close())

	// Restart: the table is rebuilt lazily from the log.
	b = fixture{dir: dir}.start(t)
	c = dialRaw(t, b.Addr())
	require.Equal(t, string(last.Body), string(idemPut(t, c, 0, pid, 4).Body))
	requireCause(t, idemPut(t, c, 0, pid, 6), protocol.CauseOutOfOrderSequence)
	require.Equal(t, end, b.topics.Get("t").Parts[0].MaxOffset(), "a retry was stored")
	next := idemPut(t, c, 0, pid, 5)
	require.Equal(t, protocol.StatusOK, next.Code, string(next.Body))
	_, _, off, _, err := protocol.ParsePutResult(next.Body)
	require.NoError(t, err)
	require.Equal(t, end, off)

	// Records without a producer are untouched: byte for byte as before.
	plain := c.roundTrip(t, protocol.AppendPut(nil, "t", 0, 0, -1, 3, []byte("plain")))
	require.Equal(t, protocol.StatusOK, plain.Code)
	require.Equal(t, protocol.StatusOK, c.roundTrip(t, protocol.AppendPut(nil, "t", 0, 0, -1, 3, []byte("plain"))).Code)
}

// TestIdempotentForgotten: a producer the table forgot (evicted past
// idempotent_producers) is refused as an unknown producer, at its next
// sequence and at sequence 0 alike, and nothing is stored: a retry of its
// stored put is not stored twice. A known producer's gap is still out of
// order.
func TestIdempotentForgotten(t *testing.T) {
	t.Parallel()
	b := fixture{mods: []func(*conf.Config){func(c *conf.Config) { c.IdempotentProducers = 1 }}}.start(t)
	c := dialRaw(t, b.Addr())
	const a, o = 0x1111_0000_0001, 0x2222_0000_0002

	first := idemPut(t, c, 0, a, 0) // A seq 0 stored
	require.Equal(t, protocol.StatusOK, first.Code, string(first.Body))
	require.Equal(t, protocol.StatusOK, idemPut(t, c, 0, o, 0).Code) // O evicts A
	end := b.topics.Get("t").Parts[0].MaxOffset()
	requireCause(t, idemPut(t, c, 0, a, 1), protocol.CauseUnknownProducer) // A's next put
	requireCause(t, idemPut(t, c, 0, a, 0), protocol.CauseUnknownProducer) // a retry of A's stored put
	require.Equal(t, end, b.topics.Get("t").Parts[0].MaxOffset(), "a put of a forgotten producer was stored")
	requireCause(t, idemPut(t, c, 0, o, 2), protocol.CauseOutOfOrderSequence) // a known producer's gap
	st := c.stats(t, "")
	require.Equal(t, "2", st["idempotent_unknown_producer"])
	require.Equal(t, "1", st["idempotent_out_of_order"])
}

// TestIdempotentMemory: past idempotent_memory the broker forgets its
// least recently used producers, of any partition; a forgotten producer's
// next put and a retry of its stored put are refused as unknown producer
// and nothing is stored twice; the others' puts go on.
func TestIdempotentMemory(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10 // 128 producers at 512 bytes, less the forgotten ids
	b := fixture{mods: []func(*conf.Config){func(c *conf.Config) { c.IdempotentMemory = limit }}}.start(t)
	c := dialRaw(t, b.Addr())
	const n, base = 160, 0x3333_0000_0000
	for i := range int64(n) {
		r := idemPut(t, c, int32(i%2), base+i, 0)
		require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	}
	st := c.stats(t, "")
	evicted, err := strconv.Atoi(st["idempotent_memory_evicted"])
	require.NoError(t, err)
	require.GreaterOrEqual(t, evicted, n-limit/512)
	used, err := strconv.Atoi(st["idempotent_memory_bytes"])
	require.NoError(t, err)
	require.LessOrEqual(t, used, limit)
	ends := []int64{b.topics.Get("t").Parts[0].MaxOffset(), b.topics.Get("t").Parts[1].MaxOffset()}
	var forgotten []int64
	for i := range int64(n) {
		r := idemPut(t, c, int32(i%2), base+i, 0) // a retry of the first put
		if r.Code == protocol.StatusOK {
			continue // remembered: answered with its offset
		}
		requireCause(t, r, protocol.CauseUnknownProducer)
		forgotten = append(forgotten, i)
		requireCause(t, idemPut(t, c, int32(i%2), base+i, 1), protocol.CauseUnknownProducer)
	}
	require.Equal(t, ends, []int64{b.topics.Get("t").Parts[0].MaxOffset(), b.topics.Get("t").Parts[1].MaxOffset()},
		"a retry was stored again")
	require.Len(t, forgotten, evicted)
	for i := range int64(n) {
		if !slices.Contains(forgotten, i) {
			r := idemPut(t, c, int32(i%2), base+i, 1)
			require.Equal(t, protocol.StatusOK, r.Code, "producer %d: %s", i, r.Body)
		}
	}
}

// TestIdempotentRebuildEmbedded: the rebuild's starting point falls in a
// message whose body embeds whole records (of another producer), with or
// without bytes after them that are none: the rebuild starts at a record
// start the log knows (its record-count index), before that message,
// and finds the producer's real records after it and none of the
// embedded ones. (A guess of a boundary from the bytes, resync, took the
// embedded records for real ones when they ran to the body's end and on
// into the real records after it: a retry of the real put of sequence 0
// would have been stored again, the review's probe.)
func TestIdempotentRebuildEmbedded(t *testing.T) {
	t.Parallel()
	for _, tail := range []string{"", "qqqq"} {
		b := fixture{}.start(t)
		c := dialRaw(t, b.Addr())
		filler := bytes.Repeat([]byte("f"), 1000)
		for range 50 { // 5 MB of plain records
			var body []byte
			for range 100 {
				body = protocol.AppendMPutEntry(body, 0, -1, filler)
			}
			r := c.roundTrip(t, append(protocol.AppendMPutHeader(nil, "t", 0, len(body), 100, 2), body...))
			require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
		}
		l := b.topics.Get("t").Parts[0]
		const fake, pid = 0x7777_0000_0001, 0x5555_0000_0001
		prefix := bytes.Repeat([]byte("z"), 4096)
		body := slices.Clone(prefix)
		for seq := range int64(20) { // records of another producer, back to back
			body = message.AppendRecord(body, 1000+seq, message.FlagHasProperties, idemData(fake, seq))
		}
		body = append(body, tail...)
		msgAt := l.MaxOffset()
		bodyAt := msgAt + message.HeaderSize
		// The container message is itself an idempotent put of pid, sequence 0.
		m := message.Message{Body: body, ProducerID: pid, ProducerSeq: 0}
		d := m.AppendData(nil)
		r := c.roundTrip(t, append(protocol.AppendPutHeader(nil, "t", 0, len(d), m.Flag(), int64(message.Checksum(d)), 3), d...))
		require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
		for seq := int64(1); seq < 10; seq++ {
			require.Equal(t, protocol.StatusOK, idemPut(t, c, 0, pid, seq).Code)
		}
		end := l.MaxOffset()
		back := end - (bodyAt + int64(len(prefix))/2) // the point: inside the prefix
		recs, from, err := partition.ScanProducers(l, back)
		require.NoError(t, err)
		require.LessOrEqual(t, from, msgAt, "tail %q: a record start at or before the container message", tail)
		require.Less(t, msgAt-from, int64(256<<10), "tail %q: near it, not the segment's start", tail)
		require.Len(t, recs, 10, "tail %q", tail)
		for i, r := range recs {
			require.Equal(t, int64(pid), r.Producer, "tail %q", tail)
			require.Equal(t, int64(i), r.Seq, "tail %q", tail)
		}
		require.NoError(t, b.Close())
	}
}

// BenchmarkBrokerPutIdempotent: pipelined durable (group commit) 1 KiB
// puts on one connection, each frame built and checksummed as it is sent:
// plain (off), with a 13-byte key (key: a properties block of the
// producer field's size) and with the idempotent producer's field (on:
// the partition's table judges every put).
func BenchmarkBrokerPutIdempotent(b *testing.B) {
	for _, arm := range []string{"off", "key", "on"} {
		idem := arm == "on"
		b.Run(arm, func(b *testing.B) {
			br := startBroker(b, 0)
			c := dialRaw(b, br.Addr())
			m := message.Message{Body: bytes.Repeat([]byte("x"), 1024)}
			if idem {
				m.ProducerID = 1<<62 | 12345
			}
			if arm == "key" { // a block of the same size without the producer
				m.Key = []byte("0123456789abc")
			}
			const window = 512
			sem := make(chan struct{}, window)
			errs := make(chan error, 1)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				var req protocol.Request
				for range b.N {
					if err := c.dec.Decode(&req); err != nil || req.Code != protocol.StatusOK {
						errs <- fmt.Errorf("%v %d %s", err, req.Code, req.Body)
						return
					}
					<-sem
				}
			}()
			var data, frame []byte
			b.ReportAllocs()
			b.SetBytes(1024)
			b.ResetTimer()
			for i := range b.N {
				sem <- struct{}{}
				m.ProducerSeq = int64(i)
				data = m.AppendData(data[:0])
				frame = protocol.AppendPutHeader(frame[:0], "t", 0, len(data), m.Flag(), int64(message.Checksum(data)), int32(i))
				c.bw.Write(frame)
				c.bw.Write(data)
				if len(sem) == cap(sem) || i == b.N-1 || c.bw.Buffered() > 64<<10 {
					c.bw.Flush()
				}
			}
			c.bw.Flush()
			wg.Wait()
			b.StopTimer()
			select {
			case err := <-errs:
				b.Fatal(err)
			default:
			}
		})
	}
}

// TestIdempotentRebuildResync: the rebuild reads back a bounded distance:
// far into a large segment it starts at a record start the log's
// record-count index knows there instead of reading the segment from its
// start, and returns exactly the records from that boundary on.
func TestIdempotentRebuildResync(t *testing.T) {
	t.Parallel()
	b := fixture{}.start(t)
	c := dialRaw(t, b.Addr())
	const pid, perMPut, mputs = 1 << 62, 100, 60 // 6000 messages of about 1 KiB
	var starts []int64                           // every record's offset
	off := int64(0)
	for i := range mputs {
		var body []byte
		for j := range perMPut {
			seq := int64(i*perMPut + j)
			m := message.Message{Body: bytes.Repeat([]byte{byte('a' + j%26)}, 1000+j), ProducerID: pid, ProducerSeq: seq}
			d := m.AppendData(nil)
			body = protocol.AppendMPutEntry(body, m.Flag(), -1, d)
			starts = append(starts, off)
			off += int64(message.HeaderSize + len(d))
		}
		r := c.roundTrip(t, append(protocol.AppendMPutHeader(nil, "t", 0, len(body), perMPut, 2), body...))
		require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	}
	l := b.topics.Get("t").Parts[0]
	require.Equal(t, off, l.MaxOffset())
	require.Greater(t, off, int64(5<<20))

	recs, from, err := partition.ScanProducers(l, 1<<20)
	require.NoError(t, err)
	want := slices.Index(starts, from)
	require.GreaterOrEqual(t, want, 0, "a record start")
	require.LessOrEqual(t, from, off-1<<20, "at or before the point")
	require.Less(t, off-1<<20-from, int64(256<<10), "near it (the index's entries are 64 KiB apart, an mput's records one append)")
	require.Len(t, recs, len(starts)-want)
	for i, r := range recs {
		require.Equal(t, starts[want+i], r.Offset)
		require.Equal(t, int64(want+i), r.Seq)
		require.Equal(t, int64(pid), r.Producer)
	}

	// Reading back more than the log holds starts at its start.
	recs, from, err = partition.ScanProducers(l, 1<<30)
	require.NoError(t, err)
	require.Zero(t, from)
	require.Len(t, recs, len(starts))
}
