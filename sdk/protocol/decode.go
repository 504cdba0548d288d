package protocol

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
)

// maxTokens is the most tokens any frame has.
const maxTokens = 10

// Decoder reads frames from a stream. It allocates nothing per frame once its
// buffers have grown to the largest frame seen.
type Decoder struct {
	r    *bufio.Reader
	lim  Limits
	line []byte
	tok  [maxTokens + 1][]byte
	ntok int
	body []byte
}

// NewDecoder returns a decoder reading from r with the given limits.
func NewDecoder(r io.Reader, lim Limits) *Decoder {
	lim = lim.withDefaults()
	size := 64 << 10
	if lim.MaxLine > size {
		size = lim.MaxLine
	}
	return &Decoder{r: bufio.NewReaderSize(r, size), lim: lim, line: make([]byte, 0, lim.MaxLine)}
}

// Buffered returns how many bytes are read from the stream but not decoded.
func (d *Decoder) Buffered() int { return d.r.Buffered() }

// Decode reads the next frame into req. It returns io.EOF at a clean end of
// stream, io.ErrUnexpectedEOF if the stream ends inside a frame, a *Error for
// a malformed frame (see Error.Fatal), or the reader's error.
func (d *Decoder) Decode(req *Request) error {
	*req = Request{Checksum: NoChecksum, Args: req.Args[:0]}
	if err := d.readLine(); err != nil {
		return err
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
	}
	if len(cmd) == 0 && d.ntok == 1 {
		// An empty line: tolerate (nc users press return).
		return d.Decode(req)
	}
	return &Error{Code: StatusBadRequest, Msg: "unknown command " + quoteToken(cmd), Opaque: d.lastOpaque()}
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
	if cap(d.body) < int(n) {
		d.body = make([]byte, n)
	}
	d.body = d.body[:n]
	if _, err := io.ReadFull(d.r, d.body); err != nil {
		return nil, unexpected(err)
	}
	return d.body, nil
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
		return d.fatal(OpPut, "put: bad length "+quoteToken(t[3]))
	}
	opaque, okOp := parseInt(t[len(t)-1], 32)
	req.Opaque = int32(opaque)
	var msg string
	if !okOp {
		msg = "put: bad opaque " + quoteToken(t[len(t)-1])
	}
	req.Topic = t[1]
	p, okP := parseInt(t[2], 32)
	req.Partition = int32(p)
	if msg == "" && (!okP || p < -1) {
		msg = "put: bad partition " + quoteToken(t[2])
	}
	f, okF := parseInt(t[4], 32)
	req.Flag = int32(f)
	if msg == "" && !okF {
		msg = "put: bad flag " + quoteToken(t[4])
	}
	switch len(t) {
	case 7:
		if isNumberStart(t[5]) {
			c, ok := parseInt(t[5], 64)
			req.Checksum = c
			if msg == "" && !ok {
				msg = "put: bad checksum " + quoteToken(t[5])
			}
		} else {
			req.TxKey = t[5]
		}
	case 8:
		c, ok := parseInt(t[5], 64)
		req.Checksum = c
		if msg == "" && !ok {
			msg = "put: bad checksum " + quoteToken(t[5])
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
		return d.fatal(OpMPut, "mput: bad length "+quoteToken(t[3]))
	}
	var msg string
	opaque, okOp := parseInt(t[5], 32)
	req.Opaque = int32(opaque)
	if !okOp {
		msg = "mput: bad opaque " + quoteToken(t[5])
	}
	req.Topic = t[1]
	p, okP := parseInt(t[2], 32)
	req.Partition = int32(p)
	if msg == "" && (!okP || p < 0) {
		msg = "mput: bad partition " + quoteToken(t[2])
	}
	c, okC := parseInt(t[4], 32)
	req.Count = int(c)
	if msg == "" && (!okC || c < 1 || c > MaxMPutCount) {
		msg = "mput: bad count " + quoteToken(t[4]) + " (1.." + strconv.Itoa(MaxMPutCount) + ")"
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
		return d.bad(OpGet, "get: bad opaque "+quoteToken(t[6]))
	case len(req.Topic) == 0:
		return d.bad(OpGet, "get: empty topic")
	case !ok1 || p < 0:
		return d.bad(OpGet, "get: bad partition "+quoteToken(t[3]))
	case !ok2:
		return d.bad(OpGet, "get: bad offset "+quoteToken(t[4]))
	case !ok3:
		return d.bad(OpGet, "get: bad maxSize "+quoteToken(t[5]))
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
		return d.bad(OpOffset, "offset: bad opaque "+quoteToken(t[5]))
	case len(req.Topic) == 0:
		return d.bad(OpOffset, "offset: empty topic")
	case !ok1 || p < 0:
		return d.bad(OpOffset, "offset: bad partition "+quoteToken(t[3]))
	case !ok2:
		return d.bad(OpOffset, "offset: bad offset "+quoteToken(t[4]))
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
			return d.bad(OpStats, "stats: bad opaque "+quoteToken(t[2]))
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
			return d.bad(req.Op, req.Op.String()+": bad opaque "+quoteToken(t[at]))
		}
		req.Opaque = int32(v)
	default:
		return d.bad(req.Op, req.Op.String()+": too many tokens")
	}
	return nil
}

// transaction <txKey> <sessionId> <TYPE> [<timeout>] [<qualifier>] <opaque>: no body.
func (d *Decoder) decodeTransaction(req *Request, t [][]byte) error {
	req.Op = OpTransaction
	if len(t) < 5 || len(t) > 7 {
		return d.bad(OpTransaction, "transaction: want 5 to 7 tokens, got "+strconv.Itoa(len(t)))
	}
	v, ok := parseInt(t[len(t)-1], 32)
	if !ok {
		return d.bad(OpTransaction, "transaction: bad opaque")
	}
	req.Opaque = int32(v)
	req.Args = append(req.Args, t[1:len(t)-1]...)
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
		return d.fatal(OpSync, "sync: bad length "+quoteToken(t[3]))
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
		return d.fatal(op, op.String()+": bad length "+quoteToken(t[2]))
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
		return d.bad(op, op.String()+": bad opaque "+quoteToken(t[3]))
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
		return d.bad(op, name+": bad opaque "+quoteToken(t[len(t)-1]))
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
			return d.bad(op, name+": bad generation "+quoteToken(t[4]))
		}
		req.Generation = g
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

// quoteToken renders a token for an error message, shortened.
func quoteToken(b []byte) string {
	if len(b) > 32 {
		b = b[:32]
	}
	return strconv.Quote(string(b))
}
