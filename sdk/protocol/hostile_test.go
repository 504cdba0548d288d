package protocol

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

// TestEmptyLineFloodNoRecursion is the crash from issue 7: 8 MiB of bare
// "\n" made Decode call itself once per line until the stack overflowed.
func TestEmptyLineFloodNoRecursion(t *testing.T) {
	d := NewDecoder(bytes.NewReader(bytes.Repeat([]byte("\n"), 8<<20)), Limits{})
	var req Request
	err := d.Decode(&req)
	var pe *Error
	require.ErrorAs(t, err, &pe)
	require.True(t, pe.Fatal)
	require.Contains(t, pe.Msg, "too many empty lines")
}

func TestEmptyLines(t *testing.T) {
	version := "version 7\r\n"
	for _, tc := range []struct {
		name  string
		in    string
		lim   Limits
		fatal bool
	}{
		{"32 bare", strings.Repeat("\n", 32) + version, Limits{}, false},
		{"32 crlf", strings.Repeat("\r\n", 32) + version, Limits{}, false},
		{"33 bare", strings.Repeat("\n", 33) + version, Limits{}, true},
		{"33 mixed", strings.Repeat("\r\n\n", 16) + "\n" + version, Limits{}, true},
		{"limit 2", "\n\n" + version, Limits{MaxEmptyLines: 2}, false},
		{"over limit 2", "\n\n\n" + version, Limits{MaxEmptyLines: 2}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(strings.NewReader(tc.in), tc.lim)
			var req Request
			err := d.Decode(&req)
			if !tc.fatal {
				require.NoError(t, err)
				require.Equal(t, OpVersion, req.Op)
				require.Equal(t, int32(7), req.Opaque)
				return
			}
			var pe *Error
			require.ErrorAs(t, err, &pe)
			require.True(t, pe.Fatal)
			require.Equal(t, StatusBadRequest, pe.Code)
			require.Equal(t, "too many empty lines (over "+strconv.Itoa(tc.lim.withDefaults().MaxEmptyLines)+")", pe.Msg)
		})
	}

	t.Run("a frame resets the count", func(t *testing.T) {
		in := strings.Repeat(strings.Repeat("\n", 32)+version, 100)
		got, err := decodeAll(t, strings.NewReader(in), Limits{})
		require.ErrorIs(t, err, io.EOF)
		require.Len(t, got, 100)
	})
	t.Run("empty lines at the end are a clean EOF", func(t *testing.T) {
		got, err := decodeAll(t, strings.NewReader(version+"\r\n\n"), Limits{})
		require.ErrorIs(t, err, io.EOF)
		require.Len(t, got, 1)
	})
	t.Run("no allocation per empty line", func(t *testing.T) {
		d := NewDecoder(&repeatReader{frame: []byte(strings.Repeat("\r\n", 32) + version)}, Limits{})
		var req Request
		require.NoError(t, d.Decode(&req))
		allocs := testing.AllocsPerRun(1000, func() {
			if err := d.Decode(&req); err != nil {
				t.Fatal(err)
			}
		})
		require.Zero(t, allocs)
	})
}

// TestSpaceLineIsOneError: " \r\n" is the unknown command "" (two empty
// tokens), a non-fatal error per line that the broker counts towards its
// consecutive-error limit; the decoder reads one line per call.
func TestSpaceLineIsOneError(t *testing.T) {
	cr := &countingReader{r: bytes.NewReader(bytes.Repeat([]byte(" \r\n"), 16<<20/3))}
	d := NewDecoder(cr, Limits{})
	var req Request
	for i := 1; i <= 1000; i++ {
		err := d.Decode(&req)
		var pe *Error
		require.ErrorAs(t, err, &pe)
		require.False(t, pe.Fatal)
		require.Equal(t, `unknown command ""`, pe.Msg)
		require.Equal(t, int64(3*i), cr.n-int64(d.Buffered()))
	}
	require.LessOrEqual(t, cr.n, int64(readBufferSize+3000))
}

