package httpapi

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// parseProduce is a produce body's decoder for the shape clients send:
// the fields of ProduceRequest, ProduceRecord and RecordHeader spelled as
// their tags, each at most once, strings of names, headers and tags
// without escapes, numbers as plain integers. It reads the body once,
// without reflection, and its keys and values alias data (encoding/json
// scans a body twice and copies each value). For any other body it
// reports false and the caller decodes with encoding/json, which accepts
// or refuses it in its own words: for a body both accept, the two give
// the same request (FuzzProduceFast).
func parseProduce(data []byte, req *ProduceRequest) bool {
	p := jsonParser{b: data}
	return p.produce(req)
}

// parseProduceMarks is parseProduce that also returns, in plain (its
// room reused), whether each record's value is a JSON string without
// escapes, whose text between the quotes is its value: what plainBase64
// would otherwise find by scanning each value for a backslash again.
func parseProduceMarks(data []byte, req *ProduceRequest, plain []bool) ([]bool, bool) {
	p := jsonParser{b: data, marks: true, plain: plain[:0]}
	ok := p.produce(req)
	return p.plain, ok
}

// produce is parseProduce.
func (p *jsonParser) produce(req *ProduceRequest) bool {
	p.ws()
	if !p.lit('{') {
		return false
	}
	var seen uint8
	p.ws()
	if p.lit('}') {
		return p.end()
	}
	for {
		p.ws()
		k, ok := p.name()
		if !ok {
			return false
		}
		p.ws()
		if !p.lit(':') {
			return false
		}
		p.ws()
		switch k {
		case "format":
			if seen&1 != 0 {
				return false
			}
			seen |= 1
			s, ok := p.plainString()
			if !ok {
				return false
			}
			req.Format = s
		case "records":
			if seen&2 != 0 || !p.lit('[') {
				return false
			}
			seen |= 2
			req.Records = slices.Grow(req.Records[:0], 16) // the caller's, if it gave room
			p.ws()
			if !p.lit(']') {
				from := p.i
				for {
					p.ws()
					if len(req.Records) == protocol.MaxMPutCount {
						// One more than a request may hold: refused
						// (produceArrayLen) before any more is built.
						return false
					}
					if n := len(req.Records); n == cap(req.Records) {
						// Room for as many more as the rest of the
						// body holds at the records' size so far (one
						// allocation for records of one size, not
						// append's doublings), within the limit.
						more := (len(p.b) - p.i) / max(1, (p.i-from)/n)
						req.Records = slices.Grow(req.Records, min(protocol.MaxMPutCount-n, max(n, more+1)))
					}
					req.Records = append(req.Records, ProduceRecord{})
					if !p.record(&req.Records[len(req.Records)-1]) {
						return false
					}
					if p.marks {
						p.plain = append(p.plain, p.valuePlain)
					}
					p.ws()
					if p.lit(']') {
						break
					}
					if !p.lit(',') {
						return false
					}
				}
			}
		default:
			return false
		}
		p.ws()
		if p.lit('}') {
			return p.end()
		}
		if !p.lit(',') {
			return false
		}
	}
}

// jsonParser reads JSON from b at i.
type jsonParser struct {
	b []byte
	i int
	// marks: the caller wants plain, each record's valuePlain (the last
	// record's value was a string without escapes).
	marks      bool
	plain      []bool
	valuePlain bool
}

