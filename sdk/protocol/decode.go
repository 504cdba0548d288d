package protocol

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math/bits"
	"strconv"
	"sync"
)

// maxTokens is the most tokens any frame has.
const maxTokens = 10

// bodyChunk is the first size in bytes of a body buffer for a body this
// large or larger, and, under a Budget, the most a decoder keeps between
// frames: a larger buffer grows (doubling, through bodyPools) as the body's
// bytes arrive, and under a Budget goes back to its pool at the start of the
// next Decode.
const bodyChunk = 64 << 10

// bodyPools hold the body buffers whose capacity is a power of two from
// bodyChunk up (bodyPools[i] holds bodyChunk<<i bytes, up to 1 GiB), shared
// by all decoders, so that a decoder that frees a large body buffer after
// each frame (under a Budget) grows the next one without allocating. They
// hold *[]byte, so that Put does not allocate. A pooled buffer is no
// connection's: it is in no Budget, and the GC reclaims it.
var bodyPools [15]sync.Pool

// bodyPool returns the pool for a buffer of capacity c, or nil if c is not a
// pooled size.
func bodyPool(c int) *sync.Pool {
	if c < bodyChunk || c&(c-1) != 0 {
		return nil
	}
	i := bits.Len(uint(c)) - bits.Len(uint(bodyChunk))
	if i >= len(bodyPools) {
		return nil
	}
	return &bodyPools[i]
}

// bodyClass returns the smallest pooled size of at least n bytes (n over
// bodyChunk), or n if none is.
func bodyClass(n int) int {
	c := 1 << bits.Len(uint(n-1))
	if bodyPool(c) == nil {
		return n
	}
	return c
}

// readBufferSize is the smallest read buffer of a Decoder in bytes (it is
// at least MaxLine), as in net/http's server: it is held by every
// connection, pipelined small frames still take one read call per 4 KiB
// (unless Grow gives the decoder a larger one), and bodies larger than it
// are read straight into the body buffer.
const readBufferSize = 4 << 10

// Decoder reads frames from a stream. It allocates nothing per frame once its
// buffers have grown to the largest frame seen. Under a Budget (a broker's
// connections), a body buffer over 64 KiB goes back to a package-level pool
// at the start of the next Decode, so an idle connection holds at most
// 64 KiB, and the next large body grows from that pool without allocating;
// without one (a client's), the decoder keeps its body buffer. A body
// buffer grows as the body's bytes arrive either way, so a peer that
// announces a large body and sends little makes the decoder hold little.
// Work is linear in the input: a bad or empty line costs a bounded amount,
// and each Decode returns after at most Limits.MaxEmptyLines empty lines.
//
// As the memory of a Request's byte slices may hold another connection's
// frame once the next Decode (or Release) starts, they must not be used
// after it.
type Decoder struct {
	r *bufio.Reader
	// under is the reader r had before Grow wrapped it (nil until then):
	// r reads through it, so bytes it still buffers come first.
	under *bufio.Reader
	lim   Limits
	line  []byte
	tok   [maxTokens + 1][]byte
	ntok  int
	body  []byte
	// bodyp is body's handle in bodyPools if its capacity is a pooled size.
	bodyp *[]byte
}

// NewDecoder returns a decoder reading from r with the given limits.
func NewDecoder(r io.Reader, lim Limits) *Decoder {
	lim = lim.withDefaults()
	size := max(readBufferSize, lim.MaxLine)
	return &Decoder{r: bufio.NewReaderSize(r, size), lim: lim, line: make([]byte, 0, lim.MaxLine)}
}

// Release frees the decoder's body buffer (and gives it back to the
// Budget), for when its connection closes. The last Request's slices must
// not be used after it. The decoder stays usable.
func (d *Decoder) Release() { d.freeBody() }

// freeBody gives d.body back to the Budget, and to its pool if it has one.
func (d *Decoder) freeBody() {
	if d.lim.Budget != nil && cap(d.body) > 0 {
		d.lim.Budget.Shrink(cap(d.body))
	}
	d.putBody()
	d.body = nil
}

// putBody returns d.body's memory to its pool, if it has one; d.body must
// then be replaced.
func (d *Decoder) putBody() {
	if d.bodyp == nil {
		return
	}
	*d.bodyp = d.body[:0]
	bodyPool(cap(d.body)).Put(d.bodyp)
	d.bodyp = nil
}

