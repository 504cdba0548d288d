// Package brokerstats (not API) parses the replies of the broker's `stats`
// items, once for sdk/client (partition discovery) and sdk/admin.
package brokerstats

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Lines returns the lines of a stats reply between STATS and END,
// without their "\r" and without empty lines.
func Lines(body string) []string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		l = strings.TrimRight(l, "\r")
		if l != "" && l != "STATS" && l != "END" {
			out = append(out, l)
		}
	}
	return out
}

// Topic is one line of `stats topics`.
type Topic struct {
	Name            string
	Partitions      int
	MessageCount    int64
	MessageBytes    int64
	AcceptPublish   bool
	AcceptSubscribe bool
}

// ParseTopics parses `<t> partitions N message_count N message_bytes N
// accept_publish B accept_subscribe B` lines, sorted by name; `<t>
// *Empty*` is a topic with no data (unknown partitions). Unknown keys are
// ignored.
func ParseTopics(body string) ([]Topic, error) {
	var out []Topic
	for _, l := range Lines(body) {
		f := strings.Fields(l)
		if len(f) == 2 && f[1] == "*Empty*" {
			out = append(out, Topic{Name: f[0], AcceptPublish: true, AcceptSubscribe: true})
			continue
		}
		if len(f) < 3 || len(f)%2 != 1 {
			return nil, fmt.Errorf("metaq: bad stats topics line %q", l)
		}
		t := Topic{Name: f[0], AcceptPublish: true, AcceptSubscribe: true}
		for i := 1; i+1 < len(f); i += 2 {
			k, v := f[i], f[i+1]
			var err error
			switch k {
			case "partitions":
				t.Partitions, err = strconv.Atoi(v)
			case "message_count":
				t.MessageCount, err = strconv.ParseInt(v, 10, 64)
			case "message_bytes":
				t.MessageBytes, err = strconv.ParseInt(v, 10, 64)
			case "accept_publish":
				t.AcceptPublish, err = strconv.ParseBool(v)
			case "accept_subscribe":
				t.AcceptSubscribe, err = strconv.ParseBool(v)
			}
			if err != nil {
				return nil, fmt.Errorf("metaq: bad %s in stats topics line %q", k, l)
			}
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Partition is one line of `stats offsets` or `stats partitions`: the
// readable range [Min, Max) and, from `stats partitions`, the message
// count (-1 from `stats offsets`).
type Partition struct {
	Partition int32
	Min, Max  int64
	Messages  int64
}

// ParsePartitions parses `<t> part <p> min_offset X max_offset Y
// [message_count N]` lines into each topic's partitions, sorted.
func ParsePartitions(body string) (map[string][]Partition, error) {
	out := make(map[string][]Partition)
	for _, l := range Lines(body) {
		f := strings.Fields(l)
		if (len(f) != 7 && len(f) != 9) || f[1] != "part" || f[3] != "min_offset" || f[5] != "max_offset" ||
			(len(f) == 9 && f[7] != "message_count") {
			return nil, fmt.Errorf("metaq: bad stats offsets line %q", l)
		}
		p, err1 := strconv.ParseInt(f[2], 10, 32)
		lo, err2 := strconv.ParseInt(f[4], 10, 64)
		hi, err3 := strconv.ParseInt(f[6], 10, 64)
		n, err4 := int64(-1), error(nil)
		if len(f) == 9 {
			n, err4 = strconv.ParseInt(f[8], 10, 64)
		}
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return nil, fmt.Errorf("metaq: bad stats offsets line %q", l)
		}
		out[f[0]] = append(out[f[0]], Partition{Partition: int32(p), Min: lo, Max: hi, Messages: n})
	}
	for _, v := range out {
		sort.Slice(v, func(i, j int) bool { return v[i].Partition < v[j].Partition })
	}
	return out, nil
}