// TestFloods feeds 16 MiB of hostile input to a decoder driven like the
// broker drives it (stop at a fatal error or after 32 errors in a row): it
// stops within a few calls, reads a bounded prefix, allocates little and
// never echoes a raw control byte.
func TestFloods(t *testing.T) {
	const size = 16 << 20
	rng := rand.New(rand.NewPCG(1, 2))
	garbage := make([]byte, size)
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	garbageLines := bytes.Clone(garbage)
	for i := 0; i < len(garbageLines); i += 1 + rng.IntN(200) {
		garbageLines[i] = '\n'
	}
	flood := func(unit string) []byte { return bytes.Repeat([]byte(unit), size/len(unit)) }
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"newlines", flood("\n")},
		{"crlf", flood("\r\n")},
		{"space crlf", flood(" \r\n")},
		{"binary garbage", garbage},
		{"binary garbage lines", garbageLines},
		{"NULs", flood("\x00")},
		{"NUL lines", flood("\x00\n")},
		{"lone CRs", flood("\r")},
		{"CR lines", flood("\r\r\n")},
		{"overlong token", append([]byte("get "), flood("a")...)},
		{"overlong line of tokens", flood("a ")},
		{"many tokens", flood("put t 0 1 0 1 2 3 4 5 6 7 8 9 10 11 12\r\n")},
		{"unknown commands", flood("bogus 1\r\n")},
		{"huge declared length", flood("put t 0 2147483647 0 1\r\n")},
		{"auth floods", flood("auth PLAIN 9999 1\r\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cr := &countingReader{r: bytes.NewReader(tc.in)}
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			d := NewDecoder(cr, Limits{})
			var req Request
			calls, errRun := 0, 0
			var last error
			for calls < 10000 {
				calls++
				err := d.Decode(&req)
				if err == nil {
					errRun = 0
					continue
				}
				last = err
				var pe *Error
				if !errors.As(err, &pe) {
					break
				}
				requireNoControlBytes(t, pe.Msg)
				if errRun++; pe.Fatal || errRun >= 32 {
					break
				}
			}
			runtime.ReadMemStats(&ms1)
			require.Error(t, last)
			require.LessOrEqual(t, calls, 33, "decode calls")
			// A bounded prefix: 33 lines of at most MaxLine, plus what the
			// read buffer holds.
			require.LessOrEqual(t, cr.n, int64(33*DefaultMaxLine+2*readBufferSize), "bytes read")
			alloc := ms1.TotalAlloc - ms0.TotalAlloc
			require.Less(t, alloc, uint64(1<<20), "bytes allocated")
			t.Logf("%d calls, %d bytes read, %d bytes allocated, last error: %v", calls, cr.n, alloc, last)
		})
	}
}

func requireNoControlBytes(t *testing.T, s string) {
	t.Helper()
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			t.Fatalf("raw control byte %#x in %q", s[i], s)
		}
	}
}

// TestBodyGrowsAsItArrives: a peer that announces 1 MB and sends 4 KiB
// makes the decoder hold 64 KiB, not 1 MB.
func TestBodyGrowsAsItArrives(t *testing.T) {
	var b budget
	in := "put t 0 1000000 0 1\r\n" + strings.Repeat("x", 4096)
	d := NewDecoder(strings.NewReader(in), Limits{Budget: &b})
	var req Request
	require.ErrorIs(t, d.Decode(&req), io.ErrUnexpectedEOF)
	require.Equal(t, bodyChunk, cap(d.body))
	require.Equal(t, bodyChunk, b.held())

	// The same over a pipe, while the sender is still connected.
	pr, pw := io.Pipe()
	b = budget{}
	d = NewDecoder(pr, Limits{Budget: &b})
	done := make(chan error, 1)
	go func() { done <- d.Decode(&req) }()
	_, err := pw.Write([]byte(in))
	require.NoError(t, err)
	_, err = pw.Write([]byte("y"))
	require.NoError(t, err)
	// The second write returned: the decoder has taken the header and 4 KiB
	// and reads the body.
	require.Equal(t, bodyChunk, b.held())
	require.NoError(t, pw.Close())
	require.ErrorIs(t, <-done, io.ErrUnexpectedEOF)
	d.Release()
	require.Zero(t, b.held())
}

func TestBodyGrowthSizes(t *testing.T) {
	for _, tc := range []struct{ maxBody, cap0, n, have, want int }{
		{0, 0, 100, 0, 100},
		{0, 100, 101, 100, 200},
		{0, 60 << 10, 63 << 10, 60 << 10, 64 << 10},
		{0, 0, 64 << 10, 0, 64 << 10},
		{0, 0, 1 << 20, 0, 64 << 10},
		{0, 64 << 10, 1 << 20, 64 << 10, 128 << 10},
		{0, 512 << 10, 1 << 20, 512 << 10, 1 << 20},
		// Over bodyChunk, sizes are powers of two (pooled).
		{0, 512 << 10, 600 << 10, 512 << 10, 1 << 20},
		{0, 40 << 10, 70 << 10, 40 << 10, 128 << 10},
		{64, 40, 41, 40, 64},
		// What has arrived (buffered) counts: no regrowth, no copy.
		{0, 100, 3000, 3000, 3000},
		{0, 0, 1 << 20, 300 << 10, 512 << 10},
		// Where the next power of two exceeds MaxBody: MaxBody.
		{1<<20 + 1, 1 << 20, 1<<20 + 1, 1 << 20, 1<<20 + 1},
		{3 << 20, 1 << 20, 1<<20 + 1, 1 << 20, 2 << 20},
		{3 << 20, 2 << 20, 3 << 20, 2 << 20, 3 << 20},
	} {
		d := &Decoder{body: make([]byte, 0, tc.cap0), lim: Limits{MaxBody: tc.maxBody}.withDefaults()}
		require.NoError(t, d.growBody(tc.n, tc.have))
		require.Equal(t, tc.want, cap(d.body), "cap %d, n %d, have %d", tc.cap0, tc.n, tc.have)
		d.Release()
	}
}