// Buffered returns how many bytes are read from the stream but not decoded.
func (d *Decoder) Buffered() int {
	if d.under != nil {
		return d.r.Buffered() + d.under.Buffered()
	}
	return d.r.Buffered()
}

// Grow makes the decoder read up to n bytes from its stream per read call
// from now on, if its buffer is smaller: for a connection that pipelines
// small frames, which otherwise takes one read call per 4 KiB (a read
// syscall per 3 or 4 puts of 1 KiB). The new buffer wraps the old one, so
// that what that one holds is decoded first and nothing is copied twice
// once it is empty (a read as large as its buffer goes past it). Only the
// first Grow has an effect; the buffer is held until the decoder is
// dropped.
func (d *Decoder) Grow(n int) {
	if d.under != nil || n <= d.r.Size() {
		return
	}
	d.under = d.r
	d.r = bufio.NewReaderSize(d.under, n)
}

// Decode reads the next frame into req. It returns io.EOF at a clean end of
// stream, io.ErrUnexpectedEOF if the stream ends inside a frame, a *Error for
// a malformed frame (see Error.Fatal), the Budget's error (framing is then
// lost), or the reader's error.
//
// Empty lines before a frame are skipped, up to Limits.MaxEmptyLines in a
// row; one more is a fatal error.
func (d *Decoder) Decode(req *Request) error {
	*req = Request{Checksum: NoChecksum}
	if d.lim.Budget != nil && cap(d.body) > bodyChunk {
		d.freeBody() // the previous Request, which aliased it, is gone
	}
	for empty := 0; ; empty++ {
		if err := d.readLine(); err != nil {
			return err
		}
		if d.ntok > 1 || len(d.tok[0]) > 0 {
			break
		}
		if empty == d.lim.MaxEmptyLines {
			return &Error{Code: StatusBadRequest, Msg: "too many empty lines (over " + strconv.Itoa(d.lim.MaxEmptyLines) + ")", Fatal: true}
		}
	}
	t := d.tok[:d.ntok]
	cmd := t[0]
	switch string(cmd) {
	case "put":
		return d.decodePut(req, t)
	case "mput":
		return d.decodeMPut(req, t)
	case "get":
		return d.decodeGet(req, t)
	case "offset":
		return d.decodeOffset(req, t)
	case "result":
		return d.decodeResult(req, t)
	case "value":
		return d.decodeValue(req, t)
	case "version":
		req.Op = OpVersion
		return d.optOpaque(req, t, 1)
	case "stats":
		return d.decodeStats(req, t)
	case "quit":
		req.Op = OpQuit
		return nil
	case "transaction":
		return d.decodeTransaction(req, t)
	case "sync":
		return d.decodeSync(req, t)
	case "commit":
		return d.decodeGroupBody(req, t, OpCommit)
	case "fetch":
		return d.decodeGroupBody(req, t, OpFetch)
	case "fvalue":
		return d.decodeFValue(req, t)
	case "join":
		return d.decodeMember(req, t, OpJoin, 6)
	case "heartbeat":
		return d.decodeMember(req, t, OpHeartbeat, 6)
	case "leave":
		return d.decodeMember(req, t, OpLeave, 5)
	case "auth":
		return d.decodeAuth(req, t)
	case "txsync":
		return d.decodeTxSync(req, t)
	case "filter":
		return d.decodeFilter(req, t)
	}
	return &Error{Code: StatusBadRequest, Msg: "unknown command " + Printable(cmd), Opaque: d.lastOpaque()}
}

// readLine reads one header line into d.line and splits it into d.tok.
func (d *Decoder) readLine() error {
	b, err := d.r.ReadSlice('\n')
	if err != nil {
		switch {
		case errors.Is(err, bufio.ErrBufferFull) || len(b) >= d.lim.MaxLine:
			return &Error{Code: StatusBadRequest, Msg: "header line too long", Fatal: true}
		case err == io.EOF && len(b) == 0:
			return io.EOF
		case err == io.EOF:
			return io.ErrUnexpectedEOF
		}
		return err
	}
	if len(b) > d.lim.MaxLine {
		return &Error{Code: StatusBadRequest, Msg: "header line too long", Fatal: true}
	}
	b = b[:len(b)-1]
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	d.line = append(d.line[:0], b...)
	d.ntok = 0
	rest := d.line
	for {
		i := bytes.IndexByte(rest, ' ')
		if i < 0 {
			d.tok[d.ntok] = rest
			d.ntok++
			break
		}
		if d.ntok == maxTokens {
			d.tok[d.ntok] = rest
			d.ntok++
			break
		}
		d.tok[d.ntok] = rest[:i]
		d.ntok++
		rest = rest[i+1:]
	}
	return nil
}

