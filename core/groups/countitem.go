package groups

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// CountItem is the stats item that counts a partition's messages from an
// offset to its end: `stats count:<topic>:<partition>:<offset>` answers
//
//	<topic> part <p> from <offset> to <max_offset> messages <n> exact <true|false>
//
// exact false (n estimated from the mean record size) while the range is
// not indexed yet (after a restart, until the background scrub has walked
// the old segments). metaq group describe uses it for LAG_MSGS.
const CountItem = "count:"

// ParseCountItem parses the argument of a count item,
// <topic>:<partition>:<offset> (the topic may hold colons: the last two
// fields are the numbers).
func ParseCountItem(arg string) (topic string, partition int, from int64, err error) {
	i := strings.LastIndexByte(arg, ':')
	if i < 0 {
		return "", 0, 0, errors.New("missing fields")
	}
	from, err = strconv.ParseInt(arg[i+1:], 10, 64)
	if err != nil || from < 0 {
		return "", 0, 0, fmt.Errorf("bad offset %q", arg[i+1:])
	}
	arg = arg[:i]
	i = strings.LastIndexByte(arg, ':')
	if i < 0 {
		return "", 0, 0, errors.New("missing fields")
	}
	p, err := strconv.ParseInt(arg[i+1:], 10, 32)
	if err != nil || p < 0 {
		return "", 0, 0, fmt.Errorf("bad partition %q", arg[i+1:])
	}
	if arg[:i] == "" {
		return "", 0, 0, errors.New("empty topic")
	}
	return arg[:i], int(p), from, nil
}
