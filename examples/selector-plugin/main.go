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

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
	"github.com/metaq-go/metaq/selectors"
)

func main() { selectors.Serve(&prefixSelector{}) }

// prefixSelector is safe for concurrent use: its only state is atomic.
type prefixSelector struct{ next atomic.Uint64 }

func (s *prefixSelector) Select(ctx context.Context, topic string, partitions []message.Partition, m *message.Message) (int, error) {
	if err := selector.Check(ctx, topic, partitions); err != nil {
		return 0, err
	}
	n := len(partitions)
	if !m.HasAttribute {
		return int((s.next.Add(1) - 1) % uint64(n)), nil
	}
	prefix, _, _ := strings.Cut(m.Attribute, ".")
	h := fnv.New32a()
	_, _ = h.Write([]byte(prefix))
	return int(h.Sum32() % uint32(n)), nil
}
