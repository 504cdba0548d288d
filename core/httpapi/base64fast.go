package httpapi

import (
	"encoding/base64"
	"encoding/binary"
)

// A produce's base64 values (format binary) are most of its bytes and
// their decoding was the largest part of the handler's CPU (39% of
// handleProduce in BenchmarkHTTPData's profile): decodeBase64 decodes the
// common case, standard padded base64 of alphabet characters only, with
// four tables of pre-shifted values (one load and OR per character, a
// check per sixteen) at about twice encoding/base64's speed, and leaves
// anything else to encoding/base64, whose result and errors are then
// the answer (line breaks it skips, nonzero bits before the padding it
// accepts, the offset of a bad character).

// b64Bad marks a character outside the alphabet in the tables.
const b64Bad = 0xff000000

var b64Dec0, b64Dec1, b64Dec2, b64Dec3 [256]uint32

func init() {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for i := range 256 {
		b64Dec0[i], b64Dec1[i], b64Dec2[i], b64Dec3[i] = b64Bad, b64Bad, b64Bad, b64Bad
	}
	for v, c := range []byte(alphabet) {
		b64Dec0[c] = uint32(v) << 18
		b64Dec1[c] = uint32(v) << 12
		b64Dec2[c] = uint32(v) << 6
		b64Dec3[c] = uint32(v)
	}
}

// decodeBase64 is base64.StdEncoding.Decode(dst, src): dst holds at least
// base64.StdEncoding.DecodedLen(len(src)) bytes.
func decodeBase64(dst, src []byte) (int, error) {
	if n, ok := decodeBase64Fast(dst, src); ok {
		return n, nil
	}
	return base64.StdEncoding.Decode(dst, src)
}

// decodeBase64Fast decodes src when it is padded standard base64 of
// alphabet characters only, with zero bits before the padding; otherwise
// it reports false (dst may have been written).
func decodeBase64Fast(dst, src []byte) (int, bool) {
	if len(src) == 0 {
		return 0, true
	}
	if len(src)%4 != 0 {
		return 0, false
	}
	body, n := src[:len(src)-4], 0
	// Sixteen characters make twelve bytes, stored as two words of eight
	// while dst has room for the two extra (the next ones overwrite
	// them): one check of the sixteen (3.0 GB/s, eight at a time 2.4).
	for len(body) >= 16 && len(dst)-n >= 14 {
		c, d := body[:16], dst[n:n+14]
		x := b64Dec0[c[0]] | b64Dec1[c[1]] | b64Dec2[c[2]] | b64Dec3[c[3]]
		y := b64Dec0[c[4]] | b64Dec1[c[5]] | b64Dec2[c[6]] | b64Dec3[c[7]]
		z := b64Dec0[c[8]] | b64Dec1[c[9]] | b64Dec2[c[10]] | b64Dec3[c[11]]
		w := b64Dec0[c[12]] | b64Dec1[c[13]] | b64Dec2[c[14]] | b64Dec3[c[15]]
		if (x|y|z|w)&b64Bad != 0 {
			return 0, false
		}
		binary.BigEndian.PutUint64(d, uint64(x)<<40|uint64(y)<<16)
		binary.BigEndian.PutUint64(d[6:], uint64(z)<<40|uint64(w)<<16)
		n, body = n+12, body[16:]
	}
	// Eight make six, stored as eight likewise.
	for len(body) >= 8 && len(dst)-n >= 8 {
		x := b64Dec0[body[0]] | b64Dec1[body[1]] | b64Dec2[body[2]] | b64Dec3[body[3]]
		y := b64Dec0[body[4]] | b64Dec1[body[5]] | b64Dec2[body[6]] | b64Dec3[body[7]]
		if (x|y)&b64Bad != 0 {
			return 0, false
		}
		binary.BigEndian.PutUint64(dst[n:], uint64(x)<<40|uint64(y)<<16)
		n, body = n+6, body[8:]
	}
	for len(body) >= 4 {
		x := b64Dec0[body[0]] | b64Dec1[body[1]] | b64Dec2[body[2]] | b64Dec3[body[3]]
		if x&b64Bad != 0 || len(dst)-n < 3 {
			return 0, false
		}
		dst[n], dst[n+1], dst[n+2] = byte(x>>16), byte(x>>8), byte(x)
		n, body = n+3, body[4:]
	}
	q := src[len(src)-4:]
	switch {
	case q[3] != '=':
		x := b64Dec0[q[0]] | b64Dec1[q[1]] | b64Dec2[q[2]] | b64Dec3[q[3]]
		if x&b64Bad != 0 || len(dst)-n < 3 {
			return 0, false
		}
		dst[n], dst[n+1], dst[n+2] = byte(x>>16), byte(x>>8), byte(x)
		return n + 3, true
	case q[2] != '=':
		x := b64Dec0[q[0]] | b64Dec1[q[1]] | b64Dec2[q[2]]
		if x&(b64Bad|0xff) != 0 || len(dst)-n < 2 {
			return 0, false
		}
		dst[n], dst[n+1] = byte(x>>16), byte(x>>8)
		return n + 2, true
	default:
		x := b64Dec0[q[0]] | b64Dec1[q[1]]
		if x&(b64Bad|0xffff) != 0 || len(dst)-n < 1 {
			return 0, false
		}
		dst[n] = byte(x >> 16)
		return n + 1, true
	}
}
