// Command selector-plugin is a partition selector served as a metaq-go
// plugin: it routes each message by the prefix of its attribute (the part
// before the first '.'), so that all "orders.*" events of a topic land on
// one partition and keep their order. Messages without an attribute are
// spread round robin.
//
// `make` builds it into bin/plugins; a producer opens it with
// selectors.Open (see examples/selector). It is not meant to be run by hand.
package main

import (
	"context"
	"hash/fnv"
	"strings"
	"sync/atomic"

	"github.com/metaq-go/metaq/selectors"
)

func main() { selectors.Serve(&prefixSelector{}) }

// prefixSelector is safe for concurrent use: its only state is atomic.
type prefixSelector struct{ next atomic.Uint64 }

func (s *prefixSelector) Select(ctx context.Context, req *selectors.SelectRequest) (*selectors.SelectResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := len(req.Partitions)
	if n == 0 {
		return nil, selectors.ErrNoPartitions
	}
	choices := make([]int, len(req.Messages))
	for i, m := range req.Messages {
		if !m.HasAttribute {
			choices[i] = int((s.next.Add(1) - 1) % uint64(n))
			continue
		}
		prefix, _, _ := strings.Cut(m.Attribute, ".")
		h := fnv.New32a()
		_, _ = h.Write([]byte(prefix))
		choices[i] = int(h.Sum32() % uint32(n))
	}
	return &selectors.SelectResponse{Choices: choices}, nil
}

func (s *prefixSelector) Close() error { return nil }
