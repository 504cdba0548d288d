package filters

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"
)

// The packed batch format carries an AcceptRequest's records in one byte
// string instead of one protobuf column per field, so that neither side
// builds a protobuf object (or a string) per record. Both AcceptRequest.packed
// (gRPC) and the batch channel (channel.go) use it. Little endian:
//
//	u8  format (packedFormat)
//	u32 n, the number of records
//	n × 40-byte headers: i64 offset, i64 msg id, i64 size, i32 flag,
//	    i32 attribute length (-1: no attribute), i32 body length (-1: no
//	    body), u32 properties length (0: none sent)
//	the attributes, concatenated in record order
//	the bodies, concatenated in record order
//	the properties blocks (sdk/message, after their length prefix),
//	    concatenated in record order
//
// The properties length was 4 reserved zero bytes before properties reached
// plugins; a host sends properties only to an instance whose InitResponse
// asked for them, so a plugin built before (which rejects a nonzero
// reserved field) never receives one. A block is never empty (it starts
// with its version byte), so 0 means none.
// The lengths must account for every byte after the headers exactly.
//
// A verdict list travels as a bitmap: bit i%8 of byte i/8 is record i's keep
// flag, (n+7)/8 bytes, unused high bits of the last byte zero.

const (
	packedFormat     = 1
	packedPrefix     = 1 + 4
	packedHeaderSize = 40
)

// errPacked is a malformed packed batch or bitmap.
var errPacked = errors.New("filters: malformed packed batch")

// packedSize is the encoded size of recs, with their properties if props.
func packedSize(recs []Record, props bool) int {
	n := packedPrefix + len(recs)*packedHeaderSize
	for i := range recs {
		n += len(recs[i].Attribute) + len(recs[i].Body)
	}
	if props {
		for i := range recs {
			n += len(recs[i].Properties)
		}
	}
	return n
}

// appendPacked appends recs in the packed format to dst, with their
// properties blocks if props. Attributes and bodies longer than
// math.MaxInt32 bytes cannot be encoded (a get reply is far smaller); it
// panics on one rather than send a corrupt batch.
func appendPacked(dst []byte, recs []Record, props bool) []byte {
	start, n := len(dst), packedSize(recs, props)
	dst = slices.Grow(dst, n)[:start+n]
	b := dst[start:]
	b[0] = packedFormat
	binary.LittleEndian.PutUint32(b[1:], uint32(len(recs)))
	h := b[packedPrefix:]
	data := h[len(recs)*packedHeaderSize:]
	var pos int
	for i := range recs {
		r := &recs[i]
		al, bl := int64(-1), int64(-1)
		if r.HasAttribute {
			al = int64(len(r.Attribute))
		}
		if r.Body != nil {
			bl = int64(len(r.Body))
		}
		pl := 0
		if props {
			pl = len(r.Properties)
		}
		if al > math.MaxInt32 || bl > math.MaxInt32 || pl > math.MaxInt32 {
			panic("filters: record too large for a packed batch")
		}
		binary.LittleEndian.PutUint64(h[0:], uint64(r.Offset))
		binary.LittleEndian.PutUint64(h[8:], uint64(r.MsgID))
		binary.LittleEndian.PutUint64(h[16:], uint64(int64(r.Size)))
		binary.LittleEndian.PutUint32(h[24:], uint32(r.Flag))
		binary.LittleEndian.PutUint32(h[28:], uint32(int32(al)))
		binary.LittleEndian.PutUint32(h[32:], uint32(int32(bl)))
		binary.LittleEndian.PutUint32(h[36:], uint32(pl))
		h = h[packedHeaderSize:]
		if r.HasAttribute {
			pos += copy(data[pos:], r.Attribute)
		}
	}
	for i := range recs {
		pos += copy(data[pos:], recs[i].Body)
	}
	if props {
		for i := range recs {
			pos += copy(data[pos:], recs[i].Properties)
		}
	}
	return dst
}

