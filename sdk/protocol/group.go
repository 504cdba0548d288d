package protocol

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
)

// AppendJoin appends `join <group> <topic> <consumerId> <strategy> <opaque>`:
// the member joins the group's coordination of topic on this broker.
func AppendJoin(dst []byte, group, topic, member, strategy string, opaque int32) []byte {
	dst = appendMemberHead(dst, "join ", group, topic, member)
	dst = append(dst, ' ')
	dst = append(dst, strategy...)
	dst = appendSpaceInt(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendHeartbeat appends `heartbeat <group> <topic> <consumerId>
// <generation> <opaque>`, where generation is the one of the last view the
// member received and has applied.
func AppendHeartbeat(dst []byte, group, topic, member string, generation int64, opaque int32) []byte {
	dst = appendMemberHead(dst, "heartbeat ", group, topic, member)
	dst = appendSpaceInt(dst, generation)
	dst = appendSpaceInt(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendLeave appends `leave <group> <topic> <consumerId> <opaque>`.
func AppendLeave(dst []byte, group, topic, member string, opaque int32) []byte {
	dst = appendMemberHead(dst, "leave ", group, topic, member)
	dst = appendSpaceInt(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

func appendMemberHead(dst []byte, cmd, group, topic, member string) []byte {
	dst = append(dst, cmd...)
	dst = append(dst, group...)
	dst = append(dst, ' ')
	dst = append(dst, topic...)
	dst = append(dst, ' ')
	return append(dst, member...)
}

// AppendGroupView appends the body of a join or heartbeat reply:
// `<generation> <p1,p2,...>`, the partitions the member owns now (the list
// may be empty: `<generation> `).
func AppendGroupView(dst []byte, generation int64, partitions []int32) []byte {
	dst = strconv.AppendInt(dst, generation, 10)
	dst = append(dst, ' ')
	for i, p := range partitions {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(p), 10)
	}
	return dst
}

var errGroupView = errors.New("protocol: bad group view")

// ParseGroupView parses a join or heartbeat reply body. The partitions come
// back sorted, without duplicates.
func ParseGroupView(body []byte) (generation int64, partitions []int32, err error) {
	g, list, ok := bytes.Cut(body, []byte{' '})
	if !ok {
		return 0, nil, errGroupView
	}
	gen, ok := parseInt(g, 64)
	if !ok || gen < 0 {
		return 0, nil, errGroupView
	}
	list = bytes.TrimRight(list, "\r\n")
	if len(list) == 0 {
		return gen, []int32{}, nil
	}
	for _, f := range bytes.Split(list, []byte{','}) {
		p, ok := parseInt(f, 32)
		if !ok || p < 0 {
			return 0, nil, errGroupView
		}
		partitions = append(partitions, int32(p))
	}
	slices.Sort(partitions)
	return gen, slices.Compact(partitions), nil
}