func TestBudget(t *testing.T) {
	var buf []byte
	buf = AppendPut(buf, "t", 0, 0, -1, 1, bytes.Repeat([]byte("a"), 100))
	big := bytes.Repeat([]byte("b"), 1<<20)
	buf = AppendPut(buf, "t", 0, 0, -1, 2, big)
	buf = AppendVersion(buf, 3)
	buf = AppendPut(buf, "t", 0, 0, -1, 4, []byte("small"))
	var b budget
	d := NewDecoder(bytes.NewReader(buf), Limits{Budget: &b})
	var req Request

	require.NoError(t, d.Decode(&req))
	require.Equal(t, 100, b.held())
	require.NoError(t, d.Decode(&req))
	require.Equal(t, big, req.Body)
	require.Equal(t, 1<<20, b.held())
	require.Equal(t, []int{100, 64<<10 - 100, 64 << 10, 128 << 10, 256 << 10, 512 << 10}, b.grows)
	// The next Decode frees the large buffer before reading anything.
	require.NoError(t, d.Decode(&req))
	require.Equal(t, OpVersion, req.Op)
	require.Zero(t, b.held())
	require.NoError(t, d.Decode(&req))
	require.Equal(t, "small", string(req.Body))
	require.Equal(t, 5, b.held())
	d.Release()
	require.Zero(t, b.held())
	d.Release()
	require.Zero(t, b.held())

	t.Run("Grow's error aborts the Decode", func(t *testing.T) {
		errFull := errors.New("full")
		b := budget{limit: 100 << 10, err: errFull}
		d := NewDecoder(bytes.NewReader(buf), Limits{Budget: &b})
		require.NoError(t, d.Decode(&req))
		require.ErrorIs(t, d.Decode(&req), errFull)
		require.LessOrEqual(t, b.held(), 100<<10)
		d.Release()
		require.Zero(t, b.held())
	})
}

// TestBodyPool: under a Budget, large body buffers go back to the shared
// pools at the next Decode and come from them when growing; interleaved
// decoders each see their own bytes, and each Budget always equals what its
// decoder holds. Without a Budget the decoder keeps its buffer.
func TestBodyPool(t *testing.T) {
	sizes := []int{1 << 20, 100, 300 << 10, 64 << 10, 70 << 10, 2 << 20, 2<<20 + 1, 3 << 20, 5, 1 << 20}
	const maxBody = 3 << 20 // not a power of two
	stream := func(seed byte) []byte {
		var buf []byte
		for i, n := range sizes {
			buf = AppendPut(buf, "t", 0, 0, -1, int32(i), bytes.Repeat([]byte{seed + byte(i)}, n))
			buf = AppendVersion(buf, int32(i))
		}
		return buf
	}
	var b1, b2 budget
	lim := Limits{MaxBody: maxBody}
	lim1, lim2 := lim, lim
	lim1.Budget, lim2.Budget = &b1, &b2
	d1 := NewDecoder(bytes.NewReader(stream('a')), lim1)
	d2 := NewDecoder(iotest.HalfReader(bytes.NewReader(stream('A'))), lim2)
	d3 := NewDecoder(bytes.NewReader(stream('0')), lim)
	var r1, r2, r3 Request
	kept := 0
	for i, n := range sizes {
		for _, c := range []struct {
			d    *Decoder
			b    *budget
			req  *Request
			seed byte
		}{{d1, &b1, &r1, 'a'}, {d2, &b2, &r2, 'A'}, {d3, nil, &r3, '0'}} {
			require.NoError(t, c.d.Decode(c.req))
			require.Equal(t, int32(i), c.req.Opaque)
			require.Len(t, c.req.Body, n)
			require.Equal(t, -1, bytes.IndexFunc(c.req.Body, func(r rune) bool { return r != rune(c.seed+byte(i)) }), "frame %d", i)
			if c.b != nil {
				require.Equal(t, cap(c.d.body), c.b.held())
				require.LessOrEqual(t, c.b.held(), maxBody)
				if n > bodyChunk && n&(n-1) == 0 {
					require.Equal(t, n, c.b.held(), "a power of two is its own class")
				}
			}
			require.NoError(t, c.d.Decode(c.req))
			require.Equal(t, OpVersion, c.req.Op)
			if c.b != nil {
				require.LessOrEqual(t, c.b.held(), bodyChunk, "freed at the next Decode")
				require.Equal(t, cap(c.d.body), c.b.held())
			}
		}
		kept = max(kept, n)
		require.GreaterOrEqual(t, cap(d3.body), kept, "without a Budget the buffer is kept")
	}
	d1.Release()
	d2.Release()
	d3.Release()
	require.Zero(t, b1.held())
	require.Zero(t, b2.held())
}