// lastOpaque returns the last token as an opaque if it parses, else 0.
func (d *Decoder) lastOpaque() int32 {
	if d.ntok < 2 {
		return 0
	}
	v, ok := parseInt(d.tok[d.ntok-1], 32)
	if !ok {
		return 0
	}
	return int32(v)
}

func (d *Decoder) bad(op Op, msg string) error {
	return &Error{Code: StatusBadRequest, Msg: msg, Op: op, Opaque: d.lastOpaque()}
}

func (d *Decoder) fatal(op Op, msg string) error {
	return &Error{Code: StatusBadRequest, Msg: msg, Op: op, Opaque: d.lastOpaque(), Fatal: true}
}

// readBody reads n body bytes into d.body. An n over MaxBody is read past and
// reported as a non-fatal error (or fatal beyond MaxDiscard).
func (d *Decoder) readBody(op Op, n int64) ([]byte, error) {
	if n < 0 {
		return nil, d.fatal(op, "negative body length")
	}
	if n > int64(d.lim.MaxBody) {
		if n > int64(d.lim.MaxDiscard) {
			return nil, d.fatal(op, "body length "+strconv.FormatInt(n, 10)+" exceeds limit "+strconv.Itoa(d.lim.MaxBody))
		}
		if _, err := d.r.Discard(int(n)); err != nil {
			return nil, unexpected(err)
		}
		return nil, d.bad(op, "body length "+strconv.FormatInt(n, 10)+" exceeds limit "+strconv.Itoa(d.lim.MaxBody))
	}
	if err := d.fillBody(int(n)); err != nil {
		return nil, err
	}
	return d.body, nil
}

// fillBody reads n bytes into d.body, growing it as the bytes arrive so that
// a peer that announces a large body and sends little makes the decoder
// hold little. A buffer smaller than the body's first chunk grows before
// anything is read into it, so that nothing is copied.
func (d *Decoder) fillBody(n int) error {
	d.body = d.body[:0]
	for len(d.body) < n {
		if len(d.body) == cap(d.body) || len(d.body) == 0 && cap(d.body) < min(n, bodyChunk) {
			if err := d.growBody(n, len(d.body)+d.Buffered()); err != nil {
				return err
			}
		}
		k, err := io.ReadFull(d.r, d.body[len(d.body):min(cap(d.body), n)])
		d.body = d.body[:len(d.body)+k]
		if err != nil {
			return unexpected(err)
		}
	}
	return nil
}

