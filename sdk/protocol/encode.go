package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strconv"
)

// The Append functions encode frames onto dst and return the extended slice,
// in the style of strconv.AppendInt: no allocation when dst has room.

// AppendPut appends a 7-token put (with checksum) and its body. Use
// NoChecksum to ask the broker not to verify.
func AppendPut(dst []byte, topic string, partition int32, flag int32, checksum int64, opaque int32, data []byte) []byte {
	dst = AppendPutHeader(dst, topic, partition, len(data), flag, checksum, opaque)
	return append(dst, data...)
}

// AppendSync appends a sync request (8 tokens, reference §1): a master's
// copy of a put for its slave, which stores it with the given msgId.
func AppendSync(dst []byte, topic string, partition int32, flag int32, msgID int64, checksum int64, opaque int32, data []byte) []byte {
	dst = append(dst, "sync "...)
	dst = append(dst, topic...)
	dst = appendSpaceInt(dst, int64(partition))
	dst = appendSpaceInt(dst, int64(len(data)))
	dst = appendSpaceInt(dst, int64(flag))
	dst = appendSpaceInt(dst, msgID)
	dst = appendSpaceInt(dst, checksum)
	dst = appendSpaceInt(dst, int64(opaque))
	dst = append(dst, '\r', '\n')
	return append(dst, data...)
}

