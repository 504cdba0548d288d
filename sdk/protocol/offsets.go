package protocol

import (
	"bytes"
	"errors"
	"strconv"
)

// OffsetEntry is one line of a commit request or a fetch reply: the next
// offset to fetch for a partition of a topic, and the id of the last message
// consumed (-1 if unknown). In a fetch request Offset and MsgID are ignored;
// in a fetch reply Offset is -1 when nothing is stored.
type OffsetEntry struct {
	Topic     string
	Partition int32
	Offset    int64
	MsgID     int64
}

// MaxOffsetEntries is the most entries one commit or fetch may carry.
const MaxOffsetEntries = 65536

// AppendCommit appends a commit request: `commit <group> <bodyLen> <opaque>`
// with one `<topic> <partition> <offset> <msgId>\r\n` line per entry.
func AppendCommit(dst []byte, group string, entries []OffsetEntry, opaque int32) []byte {
	return appendGroupBody(dst, "commit ", group, entries, true, opaque)
}

// AppendFetch appends a fetch request: `fetch <group> <bodyLen> <opaque>`
// with one `<topic> <partition>\r\n` line per entry.
func AppendFetch(dst []byte, group string, entries []OffsetEntry, opaque int32) []byte {
	return appendGroupBody(dst, "fetch ", group, entries, false, opaque)
}

func appendGroupBody(dst []byte, cmd, group string, entries []OffsetEntry, full bool, opaque int32) []byte {
	body := AppendOffsetLines(nil, entries, full)
	dst = append(dst, cmd...)
	dst = append(dst, group...)
	dst = appendSpaceInt(dst, int64(len(body)))
	dst = appendSpaceInt(dst, int64(opaque))
	dst = append(dst, '\r', '\n')
	return append(dst, body...)
}

// AppendOffsetLines appends entries as lines: `<topic> <partition> <offset>
// <msgId>` when full (commit requests, fetch replies), else `<topic>
// <partition>` (fetch requests).
func AppendOffsetLines(dst []byte, entries []OffsetEntry, full bool) []byte {
	for _, e := range entries {
		dst = append(dst, e.Topic...)
		dst = appendSpaceInt(dst, int64(e.Partition))
		if full {
			dst = appendSpaceInt(dst, e.Offset)
			dst = appendSpaceInt(dst, e.MsgID)
		}
		dst = append(dst, '\r', '\n')
	}
	return dst
}

// ParseOffsetLines parses the body of a commit or fetch request or of a
// fetch reply. full says whether lines carry offset and msgId.
func ParseOffsetLines(body []byte, full bool) ([]OffsetEntry, error) {
	var out []OffsetEntry
	want := 2
	if full {
		want = 4
	}
	for len(body) > 0 {
		i := bytes.IndexByte(body, '\n')
		if i < 0 {
			return nil, errors.New("protocol: offset line without newline")
		}
		line := bytes.TrimSuffix(body[:i], []byte{'\r'})
		body = body[i+1:]
		if len(line) == 0 {
			continue
		}
		f := bytes.Split(line, []byte{' '})
		if len(f) != want || len(f[0]) == 0 {
			return nil, errors.New("protocol: bad offset line " + Printable(line))
		}
		e := OffsetEntry{Topic: string(f[0]), Offset: -1, MsgID: -1}
		p, ok := parseInt(f[1], 32)
		if !ok || p < 0 {
			return nil, errors.New("protocol: bad partition in offset line " + Printable(line))
		}
		e.Partition = int32(p)
		if full {
			o, ok1 := parseInt(f[2], 64)
			m, ok2 := parseInt(f[3], 64)
			if !ok1 || !ok2 || o < -1 {
				return nil, errors.New("protocol: bad offset line " + Printable(line))
			}
			e.Offset, e.MsgID = o, m
		}
		if len(out) == MaxOffsetEntries {
			return nil, errors.New("protocol: more than " + strconv.Itoa(MaxOffsetEntries) + " offset lines")
		}
		out = append(out, e)
	}
	return out, nil
}

// AppendFValueHeader appends the header line of an fvalue reply: a filtered
// get reply of totalLen bytes holding [int64 BE offset][record] entries;
// nextOffset is where the client's next get starts.
func AppendFValueHeader(dst []byte, totalLen int, opaque int32, nextOffset int64) []byte {
	dst = append(dst, "fvalue "...)
	dst = strconv.AppendInt(dst, int64(totalLen), 10)
	dst = appendSpaceInt(dst, int64(opaque))
	dst = appendSpaceInt(dst, nextOffset)
	return append(dst, '\r', '\n')
}
