package groups

import (
	"strconv"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// PartitionCheck reports whether partition p of topic exists here: "" if
// it does, else why not (the refusal's text).
type PartitionCheck func(topic string, p int32) string

// Positions checks a commit's or fetch's group name
// (message.ValidateGroup), parses its body (protocol.ParseOffsetLines;
// full for a commit) and checks every topic and partition it names with
// check. The positions are of broker brokerID's partitions. A bad group or
// body is an *Error of kind Invalid.
func Positions(op string, group, body []byte, full bool, brokerID int, check PartitionCheck) (string, []message.Position, error) {
	if err := message.ValidateGroup(string(group)); err != nil {
		return "", nil, &Error{Kind: Invalid, Msg: op + ": group " + protocol.Printable(group) + ": " + err.Error()}
	}
	lines, err := protocol.ParseOffsetLines(body, full)
	if err != nil {
		return "", nil, &Error{Kind: Invalid, Msg: op + ": " + err.Error()}
	}
	out := make([]message.Position, len(lines))
	for i, l := range lines {
		if why := check(l.Topic, l.Partition); why != "" {
			return "", nil, &Error{Kind: Invalid, Msg: op + ": " + why}
		}
		if full && l.Offset < 0 {
			return "", nil, &Error{Kind: Invalid, Msg: "commit: negative offset for " + l.Topic + " " + strconv.Itoa(int(l.Partition))}
		}
		out[i] = message.Position{Topic: l.Topic, Partition: message.Partition{BrokerID: brokerID, Partition: l.Partition},
			Offset: l.Offset, MsgID: l.MsgID}
	}
	return string(group), out, nil
}
