// Package roundrobin is the builtin round-robin selector: one shared counter
// cycles through the partitions, across batches and goroutines (MetaQ's
// RoundRobinPartitionSelector). It is the selectors failure-policy fallback
// and what selectors.Open returns for "roundrobin" or an empty name.
package roundrobin

import (
	"context"

	"github.com/metaq-go/metaq/selectors"
	"github.com/metaq-go/metaq/selectors/internal/builtin"
)

// Selector is a round-robin selector. It is safe for concurrent use; the
// zero value is ready.
type Selector struct{ rr builtin.RoundRobin }

var _ selectors.Selector = (*Selector)(nil)

// New returns a round-robin selector.
func New() *Selector { return &Selector{} }

// Select gives the batch the next len(req.Messages) partitions in turn.
func (s *Selector) Select(ctx context.Context, req *selectors.SelectRequest) (*selectors.SelectResponse, error) {
	if err := builtin.Check(ctx, req.Topic, len(req.Partitions)); err != nil {
		return nil, err
	}
	out := make([]int, len(req.Messages))
	s.rr.Choose(out, len(req.Partitions))
	return &selectors.SelectResponse{Choices: out}, nil
}

// Close does nothing.
func (s *Selector) Close() error { return nil }