func (p *jsonParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// lit consumes c if it is next.
func (p *jsonParser) lit(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end reports whether only white space is left.
func (p *jsonParser) end() bool {
	p.ws()
	return p.i == len(p.b)
}

// null consumes null if it is next.
func (p *jsonParser) null() bool {
	if len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "null" {
		p.i += 4
		return true
	}
	return false
}

// stringEnd is the index after the JSON string at i (a valid one:
// escapes checked, no control characters), or -1. esc says whether it
// holds escapes.
func (p *jsonParser) stringEnd(i int) (end int, esc bool) {
	b := p.b
	if i >= len(b) || b[i] != '"' {
		return -1, false
	}
	// Most strings (a base64 value's kilobytes) hold no escape: the
	// first quote (bytes.IndexByte, vector instructions) ends one that
	// has neither a backslash nor a control character before it, checked
	// at a third of special8's work per byte.
	if q := bytes.IndexByte(b[i+1:], '"'); q >= 0 && plainBytes(b[i+1:i+1+q]) {
		return i + 2 + q, false
	}
	return stringEndSlow(b, i)
}

// plainBytes reports whether s holds neither a backslash nor a control
// character (below 0x20).
func plainBytes(s []byte) bool {
	if bytes.IndexByte(s, '\\') >= 0 {
		return false
	}
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	var acc uint64 // "a byte less than 0x20", exact as to whether one is
	for ; len(s) >= 32; s = s[32:] {
		x0, x1 := binary.LittleEndian.Uint64(s), binary.LittleEndian.Uint64(s[8:])
		x2, x3 := binary.LittleEndian.Uint64(s[16:]), binary.LittleEndian.Uint64(s[24:])
		acc |= (x0-ones*0x20)&^x0 | (x1-ones*0x20)&^x1 | (x2-ones*0x20)&^x2 | (x3-ones*0x20)&^x3
	}
	for ; len(s) >= 8; s = s[8:] {
		x := binary.LittleEndian.Uint64(s)
		acc |= (x - ones*0x20) &^ x
	}
	for _, c := range s {
		if c < 0x20 {
			return false
		}
	}
	return acc&highs == 0
}

// stringEndSlow is stringEnd byte by byte (eight at a time while
// special8 finds nothing), escapes checked.
func stringEndSlow(b []byte, i int) (end int, esc bool) {
	for i++; i < len(b); {
		if len(b)-i >= 8 && !special8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8 // eight plain bytes
			continue
		}
		c := b[i]
		i++
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		switch c {
		case '"':
			return i, esc
		case '\\':
			esc = true
			if i >= len(b) {
				return -1, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if len(b)-i < 5 {
					return -1, false
				}
				for _, h := range b[i+1 : i+5] {
					if !isHex(h) {
						return -1, false
					}
				}
				i += 5
			default:
				return -1, false
			}
		default: // a control character
			return -1, false
		}
	}
	return -1, false
}

// special8 reports whether one of the eight bytes of x is a quote, a
// backslash or a control character (below 0x20): the bit tricks of
// "a byte equal to n" and "a byte less than n", exact as to whether
// there is one.
func special8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q, bs := x^(ones*'"'), x^(ones*'\\')
	return ((q-ones)&^q|(bs-ones)&^bs|(x-ones*0x20)&^x)&highs != 0
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// plainString consumes a string without escapes and returns its text.
func (p *jsonParser) plainString() (string, bool) {
	end, esc := p.stringEnd(p.i)
	if end < 0 || esc || !utf8.Valid(p.b[p.i+1:end-1]) { // encoding/json: U+FFFD
		return "", false
	}
	s := string(p.b[p.i+1 : end-1])
	p.i = end
	return s, true
}

// name consumes an object's key without escapes and returns it (not
// copied: compare it, do not keep it).
func (p *jsonParser) name() (string, bool) {
	end, esc := p.stringEnd(p.i)
	if end < 0 || esc {
		return "", false
	}
	b := p.b[p.i+1 : end-1]
	p.i = end
	switch string(b) { // no allocation: the names it knows
	case "format":
		return "format", true
	case "records":
		return "records", true
	case "partition":
		return "partition", true
	case "key":
		return "key", true
	case "value":
		return "value", true
	case "headers":
		return "headers", true
	case "tags":
		return "tags", true
	case "timestamp":
		return "timestamp", true
	}
	return "", false
}

// raw consumes any JSON value and returns its text (aliasing b), as a
// json.RawMessage field holds it.
func (p *jsonParser) raw() (json.RawMessage, bool) {
	start := p.i
	if p.i >= len(p.b) {
		return nil, false
	}
	if p.b[p.i] == '"' {
		end, _ := p.stringEnd(p.i)
		if end < 0 {
			return nil, false
		}
		p.i = end
		return p.b[start:end:end], true
	}
	// Anything else: its extent (strings skipped, brackets counted),
	// then encoding/json's check of it.
	depth := 0
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch c {
		case '"':
			end, _ := p.stringEnd(p.i)
			if end < 0 {
				return nil, false
			}
			p.i = end
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				goto done
			}
			depth--
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				goto done
			}
		}
		p.i++
		if depth == 0 && (c == '}' || c == ']') {
			break
		}
	}
done:
	v := p.b[start:p.i:p.i]
	if len(v) == 0 || !json.Valid(v) {
		return nil, false
	}
	return v, true
}

// integer consumes a JSON integer (-?(0|[1-9][0-9]*)) of bits bits.
func (p *jsonParser) integer(bits int) (int64, bool) {
	start := p.i
	p.lit('-')
	digits := p.i
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		p.i++
	}
	if p.i == digits || p.b[digits] == '0' && p.i-digits > 1 {
		return 0, false
	}
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(p.b[start:p.i]), 10, bits)
	return n, err == nil
}