// growBody grows d.body's capacity for a body of n bytes, have of which have
// arrived (read into d.body or buffered in d.r): to at least twice its
// capacity, min(n, bodyChunk) and min(n, have). For a body of at most
// bodyChunk that is capped at bodyChunk (or MaxBody); for a larger one it
// is rounded up to a pooled size, or is MaxBody where that would exceed
// MaxBody. A buffer of a pooled size comes from (and the one it replaces
// goes back to) bodyPools.
func (d *Decoder) growBody(n, have int) error {
	c := cap(d.body)
	next := max(2*c, min(n, bodyChunk), min(n, have))
	if n <= bodyChunk {
		next = min(next, bodyChunk, d.lim.MaxBody)
	} else {
		next = min(bodyClass(next), d.lim.MaxBody)
	}
	if d.lim.Budget != nil {
		if err := d.lim.Budget.Grow(next - c); err != nil {
			return err
		}
	}
	var b []byte
	var bp *[]byte
	if pool := bodyPool(next); pool != nil {
		bp, _ = pool.Get().(*[]byte)
		if bp == nil {
			bp = new([]byte)
			*bp = make([]byte, 0, next)
		}
		b = (*bp)[:len(d.body)]
	} else {
		b = make([]byte, len(d.body), next)
	}
	copy(b, d.body)
	d.putBody()
	d.body, d.bodyp = b, bp
	return nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// put <topic> <partition> <len> <flag> [<checksum>] [<txKey>] <opaque>
func (d *Decoder) decodePut(req *Request, t [][]byte) error {
	req.Op = OpPut
	if len(t) < 6 || len(t) > 8 {
		return d.fatal(OpPut, "put: want 6 to 8 tokens, got "+strconv.Itoa(len(t)))
	}
	n, ok := parseInt(t[3], 32)
	if !ok || n < 0 {
		return d.fatal(OpPut, "put: bad length "+Printable(t[3]))
	}
	opaque, okOp := parseInt(t[len(t)-1], 32)
	req.Opaque = int32(opaque)
	var msg string
	if !okOp {
		msg = "put: bad opaque " + Printable(t[len(t)-1])
	}
	req.Topic = t[1]
	p, okP := parseInt(t[2], 32)
	req.Partition = int32(p)
	if msg == "" && (!okP || p < -1) {
		msg = "put: bad partition " + Printable(t[2])
	}
	f, okF := parseInt(t[4], 32)
	req.Flag = int32(f)
	if msg == "" && !okF {
		msg = "put: bad flag " + Printable(t[4])
	}
	switch len(t) {
	case 7:
		if isNumberStart(t[5]) {
			c, ok := parseInt(t[5], 64)
			req.Checksum = c
			if msg == "" && !ok {
				msg = "put: bad checksum " + Printable(t[5])
			}
		} else {
			req.TxKey = t[5]
		}
	case 8:
		c, ok := parseInt(t[5], 64)
		req.Checksum = c
		if msg == "" && !ok {
			msg = "put: bad checksum " + Printable(t[5])
		}
		req.TxKey = t[6]
	}
	if msg == "" && len(req.Topic) == 0 {
		msg = "put: empty topic"
	}
	body, err := d.readBody(OpPut, n)
	if err != nil {
		return err
	}
	req.Body = body
	if msg != "" {
		return d.bad(OpPut, msg)
	}
	return nil
}

// mput <topic> <partition> <bodyLen> <count> <opaque>, body = count entries of
// [int32 flag][int32 len][int32 crc or -1][data].
func (d *Decoder) decodeMPut(req *Request, t [][]byte) error {
	req.Op = OpMPut
	if len(t) != 6 {
		return d.fatal(OpMPut, "mput: want 6 tokens, got "+strconv.Itoa(len(t)))
	}
	n, ok := parseInt(t[3], 32)
	if !ok || n < 0 {
		return d.fatal(OpMPut, "mput: bad length "+Printable(t[3]))
	}
	var msg string
	opaque, okOp := parseInt(t[5], 32)
	req.Opaque = int32(opaque)
	if !okOp {
		msg = "mput: bad opaque " + Printable(t[5])
	}
	req.Topic = t[1]
	p, okP := parseInt(t[2], 32)
	req.Partition = int32(p)
	if msg == "" && (!okP || p < 0) {
		msg = "mput: bad partition " + Printable(t[2])
	}
	c, okC := parseInt(t[4], 32)
	req.Count = int(c)
	if msg == "" && (!okC || c < 1 || c > MaxMPutCount) {
		msg = "mput: bad count " + Printable(t[4]) + " (1.." + strconv.Itoa(MaxMPutCount) + ")"
	}
	if msg == "" && len(req.Topic) == 0 {
		msg = "mput: empty topic"
	}
	body, err := d.readBody(OpMPut, n)
	if err != nil {
		return err
	}
	req.Body = body
	if msg != "" {
		return d.bad(OpMPut, msg)
	}
	if err := ValidateMPutBody(body, req.Count); err != nil {
		return d.bad(OpMPut, "mput: "+err.Error())
	}
	return nil
}

// get <topic> <group> <partition> <offset> <maxSize> <opaque>
func (d *Decoder) decodeGet(req *Request, t [][]byte) error {
	req.Op = OpGet
	if len(t) != 7 {
		return d.bad(OpGet, "get: want 7 tokens, got "+strconv.Itoa(len(t)))
	}
	req.Topic, req.Group = t[1], t[2]
	p, ok1 := parseInt(t[3], 32)
	o, ok2 := parseInt(t[4], 64)
	m, ok3 := parseInt(t[5], 32)
	op, ok4 := parseInt(t[6], 32)
	req.Partition, req.Offset, req.MaxSize, req.Opaque = int32(p), o, int32(m), int32(op)
	switch {
	case !ok4:
		return d.bad(OpGet, "get: bad opaque "+Printable(t[6]))
	case len(req.Topic) == 0:
		return d.bad(OpGet, "get: empty topic")
	case !ok1 || p < 0:
		return d.bad(OpGet, "get: bad partition "+Printable(t[3]))
	case !ok2:
		return d.bad(OpGet, "get: bad offset "+Printable(t[4]))
	case !ok3:
		return d.bad(OpGet, "get: bad maxSize "+Printable(t[5]))
	}
	return nil
}

// offset <topic> <group> <partition> <offset> <opaque>
func (d *Decoder) decodeOffset(req *Request, t [][]byte) error {
	req.Op = OpOffset
	if len(t) != 6 {
		return d.bad(OpOffset, "offset: want 6 tokens, got "+strconv.Itoa(len(t)))
	}
	req.Topic, req.Group = t[1], t[2]
	p, ok1 := parseInt(t[3], 32)
	o, ok2 := parseInt(t[4], 64)
	op, ok3 := parseInt(t[5], 32)
	req.Partition, req.Offset, req.Opaque = int32(p), o, int32(op)
	switch {
	case !ok3:
		return d.bad(OpOffset, "offset: bad opaque "+Printable(t[5]))
	case len(req.Topic) == 0:
		return d.bad(OpOffset, "offset: empty topic")
	case !ok1 || p < 0:
		return d.bad(OpOffset, "offset: bad partition "+Printable(t[3]))
	case !ok2:
		return d.bad(OpOffset, "offset: bad offset "+Printable(t[4]))
	}
	return nil
}

// result <code> <bodyLen> <opaque>
func (d *Decoder) decodeResult(req *Request, t [][]byte) error {
	req.Op = OpResult
	if len(t) != 4 {
		return d.fatal(OpResult, "result: want 4 tokens, got "+strconv.Itoa(len(t)))
	}
	c, ok1 := parseInt(t[1], 32)
	n, ok2 := parseInt(t[2], 32)
	op, ok3 := parseInt(t[3], 32)
	if !ok1 || !ok2 || !ok3 || n < 0 {
		return d.fatal(OpResult, "result: bad header")
	}
	req.Code, req.Opaque = int(c), int32(op)
	body, err := d.readBody(OpResult, n)
	req.Body = body
	return err
}

// value <totalLen> <opaque>
func (d *Decoder) decodeValue(req *Request, t [][]byte) error {
	req.Op = OpValue
	if len(t) != 3 {
		return d.fatal(OpValue, "value: want 3 tokens, got "+strconv.Itoa(len(t)))
	}
	n, ok1 := parseInt(t[1], 32)
	op, ok2 := parseInt(t[2], 32)
	if !ok1 || !ok2 || n < 0 {
		return d.fatal(OpValue, "value: bad header")
	}
	req.Code, req.Opaque = StatusOK, int32(op)
	body, err := d.readBody(OpValue, n)
	req.Body = body
	return err
}

// stats [<item>] [<opaque>]: with one argument, a number is the opaque and
// anything else the item.
func (d *Decoder) decodeStats(req *Request, t [][]byte) error {
	req.Op = OpStats
	req.Opaque = DefaultOpaque
	switch len(t) {
	case 1:
	case 2:
		if v, ok := parseInt(t[1], 32); ok {
			req.Opaque = int32(v)
		} else {
			req.Item = t[1]
		}
	case 3:
		req.Item = t[1]
		v, ok := parseInt(t[2], 32)
		if !ok {
			return d.bad(OpStats, "stats: bad opaque "+Printable(t[2]))
		}
		req.Opaque = int32(v)
	default:
		return d.bad(OpStats, "stats: want at most 3 tokens")
	}
	return nil
}

func (d *Decoder) optOpaque(req *Request, t [][]byte, at int) error {
	req.Opaque = DefaultOpaque
	switch {
	case len(t) == at:
	case len(t) == at+1:
		v, ok := parseInt(t[at], 32)
		if !ok {
			return d.bad(req.Op, req.Op.String()+": bad opaque "+Printable(t[at]))
		}
		req.Opaque = int32(v)
	default:
		return d.bad(req.Op, req.Op.String()+": too many tokens")
	}
	return nil
}

// sync <topic> <partition> <len> <flag> <msgId> [<checksum>] <opaque> + body.
func (d *Decoder) decodeSync(req *Request, t [][]byte) error {
	req.Op = OpSync
	if len(t) != 7 && len(t) != 8 {
		return d.fatal(OpSync, "sync: want 7 or 8 tokens, got "+strconv.Itoa(len(t)))
	}
	n, ok := parseInt(t[3], 32)
	if !ok || n < 0 {
		return d.fatal(OpSync, "sync: bad length "+Printable(t[3]))
	}
	req.Topic = t[1]
	p, ok1 := parseInt(t[2], 32)
	f, ok2 := parseInt(t[4], 32)
	id, ok3 := parseInt(t[5], 64)
	op, ok4 := parseInt(t[len(t)-1], 32)
	req.Partition, req.Flag, req.MsgID, req.Opaque = int32(p), int32(f), id, int32(op)
	ok5 := true
	if len(t) == 8 {
		req.Checksum, ok5 = parseInt(t[6], 64)
	}
	body, err := d.readBody(OpSync, n)
	if err != nil {
		return err
	}
	req.Body = body
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || p < 0 {
		return d.bad(OpSync, "sync: bad header")
	}
	return nil
}

// commit|fetch <group> <bodyLen> <opaque> + body of offset lines.
func (d *Decoder) decodeGroupBody(req *Request, t [][]byte, op Op) error {
	req.Op = op
	if len(t) != 4 {
		return d.fatal(op, op.String()+": want 4 tokens, got "+strconv.Itoa(len(t)))
	}
	n, ok := parseInt(t[2], 32)
	if !ok || n < 0 {
		return d.fatal(op, op.String()+": bad length "+Printable(t[2]))
	}
	v, okOp := parseInt(t[3], 32)
	req.Opaque = int32(v)
	req.Group = t[1]
	body, err := d.readBody(op, n)
	if err != nil {
		return err
	}
	req.Body = body
	switch {
	case !okOp:
		return d.bad(op, op.String()+": bad opaque "+Printable(t[3]))
	case len(req.Group) == 0:
		return d.bad(op, op.String()+": empty group")
	}
	return nil
}

// fvalue <totalLen> <opaque> <nextOffset> + body of [int64 BE offset][record].
func (d *Decoder) decodeFValue(req *Request, t [][]byte) error {
	req.Op = OpFValue
	if len(t) != 4 {
		return d.fatal(OpFValue, "fvalue: want 4 tokens, got "+strconv.Itoa(len(t)))
	}
	n, ok1 := parseInt(t[1], 32)
	op, ok2 := parseInt(t[2], 32)
	next, ok3 := parseInt(t[3], 64)
	if !ok1 || !ok2 || !ok3 || n < 0 {
		return d.fatal(OpFValue, "fvalue: bad header")
	}
	req.Code, req.Opaque, req.Offset = StatusOK, int32(op), next
	body, err := d.readBody(OpFValue, n)
	req.Body = body
	return err
}

// join <group> <topic> <consumerId> <strategy> <opaque>
// heartbeat <group> <topic> <consumerId> <generation> <opaque>
// leave <group> <topic> <consumerId> <opaque>
// No body, so every error keeps the framing.
func (d *Decoder) decodeMember(req *Request, t [][]byte, op Op, want int) error {
	req.Op = op
	name := op.String()
	if len(t) != want {
		return d.bad(op, name+": want "+strconv.Itoa(want)+" tokens, got "+strconv.Itoa(len(t)))
	}
	v, ok := parseInt(t[len(t)-1], 32)
	if !ok {
		return d.bad(op, name+": bad opaque "+Printable(t[len(t)-1]))
	}
	req.Opaque = int32(v)
	req.Group, req.Topic, req.Member = t[1], t[2], t[3]
	switch {
	case len(req.Group) == 0:
		return d.bad(op, name+": empty group")
	case len(req.Topic) == 0:
		return d.bad(op, name+": empty topic")
	case len(req.Member) == 0:
		return d.bad(op, name+": empty consumer id")
	}
	switch op {
	case OpJoin:
		req.Strategy = t[4]
		if len(req.Strategy) == 0 {
			return d.bad(op, name+": empty strategy")
		}
	case OpHeartbeat:
		g, ok := parseInt(t[4], 64)
		if !ok || g < 0 {
			return d.bad(op, name+": bad generation "+Printable(t[4]))
		}
		req.Generation = g
	}
	return nil
}

// MaxAuthBody is the largest auth body (a SASL message) in bytes.
const MaxAuthBody = 1024

// auth <mechanism> <bodyLen> <opaque> + body (the SASL message; for PLAIN,
// RFC 4616's [authzid] NUL authcid NUL passwd).
func (d *Decoder) decodeAuth(req *Request, t [][]byte) error {
	req.Op = OpAuth
	if len(t) != 4 {
		return d.fatal(OpAuth, "auth: want 4 tokens, got "+strconv.Itoa(len(t)))
	}
	n, ok := parseInt(t[2], 32)
	if !ok || n < 0 || n > MaxAuthBody {
		return d.fatal(OpAuth, "auth: bad length "+Printable(t[2])+" (0.."+strconv.Itoa(MaxAuthBody)+")")
	}
	v, okOp := parseInt(t[3], 32)
	req.Opaque = int32(v)
	req.Item = t[1]
	body, err := d.readBody(OpAuth, n)
	if err != nil {
		return err
	}
	req.Body = body
	switch {
	case !okOp:
		return d.bad(OpAuth, "auth: bad opaque "+Printable(t[3]))
	case len(req.Item) == 0:
		return d.bad(OpAuth, "auth: empty mechanism")
	}
	return nil
}

// filter <topic> <group> <len> <opaque> + body of the expression.
func (d *Decoder) decodeFilter(req *Request, t [][]byte) error {
	req.Op = OpFilter
	if len(t) != 5 {
		return d.fatal(OpFilter, "filter: want 5 tokens, got "+strconv.Itoa(len(t)))
	}
	n, ok := parseInt(t[3], 32)
	if !ok || n < 0 {
		return d.fatal(OpFilter, "filter: bad length "+Printable(t[3]))
	}
	v, okOp := parseInt(t[4], 32)
	req.Opaque = int32(v)
	req.Topic, req.Group = t[1], t[2]
	body, err := d.readBody(OpFilter, n)
	if err != nil {
		return err
	}
	req.Body = body
	switch {
	case !okOp:
		return d.bad(OpFilter, "filter: bad opaque "+Printable(t[4]))
	case len(req.Topic) == 0 || len(req.Group) == 0:
		return d.bad(OpFilter, "filter: empty topic or group")
	}
	return nil
}

func isNumberStart(b []byte) bool {
	return len(b) > 0 && (b[0] == '-' || (b[0] >= '0' && b[0] <= '9'))
}

// parseInt parses a signed decimal that fits in bits bits, without allocating.
func parseInt(b []byte, bits uint) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	neg := false
	if b[0] == '-' {
		neg = true
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	var v uint64
	limit := uint64(1) << (bits - 1) // magnitude limit (inclusive for negatives)
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
		if v > limit {
			return 0, false
		}
	}
	if neg {
		return -int64(v), true
	}
	if v == limit {
		return 0, false
	}
	return int64(v), true
}

