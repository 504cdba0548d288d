package protocol

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

func decodeAll(t *testing.T, r io.Reader, lim Limits) ([]Request, error) {
	t.Helper()
	d := NewDecoder(r, lim)
	var out []Request
	for i := 0; i < 1000; i++ {
		var req Request
		err := d.Decode(&req)
		if err != nil {
			return out, err
		}
		// Copy aliased slices.
		req.Topic = bytes.Clone(req.Topic)
		req.Group = bytes.Clone(req.Group)
		req.Body = bytes.Clone(req.Body)
		req.TxKey = bytes.Clone(req.TxKey)
		req.Item = bytes.Clone(req.Item)
		req.TxSession = bytes.Clone(req.TxSession)
		req.TxQualifier = bytes.Clone(req.TxQualifier)
		out = append(out, req)
	}
	t.Fatal("too many frames")
	return nil, nil
}

func TestParseRequests(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want Request
	}{
		{"put6", "put meta-test 0 5 0 7\r\nhello", Request{Op: OpPut, Topic: []byte("meta-test"), Flag: 0, Checksum: NoChecksum, Opaque: 7, Body: []byte("hello")}},
		{"put7 checksum", "put t 3 5 1 907060870 9\r\nhello", Request{Op: OpPut, Topic: []byte("t"), Partition: 3, Flag: 1, Checksum: 907060870, Opaque: 9, Body: []byte("hello")}},
		{"put7 negative checksum", "put t 0 2 0 -1 9\r\nhi", Request{Op: OpPut, Topic: []byte("t"), Checksum: -1, Opaque: 9, Body: []byte("hi")}},
		{"put7 txkey", "put t 0 2 0 TX:abc:1 9\r\nhi", Request{Op: OpPut, Topic: []byte("t"), Checksum: NoChecksum, TxKey: []byte("TX:abc:1"), Opaque: 9, Body: []byte("hi")}},
		{"put8", "put t 0 2 0 55 TX:abc:1 9\r\nhi", Request{Op: OpPut, Topic: []byte("t"), Checksum: 55, TxKey: []byte("TX:abc:1"), Opaque: 9, Body: []byte("hi")}},
		{"put partition -1", "put t -1 0 0 1\r\n", Request{Op: OpPut, Topic: []byte("t"), Partition: -1, Checksum: NoChecksum, Opaque: 1, Body: []byte{}}},
		{"put bare newline", "put t 0 1 0 3\nx", Request{Op: OpPut, Topic: []byte("t"), Checksum: NoChecksum, Opaque: 3, Body: []byte("x")}},
		{"get", "get meta-test g1 2 1024 65536 11\r\n", Request{Op: OpGet, Topic: []byte("meta-test"), Group: []byte("g1"), Partition: 2, Offset: 1024, MaxSize: 65536, Opaque: 11, Checksum: NoChecksum}},
		{"offset", "offset t g 1 99 12\r\n", Request{Op: OpOffset, Topic: []byte("t"), Group: []byte("g"), Partition: 1, Offset: 99, Opaque: 12, Checksum: NoChecksum}},
		{"version", "version\r\n", Request{Op: OpVersion, Opaque: DefaultOpaque, Checksum: NoChecksum}},
		{"version opaque", "version 5\r\n", Request{Op: OpVersion, Opaque: 5, Checksum: NoChecksum}},
		{"stats", "stats\n", Request{Op: OpStats, Opaque: DefaultOpaque, Checksum: NoChecksum}},
		{"stats item", "stats topics\r\n", Request{Op: OpStats, Item: []byte("topics"), Opaque: DefaultOpaque, Checksum: NoChecksum}},
		{"stats opaque", "stats 44\r\n", Request{Op: OpStats, Opaque: 44, Checksum: NoChecksum}},
		{"stats item opaque", "stats offsets 4\r\n", Request{Op: OpStats, Item: []byte("offsets"), Opaque: 4, Checksum: NoChecksum}},
		{"quit", "quit\r\n", Request{Op: OpQuit, Checksum: NoChecksum}},
		{"result", "result 200 3 8\r\nabc", Request{Op: OpResult, Code: 200, Opaque: 8, Body: []byte("abc"), Checksum: NoChecksum}},
		{"value", "value 2 8\r\nab", Request{Op: OpValue, Code: 200, Opaque: 8, Body: []byte("ab"), Checksum: NoChecksum}},
		{"mput", "mput t 1 13 1 6\r\n" + string(AppendMPutEntry(nil, 0, -1, []byte("a"))), Request{Op: OpMPut, Topic: []byte("t"), Partition: 1, Count: 1, Opaque: 6, Body: AppendMPutEntry(nil, 0, -1, []byte("a")), Checksum: NoChecksum}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, split := range []bool{false, true} {
				var r io.Reader = strings.NewReader(tc.in)
				if split {
					r = iotest.OneByteReader(r)
				}
				got, err := decodeAll(t, r, Limits{})
				require.ErrorIs(t, err, io.EOF)
				require.Len(t, got, 1)
				g := got[0]
				if len(g.Body) == 0 && len(tc.want.Body) == 0 {
					g.Body, tc.want.Body = nil, nil
				}
				for _, p := range []*[]byte{&g.Topic, &g.Group, &g.TxKey, &g.Item} {
					if len(*p) == 0 {
						*p = nil
					}
				}
				require.Equal(t, tc.want, g)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name   string
		in     string
		fatal  bool
		msg    string
		opaque int32
		after  bool // a valid frame after the bad one is still decoded
	}{
		{"unknown command", "bogus 1 2\r\n", false, "unknown command", 2, true},
		{"put too few tokens", "put t 0 5\r\nhello", true, "want 6 to 8", 5, false},
		{"put non-numeric length", "put t 0 x 0 1\r\n", true, "bad length", 1, false},
		{"put negative length", "put t 0 -5 0 1\r\n", true, "bad length", 1, false},
		{"put huge length", "put t 0 999999999 0 1\r\n", true, "exceeds limit", 1, false},
		{"put oversized discarded", "put t 0 20 0 1\r\n" + strings.Repeat("x", 20), false, "exceeds limit", 1, true},
		{"put bad partition", "put t x 1 0 1\r\nz", false, "bad partition", 1, true},
		{"put bad flag", "put t 0 1 zz 1\r\nz", false, "bad flag", 1, true},
		{"put bad opaque", "put t 0 1 0 q\r\nz", false, "bad opaque", 0, true},
		{"put empty topic", "put  0 1 0 3\r\nz", false, "empty topic", 3, true},
		{"put two spaces", "put t  0 1 0 3\r\n", false, "bad partition", 3, false},
		{"get too few", "get t g 0 0 7\r\n", false, "want 7", 7, true},
		{"get bad offset", "get t g 0 x 10 7\r\n", false, "bad offset", 7, true},
		{"get negative partition", "get t g -1 0 10 7\r\n", false, "bad partition", 7, true},
		{"offset bad", "offset t g 0 7\r\n", false, "want 6", 7, true},
		{"stats too many", "stats a b c d\r\n", false, "at most 3", 0, true},
		{"mput bad count", "mput t 0 0 0 1\r\n", false, "bad count", 1, true},
		{"mput body mismatch", "mput t 0 4 1 1\r\nabcd", false, "declared entries", 1, true},
		{"line too long", "get " + strings.Repeat("a", 2000) + "\r\n", true, "too long", 0, false},
		{"binary garbage", "\x00\x01\x02\xff\xfe\n", false, "unknown command", 0, true},
		{"result bad", "result x 1 1\r\n", true, "bad header", 1, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in + "version 77\r\n"
			d := NewDecoder(strings.NewReader(in), Limits{MaxBody: 10, MaxDiscard: 100})
			var req Request
			err := d.Decode(&req)
			var pe *Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, tc.fatal, pe.Fatal)
			require.Contains(t, pe.Msg, tc.msg)
			require.Equal(t, tc.opaque, pe.Opaque)
			if tc.after {
				require.NoError(t, d.Decode(&req))
				require.Equal(t, OpVersion, req.Op)
				require.Equal(t, int32(77), req.Opaque)
			}
		})
	}
}