// record consumes one ProduceRecord.
func (p *jsonParser) record(rec *ProduceRecord) bool {
	p.valuePlain = false
	if !p.lit('{') {
		return false
	}
	p.ws()
	if p.lit('}') {
		return true
	}
	var seen uint8
	for {
		p.ws()
		k, ok := p.name()
		if !ok {
			return false
		}
		p.ws()
		if !p.lit(':') {
			return false
		}
		p.ws()
		var bit uint8
		switch k {
		case "partition":
			bit = 1
			if p.null() {
				rec.Partition = nil
			} else if n, ok := p.integer(32); ok {
				v := int32(n)
				rec.Partition = &v
			} else {
				return false
			}
		case "key":
			bit = 2
			if rec.Key, ok = p.raw(); !ok {
				return false
			}
		case "value":
			bit = 4
			if p.i < len(p.b) && p.b[p.i] == '"' {
				start := p.i
				end, esc := p.stringEnd(p.i)
				if end < 0 {
					return false
				}
				p.i = end
				rec.Value, p.valuePlain = p.b[start:end:end], !esc
			} else if rec.Value, ok = p.raw(); !ok {
				return false
			}
		case "headers":
			bit = 8
			if !p.headers(rec) {
				return false
			}
		case "tags":
			bit = 16
			if !p.tags(rec) {
				return false
			}
		case "timestamp":
			bit = 32
			if p.null() {
				rec.Timestamp = nil
			} else if n, ok := p.integer(64); ok {
				rec.Timestamp = &n
			} else {
				return false
			}
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		p.ws()
		if p.lit('}') {
			return true
		}
		if !p.lit(',') {
			return false
		}
	}
}

// headers consumes a record's headers: null or an array of {"key": ...,
// "value": ...}.
func (p *jsonParser) headers(rec *ProduceRecord) bool {
	if p.null() {
		rec.Headers = nil
		return true
	}
	if !p.lit('[') {
		return false
	}
	rec.Headers = []RecordHeader{}
	p.ws()
	if p.lit(']') {
		return true
	}
	for {
		p.ws()
		if !p.lit('{') {
			return false
		}
		var h RecordHeader
		var seen uint8
		p.ws()
		if !p.lit('}') {
			for {
				p.ws()
				k, ok := p.name()
				if !ok {
					return false
				}
				p.ws()
				if !p.lit(':') {
					return false
				}
				p.ws()
				switch k {
				case "key":
					if seen&1 != 0 {
						return false
					}
					seen |= 1
					if h.Key, ok = p.plainString(); !ok {
						return false
					}
				case "value":
					if seen&2 != 0 {
						return false
					}
					seen |= 2
					if p.null() {
						h.Value = nil
					} else if s, ok := p.plainString(); ok {
						h.Value = &s
					} else {
						return false
					}
				default:
					return false
				}
				p.ws()
				if p.lit('}') {
					break
				}
				if !p.lit(',') {
					return false
				}
			}
		}
		rec.Headers = append(rec.Headers, h)
		p.ws()
		if p.lit(']') {
			return true
		}
		if !p.lit(',') {
			return false
		}
	}
}

// tags consumes a record's tags: null or an array of strings.
func (p *jsonParser) tags(rec *ProduceRecord) bool {
	if p.null() {
		rec.Tags = nil
		return true
	}
	if !p.lit('[') {
		return false
	}
	rec.Tags = []string{}
	p.ws()
	if p.lit(']') {
		return true
	}
	for {
		p.ws()
		s, ok := p.plainString()
		if !ok {
			return false
		}
		rec.Tags = append(rec.Tags, s)
		p.ws()
		if p.lit(']') {
			return true
		}
		if !p.lit(',') {
			return false
		}
	}
}

// produceArrayLen returns the most elements of an array that is the
// value of a member of the body's top-level object: for a valid produce
// request, the number of its records (or more, with "records" twice). It
// allocates nothing, so a body of a million empty records is refused
// before encoding/json builds them (records.go). For a body that is not
// valid JSON the count means nothing, and the decoder refuses the body
// anyway.
func produceArrayLen(b []byte) int {
	depth, n, most := 0, 0, 0
	inArray := false // inside an array at depth 2 (the value of a top-level member)
	empty := true
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if inArray && depth == 2 {
				empty = false
			}
		case '{', '[':
			depth++
			if depth == 2 && c == '[' {
				inArray, n, empty = true, 0, true
			} else if inArray && depth == 3 {
				empty = false
			}
		case '}', ']':
			if depth == 2 && inArray {
				if !empty {
					n++
				}
				most, inArray = max(most, n), false
			}
			depth--
		case ',':
			if depth == 2 && inArray {
				n++
			}
		case ' ', '\t', '\n', '\r':
		default:
			if inArray && depth == 2 {
				empty = false
			}
		}
	}
	if inArray {
		most = max(most, n+1)
	}
	return most
}