// TestLargeBodyNoAllocs: a decoder decodes 1 MiB bodies without allocating,
// keeping its buffer without a Budget and through the pools with one.
func TestLargeBodyNoAllocs(t *testing.T) {
	frame := AppendPut(nil, "meta-test", 0, 0, -1, 1, bytes.Repeat([]byte("x"), 1<<20))
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // a GC empties the pools
	for _, lim := range []Limits{{}, {Budget: &budget{}}} {
		if lim.Budget != nil && raceEnabled {
			continue
		}
		d := NewDecoder(&repeatReader{frame: frame}, lim)
		var req Request
		require.NoError(t, d.Decode(&req))
		require.NoError(t, d.Decode(&req))
		allocs := testing.AllocsPerRun(100, func() {
			if err := d.Decode(&req); err != nil {
				t.Fatal(err)
			}
		})
		require.Zero(t, allocs, "budget %v", lim.Budget != nil)
		d.Release()
	}
}

// budget is a Budget that tracks what it holds and fails beyond limit; it
// records its first 64 grows.
type budget struct {
	mu    sync.Mutex
	n     int
	limit int
	err   error
	grows []int
}

func (b *budget) Grow(n int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n <= 0 {
		panic("Grow(" + strconv.Itoa(n) + ")")
	}
	if b.limit > 0 && b.n+n > b.limit {
		return b.err
	}
	b.n += n
	if len(b.grows) < 64 { // bounded, so that benchmarks allocate nothing
		b.grows = append(b.grows, n)
	}
	return nil
}

func (b *budget) Shrink(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n <= 0 || n > b.n {
		panic("Shrink(" + strconv.Itoa(n) + ") holding " + strconv.Itoa(b.n))
	}
	b.n -= n
}

func (b *budget) held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

// countingReader counts the bytes read through it and the Read calls.
type countingReader struct {
	r     io.Reader
	n     int64
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.reads++
	return n, err
}

func TestPrintable(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `""`},
		{"put", `"put"`},
		{"\x00\r\n\t\x7f\x1b", `"\x00\r\n\t\x7f\x1b"`},
		{"a\xffb\xc3", `"a\xffb\xc3"`},
		{"héllo", `"héllo"`},
		{"\u202egnp.exe", `"\u202egnp.exe"`},
		{strings.Repeat("a", 64), `"` + strings.Repeat("a", 64) + `"`},
		{strings.Repeat("a", 65), `"` + strings.Repeat("a", 64) + `"...`},
		{strings.Repeat("a", 63) + "é", `"` + strings.Repeat("a", 63) + `"...`},
		{strings.Repeat("a", 62) + "é!", `"` + strings.Repeat("a", 62) + `é"...`},
		{strings.Repeat("\x00", 100), `"` + strings.Repeat(`\x00`, 64) + `"...`},
	} {
		require.Equal(t, tc.want, Printable([]byte(tc.in)), "%q", tc.in)
	}
}

// TestErrorsEscapeInput: error messages that quote the input never carry
// its raw control bytes.
func TestErrorsEscapeInput(t *testing.T) {
	for _, in := range []string{
		"bo\x00gus\r 1\r\n",
		"\x1b[2J\r\n",
		"put t 0 \r 0 1\r\n",
		"put t \x00 1 0 1\r\nz",
		"get t g 0 \x7f 10 7\r\n",
		"stats a \r\r\n",
		"join g t c1 default \x00\r\n",
		"auth PLAIN \x00 1\r\n",
	} {
		d := NewDecoder(strings.NewReader(in), Limits{})
		var req Request
		var pe *Error
		require.ErrorAs(t, d.Decode(&req), &pe, "%q", in)
		requireNoControlBytes(t, pe.Msg)
		requireNoControlBytes(t, pe.Error())
	}
	_, _, _, _, err := ParsePutResult([]byte("1\r\x002"))
	require.Error(t, err)
	requireNoControlBytes(t, err.Error())
	_, err = ParseOffsetLines([]byte("t\x00 x 1 1\r\n"), true)
	require.Error(t, err)
	requireNoControlBytes(t, err.Error())
}