func TestDecodeTruncated(t *testing.T) {
	d := NewDecoder(strings.NewReader("put t 0 10 0 1\r\nabc"), Limits{})
	var req Request
	require.ErrorIs(t, d.Decode(&req), io.ErrUnexpectedEOF)
	d = NewDecoder(strings.NewReader("put t 0 1"), Limits{})
	require.ErrorIs(t, d.Decode(&req), io.ErrUnexpectedEOF)
}

func TestPipelinedSplitAtEveryByte(t *testing.T) {
	var buf []byte
	buf = AppendPut(buf, "topic", 1, 0, -1, 1, []byte("hello"))
	buf = AppendGet(buf, "topic", "grp", 1, 0, 1024, 2)
	buf = AppendOffset(buf, "topic", "grp", 1, 0, 3)
	buf = AppendStats(buf, "topics", 4)
	buf = AppendVersion(buf, 5)
	body := AppendMPutEntry(AppendMPutEntry(nil, 0, -1, []byte("a")), 1, 5, []byte("bc"))
	buf = AppendMPutHeader(buf, "topic", 2, len(body), 2, 6)
	buf = append(buf, body...)
	buf = AppendResult(buf, 200, "1 2 3", 7)
	buf = AppendValueHeader(buf, 3, 8)
	buf = append(buf, "xyz"...)
	buf = AppendQuit(buf)
	for cut := 0; cut <= len(buf); cut++ {
		r := io.MultiReader(iotest.HalfReader(bytes.NewReader(buf[:cut])), bytes.NewReader(buf[cut:]))
		got, err := decodeAll(t, r, Limits{})
		require.ErrorIs(t, err, io.EOF)
		require.Len(t, got, 9)
		for i, op := range []Op{OpPut, OpGet, OpOffset, OpStats, OpVersion, OpMPut, OpResult, OpValue, OpQuit} {
			require.Equal(t, op, got[i].Op)
		}
		require.Equal(t, "hello", string(got[0].Body))
		require.Equal(t, 2, got[5].Count)
		require.Equal(t, "xyz", string(got[7].Body))
	}
}

