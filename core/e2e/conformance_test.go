package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"

	"github.com/metaq-go/metaq/core/broker"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// readRawReply reads one `result` reply byte for byte, without the
// decoder, so its exact framing can be checked.
func readRawReply(t testing.TB, nc net.Conn, br *bufio.Reader) (header string, body []byte) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(ioTimeout))
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	m := regexp.MustCompile(`^result (\d+) (\d+) (-?\d+)\r\n$`).FindStringSubmatch(line)
	require.NotNil(t, m, "reply header %q", line)
	n, _ := strconv.Atoi(m[2])
	body = make([]byte, n)
	_, err = io.ReadFull(br, body)
	require.NoError(t, err)
	return line, body
}

// TestProtocolConformance checks the reply format and semantics of every
// command against reference §1 and §12.
func TestProtocolConformance(t *testing.T) {
	t.Parallel()
	const topic = "t"
	cfgText := brokerConfig(t.TempDir(),
		"max_segment_size = 4096\nmax_message_size = 4096\nmax_transfer_size = 65536\n",
		"[[topic]]\nname = \"t\"\nnum_partitions = 2\n\n[[topic]]\nname = \"empty\"\nnum_partitions = 3\n")
	tb := startBroker(t, cfgText)

	t.Run("reference example", func(t *testing.T) {
		// §1: put t 0 5 0 907060870 7\r\nhello -> result 200 <n> 7\r\n<msgId> 0 <startOffset>
		require.Equal(t, uint32(907060870), message.Checksum([]byte("hello")))
		nc, err := net.DialTimeout("tcp", tb.Addr, ioTimeout)
		require.NoError(t, err)
		defer nc.Close()
		_, err = nc.Write([]byte("put t 0 5 0 907060870 7\r\nhello"))
		require.NoError(t, err)
		br := bufio.NewReader(nc)
		header, body := readRawReply(t, nc, br)
		require.Equal(t, "result 200 "+strconv.Itoa(len(body))+" 7\r\n", header)
		m := regexp.MustCompile(`^(\d+) 0 (\d+)$`).FindSubmatch(body)
		require.NotNil(t, m, "put reply body %q", body)
		require.Equal(t, "0", string(m[2]), "first record of an empty partition starts at 0")
		id, _ := strconv.ParseInt(string(m[1]), 10, 64)
		ms, brokerID, _ := message.IDParts(id)
		require.Equal(t, 0, brokerID)
		require.InDelta(t, time.Now().UnixMilli(), ms, float64(time.Minute.Milliseconds()), "id time part")

		// The record is stored as [len][crc][id][flag][data].
		c := dial(t, tb.Addr)
		r := got(t)(c.get(topic, 0, 0, 1000))
		require.Equal(t, protocol.OpValue, r.Op)
		want := message.AppendRecord(nil, id, 0, []byte("hello"))
		require.Equal(t, want, r.Body)
	})

	t.Run("six-token put", func(t *testing.T) {
		c := dial(t, tb.Addr)
		r := ok(t)(c.call([]byte("put t 0 5 0 8\r\nworld"), 8))
		id, p, off, _, err := protocol.ParsePutResult(r.Body)
		require.NoError(t, err)
		require.Equal(t, int32(0), p)
		r = got(t)(c.get(topic, 0, off, 1000))
		require.Equal(t, message.AppendRecord(nil, id, 0, []byte("world")), r.Body)
	})

	t.Run("put with attribute", func(t *testing.T) {
		c := dial(t, tb.Addr)
		m := message.Message{Body: []byte("payload"), Attribute: "attr", HasAttribute: true}
		data := m.AppendData(nil)
		op := c.nextOpaque()
		r := ok(t)(c.call(protocol.AppendPut(nil, topic, 1, m.Flag(), int64(message.Checksum(data)), op, data), op))
		_, _, off, _, err := protocol.ParsePutResult(r.Body)
		require.NoError(t, err)
		r = got(t)(c.get(topic, 1, off, 1000))
		it := message.NewIterator(r.Body, off, 0)
		require.True(t, it.Next())
		back, err := it.Record().Message(topic, 1)
		require.NoError(t, err)
		require.Equal(t, "attr", back.Attribute)
		require.Equal(t, []byte("payload"), back.Body)
	})

	t.Run("pipelining", func(t *testing.T) {
		c := dial(t, tb.Addr)
		mustPut(t, c, topic, 1, []byte("before the pipeline")) // so gets find data
		var all, buf []byte
		kind := map[int32]string{}
		for i := 0; i < 100; i++ {
			op := int32(1000 + i)
			switch {
			case i%10 < 4:
				buf = putFrame(topic, 1, fmt.Appendf(nil, "pipelined %d", i), op)
				kind[op] = "put"
			case i%10 < 6:
				buf = protocol.AppendGet(nil, topic, "g", 1, 0, 1000, op)
				kind[op] = "get"
			case i%10 < 8:
				buf = protocol.AppendOffset(nil, topic, "g", 1, 0, op)
				kind[op] = "offset"
			case i%10 == 8:
				buf = protocol.AppendVersion(nil, op)
				kind[op] = "version"
			default:
				buf = protocol.AppendStats(nil, "", op)
				kind[op] = "stats"
			}
			all = append(all, buf...)
		}
		require.NoError(t, c.write(all), "all 100 requests in one write")
		putOffsets := map[int32]int64{}
		for i := 0; i < 100; i++ {
			r, err := c.read()
			require.NoError(t, err, "after %d replies", i)
			k, known := kind[r.Opaque]
			require.True(t, known, "reply for opaque %d answered twice or never asked", r.Opaque)
			delete(kind, r.Opaque)
			switch k {
			case "put":
				require.Equal(t, protocol.StatusOK, r.Code, "%v", r)
				_, p, off, _, err := protocol.ParsePutResult(r.Body)
				require.NoError(t, err)
				require.Equal(t, int32(1), p)
				putOffsets[r.Opaque] = off
			case "get":
				require.Equal(t, protocol.OpValue, r.Op, "%v", r)
			case "offset":
				require.Equal(t, protocol.StatusOK, r.Code)
				require.Equal(t, "0", string(r.Body))
			case "version":
				require.Equal(t, broker.Version, string(r.Body))
			case "stats":
				require.Equal(t, protocol.StatusOK, r.Code)
				parseStats(t, r.Body)
			}
		}
		require.Empty(t, kind, "requests never answered")
		// Puts on one connection to one partition are stored in request order.
		last := int64(-1)
		for i := 0; i < 100; i++ {
			if off, isPut := putOffsets[int32(1000+i)]; isPut {
				require.Greater(t, off, last, "put %d stored out of order", i)
				last = off
			}
		}
	})

	t.Run("pipelined puts and gets interleave safely", func(t *testing.T) {
		// Put acks are queued by the store's writer goroutine while get
		// replies are written with sendfile: no reply may be cut into
		// another.
		c := dial(t, tb.Addr)
		const n = 3000
		errc := make(chan error, 1)
		go func() {
			var buf []byte
			for i := 0; i < n; i++ {
				op := int32(5000 + i)
				if i%2 == 0 {
					buf = putFrame(topic, 0, bytes.Repeat([]byte{byte('a' + i%26)}, 10+i%300), op)
				} else {
					buf = protocol.AppendGet(nil, topic, "g", 0, 0, 3000, op)
				}
				if err := c.write(buf); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
		seen := map[int32]bool{}
		for i := 0; i < n; i++ {
			r, err := c.read()
			require.NoError(t, err, "after %d replies", i)
			require.False(t, seen[r.Opaque], "opaque %d answered twice", r.Opaque)
			seen[r.Opaque] = true
			if (r.Opaque-5000)%2 == 0 {
				require.Equal(t, protocol.StatusOK, r.Code, "%v", r)
				_, _, _, _, err := protocol.ParsePutResult(r.Body)
				require.NoError(t, err)
			} else {
				require.Equal(t, protocol.OpValue, r.Op, "%v", r)
				it := message.NewIterator(r.Body, 0, 0)
				for it.Next() {
				}
				require.NoError(t, it.Err())
			}
		}
		require.NoError(t, <-errc)
	})

	// Fill partition 1 so that it spans several 4 KiB segments.
	c := dial(t, tb.Addr)
	type put struct {
		id, off int64
		data    []byte
	}
	var puts []put
	for i := 0; i < 40; i++ {
		data := bytes.Repeat([]byte{byte('A' + i%26)}, 700+i)
		id, off := mustPut(t, c, topic, 1, data)
		puts = append(puts, put{id, off, data})
	}
	maxOff := puts[len(puts)-1].off + int64(message.HeaderSize+len(puts[len(puts)-1].data))

	t.Run("get never spans segments", func(t *testing.T) {
		c := dial(t, tb.Addr)
		// getSegment gets from off with room for a whole segment. The
		// active segment's newest bytes may still be in the broker's
		// memory, written out by the flusher moments later; a get then
		// returns the part in the file, a prefix of the segment (never
		// more: asserted below). Under load that takes a while, so this
		// waits, boundedly, for the reply that ends at the segment's end.
		getSegment := func(off int64) (reply, int64) {
			deadline := time.Now().Add(10 * time.Second)
			for {
				r := got(t)(c.get(topic, 1, off, 65536))
				require.Equal(t, protocol.OpValue, r.Op, "%v", r)
				end := off + int64(len(r.Body))
				require.Equal(t, mustInt(t, ok(t)(c.offset(topic, 1, off))), mustInt(t, ok(t)(c.offset(topic, 1, end-1))),
					"reply [%d,%d) spans segments", off, end)
				if mustInt(t, ok(t)(c.offset(topic, 1, end))) == end || time.Now().After(deadline) {
					return r, end
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		segs := 0
		for off := int64(0); off < maxOff; segs++ {
			require.Less(t, segs, 100)
			r, end := getSegment(off)
			// The reply stops exactly at a segment end: the offset command
			// maps its end to itself (a segment start, or the max).
			require.Equal(t, end, mustInt(t, ok(t)(c.offset(topic, 1, end))), "reply [%d,%d) does not end at a segment boundary", off, end)
			// ... and the segment holding its last byte started at off.
			require.Equal(t, off, mustInt(t, ok(t)(c.offset(topic, 1, end-1))), "reply [%d,%d) spans segments", off, end)
			it := message.NewIterator(r.Body, off, 0)
			for it.Next() {
			}
			require.NoError(t, it.Err())
			require.Equal(t, len(r.Body), it.Consumed(), "a segment ends on a record boundary")
			off = end
		}
		require.Greater(t, segs, 3, "partition 1 should span several segments")

		// From the middle of a segment, the reply still stops at its end.
		mid := puts[1].off
		_, end := getSegment(mid)
		require.Equal(t, end, mustInt(t, ok(t)(c.offset(topic, 1, end))))
		require.Equal(t, int64(0), mustInt(t, ok(t)(c.offset(topic, 1, end-1))))
	})

	t.Run("get may end in a partial record", func(t *testing.T) {
		c := dial(t, tb.Addr)
		p := puts[2]
		size := message.HeaderSize + len(p.data)
		r := got(t)(c.get(topic, 1, p.off, int32(size+10)))
		require.Equal(t, protocol.OpValue, r.Op)
		require.Len(t, r.Body, size+10)
		it := message.NewIterator(r.Body, p.off, 0)
		require.True(t, it.Next())
		require.Equal(t, p.id, it.Record().ID)
		require.Equal(t, p.data, it.Record().Data)
		require.False(t, it.Next())
		require.NoError(t, it.Err())
		require.Equal(t, size, it.Consumed())

		// Smaller than one record: the whole reply is a partial record.
		r = got(t)(c.get(topic, 1, p.off, 7))
		require.Equal(t, protocol.OpValue, r.Op)
		require.Len(t, r.Body, 7)
	})

	t.Run("maxSize is clamped to max_transfer_size", func(t *testing.T) {
		cb := startBroker(t, brokerConfig(t.TempDir(), "max_message_size = 1000\nmax_transfer_size = 2048\n",
			"[[topic]]\nname = \"clamp\"\n"))
		c := dial(t, cb.Addr)
		for i := 0; i < 10; i++ {
			mustPut(t, c, "clamp", 0, bytes.Repeat([]byte("c"), 500))
		}
		r := got(t)(c.get("clamp", 0, 0, math.MaxInt32))
		require.Equal(t, protocol.OpValue, r.Op)
		require.Len(t, r.Body, 2048)
		// The largest message fits in one reply.
		_, off := mustPut(t, c, "clamp", 0, bytes.Repeat([]byte("C"), 1000))
		r = got(t)(c.get("clamp", 0, off, math.MaxInt32))
		it := message.NewIterator(r.Body, off, 0)
		require.True(t, it.Next(), "a max_message_size record must fit in a max_transfer_size reply")
	})

	t.Run("get out of range", func(t *testing.T) {
		c := dial(t, tb.Addr)
		r := got(t)(c.get(topic, 1, -1, 100))
		require.Equal(t, protocol.StatusMoved, r.Code, "%v", r)
		require.Equal(t, "0", string(r.Body), "301 carries the min offset")

		for _, off := range []int64{maxOff, maxOff + 1, maxOff + 1000, 1 << 40} {
			r = got(t)(c.get(topic, 1, off, 100))
			require.Equal(t, protocol.StatusNotFound, r.Code, "%v", r)
			require.Equal(t, "Could not find message at position "+strconv.FormatInt(off, 10), string(r.Body))
		}
		r = got(t)(c.get(topic, 1, math.MaxInt64, 100))
		require.Equal(t, protocol.StatusMoved, r.Code, "%v", r)
		require.Equal(t, strconv.FormatInt(maxOff, 10), string(r.Body), "offset MaxInt64 moves to the max")

		// An empty partition of a configured topic: 404 at 0.
		r = got(t)(c.get("empty", 2, 0, 100))
		require.Equal(t, protocol.StatusNotFound, r.Code, "%v", r)
	})

	t.Run("offset command", func(t *testing.T) {
		c := dial(t, tb.Addr)
		require.Equal(t, int64(0), mustInt(t, ok(t)(c.offset(topic, 1, -5))), "below min: min")
		require.Equal(t, int64(0), mustInt(t, ok(t)(c.offset(topic, 1, 0))))
		require.Equal(t, int64(0), mustInt(t, ok(t)(c.offset(topic, 1, puts[1].off+3))), "inside the first segment: its start")
		require.Equal(t, maxOff, mustInt(t, ok(t)(c.offset(topic, 1, maxOff))), "at max: max")
		require.Equal(t, maxOff, mustInt(t, ok(t)(c.offset(topic, 1, maxOff+12345))), "above max: max")
		last := puts[len(puts)-1]
		segStart := mustInt(t, ok(t)(c.offset(topic, 1, last.off+1)))
		require.Greater(t, segStart, int64(0))
		require.LessOrEqual(t, segStart, last.off)
		r := got(t)(c.get(topic, 1, segStart, 65536))
		require.Equal(t, maxOff-segStart, int64(len(r.Body)), "the last segment runs to the max")
		require.Equal(t, int64(0), mustInt(t, ok(t)(c.offset("empty", 0, 77))), "empty partition")
	})

	t.Run("version", func(t *testing.T) {
		c := dial(t, tb.Addr)
		r := ok(t)(c.call(protocol.AppendVersion(nil, 5), 5))
		require.Equal(t, broker.Version, string(r.Body))
		r = ok(t)(c.call([]byte("version\r\n"), protocol.DefaultOpaque))
		require.Equal(t, broker.Version, string(r.Body))
	})

	t.Run("stats", func(t *testing.T) {
		c := dial(t, tb.Addr)
		before := parseStats(t, ok(t)(c.stats("")).Body)
		for _, k := range []string{"pid", "broker_id", "uptime", "version", "curr_connections", "cmd_put", "cmd_get",
			"cmd_offset", "get_miss", "put_failed", "total_messages", "topics"} {
			require.Contains(t, before, k, "stats key %s", k)
		}
		require.Equal(t, strconv.Itoa(os.Getpid()), before["pid"])
		require.Equal(t, "0", before["broker_id"])
		require.Equal(t, broker.Version, before["version"])
		require.Equal(t, "2", before["topics"])
	})

	t.Run("stats counters", func(t *testing.T) {
		c := dial(t, tb.Addr)
		n := func(m map[string]string, k string) int64 {
			v, err := strconv.ParseInt(m[k], 10, 64)
			require.NoError(t, err, "stats %s = %q", k, m[k])
			return v
		}
		before := parseStats(t, ok(t)(c.stats("")).Body)
		mustPut(t, c, topic, 0, []byte("counted"))
		r := got(t)(c.get(topic, 0, 1<<40, 100))
		require.Equal(t, protocol.StatusNotFound, r.Code)
		ok(t)(c.offset(topic, 0, 0))
		r = got(t)(c.call([]byte("put t 0 5 0 1 9\r\nhello"), 9))
		require.Equal(t, protocol.StatusInternalError, r.Code)
		after := parseStats(t, ok(t)(c.stats("")).Body)
		require.Equal(t, int64(2), n(after, "cmd_put")-n(before, "cmd_put"))
		require.Equal(t, int64(1), n(after, "cmd_get")-n(before, "cmd_get"))
		require.Equal(t, int64(1), n(after, "cmd_offset")-n(before, "cmd_offset"))
		require.Equal(t, int64(1), n(after, "get_miss")-n(before, "get_miss"))
		require.Equal(t, int64(1), n(after, "put_failed")-n(before, "put_failed"))
		require.Equal(t, int64(1), n(after, "total_messages")-n(before, "total_messages"))
	})

	t.Run("stats topics", func(t *testing.T) {
		c := dial(t, tb.Addr)
		lines := statsLines(t, ok(t)(c.stats("topics")).Body)
		re := regexp.MustCompile(`^(\S+) partitions (\d+) message_count (\d+) message_bytes (\d+) accept_publish (true|false) accept_subscribe (true|false)$`)
		found := map[string][]string{}
		for _, l := range lines {
			m := re.FindStringSubmatch(l)
			require.NotNil(t, m, "stats topics line %q", l)
			found[m[1]] = m
		}
		require.Contains(t, found, "t")
		require.Equal(t, "2", found["t"][2])
		require.Contains(t, found, "empty")
		require.Equal(t, "3", found["empty"][2])
		require.Equal(t, "0", found["empty"][3])

		// message_count and message_bytes agree with the offsets.
		offs := partOffsets(t, c)
		var bytesT int64
		for p := 0; p < 2; p++ {
			o := offs["t-"+strconv.Itoa(p)]
			bytesT += o[1] - o[0]
		}
		require.Equal(t, strconv.FormatInt(bytesT, 10), found["t"][4])
		var count int
		for p := int32(0); p < 2; p++ {
			recs, _, err := readPartition(c, topic, p, 65536)
			require.NoError(t, err)
			count += len(recs)
		}
		require.Equal(t, strconv.Itoa(count), found["t"][3])
	})

	t.Run("stats offsets", func(t *testing.T) {
		c := dial(t, tb.Addr)
		offs := partOffsets(t, c)
		require.Len(t, offs, 5, "one line per partition: %v", offs)
		require.Equal(t, [2]int64{0, maxOff}, offs["t-1"])
		require.Equal(t, [2]int64{0, 0}, offs["empty-2"])
		_, end, err := readPartition(c, topic, 0, 65536)
		require.NoError(t, err)
		require.Equal(t, end, offs["t-0"][1])
	})

	t.Run("stats config", func(t *testing.T) {
		c := dial(t, tb.Addr)
		// The effective configuration, as TOML: every key of the file
		// with its value (and the defaults of the rest).
		r := ok(t)(c.stats("config"))
		served, err := conf.Parse(r.Body, "stats-config.toml")
		require.NoError(t, err, string(r.Body))
		require.Equal(t, tb.cfg.Redacted(), served.Redacted())
		require.Equal(t, tb.cfg.DataDir, served.DataDir)
	})

	t.Run("stats reset and realtime", func(t *testing.T) {
		c := dial(t, tb.Addr)
		r := ok(t)(c.stats("reset"))
		require.Equal(t, "reset ok", string(r.Body))
		rt := parseStats(t, ok(t)(c.stats("realtime")).Body)
		require.Equal(t, "null", rt["realtime_put"], "realtime counters are reset")
		mustPut(t, c, topic, 0, []byte("after reset"))
		rt = parseStats(t, ok(t)(c.stats("realtime")).Body)
		require.True(t, strings.HasPrefix(rt["realtime_put"], "Count=1,"), "realtime_put %q", rt["realtime_put"])
	})

	t.Run("stats help", func(t *testing.T) {
		c := dial(t, tb.Addr)
		r := ok(t)(c.stats("help"))
		require.Contains(t, string(r.Body), "stats offsets")
	})

	t.Run("stats topic", func(t *testing.T) {
		c := dial(t, tb.Addr)
		m := parseStats(t, ok(t)(c.stats(topic)).Body)
		require.Equal(t, "t", m["topic"])
		require.Equal(t, "0", m["result_code"], "exists")
		require.Equal(t, "2", m["partitions"])
		require.Contains(t, m, "message_count")
		require.Contains(t, m, "topic_realtime_put")

		m = parseStats(t, ok(t)(c.stats("empty")).Body)
		require.Equal(t, "2", m["result_code"], "configured but no data")
		require.Equal(t, "3", m["partitions"])

		m = parseStats(t, ok(t)(c.stats("no-such-topic")).Body)
		require.Equal(t, "1", m["result_code"], "unknown")
	})

	t.Run("quit", func(t *testing.T) {
		c := dial(t, tb.Addr)
		var buf []byte
		for i := 0; i < 5; i++ {
			buf = append(buf, putFrame(topic, 0, fmt.Appendf(nil, "before quit %d", i), int32(i+1))...)
		}
		buf = append(buf, protocol.AppendVersion(nil, 6)...)
		buf = protocol.AppendQuit(buf)
		buf = append(buf, putFrame(topic, 0, []byte("after quit"), 99)...)
		before := partOffsets(t, c)["t-0"][1]
		require.NoError(t, c.write(buf))
		seen := map[int32]bool{}
		for i := 0; i < 6; i++ {
			r := ok(t)(c.read())
			seen[r.Opaque] = true
		}
		require.Len(t, seen, 6)
		require.NoError(t, c.expectClosed())
		c2 := dial(t, tb.Addr)
		recs, _, err := readPartition(c2, topic, 0, 65536)
		require.NoError(t, err)
		for _, r := range recs {
			require.NotEqual(t, "after quit", string(r.Data), "a request after quit was executed")
		}
		require.Greater(t, partOffsets(t, c2)["t-0"][1], before)
	})

	t.Run("half-close", func(t *testing.T) {
		c := dial(t, tb.Addr)
		var buf []byte
		for i := 0; i < 20; i++ {
			buf = append(buf, putFrame(topic, 0, fmt.Appendf(nil, "half-close %d", i), int32(i+1))...)
		}
		require.NoError(t, c.write(buf))
		require.NoError(t, c.nc.(*net.TCPConn).CloseWrite())
		for i := 0; i < 20; i++ {
			ok(t)(c.read())
		}
		require.NoError(t, c.expectClosed())
	})

	t.Run("unknown topic", func(t *testing.T) {
		c := dial(t, tb.Addr)
		r := got(t)(c.call(putFrame("nope", 0, []byte("x"), 3), 3))
		require.Equal(t, protocol.StatusInternalError, r.Code)
		require.Contains(t, string(r.Body), "The server do not accept topic nope")
		for _, l := range statsLines(t, ok(t)(c.stats("topics")).Body) {
			require.False(t, strings.HasPrefix(l, "nope "), "refused topic listed: %q", l)
		}
	})

	t.Run("auto_create_topics", func(t *testing.T) {
		dir := t.TempDir()
		cfg := brokerConfig(dir, "auto_create_topics = true\nnum_partitions = 2\n", "")
		ab := startBroker(t, cfg)
		c := dial(t, ab.Addr)
		id, off := mustPut(t, c, "fresh.topic-1", 1, []byte("auto"))
		require.Equal(t, int64(0), off)
		require.Contains(t, statsLines(t, ok(t)(c.stats("topics")).Body),
			"fresh.topic-1 partitions 2 message_count 1 message_bytes 24 accept_publish true accept_subscribe true")
		r := got(t)(c.call(putFrame("bad/name", 0, []byte("x"), 4), 4))
		require.Equal(t, protocol.StatusInternalError, r.Code, "invalid topic names are not created")
		c.close()
		ab.Stop(t)
		_, err := os.Stat(filepath.Join(dir, "fresh.topic-1-1"))
		require.NoError(t, err)

		// Restarted, the broker finds the auto-created topic on disk.
		ab = startBroker(t, cfg)
		c = dial(t, ab.Addr)
		recs, _, err := readPartition(c, "fresh.topic-1", 1, 1000)
		require.NoError(t, err)
		require.Len(t, recs, 1)
		require.Equal(t, id, recs[0].ID)
		require.Equal(t, "auto", string(recs[0].Data))
	})
}