// AppendTxSyncHeader appends the header line of a txsync request whose
// body (transaction journal records) is bodyLen bytes.
func AppendTxSyncHeader(dst []byte, kind string, bodyLen int, opaque int32) []byte {
	dst = append(dst, "txsync "...)
	dst = append(dst, kind...)
	dst = appendSpaceInt(dst, int64(bodyLen))
	dst = appendSpaceInt(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendPutHeader appends the header line of a 7-token put.
func AppendPutHeader(dst []byte, topic string, partition int32, dataLen int, flag int32, checksum int64, opaque int32) []byte {
	dst = append(dst, "put "...)
	dst = append(dst, topic...)
	dst = appendSpaceInt(dst, int64(partition))
	dst = appendSpaceInt(dst, int64(dataLen))
	dst = appendSpaceInt(dst, int64(flag))
	dst = appendSpaceInt(dst, checksum)
	dst = appendSpaceInt(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendMPutHeader appends the header line of an mput whose body is bodyLen
// bytes holding count entries.
func AppendMPutHeader(dst []byte, topic string, partition int32, bodyLen, count int, opaque int32) []byte {
	dst = append(dst, "mput "...)
	dst = append(dst, topic...)
	dst = appendSpaceInt(dst, int64(partition))
	dst = appendSpaceInt(dst, int64(bodyLen))
	dst = appendSpaceInt(dst, int64(count))
	dst = appendSpaceInt(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendMPutEntry appends one mput body entry. crc is the message checksum,
// or -1 to skip the broker's check.
func AppendMPutEntry(dst []byte, flag int32, crc int32, data []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(flag))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(data)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(crc))
	return append(dst, data...)
}

// AppendAuthPlain appends an `auth PLAIN` request whose body is RFC 4616's
// NUL user NUL password (no authorization identity).
func AppendAuthPlain(dst []byte, user, password string, opaque int32) []byte {
	dst = append(dst, "auth PLAIN"...)
	dst = appendSpaceInt(dst, int64(2+len(user)+len(password)))
	dst = appendSpaceInt(dst, int64(opaque))
	dst = append(dst, '\r', '\n', 0)
	dst = append(dst, user...)
	dst = append(dst, 0)
	return append(dst, password...)
}

// ParseSASLPlain splits an RFC 4616 PLAIN message, [authzid] NUL authcid NUL
// passwd, into its parts.
func ParseSASLPlain(msg []byte) (authzid, user, password string, ok bool) {
	a, rest, ok1 := bytes.Cut(msg, []byte{0})
	u, p, ok2 := bytes.Cut(rest, []byte{0})
	if !ok1 || !ok2 || len(u) == 0 || bytes.IndexByte(p, 0) >= 0 {
		return "", "", "", false
	}
	return string(a), string(u), string(p), true
}

// MPutEntry is one decoded mput entry; Data aliases the body.
type MPutEntry struct {
	Flag int32
	// CRC is the client's checksum, or -1 for none.
	CRC  int32
	Data []byte
}

var errMPutBody = errors.New("body does not hold the declared entries")

// ValidateMPutBody checks that body holds exactly count well-formed entries.
func ValidateMPutBody(body []byte, count int) error {
	n := 0
	for len(body) > 0 {
		if len(body) < MPutEntryHeader {
			return errMPutBody
		}
		l := binary.BigEndian.Uint32(body[4:])
		if uint64(l) > uint64(len(body)-MPutEntryHeader) {
			return errMPutBody
		}
		body = body[MPutEntryHeader+int(l):]
		n++
	}
	if n != count {
		return errMPutBody
	}
	return nil
}

// NextMPutEntry decodes the first entry of a validated mput body and returns
// it with the rest of the body.
func NextMPutEntry(body []byte) (MPutEntry, []byte) {
	l := int(binary.BigEndian.Uint32(body[4:]))
	e := MPutEntry{
		Flag: int32(binary.BigEndian.Uint32(body)),
		CRC:  int32(binary.BigEndian.Uint32(body[8:])),
		Data: body[MPutEntryHeader : MPutEntryHeader+l],
	}
	return e, body[MPutEntryHeader+l:]
}

// AppendGet appends a get request.
func AppendGet(dst []byte, topic, group string, partition int32, offset int64, maxSize int32, opaque int32) []byte {
	dst = append(dst, "get "...)
	dst = append(dst, topic...)
	dst = append(dst, ' ')
	dst = append(dst, group...)
	dst = appendSpaceInt(dst, int64(partition))
	dst = appendSpaceInt(dst, offset)
	dst = appendSpaceInt(dst, int64(maxSize))
	dst = appendSpaceInt(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendFilter appends a filter request: the consumer's filter expression
// for its gets of topic as group on this connection, an empty one to clear
// it. The body is the expression with a space before and after it, then
// "\r\n" follows the body (an empty line, which a broker skips): a broker
// without the command answers it as an unknown command, reads the body as
// one more line whose first token is empty and whose last token is no
// opaque, and stays in frame (docs/protocol.md, filter). Line breaks in
// expr are sent as spaces (they are white space to the expression).
func AppendFilter(dst []byte, topic, group, expr string, opaque int32) []byte {
	n := 0
	if expr != "" {
		n = len(expr) + 2
	}
	dst = append(dst, "filter "...)
	dst = append(dst, topic...)
	dst = append(dst, ' ')
	dst = append(dst, group...)
	dst = appendSpaceInt(dst, int64(n))
	dst = appendSpaceInt(dst, int64(opaque))
	dst = append(dst, '\r', '\n')
	if n > 0 {
		dst = append(dst, ' ')
		for i := 0; i < len(expr); i++ {
			c := expr[i]
			if c == '\r' || c == '\n' {
				c = ' '
			}
			dst = append(dst, c)
		}
		dst = append(dst, ' ')
	}
	return append(dst, '\r', '\n')
}

// AppendOffset appends an offset request.
func AppendOffset(dst []byte, topic, group string, partition int32, offset int64, opaque int32) []byte {
	dst = append(dst, "offset "...)
	dst = append(dst, topic...)
	dst = append(dst, ' ')
	dst = append(dst, group...)
	dst = appendSpaceInt(dst, int64(partition))
	dst = appendSpaceInt(dst, offset)
	dst = appendSpaceInt(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendVersion appends a version request.
func AppendVersion(dst []byte, opaque int32) []byte {
	dst = append(dst, "version"...)
	dst = appendSpaceInt(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendStats appends a stats request; item may be empty.
func AppendStats(dst []byte, item string, opaque int32) []byte {
	dst = append(dst, "stats"...)
	if item != "" {
		dst = append(dst, ' ')
		dst = append(dst, item...)
	}
	dst = appendSpaceInt(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendQuit appends a quit request.
func AppendQuit(dst []byte) []byte { return append(dst, "quit\r\n"...) }

// AppendResult appends a result reply with a text body.
func AppendResult(dst []byte, code int, body string, opaque int32) []byte {
	dst = AppendResultHeader(dst, code, len(body), opaque)
	return append(dst, body...)
}

// AppendResultHeader appends the header line of a result reply.
func AppendResultHeader(dst []byte, code int, bodyLen int, opaque int32) []byte {
	dst = append(dst, "result "...)
	dst = strconv.AppendInt(dst, int64(code), 10)
	dst = appendSpaceInt(dst, int64(bodyLen))
	dst = appendSpaceInt(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendValueHeader appends the header line of a value reply; the caller
// sends totalLen bytes of records after it.
func AppendValueHeader(dst []byte, totalLen int, opaque int32) []byte {
	dst = append(dst, "value "...)
	dst = strconv.AppendInt(dst, int64(totalLen), 10)
	dst = appendSpaceInt(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendPutResultBody appends a put reply body: "<msgId> <partition> <offset>".
// An mput reply adds " <count>": the ids are msgId..msgId+count-1 and each
// record follows the previous one.
func AppendPutResultBody(dst []byte, msgID int64, partition int32, offset int64) []byte {
	dst = strconv.AppendInt(dst, msgID, 10)
	dst = appendSpaceInt(dst, int64(partition))
	return appendSpaceInt(dst, offset)
}

// ParsePutResult parses a put or mput reply body.
func ParsePutResult(body []byte) (msgID int64, partition int32, offset int64, count int, err error) {
	var f [4][]byte
	n := 0
	start := 0
	for i := 0; i <= len(body); i++ {
		if i == len(body) || body[i] == ' ' {
			if n == 4 {
				return 0, 0, 0, 0, errors.New("protocol: bad put result " + Printable(body))
			}
			f[n] = body[start:i]
			n++
			start = i + 1
		}
	}
	if n < 3 {
		return 0, 0, 0, 0, errors.New("protocol: bad put result " + Printable(body))
	}
	id, ok1 := parseInt(f[0], 64)
	p, ok2 := parseInt(f[1], 32)
	o, ok3 := parseInt(f[2], 64)
	c := int64(1)
	ok4 := true
	if n == 4 {
		c, ok4 = parseInt(f[3], 32)
	}
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return 0, 0, 0, 0, errors.New("protocol: bad put result " + Printable(body))
	}
	return id, int32(p), o, int(c), nil
}

// ParseInt64 parses a decimal reply body such as a 301's offset.
func ParseInt64(b []byte) (int64, bool) { return parseInt(b, 64) }

func appendSpaceInt(dst []byte, v int64) []byte {
	dst = append(dst, ' ')
	return strconv.AppendInt(dst, v, 10)
}