func TestMPutEntries(t *testing.T) {
	body := AppendMPutEntry(nil, 1, 42, []byte("first"))
	body = AppendMPutEntry(body, 0, -1, nil)
	require.NoError(t, ValidateMPutBody(body, 2))
	require.Error(t, ValidateMPutBody(body, 3))
	require.Error(t, ValidateMPutBody(body[:len(body)-1], 2))
	e, rest := NextMPutEntry(body)
	require.Equal(t, MPutEntry{Flag: 1, CRC: 42, Data: []byte("first")}, e)
	e, rest = NextMPutEntry(rest)
	require.Equal(t, int32(-1), e.CRC)
	require.Empty(t, e.Data)
	require.Empty(t, rest)
}

func TestPutResult(t *testing.T) {
	id, p, off, n, err := ParsePutResult(AppendPutResultBody(nil, 123456789012, 3, 4096))
	require.NoError(t, err)
	require.Equal(t, []any{int64(123456789012), int32(3), int64(4096), 1}, []any{id, p, off, n})
	_, _, _, n, err = ParsePutResult([]byte("1 2 3 50"))
	require.NoError(t, err)
	require.Equal(t, 50, n)
	for _, bad := range []string{"", "1 2", "a b c", "1 2 3 4 5"} {
		_, _, _, _, err = ParsePutResult([]byte(bad))
		require.Error(t, err, bad)
	}
}