// decodePacked decodes a packed batch into recs[:0] (grown as needed) and
// returns it. With alias, the records' Attribute strings and Body slices
// point into b, which must then never be modified; otherwise they point
// into two fresh copies (one for all attributes, one for all bodies), and b
// may be reused as soon as decodePacked returns. Either way a filter may
// keep them. It returns an error wrapping errPacked for anything but a
// well-formed batch, and never panics.
func decodePacked(b []byte, recs []Record, alias bool) ([]Record, error) {
	if len(b) < packedPrefix {
		return nil, fmt.Errorf("%w: %d bytes", errPacked, len(b))
	}
	if b[0] != packedFormat {
		return nil, fmt.Errorf("%w: format %d", errPacked, b[0])
	}
	n64 := uint64(binary.LittleEndian.Uint32(b[1:]))
	rest := b[packedPrefix:]
	if n64 > uint64(len(rest)/packedHeaderSize) {
		return nil, fmt.Errorf("%w: %d records in %d bytes", errPacked, n64, len(b))
	}
	n := int(n64)
	h, data := rest[:n*packedHeaderSize], rest[n*packedHeaderSize:]
	// First pass: the lengths must add up to the data exactly.
	var attrTotal, bodyTotal, propTotal uint64
	for i := 0; i < n; i++ {
		hh := h[i*packedHeaderSize:]
		al := int32(binary.LittleEndian.Uint32(hh[28:]))
		bl := int32(binary.LittleEndian.Uint32(hh[32:]))
		pl := int32(binary.LittleEndian.Uint32(hh[36:]))
		if al < -1 || bl < -1 || pl < 0 {
			return nil, fmt.Errorf("%w: record %d header", errPacked, i)
		}
		if al > 0 {
			attrTotal += uint64(al)
		}
		if bl > 0 {
			bodyTotal += uint64(bl)
		}
		propTotal += uint64(pl)
	}
	total := attrTotal + bodyTotal + propTotal
	if total != uint64(len(data)) {
		return nil, fmt.Errorf("%w: %d data bytes, lengths say %d", errPacked, len(data), total)
	}
	if cap(recs) < n {
		recs = make([]Record, n)
	}
	recs = recs[:n]
	attrs, bodies, props := data[:attrTotal], data[attrTotal:attrTotal+bodyTotal], data[attrTotal+bodyTotal:]
	if !alias {
		attrs = []byte(string(attrs))
		bodies = append(make([]byte, 0, len(bodies)), bodies...)
		if len(props) > 0 {
			props = append(make([]byte, 0, len(props)), props...)
		}
	}
	for i := range recs {
		hh := h[i*packedHeaderSize:]
		al := int32(binary.LittleEndian.Uint32(hh[28:]))
		bl := int32(binary.LittleEndian.Uint32(hh[32:]))
		// Field by field: a whole-struct store costs a bulk write barrier.
		r := &recs[i]
		r.Offset = int64(binary.LittleEndian.Uint64(hh[0:]))
		r.MsgID = int64(binary.LittleEndian.Uint64(hh[8:]))
		r.Size = int(int64(binary.LittleEndian.Uint64(hh[16:])))
		r.Flag = int32(binary.LittleEndian.Uint32(hh[24:]))
		r.HasAttribute = al >= 0
		if al > 0 {
			r.Attribute = unsafe.String(&attrs[0], int(al))
			attrs = attrs[al:]
		} else if r.Attribute != "" {
			r.Attribute = ""
		}
		if bl >= 0 {
			r.Body = bodies[:bl:bl]
			bodies = bodies[bl:]
		} else if r.Body != nil {
			r.Body = nil
		}
		if pl := int32(binary.LittleEndian.Uint32(hh[36:])); pl > 0 {
			r.Properties = props[:pl:pl]
			props = props[pl:]
		} else if r.Properties != nil {
			r.Properties = nil
		}
	}
	return recs, nil
}

// bitmapSize is the size of the bitmap of n verdicts.
func bitmapSize(n int) int { return (n + 7) / 8 }

// appendBitmap appends keep as a bitmap to dst.
func appendBitmap(dst []byte, keep []bool) []byte {
	start, n := len(dst), bitmapSize(len(keep))
	dst = slices.Grow(dst, n)[:start+n]
	bm := dst[start:]
	clear(bm)
	for i, k := range keep {
		if k {
			bm[i>>3] |= 1 << (i & 7)
		}
	}
	return dst
}

// decodeBitmap decodes the bitmap of n verdicts. It never panics.
func decodeBitmap(bm []byte, n int) ([]bool, error) {
	if n < 0 || len(bm) != bitmapSize(n) {
		return nil, fmt.Errorf("%w: %d bitmap bytes for %d records", errPacked, len(bm), n)
	}
	if n%8 != 0 && bm[len(bm)-1]>>(n%8) != 0 {
		return nil, fmt.Errorf("%w: bitmap has bits past record %d", errPacked, n)
	}
	keep := make([]bool, n)
	for i := range keep {
		keep[i] = bm[i>>3]&(1<<(i&7)) != 0
	}
	return keep, nil
}