// The kinds of txsync (the replication of transactions, docs/protocol.md).
const (
	TxSyncPuts     = "puts"     // put records, held by the connection for a later prepare, commit or state
	TxSyncPrepare  = "prepare"  // prepare records of XA branches (with their put records before them)
	TxSyncCommit   = "commit"   // a commit record, with exact offsets (its put records before it)
	TxSyncRollback = "rollback" // the rollback record of a prepared branch
	TxSyncState    = "state"    // the prepare records of every prepared branch of the master: the slave drops the others
)

// MaxTxSyncBody is the largest txsync body in bytes.
const MaxTxSyncBody = 1 << 30

// txsync <kind> <bodyLen> <opaque> + body (transaction journal records).
func (d *Decoder) decodeTxSync(req *Request, t [][]byte) error {
	req.Op = OpTxSync
	if len(t) != 4 {
		return d.fatal(OpTxSync, "txsync: want 4 tokens, got "+strconv.Itoa(len(t)))
	}
	n, ok := parseInt(t[2], 32)
	if !ok || n < 0 {
		return d.fatal(OpTxSync, "txsync: bad length "+Printable(t[2]))
	}
	op, okOp := parseInt(t[3], 32)
	req.Opaque = int32(op)
	req.Item = t[1]
	body, err := d.readBody(OpTxSync, n)
	if err != nil {
		return err
	}
	req.Body = body
	switch k := string(req.Item); {
	case !okOp:
		return d.bad(OpTxSync, "txsync: bad opaque "+Printable(t[3]))
	case k != TxSyncPuts && k != TxSyncPrepare && k != TxSyncCommit && k != TxSyncRollback && k != TxSyncState:
		return d.bad(OpTxSync, "txsync: unknown kind "+Printable(t[1]))
	}
	return nil
}