func TestParseInt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		bits uint
		v    int64
		ok   bool
	}{
		{"0", 32, 0, true}, {"2147483647", 32, 2147483647, true}, {"2147483648", 32, 0, false},
		{"-2147483648", 32, -2147483648, true}, {"-2147483649", 32, 0, false},
		{"9223372036854775807", 64, 9223372036854775807, true}, {"9223372036854775808", 64, 0, false},
		{"", 32, 0, false}, {"-", 32, 0, false}, {"1a", 32, 0, false}, {"+1", 32, 0, false},
	} {
		v, ok := parseInt([]byte(tc.in), tc.bits)
		require.Equal(t, tc.ok, ok, tc.in)
		if ok {
			require.Equal(t, tc.v, v, tc.in)
		}
	}
}

func TestDecodeNoAllocs(t *testing.T) {
	frame := AppendPut(nil, "meta-test", 0, 0, -1, 1, bytes.Repeat([]byte("x"), 1024))
	r := &repeatReader{frame: frame}
	d := NewDecoder(r, Limits{})
	var req Request
	require.NoError(t, d.Decode(&req))
	allocs := testing.AllocsPerRun(1000, func() {
		if err := d.Decode(&req); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}

// repeatReader returns the same frame forever.
type repeatReader struct {
	frame []byte
	pos   int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.frame[r.pos:])
		n += c
		r.pos = (r.pos + c) % len(r.frame)
	}
	return n, nil
}

// benchSizes are the body sizes of the decode benchmarks.
var benchSizes = []int{100, 1024, 64 << 10, 1 << 20}

// benchBudgets runs f without a Budget (the SDK, the CLI) and with one (the
// broker).
func benchBudgets(b *testing.B, f func(b *testing.B, lim Limits)) {
	b.Run("budget=none", func(b *testing.B) { f(b, Limits{}) })
	b.Run("budget=set", func(b *testing.B) { f(b, Limits{Budget: &budget{}}) })
}

func BenchmarkDecodePut(b *testing.B) {
	benchBudgets(b, benchmarkDecodePut)
}

func benchmarkDecodePut(b *testing.B, lim Limits) {
	for _, size := range benchSizes {
		frame := AppendPut(nil, "meta-test", 0, 0, -1, 1, bytes.Repeat([]byte("x"), size))
		b.Run("size="+strconv.Itoa(size), func(b *testing.B) {
			d := NewDecoder(&repeatReader{frame: frame}, lim)
			var req Request
			b.ReportAllocs()
			b.SetBytes(int64(len(frame)))
			for b.Loop() {
				if err := d.Decode(&req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeTCP decodes puts from a loopback TCP connection, so that the
// read buffer's size shows in the number of read calls.
func BenchmarkDecodeTCP(b *testing.B) {
	benchBudgets(b, benchmarkDecodeTCP)
}

func benchmarkDecodeTCP(b *testing.B, lim Limits) {
	for _, size := range benchSizes {
		frame := AppendPut(nil, "meta-test", 0, 0, -1, 1, bytes.Repeat([]byte("x"), size))
		batch := bytes.Repeat(frame, max(1, (256<<10)/len(frame)))
		b.Run("size="+strconv.Itoa(size), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(b, err)
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				for {
					if _, err := c.Write(batch); err != nil {
						return
					}
				}
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			require.NoError(b, err)
			defer c.Close()
			cr := &countingReader{r: c}
			d := NewDecoder(cr, lim)
			var req Request
			b.ReportAllocs()
			b.SetBytes(int64(len(frame)))
			for b.Loop() {
				if err := d.Decode(&req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cr.reads)/float64(b.N), "reads/op")
		})
	}
}

func BenchmarkEncodePut(b *testing.B) {
	data := bytes.Repeat([]byte("x"), 100)
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendPut(buf[:0], "meta-test", 0, 0, -1, 1, data)
	}
}

func TestOffsetCommands(t *testing.T) {
	entries := []OffsetEntry{{Topic: "t", Partition: 1, Offset: 100, MsgID: 7}, {Topic: "u", Partition: 0, Offset: -1, MsgID: -1}}
	var buf []byte
	buf = AppendCommit(buf, "g1", entries, 5)
	buf = AppendFetch(buf, "g1", entries, 6)
	buf = AppendFValueHeader(buf, 3, 7, 999)
	buf = append(buf, "abc"...)
	got, err := decodeAll(t, bytes.NewReader(buf), Limits{})
	require.ErrorIs(t, err, io.EOF)
	require.Len(t, got, 3)
	require.Equal(t, OpCommit, got[0].Op)
	require.Equal(t, "g1", string(got[0].Group))
	require.Equal(t, int32(5), got[0].Opaque)
	es, err := ParseOffsetLines(got[0].Body, true)
	require.NoError(t, err)
	require.Equal(t, entries, es)
	require.Equal(t, OpFetch, got[1].Op)
	es, err = ParseOffsetLines(got[1].Body, false)
	require.NoError(t, err)
	require.Equal(t, []OffsetEntry{{Topic: "t", Partition: 1, Offset: -1, MsgID: -1}, {Topic: "u", Offset: -1, MsgID: -1}}, es)
	require.Equal(t, OpFValue, got[2].Op)
	require.Equal(t, int64(999), got[2].Offset)
	require.Equal(t, "abc", string(got[2].Body))
	for _, bad := range []string{"t 1 2\r\n", "t x 1 1\r\n", "t 1 1 1", " 1 1 1\r\n"} {
		_, err := ParseOffsetLines([]byte(bad), true)
		require.Error(t, err, bad)
	}
}

// readSizes is a stream that records the size of each read asked of it
// and gives at most what was asked.
type readSizes struct {
	r     io.Reader
	sizes []int
}

func (s *readSizes) Read(p []byte) (int, error) {
	s.sizes = append(s.sizes, len(p))
	return s.r.Read(p)
}

// TestDecoderGrow: a decoder grown in the middle of a pipelined stream
// decodes every frame in order, the bytes its first buffer held first;
// Buffered counts both buffers; and reads then ask for the larger size.
func TestDecoderGrow(t *testing.T) {
	body := bytes.Repeat([]byte("b"), 1000)
	var stream []byte
	const frames = 300
	for i := range frames {
		stream = append(stream, AppendPut(nil, "t", int32(i%7), 0, NoChecksum, int32(i), body)...)
	}
	src := &readSizes{r: bytes.NewReader(stream)}
	d := NewDecoder(src, Limits{})
	var req Request
	for i := range frames {
		if i == 5 {
			before := d.Buffered()
			if before == 0 {
				t.Fatal("nothing buffered after 5 frames of a 4 KiB read")
			}
			d.Grow(64 << 10)
			if d.Buffered() != before {
				t.Fatalf("Buffered %d after Grow, %d before", d.Buffered(), before)
			}
			d.Grow(128 << 10) // only the first Grow counts
			if d.r.Size() != 64<<10 {
				t.Fatalf("buffer of %d bytes after a second Grow", d.r.Size())
			}
		}
		if err := d.Decode(&req); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if req.Op != OpPut || req.Opaque != int32(i) || req.Partition != int32(i%7) || !bytes.Equal(req.Body, body) {
			t.Fatalf("frame %d: %+v", i, req)
		}
	}
	if err := d.Decode(&req); err != io.EOF {
		t.Fatalf("after the last frame: %v", err)
	}
	big := 0
	for _, n := range src.sizes {
		if n >= 32<<10 {
			big++
		}
	}
	// 300 frames of about 1 KiB: a few 64 KiB reads, not one per 4 KiB.
	if big == 0 || len(src.sizes) > 20 {
		t.Fatalf("reads asked of the stream: %v", src.sizes)
	}
}
